r"""Replay a workload against a target in a frozen order: the behaviour of ``kvreplay run``.

``kvreplay.replay`` and ``kvreplay run`` both come here: the options are declared once
(``kvreplay.options.RunConfig``; ``add_arguments`` derives the flags) and executed by
``run_async`` (``kvreplay.api.runflow``, re-exported here with its checks, which probe, ab
and snapshot share); ``commands/run.py`` only prints. Examples::

    kvreplay run fixtures/workloads/mtbench-52 --target sim \
        --phase prime:forward:c1 --phase replay:reverse:c4 --out runs/x
    kvreplay run --from-plan runs/x/plan.json --target http://127.0.0.1:8000 --backend vllm
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from kvreplay.api.fleet import add_fleet_arguments
from kvreplay.api.runflow import run_async
from kvreplay.api.runflow.checks import (
    MAX_KEY_FILE_BYTES,
    KeySource,
    QuietOption,
    check_ca_file,
    check_out_dir,
    check_target,
    contract_options,
    default_out,
    make_observer,
    open_backend,
    read_api_key,
    sim_run_extra,
    split_credentials,
)
from kvreplay.argtypes import add_declared, bound, duration
from kvreplay.options import RunConfig
from kvreplay.report.units import sim_time_scale
from kvreplay.rundir import REPORT_MD, read_plan
from kvreplay.safe_io import echo

__all__ = ["AUTO_HTML_MAX_RECORDS", "EXIT_ABORTED", "EXIT_CLIENT_ERROR", "MAX_KEY_FILE_BYTES", "KeySource",
           "QuietOption", "add_arguments", "add_contract_arguments", "add_target_arguments", "check_ca_file",
           "check_out_dir", "check_target", "contract_options", "default_out", "install_loop", "make_observer",
           "open_backend", "parse_bound", "parse_duration", "read_api_key", "run_async", "sim_run_extra",
           "split_credentials", "time_scale_of", "write_html_report", "write_reports_for"]

EXIT_ABORTED = 3
EXIT_CLIENT_ERROR = 1
"""Some positions failed inside the client (``client_error`` records); everything is written."""


def add_target_arguments(p: Any) -> None:
    """Options shared by commands that talk to a target (run, demo, probe...): ``RunConfig``'s ``target`` group."""
    from kvreplay.backends import backend_names

    add_declared(p, RunConfig, ("target",))
    for action in p._actions:  # the backends' names are known here, above kvreplay.options
        if action.dest == "backend":
            action.help = f"counter adapter: auto, none, {', '.join(backend_names())}"
    try:
        from kvreplay.sim import add_arguments as add_sim_arguments
    except ImportError:  # pragma: no cover - simulator not built
        return
    add_sim_arguments(p, prefix="sim-")


def add_arguments(p: Any) -> None:
    """Register ``run``'s options: ``kvreplay.options.RunConfig``'s fields (their one declaration), then the fleet's."""
    add_declared(p, RunConfig, ("run", "contract"))
    add_target_arguments(p)
    add_fleet_arguments(p)  # api.fleet


def add_contract_arguments(p: Any) -> None:
    """``--expect-identity``, ``--abort-on-malformed``, ``--on-check-fail`` (run, ab): the ``contract`` group."""
    add_declared(p, RunConfig, ("contract",))


parse_duration = duration
"""``90``, ``90s``, ``70m``, ``1.5h``, ``250ms`` -> seconds (``kvreplay.argtypes.duration``; its old name here)."""

parse_bound = bound
"""``host_bytes>34e9`` -> ``("host_bytes", ">", 34e9)`` (``kvreplay.argtypes.bound``; its old name here)."""


def install_loop() -> None:
    """Use uvloop where it is installed (the runner's default event loop)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover
        return
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def write_reports_for(args: object, summary: dict[str, Any], out: str) -> Path | None:
    """The reports at the end of a run, as ``--report`` asks; the path of report.html or None.

    ``none`` removes a report.md already in the folder; ``md`` writes report.md only;
    ``html`` writes both up to ``AUTO_HTML_MAX_RECORDS`` records (above it, none: the caller
    says how to draw it later).
    """
    mode = getattr(args, "report", "html")
    if mode == "none":
        # none means none, also over a report.md already in the folder.
        (Path(out) / REPORT_MD).unlink(missing_ok=True)
    elif mode == "md":
        write_html_report(out, html=False)
    elif summary.get("records", 0) <= AUTO_HTML_MAX_RECORDS:
        return write_html_report(out)
    return None


def time_scale_of(out: str) -> float | None:
    """The simulator time scale in ``out/plan.json`` (``report.units.sim_time_scale``), or None."""
    return sim_time_scale(read_plan(Path(out)))


AUTO_HTML_MAX_RECORDS = 2_000_000
"""Largest run whose report.html is drawn at the end of ``run`` by default (records).
The report streams records (``kvreplay.report.stream``; 200,000 records in about
2 s of CPU and under 150 MB, bench/bench_report.py), so only a very long run
leaves it to ``kvreplay report RUN_DIR --html``."""


def write_html_report(out: str | Path, *, html: bool = True) -> Path | None:
    """Write report.md and report.html into the run directory (after every run, interrupted ones too).

    With ``html=False`` only report.md is written (``--report md``).

    Returns:
        The path of report.html, or None when it could not be written (the run's
        data is already on disk; ``kvreplay report RUN_DIR --html`` retries).
    """
    try:
        from kvreplay.report.write import write_reports

        return write_reports(out, html=html).get("html")
    except Exception as exc:  # noqa: BLE001 - records/summary are written; a report bug must not lose the exit code
        echo(f"kvreplay: report.html not written ({type(exc).__name__}: {exc}); "
             f"retry with: kvreplay report {out} --html", err=True)
        return None
