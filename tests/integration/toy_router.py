"""A toy HTTP router for the fleet tests: round-robin over upstreams, streaming each answer back.

Run as ``python toy_router.py --upstream URL [--upstream URL ...] [--header NAME]``; it
prints ``listening on http://127.0.0.1:PORT`` and serves until killed. With
``--header`` each response carries ``NAME: <upstream URL>`` (as the simulated
router of issue 33 does). Only 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools

from aiohttp import ClientSession, web


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--upstream", action="append", required=True)
    ap.add_argument("--header", default=None)
    a = ap.parse_args()
    turn = itertools.cycle(a.upstream)
    session = ClientSession(auto_decompress=False)

    async def forward(request: web.Request) -> web.StreamResponse:
        up = next(turn)
        body = await request.read()
        async with session.post(up + request.path, data=body,
                                headers={"Content-Type": "application/json"}) as r:
            resp = web.StreamResponse(status=r.status)
            resp.content_type = r.content_type
            if a.header:
                resp.headers[a.header] = up
            await resp.prepare(request)
            async for chunk in r.content.iter_any():
                await resp.write(chunk)
            await resp.write_eof()
            return resp

    app = web.Application()
    app.router.add_post("/{tail:.*}", forward)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(f"listening on http://127.0.0.1:{port}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
