"""Cheap counter and identity reads against a fake vLLM (issue 31 item 3).

The fake serves the fixture scrape as vLLM 0.32 does: ``/metrics`` ignores
``name[]=`` (prometheus-fastapi-instrumentator's route) and ``/metrics/``
honours it and gzips its answer when the request allows gzip (prometheus_client's
ASGI app, mounted under ``^/metrics(?P<path>.*)$``). The session is the run's
(``auto_decompress=False``). Every request's path and ``Accept-Encoding`` is kept.

Fixture figures (``fixtures/metrics/vllm/nvcr-25.09.prom``): ``hit_tokens`` 80,
``query_tokens`` 246; start marker = the largest of ``process_start_time_seconds``
(1.77104238234e9) and the two ``_created`` times of the prefix counters
(1.771042457420837e9, 1.7710424574207425e9) = 1.771042457420837e9.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from kvreplay.backends import make_backend

FIXTURE = Path(__file__).resolve().parents[3] / "fixtures" / "metrics" / "vllm" / "nvcr-25.09.prom"
TEXT = FIXTURE.read_text()
MARKER = 1.771042457420837e9
RESTARTED = TEXT.replace("process_start_time_seconds 1.77104238234e+09", "process_start_time_seconds 1.8e+09")


def sample_name(line: str) -> str:
    return line.split("{")[0].split(" ")[0]


def restricted(text: str, names: list[str]) -> str:
    """What prometheus_client prints for ``name[]=`` (each asked sample with its HELP and TYPE)."""
    out = []
    for line in text.splitlines(keepends=True):
        if line.startswith("# "):
            if line.split(" ")[2] in names:
                out.append(line)
        elif line.strip() and sample_name(line) in names:
            out.append(line)
    return "".join(out)


@contextlib.asynccontextmanager
async def fake_vllm(state: dict[str, Any]):
    """``state``: ``text`` (the scrape), ``models`` (served ids), ``slash`` ("honours", "drops_one", "404")."""
    hits: list[tuple[str, str]] = []

    @web.middleware
    async def record(request, handler):
        hits.append((request.path_qs, request.headers.get("Accept-Encoding", "")))
        return await handler(request)

    async def metrics(request):  # the instrumentator's route: the query is ignored
        return web.Response(text=state["text"], content_type="text/plain")

    async def metrics_slash(request):  # prometheus_client's ASGI app
        if state["slash"] == "404":
            return web.Response(status=404, text="Not Found")
        names = request.query.getall("name[]", [])
        if state["slash"] == "drops_one":
            names = [n for n in names if n != "vllm:prompt_tokens_total"]
        body = restricted(state["text"], names).encode()
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            return web.Response(body=gzip.compress(body), content_type="text/plain",
                                headers={"Content-Encoding": "gzip"})
        return web.Response(body=body, content_type="text/plain")

    async def models(request):
        data = [{"id": m, "owned_by": "vllm", "max_model_len": 32768} for m in state["models"]]
        return web.Response(text=json.dumps({"object": "list", "data": data}), content_type="application/json")

    async def version(request):
        return web.Response(text='{"version": "0.10.1.1"}', content_type="application/json")

    app = web.Application(middlewares=[record])
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/metrics/", metrics_slash)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/version", version)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        async with aiohttp.ClientSession(auto_decompress=False) as session:  # as the run's session
            yield make_backend("vllm", f"http://127.0.0.1:{port}", session), hits
    finally:
        await runner.cleanup()


def paths(hits: list[tuple[str, str]]) -> list[str]:
    return [p.split("?")[0] + ("?" if "?" in p else "") for p, _ in hits]


def test_filtered_reads_move_to_the_slash_path_that_honours_name_filters() -> None:
    async def body():
        async with fake_vllm({"text": TEXT, "models": ["m"], "slash": "honours"}) as (b, hits):
            first = await b.snapshot(full=False)
            second = await b.snapshot(full=False)
            return first, second, b.filter_path, hits

    first, second, path, hits = asyncio.run(body())
    # the first filtered read gets the whole scrape, then asks /metrics/ once; the next one asks /metrics/ only
    assert paths(hits) == ["/metrics?", "/metrics/?", "/metrics/?"]
    assert all(enc == "identity" for _, enc in hits)  # never gzip: the run's session does not decompress
    assert path == "/metrics/"
    assert (first.common["hit_tokens"], first.common["query_tokens"]) == (80, 246)
    assert second.common == first.common and second.raw == first.raw and second.started == first.started == MARKER
    assert second.partial and second.read_bytes < first.read_bytes == len(TEXT.encode())


def test_a_slash_path_that_differs_or_is_absent_is_not_used() -> None:
    for slash in ("drops_one", "404"):
        async def body(slash=slash):
            async with fake_vllm({"text": TEXT, "models": ["m"], "slash": slash}) as (b, hits):
                await b.snapshot(full=False)
                snap = await b.snapshot(full=False)
                return snap, b.filter_path, b.filter_honoured, hits

        snap, path, honoured, hits = asyncio.run(body())
        # tried once, then whole scrapes without the query
        assert paths(hits) == ["/metrics?", "/metrics/?", "/metrics"], slash
        assert (path, honoured) == ("/metrics", False), slash
        assert snap.common["hit_tokens"] == 80 and snap.common["prompt_tokens"] == 246


def test_served_identity_is_reused_only_while_the_start_marker_stays() -> None:
    state: dict[str, Any] = {"text": TEXT, "models": ["m"], "slash": "honours"}

    async def body():
        async with fake_vllm(state) as (b, hits):
            seen = []

            async def step(label, *, read=True, reuse=True):
                del hits[:]
                if read:
                    await b.snapshot(full=False)
                ident = await b.identity(reuse_served=reuse)
                seen.append((label, paths(hits), ident, b.served_how))

            await step("baseline", read=False, reuse=False)
            await step("first per-request")  # nothing kept yet: read
            await step("same process")  # kept for this marker: no GET but the counter read
            await step("no fresh read", read=False)  # the read was used: everything is read, nothing kept
            await step("phase boundary", reuse=False)  # read whole, kept for this marker
            state["text"], state["models"] = RESTARTED, ["other"]
            await step("restarted")
            await step("restarted, same process")
            return seen

    seen = asyncio.run(body())
    served = ["/v1/models", "/version"]
    assert [(label, p, how) for label, p, _, how in seen] == [
        ("baseline", served + ["/metrics?"], "read"),  # cache_config_info: no counter read to take it from
        ("first per-request", ["/metrics?", "/metrics/?"] + served, "read"),
        ("same process", ["/metrics/?"], "reused"),
        ("no fresh read", served + ["/metrics/?"], "read"),
        ("phase boundary", ["/metrics/?"] + served, "read"),
        ("restarted", ["/metrics/?"] + served, "new_process"),
        ("restarted, same process", ["/metrics/?"], "reused"),
    ]
    idents = [i for _, _, i, _ in seen]
    for ident in idents:
        assert ident["cache_config"]["num_gpu_blocks"] == "850" and ident["version"] == "0.10.1.1"
    assert [i["models"] for i in idents] == [["m"]] * 5 + [["other"]] * 2
    # the same identity whether read or reused (key order included: summary.json prints it)
    assert list(idents[2].items()) == list(idents[1].items()) == list(idents[0].items())
