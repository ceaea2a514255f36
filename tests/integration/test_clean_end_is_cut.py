"""A 200 event stream that ends cleanly without finish_reason or [DONE] is ``cut``.

The server closes the chunked body properly (terminating chunk, no socket
error): only the missing finish tells the stream was not complete. Checked
through the runner (``execute_plan``) on both HTTP paths: kvreplay's own
HTTP/1.1 client and aiohttp (``KVREPLAY_HTTP=aiohttp``).
"""

from __future__ import annotations

import asyncio
import json

import pytest
from aiohttp import web

from kvreplay.plan import build_plan, parse_phase
from kvreplay.runner import RunOptions, execute_plan
from kvreplay.workload import load_workload


async def _serve(finish: bool) -> tuple[web.AppRunner, str]:
    async def chat(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(3):
            fin = "stop" if finish and i == 2 else None
            chunk = {"choices": [{"index": 0, "delta": {"content": f"t{i} "}, "finish_reason": fin}]}
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        if finish:
            await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()  # a clean end: terminating chunk, connection kept
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


def _run(wl_path, out, finish: bool):
    async def go():
        runner, url = await _serve(finish)
        try:
            wl = load_workload(wl_path)
            plan = build_plan(wl, [parse_phase("a:forward:c1")])
            return await execute_plan(plan, wl, RunOptions(target_url=url, out_dir=out, quiet=True))
        finally:
            await runner.cleanup()

    return asyncio.run(go())


@pytest.mark.parametrize("http", ["own", "aiohttp"])
def test_clean_end_without_finish_is_cut_on_both_http_paths(small_workload, tmp_path, monkeypatch, http):
    if http == "aiohttp":
        monkeypatch.setenv("KVREPLAY_HTTP", "aiohttp")
    else:
        monkeypatch.delenv("KVREPLAY_HTTP", raising=False)
    summary = _run(small_workload, tmp_path / "cut", finish=False)
    recs = [json.loads(x) for x in (tmp_path / "cut" / "records.jsonl").read_text().splitlines()]
    assert [r["status"] for r in recs] == ["cut"] * 6
    assert {r["http_status"] for r in recs} == {200}
    assert {r["content_deltas"] for r in recs} == {3}
    ph = summary["phases"][0]
    assert (ph["ok"], ph["failed"]) == (0, {"cut": 6})
    # The same stream with its finish is ok: the finish alone makes the difference.
    summary = _run(small_workload, tmp_path / "ok", finish=True)
    assert (summary["phases"][0]["ok"], summary["phases"][0]["failed"]) == (6, {})
