"""One HTTP/1.1 exchange of the runner's client (``runner.h1``), filled in from llhttp's callbacks.

The limits below are the client's (``runner.h1``'s docstring lists them and what happens
past each); ``_Exchange`` is one request/response on one connection: the llhttp
(``httptools.HttpResponseParser``) callbacks, the bounds they enforce, the SSE accountant
fed once per socket read, and the idle watch's check. Split from ``runner.h1`` (its
connection and pool stay there) to keep each file under the house limit.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

import httptools

from kvreplay.accounting import SSEAccountant
from kvreplay.accounting.events import ERROR_BYTES, Accountant
from kvreplay.clock import now_ns
from kvreplay.errors import StreamError
from kvreplay.runner.http import _CLIENT_ERRNOS as CLIENT_ERRNOS
from kvreplay.runner.http import MAX_JSON_BODY_BYTES


class _Conn(Protocol):
    """What an exchange asks of its connection (``runner.h1._H1Conn``)."""

    transport: asyncio.Transport | None
    """The connection's transport (None before it is made); the capture relay pauses its reading."""

    def exchange_done(self, x: _Exchange) -> None:
        """The exchange ended: the connection may be reused or closed."""


__all__ = ["MAX_ERROR_BODY", "MAX_FRAMING_BYTES", "MAX_HEAD_BYTES", "MAX_INTERIM"]

MAX_HEAD_BYTES = 64 << 10
"""Largest response head kept parsing (bytes, every 1xx head included)."""
MAX_FRAMING_BYTES = 64 << 10
"""Most chunked-framing bytes (size lines, extensions, trailers) read without a body byte."""
MAX_INTERIM = 16
"""Most 1xx interim responses before the final response."""
MAX_ERROR_BODY = 64 << 10
"""Body bytes kept of a non-200 response; the connection is dropped after that."""

_HEAD, _BODY, _DONE = 0, 1, 2
_PARSE_ERRORS = (httptools.HttpParserUpgrade, httptools.HttpParserError)


class _LimitError(Exception):
    """Raised from a parser callback when a limit is crossed (llhttp stops with a callback error)."""



class _Exchange:
    """One request/response on one connection; filled in from llhttp's callbacks."""

    __slots__ = ("acc", "body", "body_len", "chunked", "close_after", "complete", "conn", "ctype", "done_ns", "error",
                 "exc_status", "framed", "framing_run", "fut", "head_bytes", "head_chars", "headers_ns",
                 "http_status", "idle_first", "idle_from", "interim", "last_rx_ns", "location", "on_body", "parser",
                 "picked", "pieces", "reason", "state", "timeout_kind", "want")

    def __init__(self, conn: _Conn | None, fut: asyncio.Future | None, head_chars: int,
                 want: bytes = b"\0") -> None:
        self.conn = conn
        self.want = want  # a response header to keep (lower case; NUL never matches)
        self.picked = b""
        self.fut = fut
        self.head_chars = head_chars
        self.pieces: list[bytes] = []
        # llhttp's body callback is the list's own append (a C call, no Python frame per
        # chunk); httptools reads the callbacks once, here, so it is set before the parser.
        self.on_body = self.pieces.append
        self.parser = httptools.HttpResponseParser(self)
        self.state = _HEAD
        self.head_bytes = 0
        self.interim = 0
        self.headers_ns: int | None = None
        self.http_status: int | None = None
        self.reason = ""
        self.ctype = b""
        self.location = b""
        self.chunked = False
        self.framed = False  # Content-Length or Transfer-Encoding seen (else EOF ends the body)
        self.acc: Accountant | None = None
        self.body: list[bytes] | None = None
        self.body_len = 0
        self.framing_run = 0
        self.complete = False
        self.close_after = False
        self.last_rx_ns = 0
        self.idle_first = self.idle_from = 0  # H1Client's idle watch: first check (ns), silence counted from
        self.done_ns = 0
        self.error: str | None = None
        self.exc_status: str | None = None  # failure class when the exchange failed
        self.timeout_kind: str | None = None

    # -- llhttp callbacks ----------------------------------------------------

    def on_message_begin(self) -> None:
        if self.complete:
            self.close_after = True  # bytes after the response: not reusable

    def on_status(self, status: bytes) -> None:
        self.reason = status.decode("latin-1")

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.state != _HEAD:
            return  # trailers: bounded by MAX_FRAMING_BYTES, not kept
        n = name.lower()
        if n == b"content-type":
            self.ctype = value.strip().lower()
        elif n == b"location":
            self.location = value[:ERROR_BYTES]
        elif n == b"content-length":
            self.framed = True
        elif n == b"transfer-encoding":
            self.framed = True
            self.chunked = b"chunked" in value.lower()
        elif n == self.want:
            self.picked = value[:ERROR_BYTES]

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200:
            self.interim += 1
            if self.interim > MAX_INTERIM:
                raise _LimitError(f"over {MAX_INTERIM} interim (1xx) responses")
            self.ctype, self.location, self.framed, self.chunked = b"", b"", False, False
            return
        self.http_status = status
        self.headers_ns = self.last_rx_ns
        self.state = _BODY
        if status == 200 and self.ctype.startswith(b"text/event-stream"):
            self.acc = SSEAccountant(head_chars=self.head_chars)
        else:
            self.body = []

    def on_message_complete(self) -> None:
        if self.state == _BODY:
            self.complete = True
            if not self.parser.should_keep_alive():
                self.close_after = True

    # -- protocol side -------------------------------------------------------

    def on_data(self, data: bytes) -> None:
        """Parse one socket read; feed its body bytes to the accountant in one call.

        Chunked framing is bounded by the bytes read since the last read that
        carried body bytes (``MAX_FRAMING_BYTES``): every chunk but the last has
        at least one body byte, so a run without any is size lines, extensions
        or trailers only.
        """
        now = now_ns()
        self.last_rx_ns = now
        state = self.state
        if state == _BODY:
            try:
                self.parser.feed_data(data)
            except _PARSE_ERRORS as exc:
                if self._parse_error(exc, now):
                    return
            pieces = self.pieces
            acc = self.acc
            if pieces and acc is not None:
                # the steady state of a token stream: one accountant call per read
                payload = pieces[0] if len(pieces) == 1 else b"".join(pieces)
                pieces.clear()
                try:
                    acc.feed(payload, now)
                except StreamError as exc:
                    self._fail("malformed", f"{exc.kind}: {exc}"[:ERROR_BYTES], now)
                    return
                got = 1
            else:
                got = self._take(now)
            if self.state == _DONE:
                return
            if self.complete:
                self._finish(now)
            elif got:
                self.framing_run = 0
            else:
                self.framing_run += len(data)
                if self.framing_run > MAX_FRAMING_BYTES:
                    self._fail("malformed", f"malformed_http: chunk framing over {MAX_FRAMING_BYTES} bytes "
                                            "between two chunks", now)
            return
        if state == _DONE:
            self.close_after = True
            return
        self.head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except _PARSE_ERRORS as exc:
            if self._parse_error(exc, now):
                return
        if self.state == _HEAD:
            if self.head_bytes > MAX_HEAD_BYTES:
                self._fail("malformed", f"malformed_http: response head over {MAX_HEAD_BYTES} bytes", now)
            elif self.interim > MAX_INTERIM:
                self._fail("malformed", f"malformed_http: over {MAX_INTERIM} interim (1xx) responses", now)
            return
        got = self._take(now)
        if self.state == _DONE:
            return
        if self.complete:
            self._finish(now)
        elif got:
            self.framing_run = 0

    def _parse_error(self, exc: Exception, now: int) -> bool:
        """Handle a parse error from llhttp: fail the exchange (True), or after a complete response drop the link."""
        if self.complete:
            self.close_after = True  # junk after a complete response: drop the connection
            return False
        self._take(now)
        if isinstance(exc, httptools.HttpParserUpgrade):
            self._fail("malformed", "malformed_http: unexpected protocol upgrade", now)
        else:
            why = exc.__context__ if isinstance(exc.__context__, _LimitError) else exc
            self._fail("malformed", f"malformed_http: {why}"[:ERROR_BYTES], now)
        return True

    def _take(self, now: int) -> int:
        """Hand the body pieces of this read on (accountant or body list); returns their byte count."""
        pieces = self.pieces
        if not pieces:
            return 0
        payload = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        pieces.clear()
        acc = self.acc
        if acc is not None:
            try:
                acc.feed(payload, now)
            except StreamError as exc:
                self._fail("malformed", f"{exc.kind}: {exc}"[:ERROR_BYTES], now)
            return len(payload)
        body = self.body
        if body is None:
            return len(payload)
        body.append(payload)
        self.body_len += len(payload)
        if self.http_status != 200 and self.body_len > MAX_ERROR_BODY:
            self.close_after = True
            self._finish(now)
        elif self.body_len > MAX_JSON_BODY_BYTES:
            self.body = []
            self._fail("malformed", f"response_too_large: over {MAX_JSON_BODY_BYTES} bytes", now)
        return len(payload)

    def _finish(self, now: int) -> None:
        if self.state == _DONE:
            return
        self.state = _DONE
        self.done_ns = now
        # The parser holds this exchange's bound methods (a reference cycle): drop it
        # here so the exchange is freed by reference counting, not by the cyclic GC.
        del self.parser
        if self.conn is not None:
            self.conn.exchange_done(self)
        if self.fut is not None and not self.fut.done():
            self.fut.set_result(None)

    def _fail(self, status: str, error: str, now: int, *, kind: str | None = None) -> None:
        if self.state == _DONE:
            return
        self.exc_status, self.error, self.timeout_kind = status, error, kind
        self.close_after = True
        self._finish(now)

    def on_lost(self, exc: BaseException | None) -> None:
        if self.state == _DONE:
            return
        now = now_ns()
        if isinstance(exc, OSError) and exc.errno in CLIENT_ERRNOS:
            # ENOBUFS/ENOMEM on the socket: the client's resources, not the server's fault
            self._fail("client_error", f"client resources exhausted: {exc}"[:ERROR_BYTES], now)
            return
        if self.state == _BODY and not self.framed:
            self.close_after = True
            self._finish(now)  # close-delimited body: EOF is its end
            return
        if self.headers_ns is None:
            msg = (str(exc) or type(exc).__name__) if exc is not None else "Server disconnected"
            self._fail("write", msg[:ERROR_BYTES], now)
        else:
            # aiohttp's wording (ClientPayloadError), so both send paths write the same records
            why = (f"{exc}" if exc is not None else
                   "<TransferEncodingError: 400, message='Not enough data to satisfy transfer length header.'>"
                   if self.chunked else
                   "<ContentLengthError: 400, message='Not enough data to satisfy content length header.'>")
            self._fail("cut", f"Response payload is not completed: {why}"[:ERROR_BYTES], now)

    def idle_deadline(self, idle_ns: int, now: int) -> int | None:
        """The idle watch's check at ``now``: fail with a read timeout after ``idle_ns`` without a byte.

        aiohttp's sock_read. Checked first at ``idle_first`` (``idle_ns`` after the send
        was set up), then whenever ``idle_ns`` may have passed since the last byte (or
        since ``idle_from``, the send time, before any).

        Returns:
            When to check again (ns), or None: done, or failed now.
        """
        if self.state == _DONE:
            return None
        if now < self.idle_first:
            return self.idle_first
        last = self.last_rx_ns or self.idle_from
        if now - last >= idle_ns:
            res = self.acc.result if self.acc is not None else None
            kind = "first_byte" if self.headers_ns is None or res is None or res.first_byte_ns is None \
                else "read_idle"
            self._fail("timeout", f"{kind}_timeout", now, kind=kind)
            return None
        return last + idle_ns
