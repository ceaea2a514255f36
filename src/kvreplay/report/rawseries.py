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

from kvreplay.report.cells import measured
from kvreplay.report.sections import Table, fmt_value
from kvreplay.rundir import COUNTERS, raw_changes, read_counter_log

__all__ = ["raw_series_table"]

MAX_ROWS = 400
"""Rows of the raw-series table (the file keeps every one)."""


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
            d = b - a if isinstance(a, (int, float)) and isinstance(b, (int, float)) else None
            t.rows.append((f"{ph} · {k}", [measured(fmt_value(a)), measured(fmt_value(b)),
                                             measured("" if d is None else f"{d:+g}")]))
            if len(t.rows) >= MAX_ROWS:
                t.rows.append(("…", [measured(f"more in {COUNTERS}")] * 3))
                return t
    if any(ln.get("truncated") for ln in lines):
        t.rows.append(("…", [measured(f"{COUNTERS} reached its size cap")] * 3))
    return t
