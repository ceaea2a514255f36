"""Write a run directory's reports: report.md, report.html and (optionally) Parquet exports."""

from __future__ import annotations

import os
from pathlib import Path

from kvreplay.report.document import build, to_html, to_markdown
from kvreplay.rundir import SUMMARY, open_run, write_summary
from kvreplay.safe_io import write_html, write_markdown

__all__ = ["write_reports"]


def write_reports(
    run_dir: str | os.PathLike[str], *, html: bool = True, parquet: bool = False
) -> dict[str, Path]:
    """Render the reports of a run directory in place.

    Records are streamed, never loaded whole (``kvreplay.rundir.open_run``): time and
    memory stay bounded at any run size (``bench/bench_report.py``). Rebuilds
    summary.json from records.jsonl first when it is missing (a killed run),
    then writes report.md (except over a probe's own report.md in
    a directory without a replay run), report.html (``html``) and
    ``records.parquet`` (``parquet``; needs the ``kvreplay[parquet]`` extra).

    Args:
        run_dir: The run directory.
        html: Also write report.html.
        parquet: Also write records.parquet.

    Returns:
        Name (``summary``, ``markdown``, ``html``, ``parquet``) -> path written
        (``summary`` only when it was rebuilt).

    Raises:
        FileNotFoundError: the directory holds nothing to report (``load_run``).
        ImportError: ``parquet`` asked without pyarrow installed.
    """
    d = Path(run_dir)
    run = open_run(d, write_rebuilt=True)
    out: dict[str, Path] = {}
    if run.summary_rebuilt:
        out["summary"] = d / SUMMARY
        from kvreplay.offline.runloss import add_routing_loss

        if add_routing_loss(d, run.summary):  # a fleet run: phases[].routing_loss, as kvreplay run built it
            write_summary(d, run.summary)
    rep = build(run)
    is_run = run.plan is not None or bool(run.summary.get("phases"))
    if is_run or not (d / "report.md").exists():
        # A probe directory keeps the report.md its own command wrote.
        write_markdown(d / "report.md", to_markdown(rep))  # the sink: redacted, controls escaped
        out["markdown"] = d / "report.md"
    if html:
        write_html(d / "report.html", to_html(rep))
        out["html"] = d / "report.html"
    if parquet:
        from kvreplay.report.parquet import write_parquet

        out["parquet"] = write_parquet(list(run.iter_records()), d / "records.parquet")
    return out
