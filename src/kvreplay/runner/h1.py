"""The runner's HTTP/1.1 client for http and https targets, on the llhttp parser (``httptools``).

aiohttp costs about 5-8 µs of Python per chunked frame on a token stream
(docs/performance.md), so the runner has its own keep-alive client. The
framing (status line, headers, Content-Length, chunked transfer coding, 1xx
interim responses, HTTP/1.0 keep-alive rules) is parsed by llhttp, the parser
of Node.js, through ``httptools.HttpResponseParser``; its callbacks collect the
body pieces of one socket read and ``data_received`` feeds them to the SSE
accountant in one call, stamped with the read time. TLS is asyncio's SSL
transport, so http and https share this one path, one set of failure classes
(those of ``kvreplay.runner.http``) and one set of limits:

    MAX_HEAD_BYTES        response head (status line + headers, 1xx heads included)  64 KiB
    MAX_FRAMING_BYTES     chunk-size lines, chunk extensions, trailers read since     64 KiB
                          the last read that carried body bytes
    MAX_INTERIM           1xx responses before the final one                          16
    MAX_ERROR_BODY        body kept of a non-200 response                             64 KiB
    MAX_JSON_BODY_BYTES   non-streamed 200 body                                       32 MiB

Over a limit, or on anything llhttp refuses (a sign or a non-hex digit in a
chunk size, a size over 2^64, duplicate or negative Content-Length,
Transfer-Encoding with Content-Length, a NUL in a header, a protocol upgrade),
the request is a ``malformed`` record and the connection is closed; nothing
loops or buffers without bound. No redirect is followed: a 3xx is an ``http``
record whose ``error`` names the ``Location``. A request is re-sent (once) only
when a *pooled* keep-alive connection is found closed before any response byte
(field case B11); a fresh connection's failure is recorded as it is.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import socket
import ssl
import warnings
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from kvreplay.accounting import IMPLEMENTATION, StreamResult
from kvreplay.accounting.events import ERROR_BYTES
from kvreplay.clock import now_ns
from kvreplay.errors import StreamError
from kvreplay.runner import _h1exchange
from kvreplay.runner._h1exchange import (  # noqa: F401 (the exchange's names, re-exported: h1relay and tests)
    _BODY,
    _DONE,
    _HEAD,
    _PARSE_ERRORS,
    MAX_ERROR_BODY,
    MAX_FRAMING_BYTES,
    MAX_HEAD_BYTES,
    MAX_INTERIM,
    _LimitError,
)
from kvreplay.runner.http import (
    _CLIENT_ERRNOS,
    STALE_WINDOW_NS,
    RequestOutcome,
    _json_outcome,
    _malformed_outcome,
    _status_outcome,
    _stream_outcome,
)

__all__ = ["EXCHANGE_IMPLEMENTATION", "MAX_FRAMING_BYTES", "MAX_HEAD_BYTES", "MAX_INTERIM", "H1Client",
           "client_ssl_context"]


def _exchange_class() -> tuple[type[_h1exchange._Exchange], str]:
    """The exchange class the client uses, and ``"native"`` or ``"pure"``.

    The compiled twin (``_h1exchange_c``: ``_h1exchange.py`` itself compiled by Cython with the
    typed fields of ``ext/_h1exchange_c.pxd``, issue 43 item 2) beside the native accountant
    (``accounting.IMPLEMENTATION``); the module itself when the accountant is pure
    (``KVREPLAY_NO_EXTENSIONS=1``, no compiler), when the twin was not built, or when it was
    built from another version of the source (its ``SOURCE_SHA256`` is not the ``.py``'s: one
    ``RuntimeWarning``, rebuild with ``make install``).
    """
    pure = _h1exchange._Exchange
    if IMPLEMENTATION != "native":
        return pure, "pure"
    try:
        from kvreplay.runner import _h1exchange_c  # type: ignore[attr-defined]
    except ImportError:
        return pure, "pure"
    try:
        with open(_h1exchange.__file__, "rb") as f:
            current = hashlib.sha256(f.read()).hexdigest()
    except OSError:  # no source beside the build (an installed wheel without it): the build is the code
        current = _h1exchange_c.SOURCE_SHA256
    if current != _h1exchange_c.SOURCE_SHA256:
        warnings.warn("kvreplay: the compiled HTTP exchange was built from another version of "
                      "runner/_h1exchange.py; using the source (rebuild: make install)", RuntimeWarning, stacklevel=2)
        return pure, "pure"
    return _h1exchange_c._Exchange, "native"


EXCHANGE_IMPLEMENTATION: str
"""``"native"`` (the compiled twin) or ``"pure"``: which exchange the client uses (``_exchange_class``)."""
if TYPE_CHECKING:
    from kvreplay.runner._h1exchange import _Exchange
else:
    _Exchange, EXCHANGE_IMPLEMENTATION = _exchange_class()

CLIENT_ERRNOS = _CLIENT_ERRNOS
"""OS errors that are the client's own resource exhaustion, not the server's fault
(recorded as ``client_error``, never ``connect``)."""

def client_ssl_context(ca_file: str | None = None) -> ssl.SSLContext:
    """The TLS context of both send paths: system trust store, plus ``ca_file`` (PEM) when given.

    Raises:
        OSError / ssl.SSLError: ``ca_file`` cannot be read or holds no certificate.
    """
    ctx = ssl.create_default_context()
    if ca_file:
        ctx.load_verify_locations(cafile=ca_file)
    return ctx


class _H1Conn(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection (TCP or TLS); one exchange at a time."""

    def __init__(self, pool: H1Client) -> None:
        self.pool = pool
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.x: _Exchange | None = None
        self.idle_since_ns = 0
        self.uses = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:  # noqa: D102
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):  # pragma: no cover
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:  # noqa: D102
        x = self.x
        if x is not None:
            x.on_data(data)
            return
        if self.transport is not None:
            self.closed = True
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
        """Called once per exchange: back to the idle pool, or closed."""
        self.x = None
        if x.close_after or self.closed:
            self.close()
        else:
            self.idle_since_ns = x.done_ns
            self.pool.idle.append(self)

    def close(self) -> None:
        """Close the transport (idempotent)."""
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class H1Client:
    """Keep-alive HTTP/1.1 client for one ``http(s)://host[:port][/prefix]`` target (the runner's send path).

    Args:
        base_url: ``http://`` or ``https://`` URL; its path is a prefix of every route.
            Userinfo (``user:pass@``) is refused here (the CLI turns it into a header).
        headers: Request headers sent with every body (Content-Type, Authorization, ...);
            a CR, LF or NUL in a name or value raises ValueError (no header injection).
        connect_timeout_s: TCP connect (+ TLS handshake) bound (s).
        read_idle_timeout_s: Longest silence between reads (s); None = none.
        keepalive_timeout_s: A pooled connection idle longer than this is closed
            instead of reused (s) (field case B11).
        ssl_context: TLS context for https (default: ``client_ssl_context()``).
        replica_header: A response header whose value each outcome keeps as
            ``RequestOutcome.replica`` (a fleet target); None = none.

    ``send`` has the contract of ``kvreplay.runner.http.send_body``: per-request
    failures come back as a ``RequestOutcome``; cancellation closes the
    connection and propagates.

    Raises:
        ValueError: not an http(s) URL, or a control character in a header.
    """

    def __init__(self, base_url: str, *, headers: dict[str, str], connect_timeout_s: float = 30.0,
                 read_idle_timeout_s: float | None = 120.0, keepalive_timeout_s: float = 2.0,
                 ssl_context: ssl.SSLContext | None = None, replica_header: str | None = None) -> None:
        u = urlsplit(base_url)
        self.want = replica_header.lower().encode("latin-1") if replica_header else b"\0"
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError("H1Client needs an http:// or https:// URL with a host")
        if u.username is not None or u.password is not None:
            raise ValueError("H1Client: credentials in the URL are not sent; give an API key")
        self.scheme = u.scheme
        self.host = u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.prefix = u.path.rstrip("/")
        self.ssl = (ssl_context or client_ssl_context()) if u.scheme == "https" else None
        self.connect_timeout_s = connect_timeout_s
        self.idle_ns = None if read_idle_timeout_s is None else int(read_idle_timeout_s * 1e9)
        self.keepalive_ns = int(keepalive_timeout_s * 1e9)
        hostport = self.host if u.port is None else f"{self.host}:{self.port}"
        if ":" in self.host and not self.host.startswith("["):
            hostport = f"[{self.host}]" + ("" if u.port is None else f":{self.port}")
        self.hostport = hostport  # the Host header's value
        hdrs = {"Host": hostport, "User-Agent": "kvreplay", "Accept": "*/*", **headers}
        for k, v in hdrs.items():
            if any(c in k or c in v for c in "\r\n\0") or ":" in k:
                raise ValueError(f"control character in request header {k!r}")
        self._head_tail = b"".join(f"{k}: {v}\r\n".encode("latin-1") for k, v in hdrs.items()
                                   if k.lower() not in ("content-length", "transfer-encoding"))
        self._heads: dict[str, bytes] = {}
        # The read-idle watch: the exchanges in flight and one timer at the earliest check any
        # of them needs (``_sweep``), not a timer per request (a uvloop timer armed and
        # cancelled costs ~2 us; issue 43 item 2).
        self._watched: set[_Exchange] = set()
        self._watch_timer: asyncio.TimerHandle | None = None
        self.idle: list[_H1Conn] = []
        self._all: set[_H1Conn] = set()

    def _head(self, path: str) -> bytes:
        h = self._heads.get(path)
        if h is None:
            if any(c in path for c in "\r\n\0 "):
                raise ValueError(f"bad request path {path!r}")
            h = self._heads[path] = (f"POST {self.prefix}{path} HTTP/1.1\r\n".encode("latin-1")
                                     + self._head_tail + b"Content-Length: ")
        return h

    def _pooled(self) -> _H1Conn | None:
        """The newest idle keep-alive connection still open and fresh (stale ones closed), or None."""
        now = now_ns()
        idle = self.idle
        while idle:
            c = idle.pop()
            if c.closed:
                continue
            if now - c.idle_since_ns > self.keepalive_ns:
                c.close()
                continue
            return c
        return None

    async def _acquire(self, fresh: bool) -> _H1Conn:
        c = None if fresh else self._pooled()
        if c is not None:
            return c
        loop = asyncio.get_running_loop()
        if self.ssl is None:
            connect = loop.create_connection(lambda: _H1Conn(self), self.host, self.port)
        else:
            connect = loop.create_connection(lambda: _H1Conn(self), self.host, self.port, ssl=self.ssl,
                                             server_hostname=self.host)
        _, proto = await asyncio.wait_for(connect, self.connect_timeout_s)
        self._all.add(proto)
        return proto

    async def send(self, path: str, raw: bytes, *, head_chars: int = 256,
                   total_timeout_s: float | None = None, sent_ns: int | None = None) -> RequestOutcome:
        """POST ``raw`` to ``path`` and account the response; the contract of ``send_body``.

        A request whose *pooled* keep-alive connection turns out closed before any
        response byte (within ``STALE_WINDOW_NS`` of sending) is re-sent once on a
        fresh connection (field case B11); a fresh connection is never retried.

        Args:
            path: Route, e.g. ``/v1/chat/completions`` (after the base URL's path).
            raw: The body bytes, sent unchanged.
            head_chars: Visible text kept (characters).
            total_timeout_s: Whole-request bound (s); None = none.
            sent_ns: The send time to record (``now_ns()``, taken by the caller
                when it claimed the position, e.g. under runner.multiproc's
                lock); None = now.

        Raises:
            asyncio.CancelledError: cancelled; the exception carries ``outcome``
                (status ``aborted``, the real send time and the partial stream).
        """
        out, pooled = await self._send_once(path, raw, head_chars, total_timeout_s, False, sent_ns)
        if (pooled and out.status in ("write", "cut") and out.headers_ns is None
                and out.stream.first_byte_ns is None and out.done_ns - out.sent_ns < STALE_WINDOW_NS):
            out, _ = await self._send_once(path, raw, head_chars, total_timeout_s, True)
            out.reconnects = 1
        return out

    async def _send_once(self, path: str, raw: bytes, head_chars: int, total_timeout_s: float | None,
                         fresh: bool, sent_ns: int | None = None) -> tuple[RequestOutcome, bool]:
        sent = now_ns() if sent_ns is None else sent_ns
        conn = None if fresh else self._pooled()  # the common case, without a coroutine
        try:
            if conn is None:
                conn = await self._acquire(True)
        except TimeoutError:
            return RequestOutcome("timeout", None, sent, None, now_ns(),
                                  error=f"connect_timeout: Connection timeout to host "
                                        f"{self.scheme}://{self.host}:{self.port}"[:ERROR_BYTES],
                                  timeout_kind="connect"), False
        except OSError as exc:
            if exc.errno in CLIENT_ERRNOS:
                return RequestOutcome("client_error", None, sent, None, now_ns(),
                                      error=f"client resources exhausted: {exc}"[:ERROR_BYTES]), False
            ssl_txt = "default" if self.ssl is None else "verified"
            return RequestOutcome("connect", None, sent, None, now_ns(),
                                  error=(f"Cannot connect to host {self.host}:{self.port} ssl:{ssl_txt} "
                                         f"[{exc.strerror or exc}]")[:ERROR_BYTES]), False
        pooled = conn.uses > 0
        conn.uses += 1
        if not conn.closed:
            # The request leaves first: no response byte can be handled before the next
            # await, so the exchange is set up while the server works (TTFT floor).
            conn.transport.write(self._head(path) + b"%d\r\n\r\n" % len(raw) + raw)  # type: ignore[union-attr]
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        x = _Exchange(conn, fut, head_chars, self.want)
        conn.x = x
        if conn.closed:  # lost between connect and write
            x.on_lost(None)
        watched = self.idle_ns is not None and x.state != _DONE
        if watched:
            x.idle_first, x.idle_from = now_ns() + self.idle_ns, sent  # type: ignore[operator]
            self._watched.add(x)
            if self._watch_timer is None:  # else armed for an earlier check than this one's
                self._watch_timer = loop.call_later(self.idle_ns / 1e9, self._sweep, loop)  # type: ignore[operator]
        try:
            if total_timeout_s is None:
                await fut
            else:
                async with asyncio.timeout(total_timeout_s):
                    await fut
        except TimeoutError:
            x._take(now_ns())
            res = x.acc.result if x.acc is not None else StreamResult()
            x._fail("timeout", "client_total_timeout", now_ns(), kind="total")
            return RequestOutcome("timeout", x.http_status, sent, x.headers_ns, x.done_ns, res,
                                  error="client_total_timeout", timeout_kind="total"), pooled
        except asyncio.CancelledError as exc:
            t = now_ns()
            res = x.acc.result if x.acc is not None else StreamResult()
            exc.outcome = RequestOutcome("aborted", x.http_status, sent, x.headers_ns, t, res,  # type: ignore[attr-defined]
                                         streamed=x.acc is not None)
            x.close_after = True
            if x.state != _DONE:
                x.state = _DONE
                conn.x = None
            conn.close()
            raise
        finally:
            if watched:
                self._watched.discard(x)
        out = self._outcome(x, sent, head_chars)
        if x.picked:
            out.replica = x.picked.decode("latin-1").strip()
        return out, pooled

    def _sweep(self, loop: asyncio.AbstractEventLoop) -> None:
        """The idle watch's timer: check every exchange in flight (``_Exchange.idle_deadline``), re-arm for the next."""
        self._watch_timer = None
        idle = self.idle_ns
        if idle is None:
            return
        now = now_ns()
        nxt = None
        for x in list(self._watched):
            d = x.idle_deadline(idle, now)
            if d is None:
                self._watched.discard(x)
            elif nxt is None or d < nxt:
                nxt = d
        if nxt is not None:
            self._watch_timer = loop.call_later(max(0, nxt - now) / 1e9, self._sweep, loop)

    @staticmethod
    def _outcome(x: _Exchange, sent: int, head_chars: int) -> RequestOutcome:
        st = x.http_status
        acc = x.acc
        if x.exc_status is not None:
            res = acc.result if acc is not None else StreamResult()
            return RequestOutcome(x.exc_status, st, sent, x.headers_ns, x.done_ns, res, error=x.error,
                                  timeout_kind=x.timeout_kind)
        if st != 200:
            return _status_outcome(st, sent, x.headers_ns, x.done_ns, body=b"".join(x.body or ())[:MAX_ERROR_BODY],
                                   location=x.location.decode("latin-1"), reason=x.reason)
        if acc is not None:
            try:
                res = acc.close()
            except StreamError as exc:
                return _malformed_outcome(exc, st, sent, x.headers_ns, x.done_ns, acc.result)
            return _stream_outcome(res, sent, x.headers_ns, x.done_ns)
        return _json_outcome(b"".join(x.body or ()), sent, x.headers_ns, x.done_ns, head_chars)

    def close(self) -> None:
        """Close every connection (idle or not) and stop the idle watch."""
        if self._watch_timer is not None:
            self._watch_timer.cancel()
            self._watch_timer = None
        self._watched.clear()
        for c in list(self._all):
            c.close()
        self._all.clear()
        self.idle.clear()
