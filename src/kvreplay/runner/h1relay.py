"""Relaying one request on the runner's llhttp connections (``runner.h1``), for ``kvreplay record``.

The capture proxy forwards a request whose body it read whole on one of an
:class:`~kvreplay.runner.h1.H1Client`'s keep-alive connections: the request head
is the client's own header bytes after the request line and ``Host``, the body
goes out with its ``Content-Length``, and the response is parsed by llhttp as the
runner's own (``_Exchange``: the same limits, interim responses skipped, a
close-delimited body ended by EOF). Unlike the runner's exchange, every response
header is kept, and the body bytes of each socket read are handed to ``sink`` in
one call from ``data_received`` (no coroutine hop per read), so the proxy relays
each read as it arrives.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from kvreplay.runner.h1 import _BODY, _HEAD, H1Client, _Exchange, _H1Conn

__all__ = ["RelayExchange", "relay"]


class RelayExchange(_Exchange):
    """One relayed request/response; ``raw_headers`` once ``head`` is done, body reads to ``sink``.

    Attributes:
        raw_headers: The final response's headers as received (``(name, value)`` bytes).
        head: Resolved once the final response's head is parsed, or the exchange failed first.
        fut: Resolved once the response ended (complete, cut or refused: ``exc_status``).
    """

    __slots__ = ("head", "raw_headers", "sink")

    def __init__(self, conn: _H1Conn, fut: asyncio.Future, head: asyncio.Future,
                 sink: Callable[[bytes], object]) -> None:
        self.raw_headers: list[tuple[bytes, bytes]] = []
        self.sink = sink
        self.head = head
        super().__init__(conn, fut, 0)

    def on_header(self, name: bytes, value: bytes) -> None:  # noqa: D102
        if self.state == _HEAD:
            self.raw_headers.append((name, value))
        super().on_header(name, value)

    def on_headers_complete(self) -> None:  # noqa: D102
        status = self.parser.get_status_code()
        if 100 <= status < 200:
            self.raw_headers = []  # an interim response: not relayed (as aiohttp's client)
            super().on_headers_complete()
            return
        self.http_status = status
        self.headers_ns = self.last_rx_ns
        self.state = _BODY
        if not self.head.done():
            self.head.set_result(None)

    def _take(self, now: int) -> int:
        pieces = self.pieces
        if not pieces:
            return 0
        payload = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        pieces.clear()
        self.sink(payload)
        return len(payload)

    def _finish(self, now: int) -> None:
        super()._finish(now)
        if not self.head.done():
            self.head.set_result(None)


async def relay(client: H1Client, method: str, target: str, headers: list[tuple[bytes, bytes]], body: bytes,
                sink: Callable[[bytes], object]) -> RelayExchange:
    """Send one request and return once its response head is in (or the exchange failed first).

    A request whose *pooled* connection is found closed before any response byte is
    sent again once on a fresh connection (as ``H1Client.send``).

    Args:
        client: The upstream's connection pool.
        method: Request method (token characters only, as the proxy's server parsed it).
        target: The request target after the upstream's path prefix (origin form, as received).
        headers: Header lines to send after ``Host`` (no ``Host``, ``Content-Length``, hop-by-hop).
        body: The whole body; sent with its ``Content-Length``.
        sink: Called with the body bytes of each socket read, from ``data_received``.

    Returns:
        The exchange: ``http_status`` None and ``exc_status`` set when no response head came.

    Raises:
        OSError / TimeoutError: a connection to the upstream could not be made (connect bound:
            ``client.connect_timeout_s``).
        asyncio.CancelledError: cancelled (the connection is closed).
    """
    line = f"{method} {client.prefix}{target} HTTP/1.1\r\nHost: {client.hostport}\r\n".encode("latin-1")
    out = b"".join((line, *(b"%s: %s\r\n" % kv for kv in headers), b"Content-Length: %d\r\n\r\n" % len(body), body))
    loop = asyncio.get_running_loop()
    for fresh in (False, True):
        conn = None if fresh else client._pooled()
        if conn is None:
            conn = await client._acquire(True)
        pooled = conn.uses > 0
        conn.uses += 1
        x = RelayExchange(conn, loop.create_future(), loop.create_future(), sink)
        conn.x = x
        if conn.closed:
            x.on_lost(None)
        else:
            conn.transport.write(out)  # type: ignore[union-attr]
        try:
            await x.head
        except asyncio.CancelledError:
            conn.close()
            raise
        if not (pooled and not fresh and x.exc_status in ("write", "cut") and x.headers_ns is None
                and not x.head_bytes):
            return x
    return x  # pragma: no cover - the loop returns on its second pass
