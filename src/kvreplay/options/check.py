"""Run-time checks of typed keyword options against their ``TypedDict`` declaration.

A type checker reports a misspelt keyword or a value of the wrong type at the call; this
module says the same at run time, for callers without one, as a ``ConfigError`` whose
``field`` is the keyword (``sim.time_scale`` for a simulator option).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Union, get_args, get_origin

from kvreplay.errors import ConfigError

__all__ = ["check_keywords", "check_value"]

_HINTS: dict[type, dict[str, Any]] = {}


def _hints(declared: type) -> dict[str, Any]:
    """The evaluated annotations of a ``TypedDict`` (cached)."""
    hints = _HINTS.get(declared)
    if hints is None:
        hints = _HINTS[declared] = typing.get_type_hints(declared)
    return hints


def _describe(tp: Any) -> str:
    """``float``, ``float or None``, ``one of 'skip', 'mark'``, ``a list of str``: an annotation in words."""
    origin = get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(_describe(a) for a in get_args(tp))
    if origin is not None and issubclass(origin, Sequence):
        return f"a list of {_describe(get_args(tp)[0])}"
    if tp is type(None):
        return "None"
    if tp is float:
        return "a number (float)"
    return getattr(tp, "__name__", str(tp))


def _fits(value: Any, tp: Any) -> bool:
    origin = get_origin(tp)
    if origin is Literal:
        return any(value == a and type(value) is type(a) for a in get_args(tp))
    if origin in (Union, types.UnionType):
        return any(_fits(value, a) for a in get_args(tp))
    if origin is not None and issubclass(origin, Sequence):
        return (isinstance(value, list | tuple)
                and all(_fits(v, get_args(tp)[0]) for v in value))
    if tp is type(None):
        return value is None
    if tp is float:  # an int is a float to a type checker (PEP 484), a bool is not a number here
        return isinstance(value, int | float) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, tp)


def check_value(keyword: str, value: Any, declared: type, *, field: str | None = None) -> None:
    """Check one keyword's value against its annotation in ``declared`` (a ``TypedDict``).

    Args:
        keyword: The key (``read_timeout``).
        value: Its value.
        declared: The ``TypedDict`` declaring it (``RunOptions``, ``SimOptions``).
        field: The name errors give (default ``keyword``).

    Raises:
        ConfigError: ``keyword`` is not declared, or ``value`` is not of its type (field: ``field``).
    """
    hints = _hints(declared)
    name = field or keyword
    if keyword not in hints:
        raise ConfigError(f"unknown option {keyword!r}", field=name)
    tp = hints[keyword]
    if not _fits(value, tp):
        raise ConfigError(f"expected {_describe(tp)}, got {value!r} ({type(value).__name__})", field=name)


def check_keywords(values: Mapping[str, Any], declared: type, *, prefix: str = "") -> None:
    """``check_value`` of every key of ``values``; field names are ``prefix + key``.

    Raises:
        ConfigError: the first unknown key or value of the wrong type.
    """
    for key, value in values.items():
        check_value(key, value, declared, field=prefix + key)
