"""The demo's defaults: what ``kvreplay demo`` and ``kvreplay.demo`` add to a run.

The bundled mtbench-52 (``kvreplay.bundled.DEMO_WORKLOAD``) primed forward then replayed
in reverse (``DEMO_PHASES``) against the embedded simulator at time scale
``DEMO_TIME_SCALE``; each default applies only where the caller gave nothing.
"""

from __future__ import annotations

from kvreplay.options import RunConfig

__all__ = ["DEMO_PHASES", "DEMO_TIME_SCALE", "apply_demo_defaults"]

DEMO_PHASES = ("prime:forward:c1", "replay:reverse:c1")
"""The demo's phases: every body once in file order, then every body again in reverse order."""

DEMO_TIME_SCALE = 0.02
"""The simulator's time scale in the demo (a fiftieth of the modelled latencies: seconds, not minutes)."""


def apply_demo_defaults(args: RunConfig) -> RunConfig:
    """Fill a run's options with the demo's defaults where unset; returns ``args`` (changed in place).

    The workload (``--workload`` unset: the bundled mtbench-52), the phases (none given:
    ``DEMO_PHASES``) and the simulator's time scale (``--sim-time-scale`` unset: ``DEMO_TIME_SCALE``).
    """
    from kvreplay.bundled import DEMO_WORKLOAD

    if not args.workload:
        args.workload = str(DEMO_WORKLOAD)
    if not args.phase:
        args.phase = list(DEMO_PHASES)
    args.sim.setdefault("time_scale", DEMO_TIME_SCALE)
    return args
