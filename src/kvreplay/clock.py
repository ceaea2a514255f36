"""The one clock of kvreplay.

All durations are integer nanoseconds from ``time.perf_counter_ns()``; a run
keeps one wall-clock anchor (``time.time_ns()`` read once at the start) so that
run-relative times can be placed in calendar time. Nothing else in kvreplay
reads a clock directly, and native code never reads one at all.

Model time: against the simulator with ``--sim-time-scale S`` every simulated
delay runs ``S`` x its model length, so model ms = measured ms / S. The one rule
for which recorded scale converts anything is ``model_time_scale``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

__all__ = ["RunClock", "model_time_scale", "now_ns"]

now_ns = time.perf_counter_ns
"""Monotonic time in ns (``time.perf_counter_ns``); differences only."""


@dataclass(frozen=True, slots=True)
class RunClock:
    """A run's time origin.

    Attributes:
        origin_ns: ``perf_counter_ns()`` at the run start.
        wall_anchor_ns: ``time.time_ns()`` read at the same moment (Unix epoch ns).
    """

    origin_ns: int
    wall_anchor_ns: int

    @classmethod
    def start(cls) -> RunClock:
        """Anchor a new run clock now."""
        return cls(origin_ns=time.perf_counter_ns(), wall_anchor_ns=time.time_ns())


def model_time_scale(value: Any) -> float | None:
    """A recorded simulator time scale, when it converts measured time to model time; else None.

    Args:
        value: A recorded scale (``plan.json`` ``run.sim_time_scale``, ``verdict.json``
            ``sim_time_scale``, ``[server.sim] time_scale``), or anything else.

    Returns:
        ``float(value)`` for a real number > 0 other than 1 (model = measured / scale);
        None for 1 (nothing to convert), 0 (no simulated delay ran: the figures are the
        client's own time and no model time can be recovered), a negative number, a
        bool, None or a non-number.
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 and value != 1:
        return float(value)
    return None
