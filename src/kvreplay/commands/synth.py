r"""``kvreplay synth``: a synthetic workload sized in the server's own tokens, frozen as exact bodies.

Example::

    kvreplay synth --tokenizer http://127.0.0.1:8000 --out w.jsonl --requests 20 \\
        --isl 700 --osl 16 --prefix-tokens 300 --prefix-groups 2 --check
    kvreplay run w.jsonl --target http://127.0.0.1:8000 --phase a:forward:c8

A thin layer over ``kvreplay.api.synthesis``, which declares the options, writes the
workload and its manifest and runs the check; this module prints its lines.
"""

from __future__ import annotations

import argparse

from kvreplay.api.synthesis import add_arguments, synth_args
from kvreplay.safe_io import echo

__all__ = ["add_arguments", "run"]

NAME = "synth"
HELP = ("Synthesize a workload in a server's tokens: exact input/output lengths, designed prefix groups, "
        "conversations; written as exact bodies with a manifest.")


def run(args: argparse.Namespace) -> int:
    """Execute ``kvreplay synth``; exit 0, or 2 on bad options or an unusable tokenizer (``ConfigError``)."""
    for line in synth_args(args):
        echo(line)
    return 0
