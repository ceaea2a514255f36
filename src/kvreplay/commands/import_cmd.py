r"""``kvreplay import``: make a workload (bodies + arrivals + plan) from another source.

Example::

    kvreplay import mooncake fixtures/traces/mooncake_fast25_conversation_trace.jsonl \\
        --out runs/mc/mooncake.jsonl --limit 500
    kvreplay run --plan runs/mc/mooncake.plan.toml --target sim \\
        --sim-cache radix --sim-block-size 512
    kvreplay import har session.har --out runs/har          # folder of exact bodies + plan
    kvreplay import openai-batch batch_input.jsonl --out runs/batch
    kvreplay import sharegpt sharegpt.json --out runs/chat.jsonl --model M --think-time 2

A thin layer over ``kvreplay.api.importing`` (``kvreplay.import_workload``), which
declares the options and runs the importer; this module prints its lines.
"""

from __future__ import annotations

import argparse

from kvreplay.api.importing import add_arguments, import_args
from kvreplay.safe_io import echo

__all__ = ["add_arguments", "run"]

NAME = "import"
HELP = ("Import a workload: mooncake (block hash_ids) -> bodies, arrivals, plan; har | openai-batch -> "
        "a folder of the exact bodies, arrivals, plan; conversation formats (sharegpt, ...) -> chat bodies and "
        "a sessions side file.")


def run(args: argparse.Namespace) -> int:
    """Execute ``kvreplay import``: the format's importer (``workload.formats``); exit 0, or 2 on a bad source."""
    for line in import_args(args):
        echo(line)  # paths and names from the user: through the sink's terminal escaping
    return 0
