"""Many processes, one frozen sequence: ``kvreplay run --workers N``.

One Python event loop saturates one core (issue 11: C256 of 128-token streams
is close to that). ``--workers N`` runs the same runner in N processes that
share every phase's frozen sequence:

- **Shared sequence, never a static split.** Each phase has one position
  counter in shared memory. A slot of any worker that frees takes the next
  position under the counter's lock and stamps its send time under that lock
  too (closed loop), so the order of sends is the plan's across processes, as
  in one process. The phase's concurrency C is spread over the workers
  (worker i holds ``C // N`` slots, one more when ``i < C % N``), so the total
  in flight is the plan's C.
- **Phase boundaries.** Worker 0 owns the counter adapter: reset, drain,
  fresh checks and snapshots, identity checks, and at C1 the per-request
  counter reads (it then holds the one slot). All workers meet at a barrier
  before the first send of a phase and after its last request, so worker 0's
  closing snapshot follows every request. An abort in one worker (deadline,
  error rate, server fatal error, interrupt) sets a shared flag that stops new
  requests in all of them.
- **One clock.** Workers use the coordinator's ``RunClock`` origin
  (``perf_counter_ns`` is CLOCK_MONOTONIC, one clock per host), so run-relative
  timestamps from different workers compare.
- **Lossless merge.** Each worker keeps its own HdrHistograms and records;
  at the end it sends every histogram encoded (HdrHistogram's compressed V2
  encoding) to the coordinator, which decodes and ``add``s them per phase and
  metric (HdrHistogram ``add`` is exact: same bucket layout, counts summed).
  Records are merged in (phase, position) order into one ``records.jsonl``,
  each with its ``worker``. Counts and tokens add up; client self-measurement
  is merged by ``metrics.selfmeasure.merge_client``.

- **Live display.** Each worker batches its display events (phase starts,
  request starts, slim records, drains, notices) and sends them to the
  coordinator every 0.25 s on the results queue (``observer.ForwardingObserver``),
  which replays them into the run's observer; phase ends are told at the merge.

- **Start-up.** Workers fork from a fork server that imported the runner once
  (``worker_context``, ``WORKER_PRELOAD``), not one fresh interpreter and import per
  worker; the fork server is stopped and reaped when the workers are done
  (``stop_fork_server``). They get the coordinator's plan in memory (it was checked
  against the workload there) and reload only the bodies; their folders hold no plan.json.

Hosts beyond this one: ``runner.rayrun`` (``--ray``).
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import queue
import signal
import traceback
from dataclasses import replace
from pathlib import Path
from typing import Any

from kvreplay.clock import RunClock, now_ns
from kvreplay.plan import Phase, Plan
from kvreplay.rundir import (
    RECORDS,
    adopt_worker_counters,
    remove_worker_dirs,
    worker_dir,
    write_plan_json,
)
from kvreplay.runner._execute import BackendFactory, ReportRenderer, execute_run
from kvreplay.runner._merge import merge_run, phase_payload
from kvreplay.runner._options import RunOptions, plan_json_of
from kvreplay.runner._runner import _Run, on_interrupt_signals
from kvreplay.runner.observer import ForwardingObserver, NullObserver, RunObserver, replay_events
from kvreplay.workload import Workload, load_workload

__all__ = ["execute_plan_workers", "merge_run", "run_worker", "slots_of", "worker_options"]


def peer_stop_message(reason: str) -> str:
    """The abort message of a worker stopped by the coordinator or a peer for ``reason``."""
    if reason == "interrupt":
        return "operator interrupt (signal), relayed to every worker: finishing requests in flight"
    return f"stopped by another worker: {reason}"


def slots_of(concurrency: int, workers: int, index: int) -> int:
    """Slots worker ``index`` of ``workers`` holds at ``concurrency`` (they sum to it)."""
    return concurrency // workers + (1 if index < concurrency % workers else 0)


class _Shared:
    """Shared by the workers: per-phase counters and starts, the stop flag and reason, a barrier."""

    def __init__(self, ctx: Any, n_phases: int, workers: int) -> None:
        self.counters = ctx.Array("q", n_phases)
        self.starts = ctx.Array("q", n_phases)
        self.stop = ctx.Value("i", 0)
        self.reason = ctx.Array("c", 64)
        self.check_phase = ctx.Value("i", -1)  # the phase whose drain/fresh check failed (worker 0)
        self.check_reason = ctx.Array("c", 512)
        self.barrier = ctx.Barrier(workers)


class _WorkerRun(_Run):
    """The runner in one worker process: claims positions from the shared counters."""

    writes_plan = False  # the run's plan.json is the coordinator's; a worker folder is scratch

    def __init__(self, *args: Any, index: int, workers: int, shared: _Shared, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.index, self.workers, self.shared = index, workers, shared
        self.phase_index = {id(ph): i for i, ph in enumerate(self.plan.phases)}
        self.broken = False
        self.poller: asyncio.Task | None = None

    def positions(self, phase: Phase) -> Any:  # noqa: D102
        i = self.phase_index[id(phase)]
        seq = phase.sequence
        n = len(seq)
        lock = self.shared.counters.get_lock()
        counters = self.shared.counters.get_obj()  # the raw array: one lock acquisition per claim, not three

        def claim() -> Any:
            while True:
                with lock:
                    p = counters[i]
                    if p >= n:
                        return
                    counters[i] = p + 1
                    self.claim_ns = now_ns()
                yield p, seq[p]

        return claim()

    def phase_start_ns(self, phase: Phase) -> int:  # noqa: D102
        # The first worker past the start barrier fixes the phase start for all, so
        # open-loop intended times are one schedule across processes.
        i = self.phase_index[id(phase)]
        starts = self.shared.starts
        with starts.get_lock():
            if not starts[i]:
                starts[i] = now_ns()
            return starts[i]

    def slots(self, phase: Phase) -> int:  # noqa: D102
        return slots_of(phase.spec.concurrency, self.workers, self.index)

    async def phase_sync(self, phase: Phase, moment: str) -> None:  # noqa: D102
        if self.poller is None:
            self.poller = asyncio.ensure_future(self._poll_stop())
        if self.broken:
            return
        from threading import BrokenBarrierError

        try:
            await asyncio.get_running_loop().run_in_executor(None, self.shared.barrier.wait)
        except BrokenBarrierError:
            self.broken = True
            self._peer_stop("a worker process left the run", self.shared.reason.value.decode(errors="replace"))
        self._check_stop()

    def publish_check(self, phase: Phase, reason: str | None) -> None:  # noqa: D102
        if reason is not None:
            with self.shared.check_phase.get_lock():
                self.shared.check_reason.value = reason.encode()[:511]
                self.shared.check_phase.value = self.phase_index[id(phase)]

    async def phase_check_result(self, phase: Phase, reason: str | None) -> str | None:  # noqa: D102
        if reason is None and self.shared.check_phase.value == self.phase_index[id(phase)]:
            return self.shared.check_reason.value.decode(errors="replace")
        return reason

    def request_abort(self, reason: str, message: str) -> None:  # noqa: D102
        first = self.abort is None
        super().request_abort(reason, message)
        if first:
            with self.shared.stop.get_lock():
                if not self.shared.stop.value:
                    self.shared.reason.value = reason.encode()[:63]
                    self.shared.stop.value = 1

    def _check_stop(self) -> None:
        if self.shared.stop.value and not self.stop_new:
            reason = self.shared.reason.value.decode(errors="replace")
            self._peer_stop(peer_stop_message(reason), reason)

    def _peer_stop(self, message: str, reason: str) -> None:
        if self.abort is None:
            self.abort = {"reason": reason or "worker_exit", "message": message}
        self.stop_new = True

    async def _poll_stop(self) -> None:
        while True:
            await asyncio.sleep(0.02)
            self._check_stop()

    def record(self, *args: Any, **kw: Any) -> dict[str, Any]:  # noqa: D102
        rec = super().record(*args, **kw)
        rec["worker"] = self.index
        return rec


# Imported once by the fork server, so each worker forks with them loaded (~0.2 CPU s of
# imports per worker with spawn; the fork server pays it once per run).
WORKER_PRELOAD = ["kvreplay.runner.multiproc", "uvloop"]


def worker_context() -> Any:
    """The multiprocessing context workers start in: a fork server that preloaded :data:`WORKER_PRELOAD`.

    A fork server is a fresh single-threaded process (no event loop, no threads of the
    coordinator's) that forks each worker; where the platform has none, ``spawn``.
    """
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")  # pragma: no cover - Windows
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(WORKER_PRELOAD)
    return ctx


def stop_fork_server() -> None:
    """Stop the fork server (and reap it) once a run's workers are done.

    The next run starts a fresh one, so its workers see the environment and ``sys.path``
    of the moment they start, as spawned ones do (modules such as ``accounting.sse``
    read the environment when imported). Uses ``ForkServer._stop`` (CPython 3.8+; where
    it is missing, the server stays until this process exits).
    """
    from multiprocessing import forkserver

    stop = getattr(getattr(forkserver, "_forkserver", None), "_stop", None)
    if stop is not None:
        stop()


def worker_options(opts: RunOptions, out_dir: Path, elapsed_s: float) -> RunOptions:
    """A worker's options: its own output folder, quiet, deadlines less the time already gone (s)."""
    return replace(
        opts,
        out_dir=out_dir,
        quiet=True,
        stop_new_after_s=None
        if opts.stop_new_after_s is None
        else max(0.0, opts.stop_new_after_s - elapsed_s),
        hard_deadline_s=None
        if opts.hard_deadline_s is None
        else max(0.0, opts.hard_deadline_s - elapsed_s),
        elapsed_before_s=elapsed_s,
    )


async def run_worker(
    run: _Run,
    index: int,
    plan_json: dict[str, Any],
    backend_factory: BackendFactory | None,
    on_exit: Any,
) -> dict[str, Any]:
    """Execute one worker's share of the plan and return its payload for :func:`merge_run`.

    Worker 0 builds the counter adapter with ``backend_factory`` (the caller's:
    the runner never imports ``kvreplay.backends``; None = no counters);
    ``on_exit()`` runs however the worker ends (it releases peers waiting at a barrier).
    The payload's ``records`` is the path of the worker's records.jsonl.
    """
    run.counters_elsewhere = index != 0 and backend_factory is not None
    factory = backend_factory if index == 0 else None
    fwd = run.obs if isinstance(run.obs, ForwardingObserver) else None
    flusher = asyncio.ensure_future(_flush_every(fwd)) if fwd is not None else None
    try:
        summary = await execute_run(run, plan_json, factory)
    finally:
        if flusher is not None and fwd is not None:
            flusher.cancel()
            fwd.flush()
        poller = getattr(run, "poller", None)
        if poller is not None:
            poller.cancel()
        on_exit()
    return {
        "index": index,
        "summary": {k: summary.get(k) for k in ("aborted", "restarts", "identity")},
        "phases": [phase_payload(st) for st in run.stats],
        "lag": [
            run.lag_hists[st.name].encode() if st.name in run.lag_hists else None
            for st in run.stats
        ],
        "records": str(run.opts.out_dir / RECORDS),
    }


async def _flush_every(obs: ForwardingObserver, interval_s: float = 0.25) -> None:
    while True:
        await asyncio.sleep(interval_s)
        obs.flush()


async def _worker_async(
    index: int,
    workers: int,
    run_dir: str,
    workload_path: str,
    max_body_bytes: int,
    opts: RunOptions,
    backend_factory: BackendFactory | None,
    shared: _Shared,
    origin_ns: int,
    wall_anchor_ns: int,
    plan: Plan,
    run_block: dict[str, Any],
    progress: Any,
) -> dict[str, Any]:
    # The coordinator's plan (checked against the workload there, pickled: no plan.json to parse
    # and check again, which cost ~3 µs per planned request in each worker); bodies from disk.
    workload = load_workload(workload_path, max_body_bytes=max_body_bytes)
    wopts = worker_options(opts, worker_dir(Path(run_dir), index), (now_ns() - origin_ns) / 1e9)
    wopts.out_dir.mkdir(parents=True, exist_ok=True)
    run = _WorkerRun(
        plan,
        plan.bind(workload),  # with the bodies of interleaved workloads appended
        wopts,
        None,
        NullObserver() if progress is None else ForwardingObserver(lambda ev: progress.put({"progress": ev})),
        RunClock(origin_ns, wall_anchor_ns),
        index=index,
        workers=workers,
        shared=shared,
    )

    def on_exit() -> None:
        if not run.broken:
            shared.barrier.abort()  # peers still waiting (this one left early) stop waiting

    return await run_worker(run, index, {"run": dict(run_block)}, backend_factory, on_exit)


def _worker_main(results: Any, live: bool, *args: Any) -> None:
    """A worker process: ``_worker_async(*args, progress)``; its payload or traceback goes to ``results``.

    ``args`` are ``_worker_async``'s up to ``run_block``; ``progress`` is ``results``
    when ``live`` (the coordinator shows a display), else None.
    """
    index, shared = args[0], args[7]
    try:
        try:
            import uvloop

            uvloop.install()
        except ImportError:  # pragma: no cover
            pass
        call = [*args, results if live else None]  # _worker_async's arguments, progress last
        payload = asyncio.run(_worker_async(*call))
    except BaseException:  # noqa: BLE001 - reported to the coordinator, which fails the run
        shared.barrier.abort()
        results.put({"index": index, "error": traceback.format_exc()})
        return
    results.put(payload)


async def execute_plan_workers(
    plan: Plan,
    workload: Workload,
    opts: RunOptions,
    *,
    workers: int,
    backend_factory: BackendFactory | None = None,
    observer: RunObserver | None = None,
    max_body_bytes: int = 64 << 20,
    render_report: ReportRenderer | None = None,
) -> dict[str, Any]:
    """Run a frozen plan in ``workers`` processes sharing each phase's sequence; merge outputs.

    Writes the same run directory as ``execute_plan`` (plan.json before the
    first request, then records.jsonl, histograms, summary.json, report.md with
    ``render_report``), with ``workers`` in plan.json's run block and
    summary.json, and a ``worker`` key in every record.

    Args:
        plan: The frozen plan.
        workload: Its bodies (each worker reloads them from ``workload.path``).
        opts: Run options (as for ``execute_plan``).
        workers: Processes, >= 1.
        backend_factory: Builds the counter adapter in worker 0 (``execute_plan``'s
            ``backend_factory``; it must pickle: a module-level function or a
            ``functools.partial`` of one); None = no counters.
        observer: Told of the run start, each merged phase and the run end.
        max_body_bytes: Body size limit when the workers reload the workload (bytes).
        render_report: Renders report.md from the merged summary and plan.json; None = none.

    Returns:
        The merged summary (as written to summary.json).

    Raises:
        RuntimeError: a worker process failed (its traceback is in the message).
    """
    if workers < 1:
        raise ValueError("workers must be >= 1")
    out = opts.out_dir
    out.mkdir(parents=True, exist_ok=True)
    obs = observer or NullObserver()
    clock = RunClock.start()
    plan_json = plan_json_of(plan, opts, clock, workers=workers)
    write_plan_json(out, plan_json)  # ConfigError (exit 2) when it cannot be written
    obs.on_run_start(plan_json, None)
    ctx = worker_context()
    shared = _Shared(ctx, len(plan.phases), workers)
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=_worker_main,
            daemon=True,
            name=f"kvreplay-worker-{i}",
            args=(
                results,
                type(obs) is not NullObserver,
                i,
                workers,
                str(out),
                workload.path,
                max_body_bytes,
                opts,
                backend_factory,
                shared,
                clock.origin_ns,
                clock.wall_anchor_ns,
                plan,
                plan_json["run"],
            ),
        )
        for i in range(workers)
    ]
    for p in procs:
        p.start()
    loop = asyncio.get_running_loop()
    payloads: dict[int, dict[str, Any]] = {}
    phases_seen: set[str] = set()
    interrupts = {"n": 0}

    def on_signal() -> None:
        # First: every worker stops sending (shared flag; each finishes what is in flight and
        # writes its records). Second: the workers get SIGINT themselves (they then cancel).
        interrupts["n"] += 1
        if interrupts["n"] == 1:
            with shared.stop.get_lock():
                if not shared.stop.value:
                    shared.reason.value = b"interrupt"
                    shared.stop.value = 1
        else:
            for p in procs:
                if p.is_alive() and p.pid is not None:
                    os.kill(p.pid, signal.SIGINT)

    installed = on_interrupt_signals(loop, on_signal)
    try:
        while len(payloads) < workers:
            try:
                item = await loop.run_in_executor(None, results.get, True, 0.2)
            except queue.Empty:
                if not any(p.is_alive() for p in procs) and results.empty():
                    raise RuntimeError(
                        f"worker processes exited without a result ({len(payloads)}/{workers})"
                    ) from None
                continue
            if "progress" in item:
                replay_events(item["progress"], obs, phases_seen)
                continue
            if "error" in item:
                shared.barrier.abort()
                raise RuntimeError(f"worker {item['index']} failed:\n{item['error']}")
            payloads[item["index"]] = item
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
        stop_fork_server()
    summary = merge_run(plan, plan_json, [payloads[i] for i in range(workers)], clock, out, obs,
                        render_report=render_report)
    adopt_worker_counters(out, 0)  # worker 0 reads the counters
    remove_worker_dirs(out)
    return summary
