r"""``kvreplay export``: write a kvreplay workload as a peer benchmark's dataset file.

Example::

    kvreplay export aiperf runs/chat.jsonl --out chat.aiperf.jsonl     # multi_turn when sessions
    aiperf profile --input-file chat.aiperf.jsonl --custom-dataset-type multi_turn ...
    kvreplay export vllm runs/chat.jsonl --out chat.vllm.jsonl
    vllm bench serve --dataset-name custom --dataset-path chat.vllm.jsonl --disable-shuffle ...

The schemas, and what each format cannot carry, are in ``kvreplay.workload.peers``.
"""

from __future__ import annotations

import argparse

from kvreplay.safe_io import echo

NAME = "export"
HELP = ("Export a workload to a peer's dataset file: aiperf (single_turn, multi_turn or mooncake_trace JSONL) "
        "or vllm (vllm bench serve --dataset-name custom JSONL).")

_RUN_WITH = {
    "aiperf": "aiperf profile --input-file {out} --custom-dataset-type {kind} --endpoint-type chat --streaming ...",
    "vllm": "vllm bench serve --dataset-name custom --dataset-path {out} --disable-shuffle --backend openai-chat "
            "--endpoint /v1/chat/completions ...",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register ``export``'s options."""
    from kvreplay.workload.peers import AIPERF_TYPES

    p.add_argument("format", choices=tuple(_RUN_WITH), help="the peer whose dataset file to write")
    p.add_argument("workload", help="the workload (folder of *.json or .jsonl; its sessions side file is read)")
    p.add_argument("--out", required=True, metavar="FILE", help="the .jsonl file to write")
    p.add_argument("--aiperf-type", choices=AIPERF_TYPES, default="auto",
                   help="aiperf: the custom dataset type (auto: multi_turn with sessions, else single_turn; "
                        "mooncake_trace keeps each chat body's whole message array)")


def run(args: argparse.Namespace) -> int:
    """Execute ``kvreplay export``; exit 0, or 2 on a bad workload (raised as ``WorkloadError``)."""
    from kvreplay.workload.peers import export_aiperf, export_vllm

    if args.format == "aiperf":
        res = export_aiperf(args.workload, args.out, kind=args.aiperf_type)
        kind = res.kind
    else:
        res = export_vllm(args.workload, args.out)
        kind = "custom"
    echo(f"{res.bodies} bodies as {res.lines} {args.format} {kind} lines -> {res.path}")
    for what, n in sorted(res.notes.items()):
        echo(f"  {n} bodies: {what}")
    echo("  run:  " + _RUN_WITH[args.format].format(out=res.path, kind=kind))
    return 0
