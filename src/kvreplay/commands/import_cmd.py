r"""``kvreplay import``: make a workload (bodies + arrivals + plan) from another source.

Example::

    kvreplay import mooncake fixtures/traces/mooncake_fast25_conversation_trace.jsonl \\
        --out runs/mc/mooncake.jsonl --limit 500
    kvreplay run --plan runs/mc/mooncake.plan.toml --target sim \\
        --sim-cache radix --sim-block-size 512
"""

from __future__ import annotations

import argparse

NAME = "import"
HELP = "Import a workload from a trace: mooncake (block hash_ids) -> bodies, arrival offsets, plan."


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register ``import``'s options."""
    p.add_argument("format", choices=["mooncake"], help="trace format")
    p.add_argument(
        "trace",
        help="trace file (Mooncake JSONL: timestamp, input_length, output_length, hash_ids)",
    )
    p.add_argument(
        "--out",
        required=True,
        metavar="WORKLOAD",
        help="workload file to write (.jsonl); arrivals and plan are written beside it",
    )
    p.add_argument("--limit", type=int, default=None, metavar="N", help="first N requests only")
    p.add_argument(
        "--block-tokens",
        type=int,
        default=512,
        metavar="T",
        help="tokens per hash block (512 in the published Mooncake traces)",
    )
    p.add_argument("--model", default="kvreplay-sim", help="model field of every body")
    p.add_argument(
        "--chat", action="store_true", help="chat bodies (one user message) instead of completions"
    )
    p.add_argument(
        "--concurrency", type=int, default=64, help="the plan's cap on requests in flight"
    )
    p.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="the plan's multiplier on trace offsets (0.5 = twice as fast)",
    )
    p.add_argument(
        "--ignore-eos",
        action="store_true",
        help='add "ignore_eos": true (vLLM/SGLang) so outputs reach output_length',
    )


def run(args: argparse.Namespace) -> int:
    """Execute ``kvreplay import``; exit 0, or 2 on a bad trace."""
    from kvreplay.errors import ConfigError
    from kvreplay.workload.importers import import_mooncake

    if args.limit is not None and args.limit < 1:
        raise ConfigError("--limit must be >= 1", field="--limit")
    if args.block_tokens < 1 or args.concurrency < 1 or args.time_scale <= 0:
        raise ConfigError(
            "--block-tokens and --concurrency must be >= 1, --time-scale > 0",
            field="--block-tokens",
        )
    res = import_mooncake(
        args.trace,
        args.out,
        limit=args.limit,
        block_tokens=args.block_tokens,
        model=args.model,
        chat=args.chat,
        concurrency=args.concurrency,
        time_scale=args.time_scale,
        ignore_eos=args.ignore_eos,
    )
    print(
        f"{res.requests} bodies ({res.prompt_tokens} prompt tokens, simulator tokenizer) "
        f"-> {res.workload}"
    )
    print(f"arrivals (ms offsets) -> {res.arrivals}")
    print(f"plan -> {res.plan}")
    print(f"  against a server:  kvreplay run --plan {res.plan} --target URL")
    # The entries model matches chat snapshots only; block-level reuse needs the radix model
    # with the trace's block size, or every request misses.
    print(f"  against the simulator (block-level prefix cache):  kvreplay run --plan {res.plan} "
          f"--target sim --sim-cache radix --sim-block-size {args.block_tokens}")
    return 0
