"""Command-line number types: every number checked when the flags are parsed (issue 29).

Each factory returns an ``argparse`` ``type=`` function. A bad value makes
argparse exit 2 with ``argument --FLAG: <what was expected>, got '<value>'``
before the command does anything (no request sent, no file read), so the flag
and the value are named and no traceback is shown. Commands declare their
ranges where they declare their flags; this module holds the parsing.

Durations (``duration``: ``90``, ``90s``, ``70m``, ``1.5h``, ``250ms``) and abort bounds
(``bound``: ``host_bytes>34e9``) are parsed here for the command line and for the files
(``experiments.fields`` reads ``seconds`` and ``BOUND_RE``). ``add_declared`` derives a
command's flags from a typed options dataclass whose fields carry their flag, help and
check (``kvreplay.options.declare.option``).

Bottom layer: imports nothing of the project.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable, Iterable
from fractions import Fraction
from typing import Any

__all__ = ["BOUND_RE", "CheckError", "add_declared", "bound", "decimal_text", "duration", "integer", "number",
           "format_sizes", "number_list", "parse_sizes", "seconds", "token_sizes", "tokens"]

BOUND_RE = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(>=|<=|>|<)\s*([-+0-9.eE]+)\s*")
"""An abort bound ``NAME OP NUMBER`` (``host_bytes>34e9``; OP one of > >= < <=), for ``fullmatch``:
``--abort-if`` of ``kvreplay run``/``ab`` and an experiment's ``window.abort_if``."""

CheckError = argparse.ArgumentTypeError
"""What a check of this module raises on a bad value (the command line reports it naming the flag;
callers without a parser catch it by this name)."""

_DURATION_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*")
_UNIT_S = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def seconds(text: str) -> float | None:
    """``"90"`` / ``"90s"`` / ``"70m"`` / ``"1.5h"`` / ``"250ms"`` -> seconds; None when not a duration."""
    m = _DURATION_RE.fullmatch(text)
    return float(m.group(1)) * _UNIT_S[m.group(2) or "s"] if m else None


def _bad(expected: str, text: str) -> argparse.ArgumentTypeError:
    return argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")


def _range(minimum: float | None, strict: bool, maximum: float | None) -> str:
    parts = []
    if minimum is not None:
        parts.append(f"{'>' if strict else '>='} {minimum:g}")
    if maximum is not None:
        parts.append(f"<= {maximum:g}")
    return " and ".join(parts)


def integer(minimum: int | None = 1, *, unit: str = "", maximum: int | None = None) -> Callable[[str], int]:
    """A whole number in ``[minimum, maximum]`` (plain digits, an optional sign).

    Args:
        minimum: Smallest value allowed (None = any).
        unit: Said in the message (e.g. ``"bytes"``).
        maximum: Largest value allowed (None = any).
    """
    what = f"a whole number {_range(minimum, False, maximum)}".rstrip() + (f" ({unit})" if unit else "")

    def parse(text: str) -> int:
        try:
            v = int(text.strip())
        except ValueError:
            raise _bad(what, text) from None
        if (minimum is not None and v < minimum) or (maximum is not None and v > maximum):
            raise _bad(what, text)
        return v

    parse.__name__ = "integer"
    return parse


def number(
    minimum: float | None = 0.0, *, strict: bool = False, unit: str = "", maximum: float | None = None
) -> Callable[[str], float]:
    """A finite number ``> minimum`` (``strict``) or ``>= minimum``, and ``<= maximum``.

    Args:
        minimum: Lower bound (None = any).
        strict: Whether the bound itself is excluded.
        unit: Said in the message (e.g. ``"s"``).
        maximum: Upper bound (None = any).
    """
    what = f"a number {_range(minimum, strict, maximum)}".rstrip() + (f" ({unit})" if unit else "")

    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise _bad(what, text) from None
        low_ok = minimum is None or (v > minimum if strict else v >= minimum)
        if not math.isfinite(v) or not low_ok or (maximum is not None and v > maximum):
            raise _bad(what, text)
        return v

    parse.__name__ = "number"
    return parse


def duration(text: str) -> float:
    """A ``type=`` for a duration flag: seconds (``seconds``).

    Raises:
        argparse.ArgumentTypeError: not a duration (``not a duration: 'x' (e.g. 90s, 70m, 1h)``).
    """
    value = seconds(text)
    if value is None:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 90s, 70m, 1h)")
    return value


def bound(text: str) -> tuple[str, str, float]:
    """A ``type=`` for ``--abort-if``: ``host_bytes>34e9`` -> ``("host_bytes", ">", 34e9)``.

    Raises:
        argparse.ArgumentTypeError: not NAME OP NUMBER with OP in > >= < <=.
    """
    m = BOUND_RE.fullmatch(text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a bound: {text!r} (e.g. host_bytes>34e9)")
    try:
        value = float(m.group(3))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a number in {text!r}") from exc
    return m.group(1), m.group(2), value


def add_declared(parser: Any, options: type, groups: Iterable[str]) -> None:
    """Add the flags of a typed options dataclass's fields in ``groups``, in field order.

    Each field declared with ``kvreplay.options.declare.option`` carries in its metadata the
    flag (None: a positional), help, metavar, ``type=`` check, choices, action
    (``store_true``, ``append``), ``nargs``/``const``, whether it is required, and group; the
    default is the field's. Fields without that
    metadata (or of another group) are skipped.

    Args:
        parser: The parser or argument group.
        options: The dataclass (``kvreplay.options.RunConfig``).
        groups: The groups to add (``"run"``, ``"contract"``, ``"target"``...).
    """
    from dataclasses import MISSING, fields

    wanted = set(groups)
    for f in fields(options):
        m = f.metadata
        if m.get("group") not in wanted:
            continue
        default = f.default if f.default is not MISSING else None
        if f.default_factory is not MISSING:
            default = f.default_factory()
        if m["flag"] is None:
            positional: dict[str, Any] = {"help": m["help"], "metavar": m.get("metavar")}
            if m.get("choices") is not None:
                positional["choices"] = m["choices"]
            if m.get("nargs") is not None:
                positional["nargs"] = m["nargs"]
            elif not m.get("required"):
                positional["nargs"], positional["default"] = "?", default
            parser.add_argument(f.name, **positional)
            continue
        kw: dict[str, Any] = {"default": default, "help": m["help"], "dest": f.name}
        if m.get("required"):
            kw["required"] = True
        if m.get("action"):
            kw["action"] = m["action"]
        if m.get("nargs") is not None:
            kw["nargs"], kw["const"] = m["nargs"], m.get("const")
        for key in ("metavar", "choices"):
            if m.get(key) is not None:
                kw[key] = m[key]
        if m.get("check") is not None:
            kw["type"] = m["check"]
        parser.add_argument(m["flag"], **kw)


def decimal_text(minimum: float = 0.0, *, strict: bool = False, unit: str = "") -> Callable[[str], str]:
    """A decimal number checked like ``number`` but returned as its text (for exact fractions).

    ``kvreplay fit`` works in exact rationals (``Fraction("0.1")``); this keeps the text.
    """
    what = f"a number {_range(minimum, strict, None)}" + (f" ({unit})" if unit else "")

    def parse(text: str) -> str:
        try:
            v = Fraction(text.strip())
        except (ValueError, ZeroDivisionError):
            raise _bad(what, text) from None
        if not (v > Fraction(str(minimum)) if strict else v >= Fraction(str(minimum))):
            raise _bad(what, text)
        return text.strip()

    parse.__name__ = "decimal"
    return parse


def tokens(minimum: int = 1) -> Callable[[str], int]:
    """A token count: ``24k`` (k = 1024 tokens) or plain digits, at least ``minimum``."""
    what = f"a token count >= {minimum} such as 24k (k = 1024) or 24576"

    def parse(text: str) -> int:
        p = text.strip().lower()
        num = p[:-1] if p.endswith("k") else p
        if not num.isdigit():
            raise _bad(what, text)
        v = int(num) * (1024 if p.endswith("k") else 1)
        if v < minimum:
            raise _bad(what, text)
        return v

    parse.__name__ = "tokens"
    return parse


def number_list(item: Callable[[str], Any]) -> Callable[[str], tuple]:
    """A comma-separated list, every item checked by ``item`` (empty items skipped, none is an error)."""

    def parse(text: str) -> tuple:
        parts = [x.strip() for x in text.split(",") if x.strip()]
        if not parts:
            raise _bad("a comma-separated list", text)
        out = []
        for x in parts:
            try:
                out.append(item(x))
            except argparse.ArgumentTypeError as exc:
                raise argparse.ArgumentTypeError(f"item {x!r} of {text!r}: {exc}") from None
        return tuple(out)

    parse.__name__ = "list"
    return parse


def parse_sizes(text: str) -> tuple[int, ...]:
    """Parse ``8k,16k,32k,64k`` (k = 1024 tokens) or plain integers into token counts.

    Raises:
        ValueError: an empty list, a non-number, or a size < 16 tokens.
    """
    out = []
    for part in text.split(","):
        p = part.strip().lower()
        if not p:
            continue
        mult = 1024 if p.endswith("k") else 1
        num = p[:-1] if p.endswith("k") else p
        if not num.isdigit():
            raise ValueError(f"bad size {part!r}: use e.g. 8k or 8192")
        v = int(num) * mult
        if v < 16:
            raise ValueError(f"size {part!r} is under 16 tokens")
        out.append(v)
    if not out:
        raise ValueError("no sizes given")
    return tuple(out)


def format_sizes(sizes: tuple[int, ...] | list[int]) -> str:
    """Token counts as ``parse_sizes`` reads them: ``(8192, 16384, 100)`` -> ``"8k,16k,100"``."""
    return ",".join(f"{n // 1024}k" if n % 1024 == 0 else str(n) for n in sizes)


def token_sizes(text: str) -> tuple[int, ...]:
    """``--sizes``: ``parse_sizes`` as a check (``CheckError``: its message and the text given)."""
    try:
        return parse_sizes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc}, got {text!r}") from None
