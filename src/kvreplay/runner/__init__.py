"""The runner: executes a frozen plan and writes the run directory (through ``kvreplay.rundir``)."""

from kvreplay.runner._execute import execute_plan
from kvreplay.runner._options import RunOptions
from kvreplay.runner.backend import Backend, CounterDelta, Snapshot, counter_delta
from kvreplay.runner.counters import DrainResult, check_fresh, settled_snapshot, wait_drained
from kvreplay.runner.http import RequestOutcome, send_body

__all__ = [
    "Backend",
    "CounterDelta",
    "DrainResult",
    "RequestOutcome",
    "RunOptions",
    "Snapshot",
    "check_fresh",
    "counter_delta",
    "execute_plan",
    "send_body",
    "settled_snapshot",
    "wait_drained",
]
