"""A key-echoing OpenAI-style server (127.0.0.1, port 0) for the secrets test (issue 26, item 3).

It puts the API key back wherever a server can: every ``POST`` answer carries
the ``Authorization`` value it received (in the streamed content, in ``usage``
as a key and a value, in ``timings``; it answers 500 with the
value in the error message when the body holds ``question 3``, an SSE error event
when it holds ``question 2``, and 500 to a probe's warm leg, whose system message repeats a
cold leg's); the ``GET``
endpoints a backend adapter reads carry the key the server was configured with
(``/v1/models`` ``owned_by``, ``/version``, a ``/metrics`` label and ``/health``),
as a server that prints its own configuration would. The vLLM counters it serves
are plain (``prefix_cache_queries``/``hits``), so ``--backend vllm`` reads them.

Runs its own event loop on a thread: ``with KeyEchoServer(KEY) as s: s.url``.
"""

from __future__ import annotations

import asyncio
import threading

import orjson
from aiohttp import web


class KeyEchoServer:
    """The server; ``requests`` counts the POSTs answered."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.port = 0
        self.requests = 0
        self._systems: set[str] = set()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> KeyEchoServer:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the key-echo server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._complete)
        app.router.add_post("/v1/completions", self._complete)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/version", self._version)
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        self._runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "m", "object": "model", "owned_by": self.key,
                                                               "max_model_len": 4096}]})

    async def _version(self, request: web.Request) -> web.Response:
        return web.json_response({"version": f"0.0.1+{self.key}"})

    async def _health(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "configured_key": self.key})

    async def _metrics(self, request: web.Request) -> web.Response:
        q = 10 * (self.requests + 1)
        text = ("# TYPE vllm:prefix_cache_queries counter\n"
                f'vllm:prefix_cache_queries_total{{model_name="m",key="{self.key}"}} {q}\n'
                "# TYPE vllm:prefix_cache_hits counter\n"
                f'vllm:prefix_cache_hits_total{{model_name="m",key="{self.key}"}} {q // 2}\n'
                f'vllm:num_requests_running{{model_name="m"}} 0\nvllm:num_requests_waiting{{model_name="m"}} 0\n'
                f'kvreplay_echo_info{{key="{self.key}"}} 1\n')
        return web.Response(text=text, content_type="text/plain")

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        self.requests += 1
        auth = request.headers.get("Authorization", "")
        raw = await request.read()
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = {}
        prompt_tokens = max(1, len(raw) // 4)
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": 3, "total_tokens": prompt_tokens + 3,
                 "prompt_tokens_details": {"cached_tokens": 0}, "echo": auth, auth: 1}
        msgs = body.get("messages") if isinstance(body, dict) else None
        system = msgs[0].get("content") if isinstance(msgs, list) and msgs and isinstance(msgs[0], dict) else None
        warm = isinstance(system, str) and system.startswith("probe cold") and system in self._systems
        if isinstance(system, str):
            self._systems.add(system)
        if b"question 3" in raw or warm:
            return web.json_response({"error": {"message": f"invalid key: {auth}", "type": auth}}, status=500)
        if not (isinstance(body, dict) and body.get("stream")):
            return web.json_response({"id": "x", "object": "chat.completion", "model": "m",
                                      "choices": [{"index": 0, "message": {"role": "assistant",
                                                                           "content": f"you sent {auth}"},
                                                   "finish_reason": "stop"}],
                                      "usage": usage, "timings": {"note": auth}})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)

        def ev(obj: object) -> bytes:
            return b"data: " + orjson.dumps(obj) + b"\n\n"

        await resp.write(ev({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}))
        await resp.write(ev({"choices": [{"index": 0, "delta": {"content": f"you sent {auth} "}}]}))
        if b"question 2" in raw:
            await resp.write(ev({"error": {"message": f"upstream refused {auth}"}}))
            await resp.write_eof()
            return resp
        await resp.write(ev({"choices": [{"index": 0, "delta": {"content": "ok"}, "finish_reason": "stop"}]}))
        await resp.write(ev({"choices": [], "usage": usage, "timings": {"note": auth}}))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp
