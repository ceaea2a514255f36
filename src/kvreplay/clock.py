"""The one clock of kvreplay.

All durations are integer nanoseconds from ``time.perf_counter_ns()``; a run
keeps one wall-clock anchor (``time.time_ns()`` read once at the start) so that
run-relative times can be placed in calendar time. Nothing else in kvreplay
reads a clock directly, and native code never reads one at all.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

__all__ = ["RunClock", "now_ns"]

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
