"""counters.jsonl in the report: raw series that changed per phase.

The runner keeps every raw series it read in ``counters.jsonl``
(``kvreplay.rundir.counterlog``, which reads it back: ``raw_changes``, and
its invariant breaks: ``read_violations``). The report lists, per phase, each series whose
value changed at a read inside the phase (after its opening read), with its
value at the opening read and at the last read of the phase, so a
server-specific counter without a common name is still in front of the reader.
The series an adapter does not map are kept only at the run's first and last reads
(a ``run_end`` line, issue 42 item 8): they are listed under ``(whole run)``, from the
first read to the last.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvreplay.report.cells import measured
from kvreplay.report.sections import Table, fmt_value
from kvreplay.rundir import COUNTERS, raw_changes, read_counter_log

__all__ = ["raw_series_table"]

MAX_ROWS = 400
"""Rows of the raw-series table (the file keeps every one)."""


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _whole(v: Any) -> bool:
    """An integer, or a float that holds one exactly (a Prometheus counter: ``4326653952.0``)."""
    return isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) < 2**53)


def _raw(v: Any) -> str:
    """A raw series value as read: integers in full, other floats to 12 significant digits.

    ``fmt_value``'s one decimal drew a hit rate of 0.970588 as ``1.0``.
    """
    if not _number(v):
        return fmt_value(v)
    return str(int(v)) if _whole(v) else f"{v:.12g}"


def _change(a: Any, b: Any) -> str:
    """``b - a`` with its sign, exact for integers (``%g`` drew 4326653952 as ``+4.32665e+09``); "" if not numbers."""
    if not (_number(a) and _number(b)):
        return ""
    if _whole(a) and _whole(b):
        return f"{int(b) - int(a):+d}"
    return f"{b - a:+.12g}"


def raw_series_table(run_dir: Path) -> Table | None:
    """The per-phase raw-series table, or None without counters.jsonl."""
    lines = read_counter_log(run_dir / COUNTERS)
    if not lines:
        return None
    t = Table("raw series", ["at the phase start", "at the phase end", "change"],
              corner="phase · series")
    for ph, series in raw_changes(lines).items():
        for k in sorted(series):
            a, b = series[k]
            t.rows.append((f"{ph} · {k}", [measured(_raw(a)), measured(_raw(b)), measured(_change(a, b))]))
            if len(t.rows) >= MAX_ROWS:
                t.rows.append(("…", [measured(f"more in {COUNTERS}")] * 3))
                return t
    if any(ln.get("truncated") for ln in lines):
        t.rows.append(("…", [measured(f"{COUNTERS} reached its size cap")] * 3))
    return t
