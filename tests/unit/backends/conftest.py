"""A tiny aiohttp server on 127.0.0.1 port 0 for adapter tests."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from aiohttp import web

FIXTURES = Path(__file__).resolve().parents[3] / "fixtures" / "metrics"


@contextlib.asynccontextmanager
async def _serve(routes):
    """Serve ``{(METHOD, path): handler | (status, body[, content_type])}``.

    Yields ``(base_url, hits)``; hits lists every request as (method, path_qs, Accept).
    """
    hits: list[tuple[str, str, str]] = []

    @web.middleware
    async def record(request, handler):  # every request, routed or not
        hits.append((request.method, request.path_qs, request.headers.get("Accept", "")))
        return await handler(request)

    app = web.Application(middlewares=[record])

    def make(spec):
        async def handler(request):
            s = spec(request) if callable(spec) else spec
            status, body, *ctype = s
            return web.Response(
                status=status, text=body, content_type=ctype[0] if ctype else "text/plain"
            )

        return handler

    for (method, path), spec in routes.items():
        app.router.add_route(method, path, make(spec))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", hits
    finally:
        await runner.cleanup()


@pytest.fixture
def serve():
    return _serve


@pytest.fixture
def dump():
    def read(rel: str) -> str:
        return (FIXTURES / rel).read_text(encoding="utf-8")

    return read
