"""kvreplay.report: what a run directory shows people and tools.

- ``load_run``: read a run directory back (records, summary, histograms).
- ``write_reports``: report.md, the self-contained report.html, records.parquet.
- ``diagnose``: findings with the next causal experiment (rules in ``report.diagnose``,
  evidence rules in ``kvreplay.evidence.engine``).
- ``report.rawseries``: counters.jsonl in the report (raw series per phase, units).
- ``render_markdown`` / ``render_table``: the runner's own per-phase table.
- ``report.progress.make_live_observer``: the live display while a run goes.

Names are imported on first use, so the runner's import of ``report.markdown``
does not load matplotlib or numpy.
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
    "Finding": "diagnose",
    "diagnose": "diagnose",
    "HistogramArrays": "load",
    "RunData": "load",
    "load_run": "load",
    "render_markdown": "markdown",
    "render_table": "markdown",
    "write_reports": "write",
}


def __getattr__(name: str) -> Any:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module 'kvreplay.report' has no attribute {name!r}")
    return getattr(importlib.import_module(f"kvreplay.report.{mod}"), name)


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
