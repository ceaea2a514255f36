"""Issue 9: a garbage server side never crashes a run.

A small aiohttp server (127.0.0.1, port 0) answers generation requests with a
short valid SSE stream, and its control endpoints with garbage chosen per test:
``/metrics`` that is not Prometheus text, ``/cache`` JSON with missing or
wrong-typed fields, ``/cache`` that is not JSON, 500s. ``kvreplay run`` runs
in-process on a worker thread (its own event loop) and must finish with one
record per request, no invented counter values, and, when a counter read
fails, a notice on stderr and ``counter_delta: null``.

A stream of SSE comments that never ends (``: keep-alive`` every 50 ms): the
comments are bytes, so the read-idle timeout (silence between reads) never
fires, and no token ever arrives. The outcome is decided here: the whole-request
bound ends it when set (``timeout``, ``timeout_kind: total``), and without one
the hard deadline does (``aborted``, exit 3). A keep-alive comment is server
liveness, not progress, so treating it as silence would fail servers that send
comments during a long prefill (field case B12).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from aiohttp import web

from kvreplay.cli import main

STREAM = (
    b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
    b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n'
    b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}\n\n'
    b"data: [DONE]\n\n"
)


class GarbageServer:
    """Valid generation, garbage control plane.

    Args:
        metrics: Body of ``GET /metrics`` (text), or an int HTTP status to answer with.
        cache: Body of ``GET /cache`` (text), or an int HTTP status.
        comments_forever: Answer generation with SSE comments only, every 50 ms,
            until the client goes away (at most 2,000 of them).
    """

    def __init__(
        self, *, metrics: str | int = 404, cache: str | int = 404, comments_forever: bool = False
    ):
        self.metrics, self.cache, self.comments_forever = metrics, cache, comments_forever
        self.comments_sent = 0
        self.requests = 0
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    @staticmethod
    def _answer(spec: str | int, ctype: str) -> web.Response:
        if isinstance(spec, int):
            return web.Response(status=spec, text="nope")
        return web.Response(body=spec.encode("utf-8", "surrogateescape"), content_type=ctype)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        self.requests += 1
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if not self.comments_forever:
            await resp.write(STREAM)
            await resp.write_eof()
            return resp
        try:
            for _ in range(2000):
                await resp.write(b": keep-alive\n\n")
                self.comments_sent += 1
                await asyncio.sleep(0.05)
        except (ConnectionError, RuntimeError):  # client gone
            pass
        return resp

    async def _metrics(self, request: web.Request) -> web.Response:
        return self._answer(self.metrics, "text/plain")

    async def _cache(self, request: web.Request) -> web.Response:
        return self._answer(self.cache, "application/json")

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model"}]})

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/cache", self._cache)
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.base_url = f"http://127.0.0.1:{self._runner.addresses[0][1]}"
        return self.base_url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


def write_workload(folder: Path, n: int) -> Path:
    folder.mkdir(parents=True)
    for i in range(n):
        body = {"model": "m", "messages": [{"role": "user", "content": f"q{i}"}], "stream": True}
        (folder / f"{i:03d}.json").write_text(json.dumps(body))
    return folder


def kvrun(
    tmp_path: Path, srv: GarbageServer, *extra: str, n: int = 3, phase: str = "a:forward:c1"
) -> dict[str, Any]:
    """Serve ``srv`` on this loop and run ``kvreplay run`` against it on a thread."""
    wl = write_workload(tmp_path / "wl", n)
    out = tmp_path / "out"

    async def go() -> int:
        await srv.start()
        try:
            argv = [
                "run",
                str(wl),
                "--target",
                srv.base_url,
                "--phase",
                phase,
                "--out",
                str(out),
                *extra,
            ]
            return await asyncio.wait_for(asyncio.to_thread(main, argv), 50)
        finally:
            await srv.stop()

    rc = asyncio.run(go())
    records = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    summary = json.loads((out / "summary.json").read_text())
    plan = json.loads((out / "plan.json").read_text())
    return {"rc": rc, "records": records, "summary": summary, "plan": plan}


GARBAGE_METRICS = (
    "\x00\x01 this is {{{ not prometheus\nvllm:prefix_cache_hits_total{engine= 12 13 14\n"
)
"""Not Prometheus text, with a line that names a known family (so a reader tries it)."""
NO_FAMILY_METRICS = "\x00\x01 this is {{{ not prometheus at all\n"
"""Not Prometheus text, naming no known family (so halogen's companion read skips it)."""
CACHE_WITHOUT_FIELDS = (
    '{"entries": "many", "hits": null, "misses": [1], "prompt_tokens_saved": true}'
)
# issue 30 item 2: a counter field that is there but not a number is named, with the reason (its delta is null)
INVALID_FIELDS = {"invalid": {
    "entries": "entries: not a number (text 'many')", "hit_tokens": "prompt_tokens_saved: not a number (a boolean)",
    "hits": "hits: not a number (a JSON null)", "lookups": "hits: not a number (a JSON null)",
    "misses": "misses: not a number (a JSON list)"}}
GOOD_CACHE = json.dumps({k: 0 for k in ("entries", "bytes", "hits", "misses", "stores", "evicted")})


def test_cache_without_fields_gives_empty_deltas(tmp_path, capsys):
    srv = GarbageServer(metrics=NO_FAMILY_METRICS, cache=CACHE_WITHOUT_FIELDS)
    r = kvrun(tmp_path, srv, "--backend", "halogen")
    assert r["rc"] == 0 and [x["status"] for x in r["records"]] == ["ok"] * 3
    # /cache parsed but carried no usable counter: the deltas hold no invented numbers.
    assert [x["counter_delta"] for x in r["records"]] == [INVALID_FIELDS] * 3
    assert r["summary"]["phases"][0]["ok"] == 3
    assert "Traceback" not in capsys.readouterr().err


def test_cache_without_fields_and_garbage_metrics_give_empty_deltas(tmp_path, capsys):
    # A companion /metrics that never parsed is treated as absent (as with no known
    # family above): /cache alone is read, and it reports no counters.
    srv = GarbageServer(metrics=GARBAGE_METRICS, cache=CACHE_WITHOUT_FIELDS)
    r = kvrun(tmp_path, srv, "--backend", "halogen")
    assert r["rc"] == 0 and [x["status"] for x in r["records"]] == ["ok"] * 3
    assert [x["counter_delta"] for x in r["records"]] == [INVALID_FIELDS] * 3
    assert "Traceback" not in capsys.readouterr().err


def test_good_cache_survives_garbage_companion_metrics(tmp_path):
    r = kvrun(
        tmp_path, GarbageServer(metrics=GARBAGE_METRICS, cache=GOOD_CACHE), "--backend", "halogen"
    )
    assert r["rc"] == 0 and [x["status"] for x in r["records"]] == ["ok"] * 3
    assert [x["counter_delta"] for x in r["records"]] == [
        {
            "entries": 0.0,
            "bytes": 0.0,
            "hits": 0.0,
            "misses": 0.0,
            "stores": 0.0,
            "evictions": 0.0,
            "lookups": 0.0,
        }
    ] * 3


def test_cache_that_is_not_json_gives_null_deltas_and_a_notice(tmp_path, capsys):
    srv = GarbageServer(metrics=GARBAGE_METRICS, cache="<html>oops</html>")
    r = kvrun(tmp_path, srv, "--backend", "halogen")
    assert r["rc"] == 0 and [x["status"] for x in r["records"]] == ["ok"] * 3
    assert [x["counter_delta"] for x in r["records"]] == [None] * 3
    assert r["summary"]["phases"][0]["counter_delta"] is None
    err = capsys.readouterr().err
    assert "counter read failed" in err and "not JSON" in err


def test_cache_answering_500_gives_null_deltas_and_a_notice(tmp_path, capsys):
    r = kvrun(tmp_path, GarbageServer(cache=500), "--backend", "halogen")
    assert r["rc"] == 0 and [x["status"] for x in r["records"]] == ["ok"] * 3
    assert [x["counter_delta"] for x in r["records"]] == [None] * 3
    assert "counter read failed" in capsys.readouterr().err


def test_garbage_metrics_under_a_prometheus_backend(tmp_path, capsys):
    r = kvrun(
        tmp_path,
        GarbageServer(metrics=GARBAGE_METRICS),
        "--backend",
        "vllm",
        n=4,
        phase="a:forward:c2",
    )
    assert r["rc"] == 0 and [x["status"] for x in r["records"]] == ["ok"] * 4
    assert r["summary"]["phases"][0]["counter_delta"] is None
    err = capsys.readouterr().err
    assert "counter read failed" in err and "malformed Prometheus exposition" in err


def test_auto_detection_on_garbage_runs_without_counters(tmp_path, capsys):
    r = kvrun(tmp_path, GarbageServer(metrics=GARBAGE_METRICS, cache="[1, 2"), "--quiet")
    assert r["rc"] == 0 and [x["status"] for x in r["records"]] == ["ok"] * 3
    # detect() found no counter family (plain OpenAI-compatible): no counter value is invented
    assert all(not x["counter_delta"] for x in r["records"])


def test_endless_comments_end_at_the_total_timeout(tmp_path):
    srv = GarbageServer(comments_forever=True)
    r = kvrun(
        tmp_path,
        srv,
        "--backend",
        "none",
        "--quiet",
        "--read-timeout",
        "0.3",
        "--total-timeout",
        "1.0",
        n=2,
    )
    assert r["rc"] == 0
    for rec in r["records"]:
        assert (rec["status"], rec["timeout_kind"], rec["error"]) == (
            "timeout",
            "total",
            "client_total_timeout",
        )
        assert rec["chunks"] == 0 and rec["t_first_token_ns"] is None
        # the read-idle bound (0.3 s) never fired: comments kept arriving
        assert 0.95e9 <= rec["e2e_ns"] < 5e9
    assert srv.comments_sent >= 2 * 15
    assert r["summary"]["phases"][0]["failed"] == {"timeout": 2}


def test_endless_comments_without_a_total_timeout_end_at_the_hard_deadline(tmp_path):
    srv = GarbageServer(comments_forever=True)
    r = kvrun(
        tmp_path,
        srv,
        "--backend",
        "none",
        "--quiet",
        "--read-timeout",
        "0.3",
        "--hard-deadline",
        "1.5s",
        n=3,
    )
    assert r["rc"] == 3 and r["summary"]["aborted"]["reason"] == "hard_deadline"
    assert [(x["status"], x["sent"]) for x in r["records"]] == [
        ("aborted", True),
        ("aborted", False),
        ("aborted", False),
    ]
