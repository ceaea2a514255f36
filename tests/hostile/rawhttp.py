"""Raw HTTP/1.1 on asyncio streams for the capture tests: an upstream that keeps the exact wire bytes, a client.

The upstream notes, per request, its head and the body bytes *as they came on the
wire* (a chunked body with its chunk framing), and answers with a short SSE stream;
the client sends a head and a body in pieces of its choosing and reads one answer.
"""

from __future__ import annotations

import asyncio
import contextlib

SSE = (b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n'
       b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}\n\n'
       b"data: [DONE]\n\n")


def header(head: bytes, name: str) -> str | None:
    """The value of header ``name`` in a raw head (first one), or None."""
    for line in head.split(b"\r\n")[1:]:
        k, _, v = line.partition(b":")
        if k.strip().lower() == name.lower().encode():
            return v.strip().decode("latin-1")
    return None


def dechunk(wire: bytes) -> bytes:
    """The payload of a chunked body (RFC 9112 7.1), trailers ignored."""
    out, i = bytearray(), 0
    while True:
        j = wire.index(b"\r\n", i)
        size = int(wire[i:j].split(b";")[0], 16)
        if size == 0:
            return bytes(out)
        out += wire[j + 2 : j + 2 + size]
        i = j + 2 + size + 2


class RawUpstream:
    """``async with RawUpstream() as up``: listens on 127.0.0.1; ``up.got`` = [(head, wire body)]."""

    def __init__(self) -> None:
        self.got: list[tuple[bytes, bytes]] = []
        self.port = 0
        self._server: asyncio.base_events.Server | None = None

    async def __aenter__(self) -> RawUpstream:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0, limit=1 << 20)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                if "chunked" in (header(head, "Transfer-Encoding") or "").lower():
                    wire = bytearray()
                    while True:
                        line = await reader.readuntil(b"\r\n")
                        wire += line
                        size = int(line.split(b";")[0], 16)
                        if size == 0:
                            wire += await reader.readuntil(b"\r\n")  # no trailers: the empty line
                            break
                        wire += await reader.readexactly(size + 2)
                    body = bytes(wire)
                else:
                    body = await reader.readexactly(int(header(head, "Content-Length") or 0))
                self.got.append((head, body))
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n"
                             % len(SSE) + SSE)
                await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            writer.close()


async def send(url: str, head: bytes, pieces: list[bytes], *, pause: float = 0.0) -> tuple[int, bytes]:
    """Send ``head`` then each piece (``pause`` s apart); ``(status, body)`` of the answer (0 when none)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(head)
        for i, p in enumerate(pieces):
            if i and pause:
                await asyncio.sleep(pause)
            writer.write(p)
            await writer.drain()
        try:
            rhead = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            return 0, b""
        status = int(rhead.split(b" ", 2)[1])
        n = header(rhead, "Content-Length")
        body = await reader.readexactly(int(n)) if n is not None else await reader.read()
        return status, body
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


def post_head(path: str, *, length: int | None = None, chunked: bool = False, encoding: str | None = None,
              extra: str = "") -> bytes:
    """A POST head in origin form (``path``), framed by ``Content-Length`` or chunked."""
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
    if encoding:
        lines.append(f"Content-Encoding: {encoding}")
    if chunked:
        lines.append("Transfer-Encoding: chunked")
    elif length is not None:
        lines.append(f"Content-Length: {length}")
    if extra:
        lines.append(extra)
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def chunk(data: bytes) -> bytes:
    """One chunk of a chunked body (``b""``: the last chunk)."""
    return b"%x\r\n%s\r\n" % (len(data), data) if data else b"0\r\n\r\n"
