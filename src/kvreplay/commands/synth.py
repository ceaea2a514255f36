r"""``kvreplay synth``: a synthetic workload sized in the server's own tokens, frozen as exact bodies.

Example::

    kvreplay synth --tokenizer http://127.0.0.1:8000 --out w.jsonl --requests 20 \\
        --isl 700 --osl 16 --prefix-tokens 300 --prefix-groups 2 --check
    kvreplay run w.jsonl --target http://127.0.0.1:8000 --phase a:forward:c8

A thin layer over ``kvreplay.api.synthesis``, which writes the workload and its manifest and
runs the check; the flags derive from ``kvreplay.options.synth.SynthConfig``; this module
prints its lines.
"""

from __future__ import annotations

import argparse

from kvreplay.argtypes import add_declared
from kvreplay.options.declare import from_dests
from kvreplay.options.synth import SynthConfig
from kvreplay.safe_io import echo

__all__ = ["add_arguments", "run"]

NAME = "synth"
HELP = ("Synthesize a workload in a server's tokens: exact input/output lengths, designed prefix groups, "
        "conversations; written as exact bodies with a manifest.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register ``synth``'s flags: ``SynthConfig``'s fields."""
    add_declared(p, SynthConfig, ("synth",))


def run(args: argparse.Namespace) -> int:
    """Execute ``kvreplay synth``; exit 0, or 2 on bad options or an unusable tokenizer (``ConfigError``)."""
    from kvreplay.api.synthesis import synth_args

    for line in synth_args(from_dests(SynthConfig, vars(args))):
        echo(line)
    return 0
