"""Send one exact body and account its response; the one place aiohttp errors are translated.

Per-request failures never raise: they come back as a ``RequestOutcome`` whose
``status`` names the failure class (counted like wrk2's):

    ok            HTTP 200 and the stream finished (finish_reason or [DONE])
    connect       the TCP connection could not be made
    write         the connection broke while the body was being sent
    timeout       connect / read-idle (``sock_read``) / total timeout; ``timeout_kind`` says which
    http          HTTP status other than 200 (first 1 KiB of the body in ``error``)
    stream_error  an error event inside a 200 stream
    cut           the connection closed before the stream finished
    malformed     the stream or JSON body could not be parsed
"""

from __future__ import annotations

import asyncio
from array import array
from dataclasses import dataclass, field
from itertools import repeat

import aiohttp
import orjson

from kvreplay.accounting import SSEAccountant, StreamResult
from kvreplay.accounting.events import ERROR_BYTES
from kvreplay.backends._http import read_upto
from kvreplay.clock import now_ns
from kvreplay.errors import StreamError

__all__ = ["H1Client", "RequestOutcome", "send_body"]


@dataclass(slots=True)
class RequestOutcome:
    """Result of one request.

    Attributes:
        status: Failure class or ``ok`` (see module docstring).
        http_status: HTTP status code, None when no response arrived.
        sent_ns / headers_ns / done_ns: ``now_ns()`` readings (absolute ns).
        stream: Accounted stream (also filled for non-streamed JSON bodies).
        error: Server message or client-side reason (<= 1 KiB), None when ok.
        timeout_kind: ``connect``, ``first_byte``, ``read_idle`` or ``total`` for ``timeout``.
        streamed: The response was ``text/event-stream``.
        reconnects: Times the request was re-sent on a fresh connection because a
            pooled keep-alive connection was found closed (at most 1).
    """

    status: str
    http_status: int | None
    sent_ns: int
    headers_ns: int | None
    done_ns: int
    stream: StreamResult = field(default_factory=StreamResult)
    error: str | None = None
    timeout_kind: str | None = None
    streamed: bool = False
    reconnects: int = 0


def _json_error(raw: bytes) -> str:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return raw[:ERROR_BYTES].decode("utf-8", "replace")
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return err["message"][:ERROR_BYTES]
        if isinstance(err, str):
            return err[:ERROR_BYTES]
    return raw[:ERROR_BYTES].decode("utf-8", "replace")


def _account_json(raw: bytes, recv_ns: int, head_chars: int) -> StreamResult:
    """Account a non-streamed chat/completions JSON response (one 'token event')."""
    obj = orjson.loads(raw)
    r = StreamResult(first_byte_ns=recv_ns)
    if not isinstance(obj, dict):
        raise StreamError("response is not a JSON object", partial=raw[:ERROR_BYTES])
    usage = obj.get("usage")
    r.usage = usage if isinstance(usage, dict) else None
    if isinstance(obj.get("timings"), dict):
        r.timings = obj["timings"]
    if obj.get("error") is not None:
        r.error_events = 1
        r.error = _json_error(raw)
    text = ""
    for ch in obj.get("choices") or []:
        if not isinstance(ch, dict):
            continue
        if ch.get("finish_reason") is not None:
            r.finish_reason = str(ch["finish_reason"])
        msg = ch.get("message")
        if isinstance(msg, dict):
            c = msg.get("content")
            if isinstance(c, str) and c:
                text += c
                r.content_deltas = 1
            for key in ("reasoning_content", "reasoning"):
                if isinstance(msg.get(key), str) and msg[key]:
                    r.reasoning_deltas = 1
        elif isinstance(ch.get("text"), str) and ch["text"]:
            text += ch["text"]
            r.content_deltas = 1
    r.text_head = text[:head_chars]
    if r.content_deltas or r.reasoning_deltas:
        r.first_token_ns = r.last_token_ns = recv_ns
        r.first_content_ns = recv_ns if r.content_deltas else None
        r.token_ns = array("q", [recv_ns])
    r.chunks = 1
    return r


def _stream_outcome(res: StreamResult, sent: int, headers_ns: int | None, done_ns: int) -> RequestOutcome:
    """Classify a closed HTTP 200 event stream: ``stream_error``, ``cut`` or ``ok`` (both send paths)."""
    if res.error_events:
        return RequestOutcome("stream_error", 200, sent, headers_ns, done_ns, res, error=res.error, streamed=True)
    if res.eof_before_finish:
        return RequestOutcome("cut", 200, sent, headers_ns, done_ns, res, error="eof_before_finish", streamed=True)
    return RequestOutcome("ok", 200, sent, headers_ns, done_ns, res, streamed=True)


def _json_outcome(raw: bytes, sent: int, headers_ns: int | None, done_ns: int, head_chars: int) -> RequestOutcome:
    """Account and classify a whole non-streamed HTTP 200 body (both send paths)."""
    try:
        res = _account_json(raw, done_ns, head_chars)
    except StreamError as exc:
        return RequestOutcome("malformed", 200, sent, headers_ns, done_ns, error=f"{exc.kind}: {exc}"[:ERROR_BYTES])
    except orjson.JSONDecodeError as exc:
        return RequestOutcome("malformed", 200, sent, headers_ns, done_ns, error=f"invalid JSON: {exc}"[:ERROR_BYTES])
    status = "stream_error" if res.error_events else "ok"
    return RequestOutcome(status, 200, sent, headers_ns, done_ns, res, error=res.error)


async def _send_once(
    session: aiohttp.ClientSession,
    url: str,
    raw: bytes,
    *,
    headers: dict[str, str],
    head_chars: int = 256,
    total_timeout_s: float | None = None,
) -> RequestOutcome:
    """One attempt of :func:`send_body` (same arguments), without its stale-connection retry."""
    sent = now_ns()
    headers_ns: int | None = None
    http_status: int | None = None
    acc = None
    try:
        async with asyncio.timeout(total_timeout_s):
            async with session.post(url, data=raw, headers=headers) as resp:
                headers_ns = now_ns()
                http_status = resp.status
                if resp.status != 200:
                    body = (await read_upto(resp.content, ERROR_BYTES))[:ERROR_BYTES]
                    return RequestOutcome(
                        "http", http_status, sent, headers_ns, now_ns(), error=_json_error(body) or resp.reason
                    )
                ctype = resp.headers.get("Content-Type", "")
                if ctype.startswith("text/event-stream"):
                    acc = SSEAccountant(head_chars=head_chars)
                    feed = acc.feed
                    async for chunk in resp.content.iter_any():
                        feed(chunk, now_ns())
                    res = acc.close()
                    return _stream_outcome(res, sent, headers_ns, now_ns())
                buf = bytearray()
                while chunk := await resp.content.read(1 << 20):
                    buf += chunk
                    if len(buf) > MAX_JSON_BODY_BYTES:
                        return RequestOutcome("malformed", 200, sent, headers_ns, now_ns(),
                                              error=f"response_too_large: over {MAX_JSON_BODY_BYTES} bytes")
                return _json_outcome(bytes(buf), sent, headers_ns, now_ns(), head_chars)
    except StreamError as exc:
        res = acc.result if acc is not None else StreamResult()
        return RequestOutcome("malformed", http_status, sent, headers_ns, now_ns(), res, error=f"{exc.kind}: {exc}"[:ERROR_BYTES])
    except orjson.JSONDecodeError as exc:
        return RequestOutcome("malformed", http_status, sent, headers_ns, now_ns(), error=f"invalid JSON: {exc}"[:ERROR_BYTES])
    except aiohttp.ConnectionTimeoutError as exc:
        return RequestOutcome("timeout", None, sent, None, now_ns(), error=f"connect_timeout: {exc}"[:ERROR_BYTES], timeout_kind="connect")
    except aiohttp.ServerTimeoutError:
        # sock_read: no byte for read_idle seconds (a silent stream, field case B12).
        res = acc.result if acc is not None else StreamResult()
        kind = "first_byte" if headers_ns is None or res.first_byte_ns is None else "read_idle"
        return RequestOutcome("timeout", http_status, sent, headers_ns, now_ns(), res, error=f"{kind}_timeout", timeout_kind=kind)
    except TimeoutError:
        # asyncio.timeout: the whole-request bound (off by default, field case B12).
        res = acc.result if acc is not None else StreamResult()
        return RequestOutcome("timeout", http_status, sent, headers_ns, now_ns(), res, error="client_total_timeout", timeout_kind="total")
    except aiohttp.ClientConnectorError as exc:
        return RequestOutcome("connect", None, sent, None, now_ns(), error=str(exc)[:ERROR_BYTES] or "connect failed")
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError) as exc:
        res = acc.result if acc is not None else StreamResult()
        status = "cut" if headers_ns is not None else "write"
        return RequestOutcome(status, http_status, sent, headers_ns, now_ns(), res, error=(str(exc) or type(exc).__name__)[:ERROR_BYTES])
    except aiohttp.ClientOSError as exc:
        res = acc.result if acc is not None else StreamResult()
        status = "cut" if headers_ns is not None else "write"
        return RequestOutcome(status, http_status, sent, headers_ns, now_ns(), res, error=(str(exc) or type(exc).__name__)[:ERROR_BYTES])
    except aiohttp.ClientError as exc:
        res = acc.result if acc is not None else StreamResult()
        return RequestOutcome("cut" if headers_ns else "connect", http_status, sent, headers_ns, now_ns(), res, error=(str(exc) or type(exc).__name__)[:ERROR_BYTES])


MAX_JSON_BODY_BYTES = 32 << 20
"""Largest non-streamed (``stream: false``) response body kept for parsing (bytes).
A chat completion that size would hold millions of tokens; a larger body is a
``malformed`` record (``response_too_large``), so client memory stays bounded."""

STALE_WINDOW_NS = 100_000_000
"""A disconnect within 100 ms of sending, before any response byte, is the stale
keep-alive race (the server closed the idle connection as we reused it), not a
server that took the request and died: only then is the body re-sent (B11)."""


async def send_body(
    session: aiohttp.ClientSession,
    url: str,
    raw: bytes,
    *,
    headers: dict[str, str],
    head_chars: int = 256,
    total_timeout_s: float | None = None,
) -> RequestOutcome:
    """POST ``raw`` exactly as given and account the response as it streams.

    A request that fails with a disconnect before any response byte and within
    ``STALE_WINDOW_NS`` of sending is re-sent once on a fresh connection and the
    outcome counts one reconnect (field case B11: pooled keep-alive connection
    closed by the server during an idle gap).

    Args:
        session: The run's session (its timeouts carry connect and read-idle).
        url: Full endpoint URL.
        raw: The body bytes, sent unchanged.
        headers: Request headers (Content-Type, Authorization, ...).
        head_chars: Visible text kept (characters).
        total_timeout_s: Whole-request bound in seconds; None = no bound.

    Returns:
        The outcome; never raises for per-request failures.
    """
    out = await _send_once(session, url, raw, headers=headers, head_chars=head_chars,
                           total_timeout_s=total_timeout_s)
    if (
        out.status in ("write", "cut")
        and out.headers_ns is None
        and out.stream.first_byte_ns is None
        and out.done_ns - out.sent_ns < STALE_WINDOW_NS
    ):
        out = await _send_once(session, url, raw, headers=headers, head_chars=head_chars,
                               total_timeout_s=total_timeout_s)
        out.reconnects = 1
    return out


# --------------------------------------------------------------------------
# The runner's own HTTP/1.1 client (plain http targets).
#
# aiohttp costs about 5-8 µs of Python per chunked frame on a token stream
# (parser callback, StreamReader.feed_data, end_http_chunk_receiving, the
# resume_reading flow control, a coroutine hop per read; profiled in
# docs/performance.md). A token-streaming server sends one frame per token, so
# at C64 that is most of the client's CPU. This client speaks just enough
# HTTP/1.1 for the runner (keep-alive, Content-Length request bodies, chunked /
# Content-Length / close-delimited responses) and feeds the SSE accountant from
# ``data_received`` itself: one ``feed`` per socket read, stamped with the read
# time, and no coroutine hop until the response is complete. Outcomes, failure
# classes and error texts are those of ``send_body``; https targets (and
# ``KVREPLAY_HTTP=aiohttp``) keep using ``send_body``.
# --------------------------------------------------------------------------

_MAX_HEAD_BYTES = 64 << 10
_MAX_ERROR_BODY = 64 << 10
_HEAD, _BODY, _DONE = 0, 1, 2


class _Exchange:
    """One request/response on one connection; filled in from protocol callbacks."""

    __slots__ = ("acc", "body", "chunk_left", "chunk_state", "close_after", "conn", "content_length",
                 "ctype_sse", "done_ns", "error", "exc_status", "framing", "fut", "hbuf", "headers_ns",
                 "http_status", "last_rx_ns", "pend", "reason", "state", "head_chars", "timeout_kind",
                 "body_len")

    def __init__(self, conn: _H1Conn, fut: asyncio.Future, head_chars: int) -> None:
        self.conn = conn
        self.fut = fut
        self.head_chars = head_chars
        self.state = _HEAD
        self.hbuf = b""
        self.headers_ns: int | None = None
        self.http_status: int | None = None
        self.reason = ""
        self.acc = None
        self.body: list[bytes] | None = None
        self.body_len = 0
        self.framing = 0  # 0 close-delimited, 1 content-length, 2 chunked
        self.content_length = 0
        self.chunk_left = 0
        self.chunk_state = 0  # 0 size line, 1 data, 2 CRLF after data, 3 trailers
        self.pend = b""
        self.close_after = False
        self.ctype_sse = False
        self.last_rx_ns = 0
        self.done_ns = 0
        self.error: str | None = None
        self.exc_status: str | None = None  # failure class when the exchange failed
        self.timeout_kind: str | None = None

    # -- protocol side -------------------------------------------------------

    def on_data(self, data: bytes) -> None:
        now = now_ns()
        self.last_rx_ns = now
        if self.state == _HEAD:
            data = self._head(data, now)
            if self.state != _BODY or not data:
                if self.state == _BODY and self.framing == 1 and self.content_length == 0:
                    self._finish(now)
                return
        elif self.state == _DONE:
            self.close_after = True  # bytes after the response: not reusable
            return
        if self.framing == 2:
            try:
                payload, done = self._dechunk(data)
            except StreamError as exc:
                self._fail("malformed", f"{exc.kind}: {exc}"[:ERROR_BYTES], now, exc=exc)
                return
        elif self.framing == 1:
            left = self.content_length
            if len(data) >= left:
                payload, done = data[:left], True
                if len(data) > left:
                    self.close_after = True
            else:
                payload, done = data, False
            self.content_length = left - len(payload)
        else:
            payload, done = data, False
        if payload:
            acc = self.acc
            if acc is not None:
                try:
                    acc.feed(payload, now)
                except StreamError as exc:
                    self._fail("malformed", f"{exc.kind}: {exc}"[:ERROR_BYTES], now, exc=exc)
                    return
            else:
                body = self.body
                body.append(payload)  # type: ignore[union-attr]
                self.body_len += len(payload)
                if self.http_status != 200 and self.body_len > _MAX_ERROR_BODY:
                    self.close_after = True
                    self._finish(now)
                    return
                if self.body_len > MAX_JSON_BODY_BYTES:
                    self.body = []
                    self.close_after = True
                    self._fail("malformed", f"response_too_large: over {MAX_JSON_BODY_BYTES} bytes", now)
                    return
        if done:
            self._finish(now)

    def _head(self, data: bytes, now: int) -> bytes:
        buf = self.hbuf + data if self.hbuf else data
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            self.hbuf = buf
            if len(buf) > _MAX_HEAD_BYTES:
                self._fail("malformed", "response headers over 64 KiB", now)
            return b""
        lines = buf[:end].split(b"\r\n")
        rest = buf[end + 4:]
        self.hbuf = b""
        parts = lines[0].split(b" ", 2)
        try:
            if not parts[0].startswith(b"HTTP/1."):
                raise ValueError(parts[0])
            status = int(parts[1])
        except (IndexError, ValueError):
            self._fail("malformed", f"bad HTTP status line: {lines[0][:80]!r}", now)
            return b""
        if 100 <= status < 200:  # 100 Continue and friends: skip, read the next head
            return self._head(rest, now) if rest else b""
        self.http_status = status
        self.reason = parts[2].decode("latin-1") if len(parts) > 2 else ""
        self.headers_ns = now
        te = b""
        ctype = b""
        clen = None
        conn_hdr = b""
        for ln in lines[1:]:
            c = ln.find(b":")
            if c <= 0:
                continue
            name = ln[:c].strip().lower()
            if name == b"content-type":
                ctype = ln[c + 1:].strip().lower()
            elif name == b"transfer-encoding":
                te = ln[c + 1:].strip().lower()
            elif name == b"content-length":
                try:
                    clen = int(ln[c + 1:].strip())
                except ValueError:
                    self._fail("malformed", "bad Content-Length", now)
                    return b""
            elif name == b"connection":
                conn_hdr = ln[c + 1:].strip().lower()
        if parts[0] == b"HTTP/1.0" and b"keep-alive" not in conn_hdr or b"close" in conn_hdr:
            self.close_after = True
        if b"chunked" in te:
            self.framing = 2
        elif clen is not None:
            self.framing, self.content_length = 1, clen
        else:
            self.framing, self.close_after = 0, True
        if status == 200 and ctype.startswith(b"text/event-stream"):
            self.ctype_sse = True
            self.acc = SSEAccountant(head_chars=self.head_chars)
        else:
            self.body = []
        self.state = _BODY
        return rest

    def _dechunk(self, data: bytes) -> tuple[bytes, bool]:
        """Strip chunked transfer framing (RFC 9112 section 7.1); returns (payload, ended)."""
        buf = self.pend + data if self.pend else data
        self.pend = b""
        n = len(buf)
        i = 0
        out: list[bytes] = []
        left = self.chunk_left
        st = self.chunk_state
        if st == 0:
            # Fast path, exact: split on CRLF; when every (size, data) pair has
            # len(data) == size, a frame-by-frame parse reads the same frames
            # (by induction on the frames), so take them all at C speed.
            parts = buf.split(b"\r\n")
            m = (len(parts) - 1) // 2
            if m:
                sizes = parts[0:2 * m:2]
                try:
                    ns = list(map(int, sizes, repeat(16)))
                except ValueError:
                    ns = None
                if ns is not None:
                    if 0 in ns:
                        m = ns.index(0)
                        ns, sizes = ns[:m], sizes[:m]
                    datas = parts[1:2 * m:2]
                    if m and ns == list(map(len, datas)):
                        out = datas
                        i = sum(map(len, sizes)) + sum(ns) + 4 * m
        while i < n:
            if st == 1:
                take = left if n - i >= left else n - i
                out.append(buf[i:i + take])
                i += take
                left -= take
                if left:
                    break
                st = 2
            elif st == 2:
                if n - i < 2:
                    self.pend = buf[i:]
                    break
                i += 2
                st = 0
            elif st == 0:
                j = buf.find(b"\r\n", i)
                if j < 0:
                    self.pend = buf[i:]
                    break
                size_s = buf[i:j]
                sc = size_s.find(b";")
                try:
                    size = int(size_s if sc < 0 else size_s[:sc], 16)
                except ValueError:
                    raise StreamError("bad chunk size in chunked body", kind="malformed",
                                      partial=buf[i:j][:ERROR_BYTES]) from None
                i = j + 2
                if size == 0:
                    st = 3
                else:
                    left, st = size, 1
            else:  # trailers: lines until an empty one
                j = buf.find(b"\r\n", i)
                if j < 0:
                    self.pend = buf[i:]
                    break
                if j == i:
                    if j + 2 < n:
                        self.close_after = True
                    self.chunk_left, self.chunk_state = 0, 0
                    return b"".join(out), True
                i = j + 2
        self.chunk_left, self.chunk_state = left, st
        return (out[0] if len(out) == 1 else b"".join(out)), False

    def _finish(self, now: int) -> None:
        if self.state == _DONE:
            return
        self.state = _DONE
        self.done_ns = now
        self.conn.exchange_done(self)
        if not self.fut.done():
            self.fut.set_result(None)

    def _fail(self, status: str, error: str, now: int, *, kind: str | None = None,
              exc: BaseException | None = None) -> None:
        if self.state == _DONE:
            return
        self.state = _DONE
        self.exc_status, self.error, self.timeout_kind = status, error, kind
        self.done_ns = now
        self.close_after = True
        self.conn.exchange_done(self)
        if not self.fut.done():
            self.fut.set_result(None)

    def on_lost(self, exc: BaseException | None) -> None:
        if self.state == _DONE:
            return
        now = now_ns()
        if self.state == _BODY and self.framing == 0:
            self._finish(now)  # close-delimited body: EOF is its end
            return
        if self.headers_ns is None:
            msg = (str(exc) or type(exc).__name__) if exc is not None else "Server disconnected"
            self._fail("write", msg[:ERROR_BYTES], now)
        else:
            # aiohttp's wording (ClientPayloadError), so both send paths write the same records
            why = (f"{exc}" if exc is not None else
                   "<TransferEncodingError: 400, message='Not enough data to satisfy transfer length header.'>"
                   if self.framing == 2 else
                   "<ContentLengthError: 400, message='Not enough data to satisfy content length header.'>")
            self._fail("cut", f"Response payload is not completed: {why}"[:ERROR_BYTES], now)

    def check_idle(self, idle_ns: int, loop: asyncio.AbstractEventLoop, sent_ns: int) -> None:
        """Timer callback: fail with a read timeout after ``idle_ns`` without a byte (aiohttp sock_read)."""
        if self.state == _DONE:
            return
        last = self.last_rx_ns or sent_ns
        now = now_ns()
        if now - last >= idle_ns:
            res = self.acc.result if self.acc is not None else None
            kind = "first_byte" if self.headers_ns is None or res is None or res.first_byte_ns is None \
                else "read_idle"
            self._fail("timeout", f"{kind}_timeout", now, kind=kind)
        else:
            loop.call_later((last + idle_ns - now) / 1e9, self.check_idle, idle_ns, loop, sent_ns)


class _H1Conn(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection; one exchange at a time."""

    def __init__(self, pool: H1Client) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.x: _Exchange | None = None
        self.idle_since_ns = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:  # noqa: D102
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            import socket

            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:  # pragma: no cover
                pass

    def data_received(self, data: bytes) -> None:  # noqa: D102
        x = self.x
        if x is not None:
            x.on_data(data)
        elif self.transport is not None:
            self.transport.close()  # unsolicited bytes: not reusable

    def eof_received(self) -> bool:  # noqa: D102
        return False

    def connection_lost(self, exc: Exception | None) -> None:  # noqa: D102
        self.closed = True
        self.pool._all.discard(self)
        x = self.x
        if x is not None:
            x.on_lost(exc)

    def exchange_done(self, x: _Exchange) -> None:
        self.x = None
        if x.close_after or self.closed:
            self.close()
        else:
            self.idle_since_ns = x.done_ns
            self.pool.idle.append(self)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class H1Client:
    """Keep-alive HTTP/1.1 client for one ``http://host:port`` target (the runner's send path).

    Args:
        base_url: ``http://host[:port]`` (no path beyond ``/``).
        headers: Request headers sent with every body (Content-Type, Authorization, ...).
        connect_timeout_s: TCP connect bound (s).
        read_idle_timeout_s: Longest silence between reads (s); None = none.
        keepalive_timeout_s: A pooled connection idle longer than this is closed
            instead of reused (s) (field case B11).

    ``send`` has the contract of ``send_body``: per-request failures come back
    as a ``RequestOutcome``; cancellation closes the connection and propagates.
    """

    def __init__(self, base_url: str, *, headers: dict[str, str], connect_timeout_s: float = 30.0,
                 read_idle_timeout_s: float | None = 120.0, keepalive_timeout_s: float = 2.0) -> None:
        from urllib.parse import urlsplit

        u = urlsplit(base_url)
        if u.scheme != "http" or not u.hostname:
            raise ValueError(f"H1Client needs an http:// URL, not {base_url!r}")
        self.host = u.hostname
        self.port = u.port or 80
        self.prefix = u.path.rstrip("/")
        self.connect_timeout_s = connect_timeout_s
        self.idle_ns = None if read_idle_timeout_s is None else int(read_idle_timeout_s * 1e9)
        self.keepalive_ns = int(keepalive_timeout_s * 1e9)
        hostport = self.host if u.port is None else f"{self.host}:{self.port}"
        if ":" in self.host and not self.host.startswith("["):
            hostport = f"[{self.host}]" + ("" if u.port is None else f":{self.port}")
        hdrs = {"Host": hostport, "User-Agent": "kvreplay", "Accept": "*/*", **headers}
        self._head_tail = b"".join(f"{k}: {v}\r\n".encode("latin-1") for k, v in hdrs.items()
                                   if k.lower() not in ("content-length", "transfer-encoding"))
        self._heads: dict[str, bytes] = {}
        self.idle: list[_H1Conn] = []
        self._all: set[_H1Conn] = set()

    def _head(self, path: str) -> bytes:
        h = self._heads.get(path)
        if h is None:
            h = self._heads[path] = (f"POST {self.prefix}{path} HTTP/1.1\r\n".encode("latin-1")
                                     + self._head_tail + b"Content-Length: ")
        return h

    async def _acquire(self, fresh: bool) -> _H1Conn:
        now = now_ns()
        idle = self.idle
        while idle and not fresh:
            c = idle.pop()
            if c.closed:
                continue
            if now - c.idle_since_ns > self.keepalive_ns:
                c.close()
                continue
            return c
        loop = asyncio.get_running_loop()
        _, proto = await asyncio.wait_for(
            loop.create_connection(lambda: _H1Conn(self), self.host, self.port), self.connect_timeout_s)
        self._all.add(proto)
        return proto  # type: ignore[return-value]

    async def send(self, path: str, raw: bytes, *, head_chars: int = 256,
                   total_timeout_s: float | None = None, sent_ns: int | None = None) -> RequestOutcome:
        """POST ``raw`` to ``path`` and account the response; the contract of ``send_body``.

        A request that fails with a disconnect before any response byte within
        ``STALE_WINDOW_NS`` of sending is re-sent once on a fresh connection
        (field case B11).

        Args:
            path: Route, e.g. ``/v1/chat/completions`` (after the base URL's path).
            raw: The body bytes, sent unchanged.
            head_chars: Visible text kept (characters).
            total_timeout_s: Whole-request bound (s); None = none.
            sent_ns: The send time to record (``now_ns()``, taken by the caller
                when it claimed the position, e.g. under runner.multiproc's
                lock); None = now.
        """
        out = await self._send_once(path, raw, head_chars, total_timeout_s, False, sent_ns)
        if (out.status in ("write", "cut") and out.headers_ns is None and out.stream.first_byte_ns is None
                and out.done_ns - out.sent_ns < STALE_WINDOW_NS):
            out = await self._send_once(path, raw, head_chars, total_timeout_s, True)
            out.reconnects = 1
        return out

    async def _send_once(self, path: str, raw: bytes, head_chars: int, total_timeout_s: float | None,
                         fresh: bool, sent_ns: int | None = None) -> RequestOutcome:
        sent = now_ns() if sent_ns is None else sent_ns
        try:
            conn = await self._acquire(fresh)
        except TimeoutError:
            return RequestOutcome("timeout", None, sent, None, now_ns(),
                                  error=f"connect_timeout: Connection timeout to host "
                                        f"http://{self.host}:{self.port}"[:ERROR_BYTES],
                                  timeout_kind="connect")
        except OSError as exc:
            return RequestOutcome("connect", None, sent, None, now_ns(),
                                  error=(f"Cannot connect to host {self.host}:{self.port} ssl:default "
                                         f"[{exc.strerror or exc}]")[:ERROR_BYTES])
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        x = _Exchange(conn, fut, head_chars)
        conn.x = x
        if conn.closed:  # lost between connect and write
            x.on_lost(None)
        else:
            conn.transport.write(self._head(path) + b"%d\r\n\r\n" % len(raw) + raw)  # type: ignore[union-attr]
        timer = None
        if self.idle_ns is not None and x.state != _DONE:
            timer = loop.call_later(self.idle_ns / 1e9, x.check_idle, self.idle_ns, loop, sent)
        try:
            if total_timeout_s is None:
                await fut
            else:
                async with asyncio.timeout(total_timeout_s):
                    await fut
        except TimeoutError:
            res = x.acc.result if x.acc is not None else StreamResult()
            x._fail("timeout", "client_total_timeout", now_ns(), kind="total")
            return RequestOutcome("timeout", x.http_status, sent, x.headers_ns, x.done_ns, res,
                                  error="client_total_timeout", timeout_kind="total")
        except asyncio.CancelledError:
            x.close_after = True
            if x.state != _DONE:
                x.state = _DONE
                conn.x = None
            conn.close()
            raise
        finally:
            if timer is not None:
                timer.cancel()
        return self._outcome(x, sent, head_chars)

    @staticmethod
    def _outcome(x: _Exchange, sent: int, head_chars: int) -> RequestOutcome:
        st = x.http_status
        acc = x.acc
        if x.exc_status is not None:
            res = acc.result if acc is not None else StreamResult()
            return RequestOutcome(x.exc_status, st, sent, x.headers_ns, x.done_ns, res, error=x.error,
                                  timeout_kind=x.timeout_kind)
        if st != 200:
            body = b"".join(x.body or ())[:ERROR_BYTES]
            return RequestOutcome("http", st, sent, x.headers_ns, x.done_ns,
                                  error=_json_error(body) or x.reason)
        if acc is not None:
            try:
                res = acc.close()
            except StreamError as exc:
                return RequestOutcome("malformed", st, sent, x.headers_ns, x.done_ns, acc.result,
                                      error=f"{exc.kind}: {exc}"[:ERROR_BYTES])
            return _stream_outcome(res, sent, x.headers_ns, x.done_ns)
        return _json_outcome(b"".join(x.body or ()), sent, x.headers_ns, x.done_ns, head_chars)

    def close(self) -> None:
        """Close every connection (idle or not)."""
        for c in list(self._all):
            c.close()
        self._all.clear()
        self.idle.clear()
