"""Rebuild a directory's reports: the behaviour of ``kvreplay report`` and ``kvreplay.write_report``.

One entry point for the three directories kvreplay writes, told apart by what they hold
(``report_kind``): a ``kvreplay ab`` directory (``ab.json``) gets the experiment's
``report.html`` (``kvreplay.report.abreport``) and, with ``html``, each block's reports; a
``kvreplay experiment`` directory (``experiment.json``) its window's ``result.json``,
``report.md`` and ``report.html``, rebuilt from its progress after kill -9
(``experiments.window.resume.rebuild_publication``); a run directory ``report.md``, with
``html`` ``report.html``, with ``parquet`` ``records.parquet``, after rebuilding a missing
``summary.json`` from ``records.jsonl`` (``kvreplay.report.write``). ``kvreplay report``
(``commands/report.py``) prints what ``write_report`` returns.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

__all__ = ["ReportResult", "report_kind", "write_report"]

ReportKind = Literal["run", "ab", "experiment", "sweep"]

PathLike = str | os.PathLike[str]


@dataclass(frozen=True)
class ReportResult:
    """What ``write_report`` wrote, in the order ``kvreplay report`` prints it.

    Attributes:
        kind: ``"run"``, ``"ab"``, ``"experiment"`` or ``"sweep"`` (``report_kind``).
        files: The paths written, in order (a run: report.md, report.html, records.parquet as
            asked; an ab directory: each block's report.html with ``html``, then its own
            report.html; an experiment: result.json, report.md, report.html; a sweep: its
            report.html, then points.csv with ``csv``; a run: phases.csv last with ``csv``).
        summary_rebuilt: A run whose summary.json was missing: the summary.json rebuilt from
            records.jsonl (not in ``files``); else None.
        block_errors: An ab directory with ``html``: ``"BLOCK_DIR: why"`` for each block whose
            report could not be written (the others are).
        status: An experiment: its status line (``kvreplay.experiments.publish.status_line``); else None.
    """

    kind: ReportKind
    files: list[str] = field(default_factory=list)
    summary_rebuilt: str | None = None
    block_errors: list[str] = field(default_factory=list)
    status: str | None = None


def report_kind(run_dir: PathLike) -> ReportKind:
    """Which directory ``run_dir`` is: ``ab`` (ab.json), ``experiment``, ``sweep`` (sweep.json), else ``run``."""
    from kvreplay.rundir import EXPERIMENT
    from kvreplay.sweeps.document import is_sweep_dir

    d = Path(run_dir)
    if (d / "ab.json").exists():
        return "ab"
    if (d / EXPERIMENT).exists():
        return "experiment"
    if is_sweep_dir(d):
        return "sweep"
    return "run"


def write_report(run_dir: PathLike, *, html: bool = False, parquet: bool = False, csv: bool = False) -> ReportResult:
    """Write the reports of a run, ab or experiment directory (``kvreplay report``).

    Args:
        run_dir: The directory.
        html: Also write report.html (a run; each block's, for an ab directory).
        parquet: Also write records.parquet (a run; needs ``pip install 'kvreplay[parquet]'``).
        csv: Also write phases.csv (a run: one row per phase) or points.csv (a sweep).

    Returns:
        The ``ReportResult``: the kind and the files written.

    Raises:
        FileNotFoundError: a run directory with nothing to report (no plan or records).
        ImportError: ``parquet`` without pyarrow installed.
    """
    kind = report_kind(run_dir)
    if kind == "ab":
        return _ab_report(Path(run_dir), html)
    if kind == "experiment":
        return _experiment_report(Path(run_dir))
    if kind == "sweep":
        return _sweep_report(Path(run_dir), csv)
    from kvreplay.report.write import write_reports

    written = write_reports(run_dir, html=html, parquet=parquet)
    files = [str(written[k]) for k in ("markdown", "html", "parquet") if k in written]
    if csv:
        from kvreplay.report.csvfile import write_phases_csv

        files.append(str(write_phases_csv(Path(run_dir))))
    return ReportResult("run", files, summary_rebuilt=str(written["summary"]) if "summary" in written else None)


def _sweep_report(d: Path, csv: bool) -> ReportResult:
    """A sweep directory: its report.html redrawn from sweep.json (and points.csv with ``csv``)."""
    from kvreplay.sweeps.document import read_sweep, write_points_csv
    from kvreplay.sweeps.report import write_sweep_report

    doc = read_sweep(d)
    files = [str(write_sweep_report(d, doc))]
    if csv:
        files.append(str(write_points_csv(d, doc)))
    return ReportResult("sweep", files)


def _ab_report(d: Path, html: bool) -> ReportResult:
    """An ab directory: its report.html (and, with html, every block's reports)."""
    from kvreplay.report.abreport import write_ab_report
    from kvreplay.report.write import write_reports
    from kvreplay.rundir import PLAN

    files: list[str] = []
    errors: list[str] = []
    if html:
        for blk in sorted((d / "blocks").glob("*")):
            if (blk / PLAN).exists():
                try:
                    files.append(str(write_reports(blk, html=True)["html"]))
                except (FileNotFoundError, ImportError) as exc:
                    errors.append(f"{blk}: {exc}")
    files.append(str(write_ab_report(d)))
    return ReportResult("ab", files, block_errors=errors)


def _experiment_report(d: Path) -> ReportResult:
    """An experiment directory: its publication, rebuilt from its progress when the window was killed."""
    from kvreplay.experiments.publish import status_line
    from kvreplay.experiments.window.resume import rebuild_publication
    from kvreplay.rundir import RESULT

    result = rebuild_publication(d)
    return ReportResult("experiment", [str(d / name) for name in (RESULT, "report.md", "report.html")],
                        status=status_line(result))
