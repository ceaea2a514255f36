"""Running a whole plan: ``execute_plan`` (one process) and ``execute_run`` (shared with ``--workers``).

``kvreplay.runner`` exports ``execute_plan``. The per-request and per-phase
work is ``_runner._Run``'s; this module sets up the session, deadlines and
signals around it and writes summary.json at the end (also after an abort or an
interrupt), and report.md when the caller passes a renderer (``render_report``:
the runner never imports ``kvreplay.report``; ``kvreplay run`` and the
experiments pass ``kvreplay.report.markdown.render_markdown``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from kvreplay.errors import BackendError, ConfigError
from kvreplay.plan import Plan
from kvreplay.rundir import write_plan_json, write_report_md, write_summary
from kvreplay.runner._options import RunOptions, plan_json_of
from kvreplay.runner._runner import _h1_client, _Run, on_interrupt_signals
from kvreplay.runner.backend import Backend
from kvreplay.runner.h1 import client_ssl_context
from kvreplay.runner.observer import NullObserver, RunObserver
from kvreplay.workload import Workload

__all__ = ["BackendFactory", "ReportRenderer", "execute_plan", "execute_run"]

BackendFactory = Callable[[aiohttp.ClientSession], Awaitable[Backend | None]]
"""Async; builds the counter adapter from the run's session (None: no counters).

For ``--workers`` / ``--ray`` it must pickle (a module-level function, or a
``functools.partial`` of one), as it travels to worker 0's process."""
ReportRenderer = Callable[[dict[str, Any], dict[str, Any]], str]
"""``(summary, plan_json) -> report.md's text``, e.g. ``kvreplay.report.markdown.render_markdown``."""


async def execute_plan(
    plan: Plan,
    workload: Workload,
    opts: RunOptions,
    *,
    backend_factory: BackendFactory | None = None,
    observer: RunObserver | None = None,
    render_report: ReportRenderer | None = None,
) -> dict[str, Any]:
    """Run a frozen plan against a target and write the run directory.

    Writes ``plan.json`` before the first request, ``records.jsonl`` as requests
    complete, then ``summary.json``, ``histograms/*.hlog`` and, with
    ``render_report``, ``report.md`` — also after an abort or an interrupt.

    Args:
        plan: The frozen plan.
        workload: The bodies it indexes (checked against the plan's hashes).
        opts: Run options.
        backend_factory: Async; builds the counter adapter from the run's session; None = no counters.
        observer: Live-display hooks (``runner.observer``); None = silent.
        render_report: Renders report.md from the summary and plan.json; None = no report.md.

    Returns:
        The summary (as written to summary.json).

    Raises:
        ConfigError: the run directory, records.jsonl or plan.json cannot be
            written (disk full, permission denied; field ``--out``): nothing was sent.
    """
    try:
        opts.out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"cannot create the run directory: {exc.strerror or exc}; nothing was sent",
                          path=opts.out_dir, field="--out") from None
    obs = observer or NullObserver()
    run = _Run(plan, workload, opts, None, obs)
    plan_json = plan_json_of(plan, opts, run.clock)
    run.plan_sha256 = plan_json["plan_sha256"]  # the same plan's hash: summary.json's, not hashed again
    try:
        write_plan_json(opts.out_dir, plan_json)
    except ConfigError:
        run.writer.close()
        raise
    obs.on_run_start(plan_json, opts.stop_new_after_s)
    return await execute_run(run, plan_json, backend_factory, render_report)


async def execute_run(run: _Run, plan_json: dict[str, Any], backend_factory: BackendFactory | None,
                      render_report: ReportRenderer | None = None) -> dict[str, Any]:
    """Run every phase of ``run.plan`` and write records, histograms, summary.json and report.md.

    The body of ``execute_plan`` once ``run`` is made and plan.json written; a
    ``--workers`` / ``--ray`` worker calls it with its own ``run``.

    Returns:
        The summary (as written to summary.json).
    """
    plan, opts, obs = run.plan, run.opts, run.obs
    out = opts.out_dir
    concurrency = max(p.spec.concurrency for p in plan.phases)
    # Connector limit = concurrency, so the client never queues requests inside
    # aiohttp (field case B11: the default limit of 100 silently caps C > 100).
    connector = aiohttp.TCPConnector(limit=concurrency, limit_per_host=concurrency,
                                     keepalive_timeout=opts.keepalive_timeout_s,
                                     ssl=client_ssl_context(opts.ca_file) if opts.ca_file else True)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=opts.connect_timeout_s,
                                    sock_read=opts.read_idle_timeout_s)
    loop = asyncio.get_running_loop()
    interrupted = {"n": 0}

    def on_signal() -> None:
        interrupted["n"] += 1
        if interrupted["n"] >= 2:
            run.cancel_in_flight("interrupt", "operator interrupt (signal)")
        else:
            run.request_abort("interrupt", "operator interrupt (signal): finishing requests in flight")

    timers = []
    # the deadline as the caller set it, to the ms (no float noise such as "8.00001 s")
    whole = lambda s: round(s + opts.elapsed_before_s, 3)  # noqa: E731
    if opts.stop_new_after_s is not None:
        timers.append(loop.call_later(opts.stop_new_after_s, run.request_abort, "deadline",
                                      f"no new requests after {whole(opts.stop_new_after_s):g} s"))
    if opts.hard_deadline_s is not None:
        timers.append(loop.call_later(opts.hard_deadline_s, run.cancel_in_flight, "hard_deadline",
                                      f"hard deadline of {whole(opts.hard_deadline_s):g} s"))

    installed = on_interrupt_signals(loop, on_signal)
    try:
        async with aiohttp.ClientSession(connector=connector, timeout=timeout,
                                         auto_decompress=False) as session:
            run.h1 = _h1_client(opts, run.headers)
            try:
                run.backend = await backend_factory(session) if backend_factory else None
            except BackendError as exc:
                # kept in summary.json, not printed: the caller prints the error once ("kvreplay: error:
                # cannot use the target: ..."), which followed the same text as an "abort:" progress line
                say, run.progress = run.progress, (lambda _text: None)
                run.request_abort("target_unusable", str(exc))
                run.progress = say
                raise
            # The adapter actually used (``auto`` resolved), still before the first request;
            # the run block is outside the plan's hash.
            plan_json["run"]["backend"] = run.backend.name if run.backend is not None else "none"
            if run.writes_plan:  # a worker's folder has none: the run's plan.json is its coordinator's
                write_plan_json(out, plan_json)  # still before the first request: exit 2 when it fails
            await run.start_identity()  # baseline and pins, before the first request
            try:
                for i, phase in enumerate(plan.phases):
                    if i > 0:
                        await run.check_identity()
                    await run.run_phase(session, phase)
                await run.check_identity()
            except asyncio.CancelledError:
                run.request_abort("interrupt", "cancelled by a second interrupt")
    finally:
        if run.h1 is not None:
            run.h1.close()
        for tm in timers:
            tm.cancel()
        for sig in installed:
            loop.remove_signal_handler(sig)
        run.writer.close()
        if run.counter_log is not None:
            run.counter_log.close()
        summary = run.summary()
        try:
            write_summary(out, summary)
            if render_report is not None:
                write_report_md(out, render_report(summary, plan_json))
        except OSError as exc:
            # Disk full: records.jsonl holds every whole record; `kvreplay report` rebuilds the rest.
            run.progress(f"summary.json/report.md not written: {exc}; rebuild them later with: kvreplay report {out}")
        obs.on_run_end(summary)
    return summary
