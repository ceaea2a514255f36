"""A tiny OpenAI-compatible streaming server for runner tests (127.0.0.1, port 0).

Behaviour is set per test through ``MockServer.cfg``:
    delay_s      sleep before the first token (s)
    tokens       token events per response
    itl_s        sleep between tokens (s)
    status       HTTP status to answer with (non-200 sends an error JSON)
    error_msg    message of that error JSON
    cut_after    close the connection after this many token chunks (None = never)
    cached       cached_tokens to report (None = omit prompt_tokens_details)
    stall_s      after the first token, go silent this long with the socket open
    keepalive_s  the server closes idle keep-alive connections after this long
It tracks requests in flight and the peak, and keeps every body it received.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web


class MockServer:
    def __init__(self, **cfg: Any) -> None:
        self.cfg: dict[str, Any] = {"delay_s": 0.0, "tokens": 3, "itl_s": 0.0, "status": 200,
                                    "error_msg": "boom", "cut_after": None, "cached": None,
                                    "stall_s": 0.0, "keepalive_s": 75.0}
        self.cfg.update(cfg)
        self.in_flight = 0
        self.peak = 0
        self.bodies: list[bytes] = []
        self._runner: web.AppRunner | None = None
        self.base_url = ""

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        self.bodies.append(raw)
        self.in_flight += 1
        self.peak = max(self.peak, self.in_flight)
        try:
            c = self.cfg
            if c["status"] != 200:
                return web.json_response({"error": {"message": c["error_msg"], "type": "x"}}, status=c["status"])
            await asyncio.sleep(c["delay_s"])
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)

            async def send(obj: Any) -> None:
                await resp.write(b"data: " + json.dumps(obj).encode() + b"\n\n")

            await send({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
            for i in range(c["tokens"]):
                if c["cut_after"] is not None and i >= c["cut_after"]:
                    request.transport.close()
                    return resp
                if i:
                    await asyncio.sleep(c["itl_s"])
                if i == 1 and c["stall_s"]:
                    await asyncio.sleep(c["stall_s"])
                await send({"choices": [{"index": 0, "delta": {"content": f"t{i} "}, "finish_reason": None}]})
            await send({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
            usage: dict[str, Any] = {"prompt_tokens": len(raw) // 4, "completion_tokens": c["tokens"],
                                     "total_tokens": len(raw) // 4 + c["tokens"]}
            if c["cached"] is not None:
                usage["prompt_tokens_details"] = {"cached_tokens": c["cached"]}
            await send({"choices": [], "usage": usage})
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            return resp
        finally:
            self.in_flight -= 1

    async def start(self) -> str:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/completions", self._chat)
        self._runner = web.AppRunner(app, access_log=None, keepalive_timeout=self.cfg["keepalive_s"])
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.base_url = f"http://127.0.0.1:{port}"
        return self.base_url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
