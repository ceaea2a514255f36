"""``option``: a typed options dataclass field that also declares its command-line flag.

A field declared ``read_timeout: float = option(120.0, flag="--read-timeout", help=...,
check=duration, group="run")`` is the option's one declaration: its name (the API keyword
and the flag's ``dest``), its type and default (the field's), and in the field's metadata
the flag, help, metavar, ``type=`` check, choices, action, group, unit, and its name as a
plan.toml key and as an experiment ``[window]`` key where it has one.
``kvreplay.argtypes.add_declared`` derives the command line's flags from these fields; the
option-parity test (tests/unit/test_option_parity.py) holds the ``TypedDict`` of the API's
keywords, the plan.toml and ``[window]`` readers equal to them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import MISSING, field, fields
from typing import Any, TypeVar

__all__ = ["from_dests", "option", "reuse"]

C = TypeVar("C")


def option(default: Any = None, *, flag: str | None, help: str, group: str,  # noqa: A002 - the command line's word
           metavar: str | None = None, check: Callable[[str], Any] | None = None,
           choices: Sequence[Any] | None = None, action: str | None = None, factory: Callable[[], Any] | None = None,
           unit: str = "", toml: str | None = None, window: str | None = None, required: bool = False,
           nargs: str | None = None, const: Any = None) -> Any:
    """A dataclass field declaring one option (see the module docstring).

    Args:
        default: The default (ignored when ``factory`` is given).
        flag: The command-line flag (``--read-timeout``); None for a positional.
        help: The flag's help text.
        group: Which commands take it: ``run`` (run and demo), ``contract`` (run, ab), ``target``
            (every command that talks to a target), ``fleet`` (run).
        metavar: The flag's metavar.
        check: The ``type=`` of the flag (``kvreplay.argtypes``: a range or grammar check).
        choices: The accepted values.
        action: ``store_true`` or ``append`` (None: a value).
        factory: A default factory (lists).
        unit: The value's unit (``s``, ``bytes``...; said in the help).
        toml: Its plan.toml key, when a plan sets it.
        window: Its experiment ``[window]`` key, when a window sets it.
        required: The flag must be given (the field then has no default: a keyword the API requires).
        nargs: ``"?"`` for a flag whose value may be left out (it then takes ``const``).
        const: The value of a ``nargs="?"`` flag given without one.
    """
    meta = {"flag": flag, "help": help, "group": group, "metavar": metavar, "check": check, "choices": choices,
            "action": action, "unit": unit, "toml": toml, "window": window, "required": required, "nargs": nargs,
            "const": const}
    if required:
        return field(metadata=meta)
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def from_dests(cls: type[C], values: Mapping[str, Any]) -> C:
    """An options dataclass from parsed values by their flag ``dest``; keys of no field (``command``) ignored."""
    own = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in values.items() if k in own})


def reuse(config: type, name: str) -> Any:
    """Field ``name`` of options dataclass ``config`` as a field of another: the same default and declaration.

    For a command that takes an option of another's as it is (``kvreplay ab``'s
    ``--expect-identity``, declared once in ``RunConfig``): the flag, help and check are that
    declaration's, the field sits where it is written in the new class.
    """
    f = next(f for f in fields(config) if f.name == name)
    if f.default_factory is not MISSING:
        return field(default_factory=f.default_factory, metadata=f.metadata)
    if f.default is MISSING:
        return field(metadata=f.metadata)
    return field(default=f.default, metadata=f.metadata)
