"""The step-kind registry: every ``kind = "..."`` an experiment file may use.

Each kind is one module of this package declaring a ``StepKind`` (``KIND``):
how it is parsed, checked, frozen, executed, which cells it produces and how it is
reported (``experiments.steps.base``). The built-in kinds are listed below,
explicitly; a kind added at run time (a plugin, a test) goes through ``register``.
The parser, the freezer, the window, the publication and ``kvreplay experiment``
iterate over this registry and never branch on a kind's name.

Usage::

    from kvreplay.experiments.steps import kind_of, kind_names, register

    kind_of("run").sends          # True
    kind_names()                  # ("incarnation", "run", "probe", "ab", "restore", "quiesce", "sweep")
    register(StepKind(name="toy", keys=frozenset(), parse=..., execute=...))

To add a kind: a module here with its ``KIND``, one entry in ``BUILTIN``, and its tests.
"""

from __future__ import annotations

from kvreplay.errors import ConfigError
from kvreplay.experiments.steps import ab, incarnation, probe, quiesce, restore, run, sweep
from kvreplay.experiments.steps.base import CellContext, StepKind, Window

__all__ = ["BUILTIN", "CellContext", "StepKind", "UnknownStepKind", "Window", "kind_names", "kind_of", "register",
           "unregister"]

BUILTIN: tuple[StepKind, ...] = (incarnation.KIND, run.KIND, probe.KIND, ab.KIND, restore.KIND, quiesce.KIND,
                                 sweep.KIND)
"""The built-in kinds, in the order error messages list them."""

_KINDS: dict[str, StepKind] = {k.name: k for k in BUILTIN}


def register(kind: StepKind, *, replace: bool = False) -> StepKind:
    """Add a step kind (an experiment file may then use ``kind = "<name>"``).

    Args:
        kind: The kind's declaration.
        replace: Allow replacing a kind of the same name.

    Returns:
        ``kind``.

    Raises:
        ValueError: a kind of that name exists (and ``replace`` is false), or the name is
            not letters, digits, ``_``.
    """
    if not kind.name.replace("_", "").isalnum():
        raise ValueError(f"bad step kind name {kind.name!r}: letters, digits, '_'")
    if kind.name in _KINDS and not replace:
        raise ValueError(f"step kind {kind.name!r} is already registered")
    _KINDS[kind.name] = kind
    return kind


def unregister(name: str) -> None:
    """Remove a kind added by ``register`` (a built-in kind stays).

    Raises:
        ValueError: ``name`` is a built-in kind.
    """
    if any(k.name == name for k in BUILTIN):
        raise ValueError(f"step kind {name!r} is built in")
    _KINDS.pop(name, None)


class UnknownStepKind(ConfigError, KeyError):
    """No step kind of that name: a ``ConfigError`` (one line, exit 2), still a ``KeyError`` for old callers."""


def kind_of(name: str) -> StepKind:
    """The registered kind called ``name``.

    Raises:
        UnknownStepKind: no such kind (the parser checks names against ``kind_names`` first;
            a tampered or foreign experiment directory may name another): a ``ConfigError``.
    """
    try:
        return _KINDS[name]
    except (KeyError, TypeError):
        raise UnknownStepKind(f"no step kind {str(name)[:100]!r}; registered: {', '.join(_KINDS)}") from None


def kind_names() -> tuple[str, ...]:
    """Names of every registered kind: the built-in ones in ``BUILTIN`` order, then the added ones."""
    return tuple(_KINDS)
