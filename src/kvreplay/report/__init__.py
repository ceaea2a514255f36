"""kvreplay.report: what a run directory shows people and tools.

- ``load_run``: read a run directory back (records, summary, histograms; ``kvreplay.rundir``).
- ``write_reports``: report.md, the self-contained report.html, records.parquet.
- ``diagnose``: findings with the next causal experiment (rules in ``report.diagnose``,
  evidence rules in ``kvreplay.evidence.engine``).
- ``report.rawseries``: counters.jsonl in the report (raw series per phase, units).
- ``render_markdown`` / ``render_table``: the per-phase table (``kvreplay run`` hands
  ``render_markdown`` to the runner, which writes report.md with it).
- ``report.progress.make_live_observer``: the live display while a run goes.

Names are imported on first use, so an import of ``report.markdown`` (the
renderer ``kvreplay run`` hands the runner) does not load matplotlib.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "Finding",
    "HistogramArrays",
    "RunData",
    "diagnose",
    "load_run",
    "render_markdown",
    "render_table",
    "write_reports",
]

_WHERE = {
    "Finding": "kvreplay.report.diagnose",
    "diagnose": "kvreplay.report.diagnose",
    "HistogramArrays": "kvreplay.rundir",
    "RunData": "kvreplay.rundir",
    "load_run": "kvreplay.rundir",
    "render_markdown": "kvreplay.report.markdown",
    "render_table": "kvreplay.report.markdown",
    "write_reports": "kvreplay.report.write",
}


def __getattr__(name: str) -> Any:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module 'kvreplay.report' has no attribute {name!r}")
    return getattr(importlib.import_module(mod), name)


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
