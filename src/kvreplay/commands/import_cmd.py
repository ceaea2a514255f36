r"""``kvreplay import``: make a workload (bodies + arrivals + plan) from another source.

Example::

    kvreplay import mooncake fixtures/traces/mooncake_fast25_conversation_trace.jsonl \\
        --out runs/mc/mooncake.jsonl --limit 500
    kvreplay run --plan runs/mc/mooncake.plan.toml --target sim \\
        --sim-cache radix --sim-block-size 512
    kvreplay import har session.har --out runs/har          # folder of exact bodies + plan
    kvreplay import openai-batch batch_input.jsonl --out runs/batch
"""

from __future__ import annotations

import argparse

from kvreplay.safe_io import echo

NAME = "import"
HELP = ("Import a workload: mooncake (block hash_ids) -> bodies, arrivals, plan; har | openai-batch -> "
        "a folder of the exact bodies, arrivals, plan.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register ``import``'s options."""
    from kvreplay.workload.capture import IMPORT_CONCURRENCY
    from kvreplay.workload.formats import format_names, format_of

    p.add_argument("format", choices=format_names(),
                   help="source format: " + "; ".join(f"{n}: {format_of(n).summary}" for n in format_names()))
    p.add_argument(
        "trace",
        help="source file (Mooncake JSONL: timestamp, input_length, output_length, hash_ids; "
        "a HAR 1.2 .har file; an OpenAI Batch input .jsonl)",
    )
    p.add_argument(
        "--out",
        required=True,
        metavar="WORKLOAD",
        help="mooncake: workload file to write (.jsonl); har, openai-batch: folder W to create; "
        "arrivals and plan are written beside it",
    )
    p.add_argument(
        "--paths",
        default="/v1/chat/completions,/v1/completions",
        metavar="P1,P2",
        help="har, openai-batch: URL paths whose POST bodies are kept (default "
        "/v1/chat/completions,/v1/completions); other entries are counted and skipped",
    )
    p.add_argument("--redact-body-secrets", action="store_true",
                   help="har, openai-batch: keep a body that holds a secret (a key shape, a secret field, its "
                        "request's credential) with the secret replaced by [REDACTED] instead of skipping it")
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
        "--concurrency", type=int, default=IMPORT_CONCURRENCY, help="the plan's cap on requests in flight"
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
    """Execute ``kvreplay import``: the format's importer (``workload.formats``); exit 0, or 2 on a bad source."""
    from kvreplay.errors import ConfigError
    from kvreplay.workload.formats import format_of

    fmt = format_of(args.format)
    if "limit" in fmt.options and args.limit is not None and args.limit < 1:
        raise ConfigError("--limit must be >= 1", field="--limit")
    if "block_tokens" in fmt.options and (args.block_tokens < 1 or args.concurrency < 1 or args.time_scale <= 0):
        raise ConfigError(
            "--block-tokens and --concurrency must be >= 1, --time-scale > 0",
            field="--block-tokens",
        )
    options = {k: getattr(args, k) for k in fmt.options}
    if "paths" in options:
        paths = tuple(x.strip() for x in args.paths.split(",") if x.strip())
        if not paths or not all(x.startswith("/") for x in paths):
            raise ConfigError("must be comma-separated URL paths starting with /", field="--paths")
        options["paths"] = paths
    for line in fmt.run(args.trace, args.out, **options):
        echo(line)  # paths and names from the user: through the sink's terminal escaping
    return 0
