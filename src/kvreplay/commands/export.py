r"""``kvreplay export``: write a kvreplay workload as a peer benchmark's dataset file.

Example::

    kvreplay export aiperf runs/chat.jsonl --out chat.aiperf.jsonl     # multi_turn when sessions
    aiperf profile --input-file chat.aiperf.jsonl --custom-dataset-type multi_turn ...
    kvreplay export vllm runs/chat.jsonl --out chat.vllm.jsonl
    vllm bench serve --dataset-name custom --dataset-path chat.vllm.jsonl --disable-shuffle ...

The schemas, and what each format cannot carry, are in ``kvreplay.workload.peers``.
A thin layer over ``kvreplay.api.exporting`` (``kvreplay.export_workload``), which
declares the options and writes the file; this module prints what was written.
"""

from __future__ import annotations

import argparse

from kvreplay.api.exporting import export_args
from kvreplay.argtypes import add_declared
from kvreplay.options.declare import from_dests
from kvreplay.options.export import ExportConfig
from kvreplay.safe_io import echo

__all__ = ["add_arguments", "run"]

NAME = "export"
HELP = ("Export a workload to a peer's dataset file: aiperf (single_turn, multi_turn or mooncake_trace JSONL) "
        "or vllm (vllm bench serve --dataset-name custom JSONL).")

_RUN_WITH = {
    "aiperf": "aiperf profile --input-file {out} --custom-dataset-type {kind} --endpoint-type chat --streaming ...",
    "vllm": "vllm bench serve --dataset-name custom --dataset-path {out} --disable-shuffle --backend openai-chat "
            "--endpoint /v1/chat/completions ...",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register ``export``'s options: ``ExportConfig``'s fields."""
    add_declared(p, ExportConfig, ("export",))


def run(args: argparse.Namespace) -> int:
    """Execute ``kvreplay export``; exit 0, or 2 on a bad workload or a loss without ``--lossy`` (``WorkloadError``)."""
    res = export_args(from_dests(ExportConfig, vars(args)))
    kind = res.kind if args.format == "aiperf" else "custom"
    if kind == "raw_payload":  # the bodies as they are: AIPerf's raw endpoint adds no formatting or URL path
        echo(f"{res.bodies} bodies as {res.lines} aiperf raw_payload lines -> {res.path}")
        for what, n in sorted(res.notes.items()):
            echo(f"  {n} bodies: {what}")
        echo(f"  run:  aiperf profile --input-file {res.path} --custom-dataset-type raw_payload --endpoint-type raw "
             "--url http://HOST:PORT/v1/chat/completions --streaming ...")
        return 0
    echo(f"{res.bodies} bodies as {res.lines} {args.format} {kind} lines -> {res.path}")
    for line in res.lines_lost() or ["nothing lost"]:
        echo("  " + line)
    echo(f"  manifest (what was lost, counted) -> {res.manifest}")
    echo("  run:  " + _RUN_WITH[args.format].format(out=res.path, kind=kind))
    return 0
