"""kvreplay.report: what a run directory shows people and tools.

- ``load_run``: read a run directory back (records, summary, histograms).
- ``write_reports``: report.md, the self-contained report.html, records.parquet.
- ``diagnose``: findings with the next causal experiment (rules in ``report.diagnose``).
- ``render_markdown`` / ``render_table``: the runner's own per-phase table.
- ``report.progress.make_live_observer``: the live display while a run goes.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from kvreplay.report.diagnose import Finding, diagnose
    from kvreplay.report.load import HistogramArrays, RunData, load_run
    from kvreplay.report.markdown import render_markdown, render_table
    from kvreplay.report.write import write_reports

# Imported on first use: the runner needs only the markdown table, and plotting
# (matplotlib) costs about a second and tens of MB that a run should not pay.
_LAZY = {
    "Finding": "kvreplay.report.diagnose",
    "diagnose": "kvreplay.report.diagnose",
    "HistogramArrays": "kvreplay.report.load",
    "RunData": "kvreplay.report.load",
    "load_run": "kvreplay.report.load",
    "render_markdown": "kvreplay.report.markdown",
    "render_table": "kvreplay.report.markdown",
    "write_reports": "kvreplay.report.write",
}


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'kvreplay.report' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(mod), name)


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
