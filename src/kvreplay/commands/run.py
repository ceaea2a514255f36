r"""``kvreplay run``: replay a workload against a target in a frozen order.

A thin layer over ``kvreplay.api`` (``kvreplay.replay``): the options, their checks
and the run itself live in ``kvreplay.api.run``; this module prints the phase
table and the paths and maps the outcome to an exit status. The shared option
helpers are re-exported for the other commands (ab, probe, experiment, snapshot).

Examples::

    kvreplay run fixtures/workloads/mtbench-52 --target sim \
        --phase prime:forward:c1 --phase replay:reverse:c4 --out runs/x
    kvreplay run --from-plan runs/x/plan.json --target http://127.0.0.1:8000 --backend vllm
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
from typing import Any

from kvreplay.api.run import (
    AUTO_HTML_MAX_RECORDS,
    EXIT_ABORTED,
    EXIT_CLIENT_ERROR,
    add_arguments,
    add_contract_arguments,
    add_target_arguments,
    check_ca_file,
    check_out_dir,
    check_target,
    contract_options,
    default_out,
    install_loop,
    make_observer,
    open_backend,
    parse_bound,
    parse_duration,
    read_api_key,
    sim_run_extra,
    split_credentials,
    time_scale_of,
    write_html_report,
    write_reports_for,
)
from kvreplay.api.runflow import run_async
from kvreplay.options import RunConfig
from kvreplay.redaction import install_streams
from kvreplay.report.markdown import render_table
from kvreplay.safe_io import echo

NAME = "run"
HELP = "Replay a workload's exact bodies against a server in a frozen order (closed loop, or open loop with a rate)."

__all__ = [
    "AUTO_HTML_MAX_RECORDS", "EXIT_ABORTED", "EXIT_CLIENT_ERROR", "add_arguments", "add_contract_arguments",
    "add_target_arguments", "check_ca_file", "check_out_dir", "check_target", "contract_options", "default_out",
    "config_of", "install_loop", "make_observer", "open_backend", "parse_bound", "parse_duration", "read_api_key",
    "run", "run_async", "run_with", "sim_run_extra", "split_credentials", "write_html_report",
]


def config_of(args: argparse.Namespace) -> RunConfig:
    """The typed options of a run from ``run``'s (or ``demo``'s) parsed flags."""
    return RunConfig.from_dests(vars(args))


def run(args: argparse.Namespace) -> int:
    """Execute ``kvreplay run``; exit 0 ok, 1 client errors, 2 bad input, 3 aborted."""
    return run_with(config_of(args))


def run_with(args: RunConfig) -> int:
    """Execute a run from its typed options; the exit status of ``kvreplay run``."""
    install_loop()
    old = install_streams()  # the API key never reaches stdout/stderr, whatever a server echoes
    try:
        summary = asyncio.run(run_async(args))
        out = summary.pop("_out")
        # The workload index and the plan (tens of MB at a million requests) are in reference
        # cycles once the run's loop is closed: free them before the report is drawn, so that
        # the two peaks do not add (issue 32).
        gc.collect()
        try:
            return _finish(args, summary, out)
        except KeyboardInterrupt:
            # A second Ctrl-C while the report is drawn: the data is on disk already.
            echo(f"\nkvreplay: interrupted while writing the report; run directory: {out}; "
                 f"redraw it with: kvreplay report {out} --html", err=True)
            return EXIT_ABORTED
    finally:
        sys.stdout, sys.stderr = old


def _finish(args: RunConfig, summary: dict[str, Any], out: str) -> int:
    """Draw the report (``write_reports_for``), print the table and paths; the exit status of ``run``."""
    html_path = write_reports_for(args, summary, out)
    if (getattr(args, "report", "html") == "html" and summary.get("records", 0) > AUTO_HTML_MAX_RECORDS
            and not args.quiet):
        echo(f"kvreplay: {summary['records']} records: report.html not drawn automatically "
             f"(above {AUTO_HTML_MAX_RECORDS} records); "
             f"draw it with: kvreplay report {out} --html", err=True)
    if not args.quiet:
        echo(render_table(summary, time_scale_of(out)))
        echo(f"run directory: {out}")
        if html_path is not None:
            echo(f"report: {html_path}")
    if summary.get("aborted"):
        return EXIT_ABORTED
    n_client = sum((ph.get("failed") or {}).get("client_error", 0) for ph in summary.get("phases", []))
    if n_client:
        echo(f"kvreplay: {n_client} request(s) failed inside the client (status client_error); "
             f"see records.jsonl", err=True)
        return EXIT_CLIENT_ERROR
    return 0
