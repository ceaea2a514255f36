r"""``kvreplay import``: make a workload (bodies + arrivals + plan) from another source.

Example::

    kvreplay import mooncake fixtures/traces/mooncake_fast25_conversation_trace.jsonl \\
        --out runs/mc/mooncake.jsonl --limit 500
    kvreplay run --plan runs/mc/mooncake.plan.toml --target sim \\
        --sim-cache radix --sim-block-size 512
    kvreplay import har session.har --out runs/har          # folder of exact bodies + plan
    kvreplay import openai-batch batch_input.jsonl --out runs/batch
    kvreplay import sharegpt sharegpt.json --out runs/chat.jsonl --model M --think-time 2

A thin layer over ``kvreplay.api.importing`` (``kvreplay.import_workload``), which runs the
importer; the options are ``kvreplay.options.importing.ImportConfig``; this module prints its lines.
"""

from __future__ import annotations

import argparse
from dataclasses import fields

from kvreplay.api.importing import import_args
from kvreplay.argtypes import add_declared
from kvreplay.options.declare import from_dests
from kvreplay.options.importing import ImportConfig
from kvreplay.safe_io import echo

__all__ = ["add_arguments", "run"]

NAME = "import"
HELP = ("Import a workload: mooncake (block hash_ids) -> bodies, arrivals, plan; har | openai-batch -> "
        "a folder of the exact bodies, arrivals, plan; conversation formats (sharegpt, ...) -> chat bodies and "
        "a sessions side file.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register ``import``'s options: ``ImportConfig``'s fields; the format's choices are the registry's."""
    from kvreplay.workload.formats import format_names, format_of

    fmt = next(f for f in fields(ImportConfig) if f.name == "format")
    p.add_argument("format", choices=format_names(),
                   help=f"{fmt.metadata['help']}: " + "; ".join(f"{n}: {format_of(n).summary}" for n in format_names()))
    add_declared(p, ImportConfig, ("import",))


def run(args: argparse.Namespace) -> int:
    """Execute ``kvreplay import``: the format's importer (``workload.formats``); exit 0, or 2 on a bad source."""
    for line in import_args(from_dests(ImportConfig, vars(args))):
        echo(line)  # paths and names from the user: through the sink's terminal escaping
    return 0
