"""The client measuring itself: is a phase's latency the server's or kvreplay's?

Per phase, while its requests run:

- **CPU utilisation** of the client process: ``time.process_time()`` (user +
  system, all threads) over the phase's wall time; 1.0 is one core busy. The
  runner is one event loop, so near 1.0 it cannot read sockets as fast as they
  fill and every latency it stamps grows by its own queueing.
- **Event-loop lag**: a timer asks to run every ``LAG_INTERVAL_S``; how late it
  actually runs (ns, recorded in µs in an HdrHistogram) is how long any socket
  read waited behind other work. uvloop rounds timers to 1 ms, so lags under
  about 1 ms are timer resolution, not load.
- **Late sends** (open loop only): requests sent more than ``LATE_SEND_MS``
  after their intended time (wrk2's coordinated-omission view: the schedule,
  not the previous response, says when a request should go).

- **Starvation**: wall time the loop's thread was runnable but not running
  (waiting for a CPU), from ``/proc/thread-self/schedstat`` field 2 (Linux
  ``Documentation/scheduler/sched-stats.rst``: time spent on the cpu, time spent
  waiting on a runqueue, timeslices; ns). Where the file is absent (not Linux,
  or a kernel without ``CONFIG_SCHED_INFO``) starvation is ``None`` and only CPU
  counts.

The probe has no coordinated omission: a tick that runs ``L`` late also
records the ticks the stall swallowed (``L - I``, ``L - 2I``, ... while at
least ``I``, the probe interval), as HdrHistogram's
``recordValueWithExpectedInterval`` does, so a stall of ``S`` seconds counts as
``S / I`` late samples and the lag percentiles are shares of the phase's *time*,
not of the ticks that happened to run. For every tick at least
``LOOP_LAG_P99_MS`` late, the monitor also adds up what the loop's thread did
over that tick's window (from the previous tick to this one): running
(``stall_cpu_share``) or runnable and waiting for a CPU (``stall_wait_share``).

Documented verdict (``client.verdict``; ``classify``):

- ``client_bound`` (``client_bound: true`` in ``summary.json``): the loop-lag
  p99 is at least ``LOOP_LAG_P99_MS`` **and** the client's CPU or starvation is
  above its threshold: CPU utilisation at least ``CPU_UTILISATION`` over the
  phase or the loop thread running for at least ``STALL_SHARE`` of the late
  windows; or starvation at least ``STARVATION_SHARE`` of the phase's wall time
  or at least ``STALL_SHARE`` of the late windows. The client may then have
  added up to the lag to the latencies it stamped.
- ``host_stalls``: the lag is over its threshold but neither CPU nor
  starvation is: the thread was off-CPU and not waiting for one while its timer
  was due (the host or hypervisor did not run it, the process was stopped, or a
  blocking call held the loop). Reported with its figures; not labelled
  client-bound.
- ``quiet``: the loop-lag p99 is under its threshold.

There is no minimum sample count (a C256 phase of 2,000 requests may last well
under a second): with the backfill, one 3 s stall is 600 samples at 5 ms.
Late sends are reported but do not by themselves label the phase: an open loop
also sends late when its concurrency cap is full because the *server* is slow
(``schedule`` says so).

Sources: wrk2 (Gil Tene) on coordinated omission; the event-loop-lag probe of
Node's ``perf_hooks.monitorEventLoopDelay`` (a periodic timer's lateness in an
HdrHistogram).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from kvreplay.clock import now_ns
from kvreplay.metrics.histograms import LatencySet

__all__ = [
    "CPU_UTILISATION",
    "HOST_CPU_WAIT_SHARE",
    "LAG_INTERVAL_S",
    "LATE_SEND_MS",
    "LOOP_LAG_P99_MS",
    "MIN_LAG_SAMPLES",
    "STALL_SHARE",
    "STARVATION_SHARE",
    "ClientMonitor",
    "SchedStat",
    "classify",
    "describe",
    "host_busy",
    "host_busy_text",
    "merge_client",
    "phase_busy_line",
    "thresholds",
]

LAG_INTERVAL_S = 0.005
"""Period of the loop-lag probe timer (s)."""
LOOP_LAG_P99_MS = 10.0
"""Loop-lag p99 at or above which a phase's loop counts as late (ms): reads waited that long."""
CPU_UTILISATION = 0.90
"""CPU utilisation (process CPU s / wall s; one core = 1.0) from which the client counts as busy."""
STARVATION_SHARE = 0.10
"""Runnable-but-not-running wall time of the loop thread / phase wall time from which it counts as starved."""
STALL_SHARE = 0.50
"""Share of the late ticks' windows the loop thread spent running (or waiting for a CPU) from which
the lag counts as the client's CPU (or its starvation)."""
MIN_LAG_SAMPLES = 0
"""No minimum any more (the probe backfills swallowed ticks); kept in ``client_thresholds`` for readers."""
LATE_SEND_MS = 1.0
"""An open-loop send this much later than intended (ms) counts as late."""
VERDICTS = ("quiet", "host_stalls", "client_bound")
"""``client.verdict`` values, mildest first (``merge_client`` keeps the worst)."""


def thresholds() -> dict[str, float]:
    """The documented thresholds, as written into summary.json."""
    return {
        "loop_lag_p99_ms": LOOP_LAG_P99_MS,
        "min_lag_samples": MIN_LAG_SAMPLES,
        "cpu_utilisation": CPU_UTILISATION,
        "starvation_share": STARVATION_SHARE,
        "stall_share": STALL_SHARE,
        "late_send_ms": LATE_SEND_MS,
        "lag_interval_ms": LAG_INTERVAL_S * 1e3,
    }


def classify(
    lag_p99_ms: float | None,
    cpu_utilisation: float | None,
    starvation_share: float | None = None,
    stall_cpu_share: float | None = None,
    stall_wait_share: float | None = None,
) -> str:
    """The phase verdict from its self-measurement (rule in the module docstring).

    Args:
        lag_p99_ms: Backfilled loop-lag p99 (ms); None without samples.
        cpu_utilisation: Process CPU s / phase wall s (1.0 = one core).
        starvation_share: Loop thread's runnable-waiting s / phase wall s; None when unmeasured.
        stall_cpu_share: Loop thread's CPU s / wall s over the windows of ticks at least
            ``LOOP_LAG_P99_MS`` late; None without such ticks.
        stall_wait_share: Its runnable-waiting s / wall s over the same windows; None when unmeasured.

    Returns:
        ``"client_bound"``, ``"host_stalls"`` or ``"quiet"``.
    """
    if lag_p99_ms is None or lag_p99_ms < LOOP_LAG_P99_MS:
        return "quiet"
    busy = (cpu_utilisation or 0.0) >= CPU_UTILISATION or (stall_cpu_share or 0.0) >= STALL_SHARE
    starved = (starvation_share or 0.0) >= STARVATION_SHARE or (stall_wait_share or 0.0) >= STALL_SHARE
    return "client_bound" if busy or starved else "host_stalls"


class SchedStat:
    """The calling thread's scheduler times from ``/proc/thread-self/schedstat`` (Linux).

    The file is opened once (in the thread to be measured) and re-read with
    ``pread`` at offset 0 (about 3 µs). ``available`` is False where it does
    not exist; ``read`` then returns None.
    """

    __slots__ = ("_fd",)

    def __init__(self) -> None:
        self._fd: int | None = None
        for path in ("/proc/thread-self/schedstat", "/proc/self/schedstat"):
            try:
                self._fd = os.open(path, os.O_RDONLY)
                break
            except OSError:
                continue
        if self._fd is not None and self.read() is None:
            self.close()

    @property
    def available(self) -> bool:
        """Whether the thread's scheduler times can be read."""
        return self._fd is not None

    def read(self) -> tuple[int, int] | None:
        """``(running ns, runnable-waiting ns)`` since the thread started; None when unavailable."""
        if self._fd is None:
            return None
        try:
            f = os.pread(self._fd, 96, 0).split()
            return int(f[0]), int(f[1])
        except (OSError, ValueError, IndexError):
            return None

    def close(self) -> None:
        """Release the file."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class CpuPressure:
    """The host's CPU pressure stall time from ``/proc/pressure/cpu`` (Linux PSI).

    The kernel's pressure stall information (Documentation/accounting/psi.rst): the
    ``some`` line's ``total=`` is the wall time (µs) during which at least one runnable
    task on the host waited for a CPU. Read once at a phase's start and once at its end,
    the difference over the phase's wall time is the share of the phase in which work
    on this host (a same-host server, the client, anything else) queued for a CPU.
    ``read`` returns None where the file does not exist (kernels without PSI, macOS).
    """

    PATH = "/proc/pressure/cpu"

    @classmethod
    def read(cls) -> int | None:
        """The ``some`` line's ``total`` (µs); None when unavailable or unreadable."""
        try:
            with open(cls.PATH, "rb") as f:
                head = f.read(512)
        except OSError:
            return None
        for line in head.split(b"\n"):
            if line.startswith(b"some "):
                for field in line.split():
                    if field.startswith(b"total="):
                        try:
                            return int(field[6:])
                        except ValueError:
                            return None
        return None


class ClientMonitor:
    """Self-measurement of one phase (start it when the phase starts, stop it when it ends).

    Args:
        interval_s: Loop-lag probe period (s).

    Attributes:
        lag: Loop lag (HdrHistogram, µs), with the ticks a stall swallowed backfilled.
        late_sends / sends: Open-loop sends later than ``LATE_SEND_MS`` / all timed sends.
        cpu_s / wall_s: Process CPU (s, all threads) and wall time (s) of the phase.
        starved_s: Loop thread's runnable-but-not-running time (s); None without schedstat.
        loop_late_s: Sum of the lateness of ticks at least ``LOOP_LAG_P99_MS`` late (s).
        stall_window_s / stall_cpu_s / stall_wait_s: Over those ticks' windows (previous
            tick to this one): wall, loop-thread CPU and runnable-waiting time (s).
        host_cpu_wait_s: Wall time of the phase (s) during which some task on the host
            waited for a CPU (``CpuPressure``); None without PSI.
    """

    def __init__(self, interval_s: float = LAG_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._interval_ns = int(interval_s * 1e9)
        self._stall_ns = int(LOOP_LAG_P99_MS * 1e6)
        self.lag = LatencySet()
        self.sends = 0
        self.late_sends = 0
        self._late_ns = int(LATE_SEND_MS * 1e6)
        self._handle: asyncio.TimerHandle | None = None
        self._sched: SchedStat | None = None
        self._due_ns = 0
        self._run0 = 0
        self._wait0: int | None = None
        self._phase_wait0: int | None = None
        self._cpu0 = 0.0
        self._t0 = 0
        self._psi0: int | None = None
        self.host_cpu_wait_s: float | None = None
        self.cpu_s = 0.0
        self.wall_s = 0.0
        self.starved_s: float | None = None
        self.loop_late_s = 0.0
        self.stall_window_s = 0.0
        self.stall_cpu_s = 0.0
        self.stall_wait_s: float | None = None
        self.open_loop = False

    def _thread_times(self) -> tuple[int, int | None]:
        """(loop thread CPU ns, runnable-waiting ns or None)."""
        rw = self._sched.read() if self._sched is not None else None
        if rw is None:
            return time.thread_time_ns(), None
        return rw

    def start(self, *, open_loop: bool = False) -> None:
        """Begin measuring (from inside the running loop, in its thread)."""
        self.open_loop = open_loop
        self._sched = SchedStat()
        self._cpu0 = time.process_time()
        self._t0 = now_ns()
        self._psi0 = CpuPressure.read()
        run, wait = self._thread_times()
        self._phase_wait0 = wait
        self.mark(self._t0, run, wait)
        self._handle = asyncio.get_running_loop().call_later(
            self.interval_s, self._tick, asyncio.get_running_loop()
        )

    def mark(self, t_ns: int, run_ns: int, wait_ns: int | None) -> None:
        """Arm the probe at ``t_ns``: the next tick is due one interval later.

        Args:
            t_ns: ``now_ns()`` reading.
            run_ns: Loop thread CPU so far (ns).
            wait_ns: Loop thread runnable-waiting so far (ns); None when unmeasured.
        """
        self._due_ns = t_ns + self._interval_ns
        self._run0 = run_ns
        self._wait0 = wait_ns

    def observe(self, t_ns: int, run_ns: int, wait_ns: int | None) -> None:
        """One probe tick running at ``t_ns`` (same units as ``mark``), then re-mark.

        Records the lateness ``L`` and, when ``L`` is at least one interval, the
        ticks it swallowed (``L - I``, ``L - 2I``, ... while at least ``I``):
        ``floor(L / I)`` samples in all. A tick at least ``LOOP_LAG_P99_MS``
        late adds its lateness to ``loop_late_s`` and its window's wall, CPU and
        waiting time to the ``stall_*`` sums.
        """
        late = t_ns - self._due_ns
        if late < 0:
            late = 0
        self.lag.record_ns(late)
        iv = self._interval_ns
        if late >= 2 * iv:
            self.lag.record_many_ns(range(late - iv, iv - 1, -iv))
        if late >= self._stall_ns:
            self.loop_late_s += late / 1e9
            self.stall_window_s += (t_ns - self._due_ns + iv) / 1e9
            self.stall_cpu_s += (run_ns - self._run0) / 1e9
            if wait_ns is not None and self._wait0 is not None:
                self.stall_wait_s = (self.stall_wait_s or 0.0) + (wait_ns - self._wait0) / 1e9
        self.mark(t_ns, run_ns, wait_ns)

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        t = now_ns()
        run, wait = self._thread_times()
        self.observe(t, run, wait)
        self._handle = loop.call_later(self.interval_s, self._tick, loop)

    def note_send(self, intended_ns: int, sent_ns: int) -> None:
        """Count one open-loop send (``now_ns()`` readings)."""
        self.sends += 1
        if sent_ns - intended_ns > self._late_ns:
            self.late_sends += 1

    def stop(self) -> None:
        """End measuring."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self.cpu_s = time.process_time() - self._cpu0
        self.wall_s = (now_ns() - self._t0) / 1e9
        psi = CpuPressure.read()
        if psi is not None and self._psi0 is not None and psi >= self._psi0:
            self.host_cpu_wait_s = (psi - self._psi0) / 1e6
        if self._sched is not None:
            _, wait = self._thread_times()
            if wait is not None and self._phase_wait0 is not None:
                self.starved_s = (wait - self._phase_wait0) / 1e9
            self._sched.close()
            self._sched = None

    def to_json(self) -> dict[str, Any]:
        """Flat figures for ``summary.json``'s ``phases[].client`` (``bound`` = client-bound)."""
        lag = self.lag.summary_ms()
        util = self.cpu_s / self.wall_s if self.wall_s > 0 else None
        starv = self.starved_s / self.wall_s if self.starved_s is not None and self.wall_s > 0 else None
        win = self.stall_window_s
        s_cpu = self.stall_cpu_s / win if win > 0 else None
        s_wait = self.stall_wait_s / win if win > 0 and self.stall_wait_s is not None else None
        verdict = classify(lag["p99"], util, starv, s_cpu, s_wait)

        def r(v: float | None) -> float | None:
            return round(v, 4) if v is not None else None

        return {
            "bound": verdict == "client_bound",
            "verdict": verdict,
            "cpu_s": round(self.cpu_s, 4),
            "cpu_utilisation": r(util),
            "starved_s": r(self.starved_s),
            "starvation_share": r(starv),
            "loop_lag_p50_ms": lag["p50"],
            "loop_lag_p99_ms": lag["p99"],
            "loop_lag_max_ms": lag["max"],
            "loop_lag_samples": lag["n"],
            "loop_late_s": round(self.loop_late_s, 4),
            "stall_cpu_share": r(s_cpu),
            "stall_wait_share": r(s_wait),
            "timed_sends": self.sends if self.open_loop else None,
            "late_sends": self.late_sends if self.open_loop else None,
            "late_send_share": round(self.late_sends / self.sends, 4)
            if self.open_loop and self.sends
            else None,
            "host_cpu_wait_share": r(min(self.host_cpu_wait_s / self.wall_s, 1.0))
            if self.host_cpu_wait_s is not None and self.wall_s > 0
            else None,
            **host_load(),
        }


def host_load() -> dict[str, Any]:
    """``{"host_load_1m", "host_cpus"}``: the host's load and CPUs at a phase's end.

    The 1-minute load average (``os.getloadavg``) and the CPUs this process may run on
    (``os.sched_getaffinity``); None where the platform has none.

    A load average above the CPU count means runnable work waited for a CPU during the
    phase: a server on the same host (the embedded simulator, a local llama-server) was
    delayed too, which the client's own loop lag does not show. A/B timing decisions are
    withheld then (``experiments.ab.resolution.client_noise``).
    """
    try:
        load: float | None = round(os.getloadavg()[0], 2)
    except OSError:
        load = None
    try:
        cpus: int | None = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count()
    return {"host_load_1m": load, "host_cpus": cpus}


def merge_client(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Combine the ``client`` figures of one phase measured in several worker processes.

    CPU seconds, starvation seconds and sends add up; utilisation, starvation
    share, loop lag, late time and stall shares are the worst worker's, and so
    is the verdict (a phase is client-bound when any of its processes is).
    """
    if not parts:
        return {}
    worst = max(parts, key=lambda p: p.get("loop_lag_p99_ms") or 0.0)
    out = dict(worst)
    out["cpu_s"] = round(sum(p.get("cpu_s") or 0.0 for p in parts), 4)
    for k in ("cpu_utilisation", "starvation_share", "loop_late_s", "stall_cpu_share", "stall_wait_share"):
        vals = [p[k] for p in parts if p.get(k) is not None]
        out[k] = max(vals) if vals else None
    starved = [p["starved_s"] for p in parts if p.get("starved_s") is not None]
    out["starved_s"] = round(sum(starved), 4) if starved else None
    out["loop_lag_samples"] = sum(p.get("loop_lag_samples") or 0 for p in parts)
    lates = [p["late_sends"] for p in parts if p.get("late_sends") is not None]
    timed = sum(p.get("timed_sends") or 0 for p in parts)
    out["late_sends"] = sum(lates) if lates else None
    out["timed_sends"] = timed if lates else None
    out["late_send_share"] = round(sum(lates) / timed, 4) if lates and timed else None
    out["bound"] = any(p.get("bound") for p in parts)
    verdicts = [p["verdict"] for p in parts if p.get("verdict") in VERDICTS]
    out["verdict"] = (max(verdicts, key=VERDICTS.index) if verdicts
                      else ("client_bound" if out["bound"] else None))
    out["workers"] = len(parts)
    return out


def _pct(v: float | None) -> str:
    return f"{v:.0%}" if v is not None else "n/a"


def describe(client: dict[str, Any], wall_s: float | None) -> str:
    """Words for a phase's verdict: what was measured, and the latency the client may have added.

    Args:
        client: ``summary.json`` ``phases[].client`` (from ``ClientMonitor.to_json``).
        wall_s: The phase's wall time (s), or None.

    Returns:
        One sentence without the phase name, e.g. ``"the client may have added up to
        3000.3 ms ..."`` for ``client_bound``, ``"host scheduling stalls: ..."`` for
        ``host_stalls``; ``""`` for ``quiet`` or a summary without a verdict.
    """
    verdict = client.get("verdict")
    if verdict not in ("client_bound", "host_stalls"):
        return ""
    mx, p99 = client.get("loop_lag_max_ms"), client.get("loop_lag_p99_ms")
    starved = client.get("starved_s")
    util = client.get("cpu_utilisation")
    measured = (
        f"its event loop ran late by up to {mx} ms (loop-lag p99 {p99} ms over "
        f"{client.get('loop_lag_samples')} probe samples, ticks a stall swallowed counted), "
        f"at least {LOOP_LAG_P99_MS:g} ms late for {client.get('loop_late_s')} s in all"
        + (f" of the {wall_s:.3f} s phase" if wall_s else "")
        + f"; the client used {util if util is not None else 'n/a'} of a core "
        f"(its loop thread ran {_pct(client.get('stall_cpu_share'))} of the late time) and "
        + (
            f"its loop thread waited {starved} s runnable for a CPU "
            f"({_pct(client.get('starvation_share'))} of the phase, "
            f"{_pct(client.get('stall_wait_share'))} of the late time)"
            if starved is not None
            else "its wait for a CPU was not measured (no /proc/thread-self/schedstat)"
        )
    )
    if verdict == "client_bound":
        return (
            f"the client may have added up to {mx} ms to the latencies it stamped "
            f"(p99 {p99} ms): {measured}"
        )
    return (
        f"host scheduling stalls: {measured}. Neither its CPU (threshold {CPU_UTILISATION:g} of a core, "
        f"{STALL_SHARE:.0%} of the late time) nor its wait for a CPU (threshold {STARVATION_SHARE:.0%} "
        f"of the phase, {STALL_SHARE:.0%} of the late time) explains the lag: the loop thread was off-CPU "
        "and not waiting for one (the host or hypervisor did not run it, the process was stopped, or a "
        f"blocking call held the loop); requests in flight then may carry up to {mx} ms that is not the server's"
    )


HOST_CPU_WAIT_SHARE = 0.1
"""A phase in which some task on the host waited for a CPU at least this share of the
time (``host_cpu_wait_share``, Linux PSI) counts as ``host_busy``."""


def host_busy(client: dict[str, Any] | None) -> bool:
    """True when a phase's ``client`` figures show the host short of CPUs during the phase.

    Either of:

    - ``host_cpu_wait_share`` (``ClientMonitor``: the share of the phase's wall time in
      which at least one runnable task on the host waited for a CPU, from
      ``/proc/pressure/cpu``'s ``some`` total) at least ``HOST_CPU_WAIT_SHARE``;
    - ``host_load_1m`` above ``host_cpus``, the CPUs the client could use (``host_load``).

    A server on the same host (the embedded simulator's background ``serve-sim``) was then
    delayed by the scheduler while the client's own loop stayed quiet: a C4 TTFT cell read
    -37% against a 1.5x slower prefill on a host at load 7 on 2 CPUs, and -18% [-25, -17]
    ("benefit" where the truth is no change) with one CPU-bound process beside it at a load
    under the CPU count, which only the pressure figure shows (0.4-0.7 in the blocks such a
    process overlapped, 0.002-0.06 in most blocks of quieter runs on the project's 2-CPU
    machine, where blocks at 0.08-0.10 already read C4 TTFT 20-25% slower). Runs older than
    these fields count as not busy. ``kvreplay compare`` withholds timing decisions then
    (``experiments.ab.resolution.client_noise``); a run's console and reports flag the phase
    (``host_busy_text``).
    """
    c = client or {}
    share = c.get("host_cpu_wait_share")
    if isinstance(share, (int, float)) and share >= HOST_CPU_WAIT_SHARE:
        return True
    load, cpus = c.get("host_load_1m"), c.get("host_cpus")
    return isinstance(load, (int, float)) and isinstance(cpus, int) and cpus > 0 and load > cpus


def host_busy_text(client: dict[str, Any] | None, *, load: bool = True) -> str | None:
    """The ``host_busy`` label and sentence of one phase's ``client`` figures; None when not busy.

    ``{"host_cpu_wait_share": 0.61}`` -> ``"host_busy (a task on the host waited for a CPU
    61% of the phase)"``; a load average over the CPUs -> ``"host_busy (load average 7.2 on
    2 CPUs)"``. The one wording of ``kvreplay compare``'s reasons and of a run's console,
    report.md and report.html (``phase_busy_line``).

    Args:
        client: A phase's ``client`` figures (summary.json), or None.
        load: Count the 1-minute load average too (``host_busy``); False = the phase's own
            CPU pressure only (a run's own reports: the load average spans a minute, not the phase).
    """
    c = client or {}
    share = c.get("host_cpu_wait_share")
    if isinstance(share, (int, float)) and share >= HOST_CPU_WAIT_SHARE:
        return f"host_busy (a task on the host waited for a CPU {share * 100:.0f}% of the phase)"
    if not load or not host_busy(client):
        return None
    return f"host_busy (load average {c['host_load_1m']:g} on {c['host_cpus']} CPUs)"


def phase_busy_line(phase: dict[str, Any]) -> str | None:
    """``"phase replay: host_busy (a task on the host waited for a CPU 61% of the phase): ..."``, or None.

    For a summary phase whose ``client.host_cpu_wait_share`` is at least ``HOST_CPU_WAIT_SHARE``:
    the line a run's console (``runner.observer``), report.md (``report.markdown.render_table``)
    and report.html (``report.document``) show, in ``host_busy_text``'s words.
    """
    client = phase.get("client")
    text = host_busy_text(client if isinstance(client, dict) else None, load=False)
    if text is None:
        return None
    return (f"phase {phase.get('name')}: {text}: a server on this host waited too, so its latencies "
            "include the host's CPU shortage (kvreplay compare withholds timing decisions on such phases)")
