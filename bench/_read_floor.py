"""The floor of a streaming client that stamps every read: uvloop, no HTTP parsing, nothing kept.

``bench_client.py --clients plain,kvreplay,floor`` runs it as a third client on the same
fast server. Each of ``conc`` keep-alive connections writes one request's bytes (a
``POST`` with ``Content-Length``, the same bodies as the other clients), then on every
read takes a clock stamp (``kvreplay.clock.now_ns``, as kvreplay stamps each read) and
looks only at the read's last five bytes for the chunked body's end (``0\\r\\n\\r\\n``:
the fast server's answers end so and carry no trailers); then it writes the next request.
It parses no head, no SSE event, keeps no record: its CPU per streamed token and per
request is what the socket reads and writes and the event loop's wake-ups cost on this
machine, below which no client that reads each event as it arrives (the no-holding rule
behind TTFT and ITL) can go on the same loop. TTFT is the first read after the send.

Used by ``bench/bench_client.py`` (``child_floor``); loopback only, bounded by its
request count.
"""

from __future__ import annotations

import asyncio
import socket

from kvreplay.clock import now_ns

_END = b"0\r\n\r\n"


class _FloorConn(asyncio.Protocol):
    """One keep-alive connection: write a request, stamp every read, write the next at the answer's end."""

    def __init__(self, run: _FloorRun) -> None:
        self.run = run
        self.tr: asyncio.Transport | None = None
        self.t_sent = 0
        self.first = 0
        self.tail = b""

    def connection_made(self, tr: asyncio.BaseTransport) -> None:  # noqa: D102
        self.tr = tr  # type: ignore[assignment]
        tr.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._next()

    def _next(self) -> None:
        req = self.run.take()
        if req is None:
            assert self.tr is not None
            self.tr.close()
            return
        self.first = 0
        self.tail = b""
        self.t_sent = now_ns()
        assert self.tr is not None
        self.tr.write(req)

    def data_received(self, data: bytes) -> None:  # noqa: D102
        now = now_ns()
        if not self.first:
            self.first = now
            self.run.ttft.append(now - self.t_sent)
        tail = data[-5:] if len(data) >= 5 else (self.tail + data)[-5:]
        self.tail = tail
        if tail == _END:
            self.run.done += 1
            self._next()

    def connection_lost(self, exc: Exception | None) -> None:  # noqa: D102
        self.run.closed += 1
        if self.run.closed == self.run.conc and not self.run.finished.done():
            self.run.finished.set_result(None)


class _FloorRun:
    """``count`` requests over ``conc`` connections, bodies taken in ``order``."""

    def __init__(self, requests: list[bytes], order: list[int], conc: int) -> None:
        self.requests, self.order, self.conc = requests, order, conc
        self.i = 0
        self.done = self.closed = 0
        self.ttft: list[int] = []
        self.finished: asyncio.Future = asyncio.get_running_loop().create_future()

    def take(self) -> bytes | None:
        if self.i >= len(self.order):
            return None
        self.i += 1
        return self.requests[self.order[self.i - 1]]


def request_bytes(host: str, port: int, body: bytes) -> bytes:
    """One ``POST /v1/chat/completions`` with ``body`` (bytes on the wire, HTTP/1.1 keep-alive)."""
    return (b"POST /v1/chat/completions HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
            b"Accept: text/event-stream\r\nContent-Length: %d\r\n\r\n%s"
            % (host.encode(), port, len(body), body))


async def run_floor(port: int, bodies: list[bytes], order: list[int], conc: int) -> dict:
    """Run ``order`` over ``conc`` connections to 127.0.0.1:``port``; the requests done and TTFT p50 (µs)."""
    loop = asyncio.get_running_loop()
    reqs = [request_bytes("127.0.0.1", port, b) for b in bodies]
    run = _FloorRun(reqs, order, conc)
    for _ in range(conc):
        await loop.create_connection(lambda: _FloorConn(run), "127.0.0.1", port)
    await asyncio.wait_for(run.finished, timeout=600)
    run.ttft.sort()
    return {"requests": run.done,
            "ttft_p50_us": run.ttft[len(run.ttft) // 2] / 1e3 if run.ttft else None}
