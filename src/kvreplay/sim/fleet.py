"""The embedded fleet: N simulated replicas and a router, all on the caller's event loop.

``start_fleet`` starts N ``SimServer`` replicas (each on its own port, each with
its own cache, counters, ``/metrics``, ``/cache`` and ``/events``) and a router
in front of them. The router picks a replica per generation request with a
``kvreplay.sim.routing.RouterPolicy`` (``round_robin``, ``random``,
``prefix_affinity``), forwards the request bytes unchanged, and streams the
answer back unchanged, relaying each upstream read as it arrives; it adds one
response header, ``x-kvreplay-replica: <replica base URL>``
(``routing.REPLICA_HEADER``).

Router endpoints:

============================  ==============================================================
POST /v1/chat/completions     routed by the policy (``prefix_affinity`` renders the body
POST /v1/completions          with the simulator's tokenizer to ask each replica's cache)
POST /reset_prefix_cache      sent to every replica; ``{"status", "dropped": [per replica]}``
GET  /fleet                   ``{"policy", "seed", "replicas": [urls], "assigned": [counts]}``
GET  /metrics, /cache,        404: counters are per replica (read each replica's URL)
     /events
anything else                 forwarded to replica 0 unchanged (``/v1/models``, ``/version``,
                              ``/health``, ``/tokenize``), not counted by the policy
============================  ==============================================================

A replica that cannot be reached gives 502 with an OpenAI-shaped error body and
the replica header; a connection the replica drops (before answering, or in the
middle of a stream: the ``die`` and ``cut`` faults) is dropped towards the client
too, so a client sees through the router what it sees from one server.

Example::

    fleet = await start_fleet(2, "prefix_affinity", config=SimConfig(time_scale=0))
    fleet.router_url, fleet.replica_urls
    await fleet.stop()
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from kvreplay.sim._responses import error_response, json_response
from kvreplay.sim.config import SimConfig
from kvreplay.sim.routing import REPLICA_HEADER, PrefixPeek, RouterPolicy
from kvreplay.sim.server import SimServer, bind_socket
from kvreplay.sim.tokenizer import Prompt, render_body

__all__ = ["Fleet", "SimRouter", "start_fleet"]

_ROUTED = ("/v1/chat/completions", "/v1/completions")
_PER_REPLICA = ("/metrics", "/cache", "/events")
# Hop-by-hop and framing headers: the router's own connections set these.
_HOP = frozenset(
    ("connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade", "host",
     "content-length")
)


def _url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


class SimRouter:
    """The fleet's router (an aiohttp server; see module docstring).

    Args:
        replicas: The running replicas, in index order.
        policy: The routing decision (its N must equal ``len(replicas)``).

    Raises:
        ValueError: The policy's N differs from the number of replicas.
    """

    def __init__(self, replicas: Sequence[SimServer], policy: RouterPolicy) -> None:
        if policy.replicas != len(replicas):
            raise ValueError(f"policy for {policy.replicas} replicas, {len(replicas)} given")
        self.replicas = tuple(replicas)
        self.policy = policy
        self.urls = tuple(r.base_url for r in self.replicas)
        self.loads = [0] * len(self.replicas)
        """Requests in flight per replica (through this router)."""
        self.log: list[int] = []
        """Replica index of every routed request, in the order decided."""
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Bind and serve on the running loop; returns the router's base URL.

        Raises:
            OSError: The address cannot be bound.
        """
        sock = bind_socket(host, port)
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, enable_cleanup_closed=True),
            auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=None),
            skip_auto_headers=("User-Agent", "Accept-Encoding"),
        )
        app = web.Application(client_max_size=256 << 20)
        app.router.add_get("/fleet", self._fleet)
        app.router.add_post("/reset_prefix_cache", self._reset)
        app.router.add_route("*", "/{tail:.*}", self._forward)
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await runner.setup()
        await web.SockSite(runner, sock).start()
        self._runner = runner
        self.url = _url(host, sock.getsockname()[1])
        return self.url

    async def stop(self) -> None:
        """Stop serving and close the upstream connections (idempotent)."""
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    # ---- endpoints -----------------------------------------------------------------
    async def _fleet(self, request: web.Request) -> web.Response:
        return json_response({"policy": self.policy.policy, "seed": self.policy.seed,
                              "replicas": list(self.urls), "assigned": list(self.policy.assigned)})

    async def _reset(self, request: web.Request) -> web.Response:
        dropped = [r.engine.reset_prefix_cache() for r in self.replicas]
        return json_response({"status": "ok", "dropped": dropped})

    def _choose(self, raw: bytes) -> tuple[int, Prompt | None]:
        prompt = None
        if self.policy.needs_tokens:
            try:
                body = orjson.loads(raw)
                if isinstance(body, dict):
                    prompt = render_body(body)
            except (orjson.JSONDecodeError, ValueError):
                prompt = None  # the replica answers 400; any replica will do
        tokens = None if prompt is None else prompt.tokens
        caches: list[PrefixPeek] = []
        if self.policy.needs_tokens:
            for r in self.replicas:
                cache = r.engine.entries if r.engine.entries is not None else r.engine.radix
                caches.append(cache if cache is not None and tokens is not None else _Cold())
        pick = self.policy.choose(tokens, caches, self.loads)
        self.log.append(pick)
        return pick, prompt

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        if request.path in _PER_REPLICA:
            return error_response(
                404, f"{request.path} is per replica: read it from each of {', '.join(self.urls)}", "NotFoundError"
            )
        raw = await request.read()
        routed = request.method == "POST" and request.path in _ROUTED
        index, prompt = self._choose(raw) if routed else (0, None)
        base = self.urls[index]
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        replica = self.replicas[index]
        if prompt is not None:
            # the replica takes the rendering instead of rendering the same bytes again
            replica.pre_rendered[raw] = prompt
        if routed:
            self.loads[index] += 1
        try:
            return await self._relay(request, base, raw, headers)
        finally:
            if routed:
                self.loads[index] -= 1
            if prompt is not None:
                replica.pre_rendered.pop(raw, None)

    async def _relay(
        self, request: web.Request, base: str, raw: bytes, headers: dict[str, str]
    ) -> web.StreamResponse:
        assert self._session is not None
        try:
            upstream = await self._session.request(
                request.method, base + request.rel_url.path_qs, data=raw, headers=headers, allow_redirects=False
            )
        except aiohttp.ClientConnectorError as exc:
            resp = error_response(502, f"replica {base} did not answer: {exc}", "BadGateway")
            resp.headers[REPLICA_HEADER] = base
            return resp
        except (aiohttp.ClientError, OSError):
            # connected, then dropped before answering (the `die` fault): drop the client's too
            if request.transport is not None:
                request.transport.close()
            raise web.HTTPException() from None
        async with upstream:
            out = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for k, v in upstream.headers.items():
                if k.lower() not in _HOP:
                    out.headers.add(k, v)
            if upstream.content_length is not None:
                out.content_length = upstream.content_length
            out.headers[REPLICA_HEADER] = base
            await out.prepare(request)
            try:
                # one write per upstream read, as it arrives: no buffering between the two
                async for chunk in upstream.content.iter_any():
                    await out.write(chunk)
            except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError):
                # the replica cut the stream: cut it towards the client as well
                if request.transport is not None:
                    request.transport.close()
                raise web.HTTPException() from None
            await out.write_eof()
            return out


class _Cold:
    """A cache that holds nothing (a body that could not be rendered scores 0 everywhere)."""

    def peek(self, tokens: Sequence[int]) -> int:
        return 0


@dataclass(eq=False)
class Fleet:
    """A running embedded fleet (from ``start_fleet``).

    Attributes:
        router_url: Base URL of the router (``http://HOST:PORT``): the ``--target``.
        replica_urls: Base URLs of the replicas, in index order: the ``--replica`` URLs.
        replicas: The replica servers (their ``engine`` holds cache and counters).
        router: The router (its ``log`` holds the replica index of every routed request).
    """

    router_url: str
    replica_urls: tuple[str, ...]
    replicas: tuple[SimServer, ...]
    router: SimRouter
    _stopped: bool = field(default=False, repr=False)

    @property
    def policy(self) -> str:
        """The router policy's name."""
        return self.router.policy.policy

    def target_args(self) -> list[str]:
        """``["--target", ROUTER, "--replica", URL, ...]``: the run flags naming this fleet."""
        out = ["--target", self.router_url]
        for url in self.replica_urls:
            out += ["--replica", url]
        return out

    async def stop(self) -> None:
        """Stop the router, then every replica (idempotent)."""
        if self._stopped:
            return
        self._stopped = True
        await self.router.stop()
        for r in self.replicas:
            with contextlib.suppress(Exception):
                await r.stop()

    async def __aenter__(self) -> Fleet:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def start_fleet(
    n: int,
    router_policy: str = "round_robin",
    *,
    config: SimConfig | None = None,
    configs: Sequence[SimConfig] | None = None,
    calibration: dict[str, Any] | None = None,
    seed: int = 0,
    host: str = "127.0.0.1",
    router_port: int = 0,
) -> Fleet:
    """Start N simulated replicas and a router in front of them, on the running loop.

    Args:
        n: Number of replicas (>= 1).
        router_policy: ``round_robin``, ``random`` or ``prefix_affinity``
            (``routing.ROUTER_POLICIES``).
        config: The configuration of every replica (default ``SimConfig()``).
        configs: One configuration per replica instead (length ``n``).
        calibration: The calibration that set the configuration, served in
            each replica's ``/version`` (as ``SimServer``).
        seed: Seed of the ``random`` policy.
        host: Address every server binds (replicas on free ports).
        router_port: The router's port (0 = a free one).

    Returns:
        The running ``Fleet``; call ``await fleet.stop()`` (or use it as an
        async context manager).

    Raises:
        ValueError: n < 1, an unknown policy, or ``configs`` of another length.
        OSError: An address cannot be bound (what was started is stopped).
    """
    policy = RouterPolicy(n, router_policy, seed=seed)
    if configs is not None and len(configs) != n:
        raise ValueError(f"{len(configs)} replica configurations for {n} replicas")
    cfgs = list(configs) if configs is not None else [config or SimConfig()] * n
    replicas: list[SimServer] = []
    router: SimRouter | None = None
    try:
        for cfg in cfgs:
            srv = SimServer(cfg, calibration=calibration)
            await srv.start(host=host, port=0)
            replicas.append(srv)
        router = SimRouter(replicas, policy)
        await router.start(host=host, port=router_port)
    except BaseException:
        if router is not None:
            await router.stop()
        for srv in replicas:
            await srv.stop()
        raise
    return Fleet(router.url, router.urls, tuple(replicas), router)
