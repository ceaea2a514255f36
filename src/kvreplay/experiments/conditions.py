"""``when``: a step's condition, evaluated just before the step (issue 28).

TOML (any step but a restore, which always runs)::

    when = 'time_left > "15m"'                 # time until stop_new_after (else hard_deadline - restore_reserve)
    when = "previous_step_ok"                  # the step just before it was measured
    when = 'step_ok = "A"'                     # step A (an earlier step) was measured
    when = ['time_left > "15m"', "previous_step_ok"]   # a list: every condition must hold

``time_left`` compares with ``>``, ``>=``, ``<`` or ``<=`` against a duration (quoted or
not: ``"15m"``, ``90s``, ``900``). It counts from now to ``stop_new_after`` (the window's
deadlines, from the start or from the quiesce: ``[window] deadline_from``), or, without
one, to ``hard_deadline - restore_reserve``; with neither it is unbounded and every
``time_left`` condition holds.

What was evaluated is recorded in ``result.json`` as the step's ``condition``::

    {"when": ['time_left > "15m"'], "holds": false, "false": ['time_left > "15m"'],
     "seen": {"time_left_s": 612.0, "time_left_until": "stop_new_after"}}

``seen`` holds the values read: ``time_left_s`` and ``time_left_until`` (``stop_new_after``,
``cancel_in_flight`` or None), ``previous_step`` and ``previous_status``, ``step_ok``
(``{NAME: status}``). A step whose condition is false is ``skipped`` (reason
``condition false: TEXT``) and runs nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from kvreplay.experiments.fields import NAME_RE, Where, parse_duration

__all__ = ["Condition", "evaluate", "parse_when"]

_TIME = re.compile(r'\s*time_left\s*(>=|<=|>|<)\s*"?([^"]*?)"?\s*')
_STEP = re.compile(r'\s*step_ok\s*=\s*"?([^"]*?)"?\s*')
_PREV = re.compile(r"\s*previous_step_ok\s*")


@dataclass(frozen=True, slots=True)
class Condition:
    """One condition of a step's ``when``.

    Attributes:
        text: As written in the file.
        what: ``time_left``, ``previous_step_ok`` or ``step_ok``.
        op: The comparison of ``time_left`` (``>``, ``>=``, ``<``, ``<=``), else None.
        seconds: The duration ``time_left`` is compared with (s), else None.
        step: The step ``step_ok`` names, else None.
    """

    text: str
    what: str
    op: str | None = None
    seconds: float | None = None
    step: str | None = None

    def describe(self) -> str:
        """Normalised form for the dry-run: ``time_left > 900 s``, ``previous_step_ok``, ``step_ok A``."""
        if self.what == "time_left":
            return f"time_left {self.op} {self.seconds:g} s"
        return f"step_ok {self.step}" if self.what == "step_ok" else self.what


def parse_when(value: Any, where: Where) -> tuple[Condition, ...]:
    """A step's ``when`` (a string or a list of strings, module docstring).

    Raises:
        ConfigError: not a string/list, or a condition of none of the three forms (naming ``FLD.when``).
    """
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(x, str) for x in items):
        raise where.error("when is a condition or a list of conditions: 'time_left > \"15m\"', "
                          "\"previous_step_ok\", 'step_ok = \"NAME\"'", "when")
    out = []
    for text in items:
        if m := _TIME.fullmatch(text):
            secs = parse_duration(m.group(2), path=where.path, line=where.line, fld=f"{where.fld}.when")
            out.append(Condition(text, "time_left", op=m.group(1), seconds=secs))
        elif _PREV.fullmatch(text):
            out.append(Condition(text, "previous_step_ok"))
        elif (m := _STEP.fullmatch(text)) and NAME_RE.match(m.group(1)):
            out.append(Condition(text, "step_ok", step=m.group(1)))
        else:
            raise where.error(f"not a condition: {text!r} (time_left > \"15m\", previous_step_ok, "
                              "step_ok = \"NAME\")", "when")
    return tuple(out)


_OPS = {">": float.__gt__, ">=": float.__ge__, "<": float.__lt__, "<=": float.__le__}


def evaluate(conds: tuple[Condition, ...], *, time_left_s: float | None, time_left_until: str | None,
             previous: tuple[str, str] | None, statuses: dict[str, str]) -> dict[str, Any]:
    """Evaluate a step's conditions (every one must hold).

    Args:
        conds: The step's ``when``.
        time_left_s: Seconds until the window's deadline (None: unbounded).
        time_left_until: Which deadline (``stop_new_after``, ``cancel_in_flight``), None when unbounded.
        previous: ``(name, status)`` of the step just before it (None for the first step).
        statuses: Status of every earlier step, by name.

    Returns:
        ``{"when": [text, ...], "holds": bool, "false": [text, ...], "seen": {...}}`` (module docstring); the
        values in ``seen`` are only those the conditions read.
    """
    seen: dict[str, Any] = {}
    false: list[str] = []
    for c in conds:
        if c.what == "time_left":
            seen["time_left_s"] = None if time_left_s is None else round(time_left_s, 3)
            seen["time_left_until"] = time_left_until
            ok = time_left_s is None or _OPS[c.op or ">"](float(time_left_s), float(c.seconds or 0.0))
        elif c.what == "previous_step_ok":
            seen["previous_step"], seen["previous_status"] = previous if previous else (None, None)
            ok = previous is not None and previous[1] == "measured"
        else:
            status = statuses.get(c.step or "")
            seen.setdefault("step_ok", {})[c.step] = status
            ok = status == "measured"
        if not ok:
            false.append(c.text)
    return {"when": [c.text for c in conds], "holds": not false, "false": false, "seen": seen}
