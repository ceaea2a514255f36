"""TTFT distortion from counter reads of a large ``/metrics`` (issue 30 item 5, issue 31 item 3).

A server of its own (``--serve``, another process) streams every ``POST`` as
``--tokens`` chunks ``--itl-ms`` apart after a ``--ttft-ms`` pause, and answers
``GET /metrics`` with about 5 MB of exposition (vLLM's two prefix counters, its
load gauges and 50,000 histogram buckets), ignoring ``name[]=`` filters as a
server not built on prometheus_client would. This process runs ``kvreplay run``
in-process at C4 three ways:

- ``none``: ``--backend none`` (no counter reads: the reference);
- ``process``: ``--backend vllm --abort-if hit_tokens>1e30`` (the monitor reads
  counters every second while requests are in flight): large scrapes parsed in
  the parser process (``backends/_offload``), as kvreplay does now;
- ``thread``: the same, with the parse forced into a thread of this process
  (the way before issue 30 item 5).

Printed per way: TTFT p50 / p99 / max (ms, from ``summary.json``), the added
p99 against ``none`` (the distortion figure), the loop-lag max and the
counter reads (``phases[].counter_reads``). The load average is printed: on a
shared machine the wall-clock figures are noisy.

    .venv/bin/python bench/bench_counter_reads.py               # ~1 min
    .venv/bin/python bench/bench_counter_reads.py --requests 80
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

GOOD = (b"# TYPE vllm:prefix_cache_queries counter\nvllm:prefix_cache_queries_total 10\n"
        b"# TYPE vllm:prefix_cache_hits counter\nvllm:prefix_cache_hits_total 4\n"
        b"vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n")


def big_metrics() -> bytes:
    """About 5 MB: the vLLM counters above and 50,000 histogram buckets."""
    lines = [b"# HELP vllm:junk_seconds junk\n# TYPE vllm:junk_seconds histogram\n"]
    lines += [b'vllm:junk_seconds_bucket{model_name="some-model-name-of-some-length",engine="%d",le="%d.0"} %d\n'
              % (i // 1000, i % 1000, i) for i in range(50_000)]
    return GOOD + b"".join(lines)


def serve(ttft_ms: float, itl_ms: float, tokens: int) -> None:
    """The server (``--serve``): prints ``PORT <n>``, runs until killed."""
    from aiohttp import web

    metrics = big_metrics()

    def ev(obj: dict) -> bytes:
        return b"data: " + json.dumps(obj).encode() + b"\n\n"

    async def chat(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await asyncio.sleep(ttft_ms / 1e3)
        for i in range(tokens):
            fin = "stop" if i == tokens - 1 else None
            await resp.write(ev({"choices": [{"index": 0, "delta": {"content": "x"}, "finish_reason": fin}]}))
            await asyncio.sleep(itl_ms / 1e3)
        await resp.write(ev({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": tokens}}))
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def get_metrics(request: web.Request) -> web.Response:
        return web.Response(body=metrics, content_type="text/plain")

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "m", "owned_by": "vllm"}]})

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        app.router.add_get("/metrics", get_metrics)
        app.router.add_get("/v1/models", models)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        print("PORT", site._server.sockets[0].getsockname()[1], flush=True)  # type: ignore[union-attr]
        await asyncio.Event().wait()

    asyncio.run(main())


def run_once(url: str, workload: Path, out: Path, way: str, requests: int) -> dict:
    from kvreplay.backends import _offload
    from kvreplay.cli import main

    _offload.OFFLOAD_BYTES = (1 << 40) if way == "thread" else (256 << 10)
    args = ["run", str(workload), "--target", url, "--out", str(out), "--quiet",
            "--phase", f"a:forward:c4:first{requests}"]
    args += ["--backend", "none"] if way == "none" else ["--backend", "vllm", "--abort-if", "hit_tokens>1e30"]
    rc = main(args)
    ph = json.loads((out / "summary.json").read_text())["phases"][0]
    return {"rc": rc, "ttft": ph["ttft_ms"], "lag_max": (ph.get("client") or {}).get("loop_lag_max_ms"),
            "reads": ph.get("counter_reads")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--ttft-ms", type=float, default=50.0)
    ap.add_argument("--itl-ms", type=float, default=20.0)
    ap.add_argument("--tokens", type=int, default=40)
    a = ap.parse_args()
    if a.serve:
        serve(a.ttft_ms, a.itl_ms, a.tokens)
        return
    proc = subprocess.Popen([sys.executable, __file__, "--serve", "--ttft-ms", str(a.ttft_ms),
                             "--itl-ms", str(a.itl_ms), "--tokens", str(a.tokens)],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = int(proc.stdout.readline().split()[1])
        url = f"http://127.0.0.1:{port}"
        with tempfile.TemporaryDirectory() as tmp:
            wl = Path(tmp) / "wl"
            wl.mkdir()
            for i in range(a.requests):
                (wl / f"{i:03d}.json").write_text(json.dumps(
                    {"model": "m", "stream": True, "max_tokens": a.tokens,
                     "messages": [{"role": "user", "content": f"question {i}"}]}))
            res = {way: run_once(url, wl, Path(tmp) / way, way, a.requests) for way in ("none", "process", "thread")}
    finally:
        proc.terminate()
        proc.wait()
    base = res["none"]["ttft"]["p99"]
    print(f"C4, {a.requests} requests, TTFT {a.ttft_ms:g} ms + {a.tokens} tokens x {a.itl_ms:g} ms; "
          f"/metrics {len(big_metrics()) / 1e6:.1f} MB read every second by the monitor")
    print(f"{'way':8} {'TTFT p50':>9} {'p99':>9} {'max':>9} {'added p99':>10} {'lag max':>8}  counter reads")
    for way, r in res.items():
        t = r["ttft"]
        print(f"{way:8} {t['p50']:9.1f} {t['p99']:9.1f} {t['max']:9.1f} {t['p99'] - base:10.1f} "
              f"{r['lag_max'] or 0:8.1f}  {r['reads']}")
    print("load average:", " ".join(f"{x:.2f}" for x in os.getloadavg()))


if __name__ == "__main__":
    main()
