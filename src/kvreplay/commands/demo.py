"""``kvreplay demo``: the bundled workload primed forward then replayed in reverse against the simulator.

``kvreplay run`` with the demo's defaults (``kvreplay.api.demo_defaults``, as ``kvreplay.demo``).
"""

from __future__ import annotations

import argparse

from kvreplay.api.demo_defaults import apply_demo_defaults
from kvreplay.bundled import DEMO_WORKLOAD
from kvreplay.commands import run as run_cmd

NAME = "demo"
HELP = "Replay the bundled mtbench-52 workload forward then reverse against the built-in simulator."

DEFAULT_WORKLOAD = str(DEMO_WORKLOAD)
"""The bundled mtbench-52 (package data, ``kvreplay.bundled``): the demo runs from any directory."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register ``demo``'s options (the same as ``run``, with the demo's defaults)."""
    run_cmd.add_arguments(p)
    p.set_defaults(phase=None)


def run(args: argparse.Namespace) -> int:
    """Run the demo: ``prime:forward:c1`` then ``replay:reverse:c1`` on mtbench-52 at sim time scale 0.02."""
    return run_cmd.run_with(apply_demo_defaults(run_cmd.config_of(args)))
