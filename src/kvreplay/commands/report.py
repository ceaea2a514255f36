"""``kvreplay report RUN_DIR [--html] [--parquet]``: rebuild a run directory's reports.

Writes report.md always; report.html with ``--html``; records.parquet with
``--parquet``. When summary.json is missing (a killed run) it is rebuilt from
records.jsonl first. Prints the path of each file written.

On a ``kvreplay ab`` directory (it holds ``ab.json``) it writes the experiment's
``report.html`` (``kvreplay.report.abreport``), and with ``--html`` each block's
report too.

On a ``kvreplay experiment`` directory (it holds ``experiment.json``) it writes the
window's ``result.json``, ``report.md`` and ``report.html``, rebuilt from the window's
progress after kill -9 (``experiments.window.resume.rebuild_publication``: steps that
never ran read ``not_run``, "not run: interrupted").
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kvreplay.safe_io import echo

NAME = "report"
HELP = "Write report.md (and report.html with --html) for a run directory; rebuilds summary.json."


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register ``report``'s options."""
    p.add_argument(
        "run_dir", metavar="RUN_DIR", help="a run directory (plan.json, records.jsonl, ...)"
    )
    p.add_argument("--html", action="store_true", help="also write the self-contained report.html")
    p.add_argument(
        "--parquet",
        action="store_true",
        help="also write records.parquet (needs pip install 'kvreplay[parquet]')",
    )


def run(args: argparse.Namespace) -> int:
    """Execute ``kvreplay report``; exit 0 ok, 2 nothing to report or a missing extra."""
    from kvreplay.report.write import write_reports
    from kvreplay.rundir import EXPERIMENT

    if (Path(args.run_dir) / "ab.json").exists():
        return _ab_report(args)
    if (Path(args.run_dir) / EXPERIMENT).exists():
        return _experiment_report(Path(args.run_dir))
    try:
        written = write_reports(args.run_dir, html=args.html, parquet=args.parquet)
    except FileNotFoundError as exc:
        echo(f"kvreplay report: {exc}", err=True)
        return 2
    except ImportError as exc:
        echo(f"kvreplay report: {exc}", err=True)
        return 2
    if "summary" in written:
        echo(f"summary.json was missing: rebuilt from records.jsonl: {written['summary']}")
    for key in ("markdown", "html", "parquet"):
        if key in written:
            echo(written[key])
    return 0


def _ab_report(args: argparse.Namespace) -> int:
    """An ab directory: its report.html (and, with --html, every block's reports)."""
    from pathlib import Path

    from kvreplay.report.abreport import write_ab_report
    from kvreplay.report.write import write_reports
    from kvreplay.rundir import PLAN

    d = Path(args.run_dir)
    if args.html:
        for blk in sorted((d / "blocks").glob("*")):
            if (blk / PLAN).exists():
                try:
                    echo(write_reports(blk, html=True)["html"])
                except (FileNotFoundError, ImportError) as exc:
                    echo(f"kvreplay report: {blk}: {exc}", err=True)
    echo(write_ab_report(d))
    return 0


def _experiment_report(d: Path) -> int:
    """An experiment directory: its publication, rebuilt from its progress when the window was killed."""
    from kvreplay.experiments.publish import status_line
    from kvreplay.experiments.window.resume import rebuild_publication
    from kvreplay.rundir import RESULT

    result = rebuild_publication(d)
    echo(f"experiment: {status_line(result)}")
    for name in (RESULT, "report.md", "report.html"):
        echo(str(d / name))
    return 0
