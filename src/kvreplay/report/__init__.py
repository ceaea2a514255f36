"""kvreplay.report: what a run directory shows people and tools.

- ``load_run``: read a run directory back (records, summary, histograms).
- ``write_reports``: report.md, the self-contained report.html, records.parquet.
- ``diagnose``: findings with the next causal experiment (rules in ``report.diagnose``).
- ``render_markdown`` / ``render_table``: the runner's own per-phase table.
- ``report.progress.make_live_observer``: the live display while a run goes.
"""

from kvreplay.report.diagnose import Finding, diagnose
from kvreplay.report.load import HistogramArrays, RunData, load_run
from kvreplay.report.markdown import render_markdown, render_table
from kvreplay.report.write import write_reports

__all__ = sorted([
    "Finding",
    "HistogramArrays",
    "RunData",
    "diagnose",
    "load_run",
    "render_markdown",
    "render_table",
    "write_reports",
])
