"""``kvreplay report RUN_DIR [--html] [--parquet]``: rebuild a run directory's reports.

Writes report.md always; report.html with ``--html``; records.parquet with
``--parquet``. When summary.json is missing (a killed run) it is rebuilt from
records.jsonl first. Prints the path of each file written.

On a ``kvreplay ab`` directory (it holds ``ab.json``) it writes the experiment's
``report.html`` (``kvreplay.report.abreport``), and with ``--html`` each block's
report too.

On a ``kvreplay sweep`` directory (it holds ``sweep.json``) it redraws the sweep's
``report.html`` (``kvreplay.sweeps.report``), and with ``--csv`` its ``points.csv``; on a
run directory ``--csv`` writes ``phases.csv`` (``kvreplay.report.csvfile``).

On a ``kvreplay experiment`` directory (it holds ``experiment.json``) it writes the
window's ``result.json``, ``report.md`` and ``report.html``, rebuilt from the window's
progress after kill -9 (``experiments.window.resume.rebuild_publication``: steps that
never ran read ``not_run``, "not run: the window was killed before this step").

A thin layer over ``kvreplay.api.reporting`` (``kvreplay.write_report``), which tells the
directories apart and writes; this module prints the paths and maps a run directory with
nothing to report (or a missing extra) to exit status 2.
"""

from __future__ import annotations

import argparse

from kvreplay.safe_io import echo

NAME = "report"
HELP = ("Write report.md (and report.html with --html) for a run, ab, sweep or experiment directory; "
        "a missing summary.json (a killed run) is rebuilt from records.jsonl.")


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
    p.add_argument("--csv", action="store_true",
                   help="also write phases.csv (a run: one row per phase) or points.csv (a sweep directory)")


def run(args: argparse.Namespace) -> int:
    """Execute ``kvreplay report``; exit 0 ok, 2 nothing to report or a missing extra."""
    from kvreplay.api.reporting import report_kind, write_report

    try:
        r = write_report(args.run_dir, html=args.html, parquet=args.parquet, csv=args.csv)
    except (FileNotFoundError, ImportError) as exc:
        if report_kind(args.run_dir) != "run":
            raise
        echo(f"kvreplay report: {exc}", err=True)
        return 2
    if r.kind == "ab":
        for line in r.block_errors:
            echo(f"kvreplay report: {line}", err=True)
    elif r.kind == "experiment":
        echo(f"experiment: {r.status}")
    elif r.summary_rebuilt is not None:
        echo(f"summary.json was missing: rebuilt from records.jsonl: {r.summary_rebuilt}")
    for path in r.files:
        echo(path)
    return 0
