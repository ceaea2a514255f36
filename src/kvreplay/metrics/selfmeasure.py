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

Documented thresholds: a phase is labelled ``client_bound: true`` in
``summary.json`` when its loop-lag p99 is at least ``LOOP_LAG_P99_MS`` (over at
least ``MIN_LAG_SAMPLES`` probe samples: the p99 of fewer samples is their
maximum, and one host stall would decide it) or its CPU utilisation is at
least ``CPU_UTILISATION``. Late sends are reported but do
not by themselves label the phase: an open loop also sends late when its
concurrency cap is full because the *server* is slow (``schedule`` says so).

Sources: wrk2 (Gil Tene) on coordinated omission; the event-loop-lag probe of
Node's ``perf_hooks.monitorEventLoopDelay`` (a periodic timer's lateness in an
HdrHistogram).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kvreplay.clock import now_ns
from kvreplay.metrics.histograms import LatencySet

__all__ = [
    "CPU_UTILISATION",
    "LAG_INTERVAL_S",
    "LATE_SEND_MS",
    "LOOP_LAG_P99_MS",
    "MIN_LAG_SAMPLES",
    "ClientMonitor",
    "merge_client",
    "thresholds",
]

LAG_INTERVAL_S = 0.005
"""Period of the loop-lag probe timer (s)."""
LOOP_LAG_P99_MS = 10.0
"""Loop-lag p99 at or above which a phase is client-bound (ms): reads waited that long."""
CPU_UTILISATION = 0.90
"""CPU utilisation (process CPU s / wall s; one core = 1.0) from which a phase is client-bound."""
MIN_LAG_SAMPLES = 100
"""Probe samples (0.5 s of phase at 5 ms) below which the loop-lag p99 does not label a phase."""
LATE_SEND_MS = 1.0
"""An open-loop send this much later than intended (ms) counts as late."""


def thresholds() -> dict[str, float]:
    """The documented thresholds, as written into summary.json."""
    return {
        "loop_lag_p99_ms": LOOP_LAG_P99_MS,
        "min_lag_samples": MIN_LAG_SAMPLES,
        "cpu_utilisation": CPU_UTILISATION,
        "late_send_ms": LATE_SEND_MS,
        "lag_interval_ms": LAG_INTERVAL_S * 1e3,
    }


class ClientMonitor:
    """Self-measurement of one phase (start it when the phase starts, stop it when it ends).

    Args:
        interval_s: Loop-lag probe period (s).

    Attributes:
        lag: Loop lag (HdrHistogram, µs).
        late_sends / sends: Open-loop sends later than ``LATE_SEND_MS`` / all timed sends.
    """

    def __init__(self, interval_s: float = LAG_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self.lag = LatencySet()
        self.sends = 0
        self.late_sends = 0
        self._late_ns = int(LATE_SEND_MS * 1e6)
        self._handle: asyncio.TimerHandle | None = None
        self._due_ns = 0
        self._cpu0 = 0.0
        self._t0 = 0
        self.cpu_s = 0.0
        self.wall_s = 0.0
        self.open_loop = False

    def start(self, *, open_loop: bool = False) -> None:
        """Begin measuring (from inside the running loop)."""
        self.open_loop = open_loop
        self._cpu0 = time.process_time()
        self._t0 = now_ns()
        self._arm(asyncio.get_running_loop())

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        self._due_ns = now_ns() + int(self.interval_s * 1e9)
        self._handle = loop.call_later(self.interval_s, self._tick, loop)

    def _tick(self, loop: asyncio.AbstractEventLoop) -> None:
        late = now_ns() - self._due_ns
        self.lag.record_ns(late if late > 0 else 0)
        self._arm(loop)

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

    def to_json(self) -> dict[str, Any]:
        """Flat figures for ``summary.json``'s ``phases[].client`` (``bound`` = client-bound)."""
        lag = self.lag.summary_ms()
        util = self.cpu_s / self.wall_s if self.wall_s > 0 else None
        bound = bool(
            (
                lag["p99"] is not None
                and lag["n"] >= MIN_LAG_SAMPLES
                and lag["p99"] >= LOOP_LAG_P99_MS
            )
            or (util is not None and util >= CPU_UTILISATION)
        )
        return {
            "bound": bound,
            "cpu_s": round(self.cpu_s, 4),
            "cpu_utilisation": round(util, 4) if util is not None else None,
            "loop_lag_p50_ms": lag["p50"],
            "loop_lag_p99_ms": lag["p99"],
            "loop_lag_max_ms": lag["max"],
            "loop_lag_samples": lag["n"],
            "timed_sends": self.sends if self.open_loop else None,
            "late_sends": self.late_sends if self.open_loop else None,
            "late_send_share": round(self.late_sends / self.sends, 4)
            if self.open_loop and self.sends
            else None,
        }


def merge_client(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Combine the ``client`` figures of one phase measured in several worker processes.

    CPU seconds and sends add up; utilisation and loop lag are the worst
    worker's (a phase is client-bound when any of its processes is).
    """
    if not parts:
        return {}
    out = dict(max(parts, key=lambda p: p.get("loop_lag_p99_ms") or 0.0))
    out["cpu_s"] = round(sum(p.get("cpu_s") or 0.0 for p in parts), 4)
    utils = [p["cpu_utilisation"] for p in parts if p.get("cpu_utilisation") is not None]
    out["cpu_utilisation"] = max(utils) if utils else None
    out["loop_lag_samples"] = sum(p.get("loop_lag_samples") or 0 for p in parts)
    lates = [p["late_sends"] for p in parts if p.get("late_sends") is not None]
    timed = sum(p.get("timed_sends") or 0 for p in parts)
    out["late_sends"] = sum(lates) if lates else None
    out["timed_sends"] = timed if lates else None
    out["late_send_share"] = round(sum(lates) / timed, 4) if lates and timed else None
    out["bound"] = any(p.get("bound") for p in parts)
    out["workers"] = len(parts)
    return out
