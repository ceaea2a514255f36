"""The simulator's HTTP server: plain aiohttp.web on the caller's event loop.

Endpoints:

========================  ==================================================================
POST /v1/chat/completions OpenAI chat; ``stream`` true gives SSE (role prelude with content
                          "", one chunk per token, a finish chunk with an empty delta, a
                          usage-only ``choices: []`` chunk when
                          ``stream_options.include_usage``, then ``data: [DONE]``)
POST /v1/completions      legacy completions, same stream shape (``text`` instead of ``delta``)
GET  /v1/models           ``{"object": "list", "data": [model card]}``
GET  /version             ``{"version", "build", "cache"}`` (build changes with the ``identity``
                          fault; ``cache``: the cache model and its settings, ``cache_identity``)
GET  /health              200 ``{"status": "ok"}``
GET  /cache               halogen-style JSON, exactly the 14 keys of issue 5
GET  /metrics             Prometheus text, vLLM names (see ``kvreplay.sim.metrics``)
GET  /events?since=N&limit=M  the event log (ground truth), ids > N, at most M (default 1000)
POST /tokenize            ``{"prompt"}`` or ``{"messages"}`` -> ``{"tokens", "count"}`` (+ boundaries)
POST /detokenize          ``{"tokens"}`` -> ``{"prompt"}`` (as vLLM; ids this process has produced)
POST /reset_prefix_cache  empties the cache; counters are kept, as in vLLM
========================  ==================================================================

Usage always carries ``prompt_tokens``, ``completion_tokens``, ``total_tokens`` and
``prompt_tokens_details.cached_tokens`` (0 included: the simulator always knows).

Simulated delays are ``asyncio.sleep`` calls of model seconds x ``time_scale``;
nothing blocks the loop and no thread is used, so the runner can host the server
in its own (uv)loop. Requests beyond ``slots`` wait in FIFO order.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import socket
import time
from typing import Any

import orjson
from aiohttp import web

from kvreplay import __version__
from kvreplay.sim._responses import Cut, Responses, error_response, json_response
from kvreplay.sim.config import SimConfig
from kvreplay.sim.engine import SimEngine, generate_output
from kvreplay.sim.faults import FaultSpec
from kvreplay.sim.metrics import filter_exposition, render_metrics
from kvreplay.sim.tokenizer import Prompt, detokenize, render_body

__all__ = ["SimServer", "bind_socket", "cache_identity"]

_ERRORS = {
    "http401": (401, "Invalid API key provided (simulated).", "authentication_error"),
    "http403": (403, "Permission denied for this model (simulated).", "permission_denied"),
    "oom500": (
        500,
        "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity; "
        "77.02 GiB already allocated) (simulated)",
        "InternalServerError",
    ),
}


def cache_identity(cfg: Any) -> dict[str, Any]:
    """The cache model and its settings, as ``/version`` reports them (part of the server identity).

    Every cache setting of ``SimConfig`` whatever the model, so an identity pin
    (``--expect-identity version.cache.host_evict=leaf-lru``) can tell two policies
    or sizes apart: ``model``, ``entries``, ``snapshots``, ``snapshot_at``,
    ``entries_recency``, ``bytes_per_token``, ``max_entry_bytes``, ``max_bytes``,
    ``block_size``, ``device_blocks``, ``host_rows``, ``host_pages``,
    ``page_tokens``, ``host_evict``.
    """
    return {
        "model": cfg.cache,
        "entries": cfg.cache_entries,
        "snapshots": cfg.snapshots,
        "snapshot_at": list(cfg.snapshot_at),
        "entries_recency": cfg.entries_recency,
        "bytes_per_token": cfg.bytes_per_token,
        "max_entry_bytes": cfg.max_entry_bytes,
        "max_bytes": cfg.max_bytes,
        "block_size": cfg.block_size,
        "device_blocks": cfg.device_blocks,
        "host_rows": cfg.host_rows,
        "host_pages": cfg.host_pages,
        "page_tokens": cfg.page_tokens,
        "host_evict": cfg.host_evict,
    }


def bind_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``(host, port)`` (IPv6 when ``host`` has a colon; ``SO_REUSEADDR``), not listening yet.

    Raises:
        OSError: the address cannot be bound (the socket is closed first).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    return sock


class SimServer(Responses):
    """An embedded OpenAI-compatible server with a cache model and faults.

    Args:
        config: The simulator configuration (defaults when None).
        calibration: The calibration that set ``config`` (``sim.config.config_and_calibration``),
            or None; served in ``/version`` as ``calibration`` (``source``, ``sha256``,
            ``capacity``, ``changes``, ``overridden``) so that a run's identity keeps it.

    Example::

        srv = SimServer(SimConfig(time_scale=0))
        await srv.start()            # 127.0.0.1, a free port
        srv.base_url                 # "http://127.0.0.1:PORT"
        await srv.stop()
    """

    def __init__(self, config: SimConfig | None = None, calibration: dict[str, Any] | None = None) -> None:
        self.config = config or SimConfig()
        self.calibration = (
            {k: calibration.get(k) for k in ("source", "sha256", "capacity", "changes", "overridden")}
            if calibration
            else None
        )
        self.engine = SimEngine(self.config)
        self._runner: web.AppRunner | None = None
        self._host = "127.0.0.1"
        self._port = 0
        self._slots: asyncio.Semaphore | None = None
        self._lane: asyncio.Lock | None = None
        self._tasks: set[asyncio.Task] = set()
        self._created = int(time.time())
        self.pre_rendered: dict[bytes, Prompt] = {}
        """Prompts already rendered for exact request bytes, used once (the fleet router's
        ``prefix_affinity`` renders a body to route it; the replica then does not render it again)."""

    # ---- lifecycle ------------------------------------------------------------------
    @property
    def port(self) -> int:
        """The bound port (0 before ``start``)."""
        return self._port

    @property
    def base_url(self) -> str:
        """``http://HOST:PORT`` of the running server."""
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"http://{host}:{self._port}"

    def make_app(self) -> web.Application:
        """The aiohttp application (routes only; ``start`` runs it)."""
        app = web.Application(client_max_size=256 << 20)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/version", self._version)
        app.router.add_get("/health", self._health)
        app.router.add_get("/cache", self._cache)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/events", self._events)
        app.router.add_post("/tokenize", self._tokenize)
        app.router.add_post("/detokenize", self._detokenize)
        app.router.add_post("/reset_prefix_cache", self._reset)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Bind and serve on the running loop.

        Args:
            host: Address to bind (default loopback).
            port: TCP port; 0 picks a free one.

        Returns:
            ``base_url``.

        Raises:
            OSError: The address cannot be bound.
            RuntimeError: Already started.
        """
        if self._runner is not None:
            raise RuntimeError("SimServer already started")
        self._slots = asyncio.Semaphore(self.config.slots)
        self._lane = asyncio.Lock()
        sock = bind_socket(host, port)
        runner = web.AppRunner(self.make_app(), access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await runner.setup()
        await web.SockSite(runner, sock).start()
        self._runner = runner
        self._host = host
        self._port = sock.getsockname()[1]
        return self.base_url

    async def stop(self) -> None:
        """Stop serving and cancel background timers (idempotent)."""
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        self._tasks.clear()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def __aenter__(self) -> SimServer:
        if self._runner is None:
            await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _sleep(self, model_s: float) -> None:
        d = model_s * self.config.time_scale
        if d > 0:
            await asyncio.sleep(d)

    async def _transfer(self, model_s: float) -> None:
        """One store/restore copy on the single transfer lane (gauges move)."""
        eng = self.engine
        d = model_s * self.config.time_scale
        if d <= 0 or self._lane is None:
            return
        eng.transfers_waiting += 1
        try:
            await self._lane.acquire()
        finally:
            eng.transfers_waiting -= 1
        eng.transfers_in_flight += 1
        try:
            await asyncio.sleep(d)
        finally:
            eng.transfers_in_flight -= 1
            self._lane.release()

    async def _retire(self, store_s: float) -> None:
        eng = self.engine
        eng.retiring += 1
        try:
            await self._transfer(store_s)
        finally:
            eng.retiring -= 1

    async def _hold_busy(self, seconds: float) -> None:
        eng = self.engine
        eng.phantom_busy += 1
        try:
            await asyncio.sleep(seconds)
        finally:
            eng.phantom_busy -= 1

    # ---- small endpoints --------------------------------------------------------------
    async def _models(self, request: web.Request) -> web.Response:
        m = self.engine.model
        card = {
            "id": m,
            "object": "model",
            "created": self._created,
            "owned_by": "kvreplay",
            "root": m,
            "parent": None,
            "max_model_len": 131072,
            "permission": [],
        }
        return json_response({"object": "list", "data": [card]})

    async def _version(self, request: web.Request) -> web.Response:
        doc: dict[str, Any] = {"version": __version__, "build": self.engine.build,
                               "cache": cache_identity(self.engine.cfg)}
        if self.calibration is not None:
            doc["calibration"] = self.calibration
        return json_response(doc)

    async def _health(self, request: web.Request) -> web.Response:
        return json_response({"status": "ok"})

    async def _cache(self, request: web.Request) -> web.Response:
        return json_response(self.engine.cache_json())

    async def _metrics(self, request: web.Request) -> web.Response:
        text = render_metrics(self.engine)
        if "name[]" in request.query:  # prometheus_client's filter, which vLLM's /metrics honours
            text = filter_exposition(text, set(request.query.getall("name[]")))
        return web.Response(
            body=text.encode(),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )

    async def _events(self, request: web.Request) -> web.Response:
        try:
            since = int(request.query.get("since", "0"))
            limit = int(request.query.get("limit", "1000"))
        except ValueError:
            return error_response(400, "since and limit must be integers", "BadRequestError")
        if limit < 1:
            return error_response(400, "limit must be >= 1", "BadRequestError")
        return json_response(self.engine.events_since(since, min(limit, 100_000)))

    async def _tokenize(self, request: web.Request) -> web.Response:
        try:
            body = orjson.loads(await request.read())
            if not isinstance(body, dict):
                raise ValueError("body must be a JSON object")
            prompt = render_body(body)
        except (orjson.JSONDecodeError, ValueError) as exc:
            return error_response(400, f"cannot tokenize: {exc}", "BadRequestError")
        return json_response(
            {
                "tokens": list(prompt.tokens),
                "count": len(prompt),
                "system_end": prompt.system_end,
                "messages_end": prompt.messages_end,
                "max_model_len": 131072,
            }
        )

    async def _detokenize(self, request: web.Request) -> web.Response:
        try:
            body = orjson.loads(await request.read())
            toks = body.get("tokens") if isinstance(body, dict) else None
            if not isinstance(toks, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in toks):
                raise ValueError("body must be a JSON object with a 'tokens' list of integers")
            text = detokenize(toks)
        except (orjson.JSONDecodeError, ValueError) as exc:
            return error_response(400, f"cannot detokenize: {exc}", "BadRequestError")
        return json_response({"prompt": text})

    async def _reset(self, request: web.Request) -> web.Response:
        dropped = self.engine.reset_prefix_cache()
        return json_response({"status": "ok", "dropped": dropped})

    # ---- generation -------------------------------------------------------------------
    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=True)

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._generate(request, chat=False)

    async def _generate(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        eng = self.engine
        raw = await request.read()
        seq = eng.next_request()
        fired = eng.faults.firing(seq)
        kinds: dict[str, FaultSpec] = {}
        for f in fired:
            kinds.setdefault(f.kind, f)
        base_event = {
            "seq": seq,
            "request_id": f"{'chatcmpl' if chat else 'cmpl'}-sim-{seq}",
            "endpoint": request.path,
            "body_sha256": hashlib.sha256(raw).hexdigest(),
            "faults": [f.text for f in fired],
        }
        if "die" in kinds:
            eng.log("request", **base_event, status=None, outcome="die")
            asyncio.get_running_loop().create_task(self.stop())  # not in _tasks: stop() cancels those
            if request.transport is not None:
                request.transport.abort()
            return web.Response(status=503)  # never reaches the client: its connection is gone
        if "restart" in kinds:
            eng.restart()
        if "identity" in kinds:
            eng.change_identity(str(kinds["identity"].get("what", "build")))
        if "busy-gauge" in kinds:
            self._spawn(self._hold_busy(float(kinds["busy-gauge"].get("s", 1.0))))
        for kind, (status, message, etype) in _ERRORS.items():
            if kind in kinds:
                eng.log("request", **base_event, status=status, outcome=kind)
                return error_response(status, message, etype)
        try:
            body = orjson.loads(raw)
            if not isinstance(body, dict):
                raise ValueError("body must be a JSON object")
            if chat and "messages" not in body:
                raise ValueError("chat request needs 'messages'")
            if not chat and "prompt" not in body:
                raise ValueError("completions request needs 'prompt'")
            handed = self.pre_rendered.pop(raw, None)
            prompt = handed if handed is not None else render_body(body)
        except (orjson.JSONDecodeError, ValueError) as exc:
            eng.log("request", **base_event, status=400, outcome="bad_request", error=str(exc))
            return error_response(400, f"invalid request: {exc}", "BadRequestError")
        gen = generate_output(raw, body, self.config)
        stream = bool(body.get("stream"))
        opts = body.get("stream_options")
        include_usage = stream and isinstance(opts, dict) and bool(opts.get("include_usage"))
        assert self._slots is not None
        eng.waiting += 1
        try:
            await self._slots.acquire()
        finally:
            eng.waiting -= 1
        eng.running += 1
        state = {"finished": False}
        ticket = eng.admit(seq, prompt)
        event = dict(
            base_event,
            prompt_tokens=len(prompt),
            system_end=prompt.system_end,
            messages_end=prompt.messages_end,
            cached_tokens=ticket.cached_tokens,
            prefill_s=ticket.prefill_s,
            restore_s=ticket.restore_s,
            stream=stream,
        )

        def finish(produced: int, reason: str, outcome: str) -> None:
            if state["finished"]:
                return
            state["finished"] = True
            store_s, cache = eng.finish(ticket, gen.token_ids[:produced], reason)
            eng.log(
                "request",
                **event,
                status=200,
                outcome=outcome,
                completion_tokens=produced,
                finish_reason=reason,
                store_s=store_s,
                cache=cache,
            )
            self._spawn(self._retire(store_s))

        try:
            if stream:
                return await self._stream(request, chat, ticket, gen, kinds, include_usage, finish)
            return await self._plain(request, chat, ticket, gen, kinds, finish)
        except Cut:
            if request.transport is not None:
                request.transport.close()
            raise web.HTTPException() from None  # the client sees a dropped connection
        except (ConnectionError, asyncio.CancelledError):
            finish(0, "abort", "client_gone")
            raise
        finally:
            if not state["finished"]:
                finish(0, "abort", "server_error")
            eng.running -= 1
            self._slots.release()
