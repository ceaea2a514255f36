"""The floor of a per-read relay on this machine: a byte relay on uvloop, no HTTP, nothing retained.

``bench_record.py`` runs it beside ``kvreplay record`` on the same C64 runs. Each client
connection gets one upstream connection; every read on one side is written to the other
as it arrives (``data_received`` -> ``transport.write``), which is all a relay that keeps
each upstream read's timing must do. It parses nothing, so its CPU per streamed token is
the cost of the socket reads and writes, the event loop's wake-ups and a bytes object per
read: no HTTP-aware proxy written on the same loop can cost less per read.

    python bench/_relay_floor.py UPSTREAM_HOST UPSTREAM_PORT   # prints "listening on http://127.0.0.1:PORT"

Bounded: it serves 127.0.0.1 only and runs until its parent stops it (SIGINT/SIGTERM).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys

import uvloop


class _Up(asyncio.Protocol):
    """The upstream side of one relayed connection: each read goes to the client as it arrives."""

    def __init__(self, down: _Down) -> None:
        self.down = down
        self.tr: asyncio.Transport | None = None

    def connection_made(self, tr: asyncio.BaseTransport) -> None:  # noqa: D102
        self.tr = tr  # type: ignore[assignment]
        tr.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:  # noqa: D102
        assert self.down.tr is not None
        self.down.tr.write(data)

    def connection_lost(self, exc: Exception | None) -> None:  # noqa: D102
        if self.down.tr is not None:
            self.down.tr.close()


class _Down(asyncio.Protocol):
    """The client side: reads before the upstream connection is up are held, then written in order."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.tr: asyncio.Transport | None = None
        self.up: _Up | None = None
        self.held: list[bytes] = []

    def connection_made(self, tr: asyncio.BaseTransport) -> None:  # noqa: D102
        self.tr = tr  # type: ignore[assignment]
        tr.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        _, up = await asyncio.get_running_loop().create_connection(lambda: _Up(self), self.host, self.port)
        self.up = up
        assert up.tr is not None
        for data in self.held:
            up.tr.write(data)
        self.held = []

    def data_received(self, data: bytes) -> None:  # noqa: D102
        if self.up is None or self.up.tr is None:
            self.held.append(data)
        else:
            self.up.tr.write(data)

    def connection_lost(self, exc: Exception | None) -> None:  # noqa: D102
        if self.up is not None and self.up.tr is not None:
            self.up.tr.close()


async def _serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Down(host, port), "127.0.0.1", 0)
    print(f"listening on http://127.0.0.1:{server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):  # the parent's SIGINT: stop quietly
        uvloop.run(_serve(sys.argv[1], int(sys.argv[2])))
