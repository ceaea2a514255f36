"""counters.jsonl in the report: raw series that changed per phase, invariant breaks.

The runner keeps every raw series it read in ``counters.jsonl``
(``kvreplay.runner.counterlog``). The report lists, per phase, each series whose
value changed at a read inside the phase (after its opening read), with its
value at the opening read and at the last read of the phase, so a
server-specific counter without a common name is still in front of the reader.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvreplay.report.cells import measured
from kvreplay.report.sections import Table, fmt_value
from kvreplay.runner.counterlog import read_counter_log

__all__ = ["COUNTER_LOG", "raw_changes", "raw_series_table", "violations"]

COUNTER_LOG = "counters.jsonl"
MAX_ROWS = 400
"""Rows of the raw-series table (the file keeps every one)."""


def raw_changes(lines: list[dict[str, Any]]) -> dict[str, dict[str, tuple[Any, Any]]]:
    """Phase -> series -> ``(value at the phase's opening read, value at its last read)``.

    Only series that changed at a read of the phase after its opening read; a
    series that appeared mid-phase starts at None, one that vanished ends at None.

    Args:
        lines: counters.jsonl as dicts (``read_counter_log``).
    """
    state: dict[str, Any] = {}
    moved: dict[str, set[str]] = {}
    start: dict[str, dict[str, Any]] = {}
    end: dict[str, dict[str, Any]] = {}
    for ln in lines:
        if ln.get("truncated"):
            break
        if ln.get("full"):
            state = dict(ln.get("series") or {})
        else:
            state.update(ln.get("changed") or {})
            for k in ln.get("removed") or []:
                state.pop(k, None)
        ph = str(ln.get("phase", ""))
        if ph not in start:
            start[ph] = dict(state)
            moved[ph] = set()
        else:
            moved[ph] |= set(ln.get("changed") or {}) | set(ln.get("removed") or [])
        end[ph] = state if ln is lines[-1] else dict(state)
    return {
        ph: {k: (start[ph].get(k), end[ph].get(k)) for k in sorted(ks)} for ph, ks in moved.items()
    }


def raw_series_table(run_dir: Path) -> Table | None:
    """The per-phase raw-series table, or None without counters.jsonl."""
    lines = read_counter_log(run_dir / COUNTER_LOG)
    if not lines:
        return None
    t = Table("raw series", ["at the phase start", "at the phase end", "change"],
              corner="phase · series")
    for ph, series in raw_changes(lines).items():
        for k in sorted(series):
            a, b = series[k]
            d = b - a if isinstance(a, (int, float)) and isinstance(b, (int, float)) else None
            t.rows.append((f"{ph} · {k}", [measured(fmt_value(a)), measured(fmt_value(b)),
                                             measured("" if d is None else f"{d:+g}")]))
            if len(t.rows) >= MAX_ROWS:
                t.rows.append(("…", [measured(f"more in {COUNTER_LOG}")] * 3))
                return t
    if any(ln.get("truncated") for ln in lines):
        t.rows.append(("…", [measured(f"{COUNTER_LOG} reached its size cap")] * 3))
    return t


def violations(run_dir: Path) -> list[dict[str, Any]]:
    """Cache-invariant breaks stored in counters.jsonl, with ``phase`` and ``at``."""
    out = []
    for ln in read_counter_log(run_dir / COUNTER_LOG):
        for v in ln.get("violations") or []:
            out.append({**v, "phase": ln.get("phase"), "at": ln.get("at")})
    return out
