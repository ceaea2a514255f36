"""Many hosts: ``kvreplay run --workers N --ray ADDRESS`` runs the workers as Ray actors.

The same worker as ``--workers`` (``runner.multiproc``), with the shared memory
of one machine replaced by a coordinator actor that every worker reaches over
Ray, so workers may sit on any host of a Ray cluster:

- **One frozen sequence.** The coordinator holds each phase's next position. A
  slot that frees asks it for the next one (``claim``; one actor call, about
  1-3 ms on one host, spent between a slot's requests and never inside a
  measured latency) and stamps its send time on its own host when the answer
  arrives. Claims are answered in ``position`` order, as in one process
  (never a static split); two actors' send stamps can invert by the answer's
  transit (well under 1 ms on one host), where ``--workers`` stamps under the lock. Once the run stops (deadline, abort,
  interrupt), the next claim of a phase returns all its remaining positions at
  once, and they are recorded as not sent.
- **Phase boundaries.** All workers meet at the coordinator's barrier before a
  phase's first send and after its last request; worker 0 owns the counter
  adapter (reset, drain, snapshots, per-request counters at C1), as with
  ``--workers``. A stop in one worker reaches the others through the
  coordinator (each polls it every 50 ms and reads it with every claim).
- **Clocks are per host.** ``perf_counter_ns`` is CLOCK_MONOTONIC, one clock per
  host boot. A worker on the driver's host (same ``/proc/sys/kernel/random/boot_id``)
  uses the driver's clock origin as is (``clock: shared``); a worker on another
  host aligns its origin through the wall clock (``time.time_ns``) when it
  starts (``clock: wall-aligned``), so its run-relative timestamps are only as
  close to the driver's as the hosts' NTP sync. Every per-request latency (TTFT,
  ITL, E2E) is a difference of two readings on one host and is exact; the
  summary's ``ray.hosts`` and the report say which worker ran where.
- **Records come home.** Each actor writes its records.jsonl (flushed per
  record) on its own host; after the run the driver copies every file back in
  8 MiB reads, then merges exactly as ``--workers`` does
  (:func:`kvreplay.runner.multiproc.merge_run`).

``ADDRESS`` is what ``ray.init(address=...)`` takes: ``auto`` (a cluster already
running here), ``HOST:PORT`` of a head node's GCS, ``ray://HOST:10001`` (Ray
Client), or ``local`` for a new single-machine instance that lives as long as
the run. Ray is an optional extra: ``pip install 'kvreplay[ray]'``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import shutil
import socket
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kvreplay.clock import RunClock, now_ns
from kvreplay.errors import ConfigError
from kvreplay.plan import Phase, Plan
from kvreplay.rundir import RECORDS, WORKERS, read_plan_bytes, remove_worker_dirs, worker_records, write_plan_json
from kvreplay.runner._execute import BackendFactory, ReportRenderer
from kvreplay.runner._options import RunOptions, plan_json_of
from kvreplay.runner._runner import _Run, on_interrupt_signals
from kvreplay.runner.multiproc import _WorkerRun, merge_run, peer_stop_message, run_worker, worker_options
from kvreplay.runner.observer import ForwardingObserver, NullObserver, RunObserver, replay_events
from kvreplay.workload import Workload

__all__ = ["RAY_HINT", "check_address", "execute_plan_ray", "require_ray"]

RAY_HINT = "pip install 'kvreplay[ray]'"
"""How to get the optional Ray dependency."""

COPY_CHUNK_BYTES = 8 << 20
"""Records copied back from an actor per call (bytes)."""

PLACE_TIMEOUT_S = 120.0
"""How long the driver waits for Ray to start every worker actor (s)."""


def require_ray() -> Any:
    """Import Ray.

    Raises:
        ConfigError: Ray is not installed (field ``--ray``; the message says how to install it).
    """
    try:
        import ray
    except ImportError as exc:
        raise ConfigError(f"--ray needs Ray, an optional extra: {RAY_HINT}", field="--ray") from exc
    return ray


def boot_id() -> str:
    """This host's boot id (Linux); two processes with the same one share CLOCK_MONOTONIC. '' elsewhere."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


class Coordinator:
    """The shared state of a Ray run (runs as one async Ray actor; plain class for tests).

    Args:
        lengths: Each phase's sequence length (positions).
        workers: Workers that meet at every barrier.
    """

    def __init__(self, lengths: list[int], workers: int) -> None:
        self.lengths = list(lengths)
        self.next = [0] * len(lengths)
        self.workers = workers
        self.reason = ""
        self.cancel = False
        self.broken = False
        self.arrived: dict[str, int] = {}
        self.events: dict[str, asyncio.Event] = {}
        self.starts: dict[int, int] = {}
        self.display: list[tuple] = []
        self.checks: dict[int, str] = {}

    async def progress(self, events: list[tuple]) -> None:
        """A worker's batch of live-display events (``observer.ForwardingObserver``)."""
        self.display.extend(events)

    async def take_progress(self) -> list[tuple]:
        """The events received since the last call, in arrival order."""
        events, self.display = self.display, []
        return events

    async def claim(self, phase: int) -> tuple[int, int, str]:
        """Positions ``[a, b)`` for the caller and the stop reason ('' while running).

        One position while running; every remaining one once stopped; ``a == b`` when none is left.
        """
        a, n = self.next[phase], self.lengths[phase]
        b = n if self.reason else min(a + 1, n)
        self.next[phase] = b
        return a, b, self.reason

    async def stop(self, reason: str) -> None:
        """Stop new sends in every worker (the first reason is kept)."""
        if not self.reason:
            self.reason = reason or "stop"

    async def state(self) -> tuple[str, bool]:
        """The stop reason ('' while running) and whether requests in flight are to be cancelled."""
        return self.reason, self.cancel

    async def cancel_in_flight(self) -> None:
        """Second interrupt: every worker cancels its requests in flight (each still gets a record)."""
        self.cancel = True
        if not self.reason:
            self.reason = "interrupt"

    async def barrier(self, key: str) -> bool:
        """Wait until every worker arrived at ``key``; False when the barrier was broken."""
        if self.broken:
            return False
        ev = self.events.setdefault(key, asyncio.Event())
        self.arrived[key] = self.arrived.get(key, 0) + 1
        if self.arrived[key] >= self.workers:
            ev.set()
        await ev.wait()
        return not self.broken

    async def break_barriers(self) -> None:
        """Release every waiter (a worker left the run); later barriers return False at once."""
        self.broken = True
        for ev in self.events.values():
            ev.set()

    async def phase_start(self, phase: int, rel_ns: int) -> int:
        """The phase's start (ns from the run origin): the first worker's proposal wins."""
        return self.starts.setdefault(phase, rel_ns)

    async def set_check(self, phase: int, reason: str) -> None:
        """Worker 0: the phase's drain/fresh check failed for ``reason`` (before the start barrier)."""
        self.checks.setdefault(phase, reason)

    async def check(self, phase: int) -> str | None:
        """The phase's failed-check reason, None when its checks passed (after the start barrier)."""
        return self.checks.get(phase)


class _Claims:
    """Async iterator of ``(position, (body_index, repetition))`` claimed from the coordinator.

    Several slots of one worker await it at once; each call is one claim. A claim
    whose slot is cancelled while waiting for the answer (second interrupt, hard
    deadline) is kept: its positions join the queue that the runner drains into
    not-sent records, so no position is lost.
    """

    def __init__(self, run: _RayWorkerRun, phase_index: int, seq: Sequence[tuple[int, int]]) -> None:
        self.run, self.i, self.seq = run, phase_index, seq
        self.rest: collections.deque[int] = collections.deque()
        self.orphans: set[asyncio.Future] = set()
        self.done = False

    def __aiter__(self) -> _Claims:
        return self

    async def __anext__(self) -> tuple[int, Any]:
        while True:
            if self.rest:
                p = self.rest.popleft()
                return p, self.seq[p]
            if self.orphans:
                await asyncio.gather(*self.orphans, return_exceptions=True)
                continue
            if self.done:
                raise StopAsyncIteration
            claim = asyncio.ensure_future(_awaitable(self.run.coord.claim.remote(self.i)))
            try:
                a, b, reason = await asyncio.shield(claim)
            except asyncio.CancelledError:
                self.orphans.add(claim)
                claim.add_done_callback(self._adopt)
                raise
            self.run.note_reason(reason)
            if a >= b:
                self.done = True
                raise StopAsyncIteration
            self.run.claim_ns = now_ns()
            self.rest.extend(range(a + 1, b))
            return a, self.seq[a]

    def _adopt(self, claim: asyncio.Future) -> None:
        self.orphans.discard(claim)
        if claim.cancelled() or claim.exception() is not None:
            return
        a, b, _ = claim.result()
        if a >= b:
            self.done = True
        self.rest.extend(range(a, b))


class _RayWorkerRun(_WorkerRun):
    """The worker's runner with the coordinator actor in place of shared memory."""

    def __init__(self, *args: Any, coord: Any, **kw: Any) -> None:
        # No shared memory here: this class overrides every method of _WorkerRun that reads it.
        super().__init__(*args, shared=None, **kw)  # type: ignore[arg-type]
        self.coord = coord
        self.cancelled = False
        self.starts: dict[int, int] = {}

    def positions(self, phase: Phase) -> Any:  # noqa: D102
        return _Claims(self, self.phase_index[id(phase)], phase.sequence)

    def phase_start_ns(self, phase: Phase) -> int:  # noqa: D102
        return self.starts.get(self.phase_index[id(phase)]) or now_ns()

    async def phase_sync(self, phase: Phase, moment: str) -> None:  # noqa: D102
        if self.poller is None:
            self.poller = asyncio.ensure_future(self._poll_stop())
        i = self.phase_index[id(phase)]
        if not self.broken and not await self.coord.barrier.remote(f"{i}:{moment}"):
            self.broken = True
            self._peer_stop("a worker left the run", "worker_exit")
        if moment == "start":
            # One schedule for open-loop phases: the first proposal, in this host's clock.
            rel = await self.coord.phase_start.remote(i, now_ns() - self.clock.origin_ns)
            self.starts[i] = self.clock.origin_ns + rel
        self.note_state(*await self.coord.state.remote())

    def publish_check(self, phase: Phase, reason: str | None) -> None:  # noqa: D102
        if reason is not None:
            # Submitted before this worker's start barrier call, so the actor has it first.
            self.coord.set_check.remote(self.phase_index[id(phase)], reason)

    async def phase_check_result(self, phase: Phase, reason: str | None) -> str | None:  # noqa: D102
        return reason if reason is not None else await self.coord.check.remote(self.phase_index[id(phase)])

    def request_abort(self, reason: str, message: str) -> None:  # noqa: D102
        first = self.abort is None
        _Run.request_abort(self, reason, message)
        if first:
            self.coord.stop.remote(reason)

    def note_reason(self, reason: str) -> None:
        """Stop new sends here when the coordinator says the run stopped."""
        if reason and not self.stop_new:
            self._peer_stop(peer_stop_message(reason), reason)

    def note_state(self, reason: str, cancel: bool) -> None:
        """Apply the coordinator's state: stop new sends; cancel those in flight on a second interrupt."""
        self.note_reason(reason)
        if cancel and not self.cancelled:
            self.cancelled = True
            self.cancel_in_flight("interrupt", "operator interrupt (signal), second")

    def _check_stop(self) -> None:
        pass  # the coordinator's state arrives with claims, barriers and the poller

    async def _poll_stop(self) -> None:
        while True:
            await asyncio.sleep(0.05)
            self.note_state(*await self.coord.state.remote())


class WorkerActor:
    """One worker of a Ray run (wrapped by ``ray.remote`` in :func:`execute_plan_ray`)."""

    def __init__(self) -> None:
        self.dir: Path | None = None

    async def where(self) -> dict[str, Any]:
        """``{"host", "pid", "boot_id", "node"}`` of the process this actor runs in (``node``: Ray's node id, hex)."""
        import ray

        return {"host": socket.gethostname(), "pid": os.getpid(), "boot_id": boot_id(),
                "node": ray.get_runtime_context().get_node_id()}

    async def run(
        self,
        index: int,
        workers: int,
        plan_bytes: bytes,
        plan: Plan,
        workload: Workload,
        opts: RunOptions,
        backend_factory: BackendFactory | None,
        coord: Any,
        driver: dict[str, Any],
        live: bool = False,
    ) -> dict[str, Any]:
        """Run worker ``index``'s share; the payload as :func:`run_worker` returns it, plus ``clock``.

        ``plan`` and ``workload`` (already bound: interleaved bodies appended) come from
        the driver, which checked them against plan.json: nothing is read from the
        driver's paths here, which need not exist on this host.
        """
        import orjson

        self.dir = Path(tempfile.mkdtemp(prefix=f"kvreplay-ray-w{index}-"))
        if driver["boot_id"] and driver["boot_id"] == boot_id():
            clock, how = RunClock(driver["origin_ns"], driver["wall_anchor_ns"]), "shared"
        else:
            since_ns = time.time_ns() - driver["wall_anchor_ns"]
            clock, how = RunClock(now_ns() - since_ns, driver["wall_anchor_ns"]), "wall-aligned"
        wopts = worker_options(opts, self.dir / "out", (now_ns() - clock.origin_ns) / 1e9)
        wopts.out_dir.mkdir(parents=True)
        obs = ForwardingObserver(lambda ev: coord.progress.remote(ev)) if live else NullObserver()
        run = _RayWorkerRun(plan, workload, wopts, None, obs, clock, index=index, workers=workers, coord=coord)

        def on_exit() -> None:
            if not run.broken:
                coord.break_barriers.remote()  # peers still waiting (this one left early) stop waiting

        payload = await run_worker(run, index, orjson.loads(plan_bytes), backend_factory, on_exit)
        payload["clock"] = how
        return payload

    async def records_file(self) -> str | None:
        """This actor's records.jsonl (None before its run started)."""
        return None if self.dir is None else str(self.dir / "out" / RECORDS)

    async def read(self, path: str, offset: int, size: int) -> bytes:
        """Up to ``size`` bytes of this actor's file ``path`` from ``offset`` (b'' at the end)."""
        with open(path, "rb") as f:
            f.seek(offset)
            return f.read(size)

    async def cleanup(self) -> None:
        """Remove this actor's temporary folder."""
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)


def check_address(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast on a ``--ray`` address nothing listens at (``ray.init`` retries without end).

    ``auto`` and ``local`` are not checked here; ``HOST:PORT`` and ``ray://HOST:PORT`` get
    one TCP connect.

    Raises:
        ConfigError: malformed address, or the connect failed within ``timeout_s``.
    """
    if address in ("auto", "local"):
        return
    host, _, port = address.split("://", 1)[-1].rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"--ray {address!r}: give auto, local, HOST:PORT or ray://HOST:PORT", field="--ray")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        raise ConfigError(f"cannot reach Ray at {address!r}: {exc}", field="--ray") from exc


def _init_ray(ray: Any, address: str, workers: int) -> bool:
    """Connect to (or start) Ray; True when this call did, so the caller shuts it down."""
    if ray.is_initialized():
        return False
    check_address(address)
    kw: dict[str, Any] = {"logging_level": "ERROR", "log_to_driver": False, "configure_logging": False}
    env = {"env_vars": {k: v for k, v in os.environ.items() if k.startswith("KVREPLAY_")}}
    try:
        if address == "local":
            ray.init(num_cpus=max(workers, os.cpu_count() or 1), include_dashboard=False,
                     runtime_env=env, **kw)
        else:
            ray.init(address=address, runtime_env=env, **kw)
    except Exception as exc:  # noqa: BLE001 - Ray raises many kinds (connection, auth, version mismatch)
        raise ConfigError(f"cannot connect to Ray at {address!r}: {type(exc).__name__}: {exc}",
                          field="--ray") from exc
    return True


async def _copy_back(actor: Any, remote: str, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    offset = 0
    with open(dest, "wb") as f:
        while chunk := await actor.read.remote(remote, offset, COPY_CHUNK_BYTES):
            f.write(chunk)
            offset += len(chunk)


async def execute_plan_ray(
    plan: Plan,
    workload: Workload,
    opts: RunOptions,
    *,
    workers: int,
    address: str,
    backend_factory: BackendFactory | None = None,
    observer: RunObserver | None = None,
    render_report: ReportRenderer | None = None,
) -> dict[str, Any]:
    """Run a frozen plan in ``workers`` Ray actors sharing each phase's sequence; merge outputs.

    Writes the same run directory as ``execute_plan_workers``, with ``ray`` in
    plan.json's run block and in summary.json: ``{"address", "hosts": [{"worker",
    "host", "node", "pid", "clock"}], "clock_note"}`` (``node``: the Ray node id the actor ran on;
    several nodes may share a host name) (``clock``: ``shared`` or
    ``wall-aligned``, see the module text).

    Args:
        plan: The frozen plan.
        workload: Its bodies (shipped to the actors through Ray's object store, with those
            of interleaved workloads appended).
        opts: Run options (as for ``execute_plan``); ``target_url`` must be reachable from every host.
        workers: Actors, >= 1 (each asks Ray for one CPU).
        address: What ``ray.init(address=...)`` takes, or ``local``.
        backend_factory: Builds the counter adapter in worker 0 (as for
            ``execute_plan_workers``: it must pickle); None = no counters.
        observer: Told of the run start, each merged phase and the run end.
        render_report: Renders report.md from the merged summary and plan.json; None = none.

    Returns:
        The merged summary (as written to summary.json).

    Raises:
        ConfigError: Ray missing or unreachable, or it could not start ``workers``
            actors within ``PLACE_TIMEOUT_S``.
        RuntimeError: a worker failed (its traceback is in the message).
    """
    if workers < 1:
        raise ValueError("workers must be >= 1")
    ray = require_ray()
    started = _init_ray(ray, address, workers)
    out = opts.out_dir
    obs = observer or NullObserver()
    actors: list[Any] = []
    try:
        coord = ray.remote(num_cpus=0)(Coordinator).remote([len(p.sequence) for p in plan.phases], workers)
        actor_cls = ray.remote(num_cpus=1)(WorkerActor)
        actors = [actor_cls.remote() for _ in range(workers)]
        cpus = ray.cluster_resources().get("CPU", 0)
        if cpus < workers:
            obs.on_message(f"waiting up to {PLACE_TIMEOUT_S:g} s for Ray to place {workers} workers "
                           f"(1 CPU each; the cluster has {cpus:g} now)")
        try:
            places = await asyncio.wait_for(asyncio.gather(*(a.where.remote() for a in actors)), PLACE_TIMEOUT_S)
        except TimeoutError:
            cpus = ray.cluster_resources().get("CPU", 0)
            raise ConfigError(f"Ray did not start {workers} worker actors within {PLACE_TIMEOUT_S:g} s "
                              f"(each takes 1 CPU; the cluster has {cpus:g})", field="--workers") from None
        out.mkdir(parents=True, exist_ok=True)
        clock = RunClock.start()
        hosts = [{"worker": i, "host": p["host"], "node": p["node"], "pid": p["pid"]} for i, p in enumerate(places)]
        ray_block = {"address": address, "hosts": hosts}
        plan_json = plan_json_of(plan, opts, clock, workers=workers, ray=ray_block)
        write_plan_json(out, plan_json)  # ConfigError (exit 2) when it cannot be written
        obs.on_run_start(plan_json, None)
        import orjson

        plan_bytes = read_plan_bytes(out)
        plan_ref, wl_ref = ray.put(plan), ray.put(plan.bind(workload).in_memory())  # other hosts: the bytes travel
        driver = {"origin_ns": clock.origin_ns, "wall_anchor_ns": clock.wall_anchor_ns, "boot_id": boot_id()}
        live = type(obs) is not NullObserver
        refs = [a.run.remote(i, workers, plan_bytes, plan_ref, wl_ref, opts, backend_factory, coord, driver, live)
                for i, a in enumerate(actors)]
        try:
            payloads = await _gather(ray, refs, coord, obs if live else None)
        except _WorkerFailed as wf:
            # Keep what was measured: every actor's records, copied home before they are removed.
            for i, a in enumerate(actors):
                try:
                    if remote := await a.records_file.remote():
                        await _copy_back(a, remote, worker_records(out, i))
                except Exception:  # noqa: BLE001, S110 - the failed actor may be gone
                    pass
            raise RuntimeError(f"worker {wf.index} failed; the records each worker wrote are in "
                               f"{out / WORKERS}:\n{wf.exc}") from wf.exc
        plan_json = orjson.loads(plan_bytes)
        for i, (a, p) in enumerate(zip(actors, payloads, strict=True)):
            local = worker_records(out, i)
            await _copy_back(a, p["records"], local)
            p["records"] = str(local)
            hosts[i]["clock"] = p["clock"]
        n_hosts = len({h["host"] for h in hosts})
        ray_block["clock_note"] = (
            f"{workers} workers on {n_hosts} host(s); per-request latencies are measured on each "
            "worker's own host clock; run-relative times of workers on another host than the driver "
            "are aligned through the wall clock (wall-aligned)")
        summary = merge_run(plan, plan_json, payloads, clock, out, obs, render_report=render_report, ray=ray_block)
        remove_worker_dirs(out)
        return summary
    finally:
        for a in actors:
            with contextlib.suppress(Exception):  # noqa: BLE001 - a dead actor has nothing left to clean
                await a.cleanup.remote()
            ray.kill(a)
        if started:
            ray.shutdown()


class _WorkerFailed(Exception):
    def __init__(self, index: int, exc: BaseException) -> None:
        super().__init__(index, exc)
        self.index, self.exc = index, exc


async def _gather(ray: Any, refs: list[Any], coord: Any, obs: RunObserver | None) -> list[dict[str, Any]]:
    """Every worker's payload; SIGINT/SIGTERM stop new sends (first) or cancel those in flight (second).

    Either way each worker still writes its records and returns its payload, so the run
    directory is complete. With ``obs``, the workers' live-display events are taken from
    the coordinator every 0.25 s and replayed into it.
    """
    loop = asyncio.get_running_loop()
    interrupts = {"n": 0}

    def on_signal() -> None:
        interrupts["n"] += 1
        if interrupts["n"] == 1:
            coord.stop.remote("interrupt")
        else:
            coord.cancel_in_flight.remote()

    installed = on_interrupt_signals(loop, on_signal)
    try:
        pending = {asyncio.ensure_future(_awaitable(r)): i for i, r in enumerate(refs)}
        done: dict[int, dict[str, Any]] = {}
        failed: _WorkerFailed | None = None
        seen: set[str] = set()
        while pending:
            finished, _ = await asyncio.wait(pending, timeout=0.25, return_when=asyncio.FIRST_COMPLETED)
            if obs is not None:
                replay_events(await coord.take_progress.remote(), obs, seen)
            for fut in finished:
                i = pending.pop(fut)
                try:
                    done[i] = fut.result()
                except Exception as exc:  # noqa: BLE001 - one failed worker fails the run, as with --workers
                    if failed is None:
                        # The others stop sending and finish what is in flight; wait for them.
                        failed = _WorkerFailed(i, exc)
                        await coord.stop.remote("worker_exit")
                        await coord.break_barriers.remote()
        if failed is not None:
            raise failed
        if obs is not None:
            replay_events(await coord.take_progress.remote(), obs, seen)
        return [done[i] for i in range(len(refs))]
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)


async def _awaitable(ref: Any) -> Any:
    return await ref
