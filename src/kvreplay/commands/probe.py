"""``kvreplay probe``: what does this server's cache hold, and what is it worth?

A thin layer over ``kvreplay.api.probing`` (``kvreplay.probe``), which runs the probe;
the flags derive from ``kvreplay.options.probe.ProbeCommandConfig``; this module prints the
verdict's sentences. Examples::

    kvreplay probe --target http://127.0.0.1:8000 --sizes 8k,16k,32k,64k --out runs/probe
    kvreplay probe --target sim --sim-cache-entries 8 --sim-time-scale 0 --out runs/probe-sim
"""

from __future__ import annotations

import argparse
import asyncio

from kvreplay.api.probing import config_from_args, probe_async
from kvreplay.api.run import add_target_arguments, install_loop
from kvreplay.argtypes import add_declared
from kvreplay.options.probe import ProbeCommandConfig
from kvreplay.safe_io import echo

NAME = "probe"
HELP = (
    "Probe a server's prefix cache: cold/warm legs, prefill fit, eviction bisection, verdict.json."
)

__all__ = ["add_arguments", "config_from_args", "probe_async", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register ``probe``'s flags: ``ProbeCommandConfig``'s own, then the target's (``run``'s)."""
    add_declared(p, ProbeCommandConfig, ("probe",))
    add_target_arguments(p)


def run(args: argparse.Namespace) -> int:
    """Execute ``kvreplay probe``; exit 0 with a verdict, 2 on bad input."""
    install_loop()
    verdict = asyncio.run(probe_async(ProbeCommandConfig.from_dests(vars(args))))
    out = verdict.pop("_out")
    if not args.quiet:
        echo(verdict["plain"])
        if verdict.get("target_prefix"):
            echo(verdict["target_prefix"]["sentence"])
        echo(f"verdict: {out}/verdict.json")
    return 0
