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
    malformed     the stream or JSON body could not be parsed, or the HTTP framing
                  was refused (``malformed_http: ...``) or over a limit
    client_error  the client's own failure: resources exhausted (EMFILE, ENFILE,
                  ENOBUFS) or an unexpected exception while sending or accounting

No redirect is followed: a 3xx is an ``http`` record naming its ``Location``.
The runner sends through ``kvreplay.runner.h1.H1Client`` (http and https);
``send_body`` (aiohttp) serves the probe and prompt experiments and is the
reference path of the parity tests (``KVREPLAY_HTTP=aiohttp``).
"""

from __future__ import annotations

import asyncio
import errno
from array import array
from dataclasses import dataclass, field

import aiohttp
import orjson

from kvreplay.accounting import SSEAccountant, StreamResult
from kvreplay.accounting.events import ERROR_BYTES
from kvreplay.clock import now_ns
from kvreplay.errors import StreamError
from kvreplay.redaction import redact

__all__ = ["RequestOutcome", "read_upto", "redirect_error", "send_body"]


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
        replica: The value of the response header naming the replica that served it
            (``H1Client(replica_header=...)``; a fleet target, ``runner.fleet``), None when absent.
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
    replica: str | None = None


def _json_error(raw: bytes) -> str:
    """The message of an error body (JSON ``error.message``, else the text).

    Secrets are redacted before the cut to ``ERROR_BYTES``.
    """
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return redact(raw[:2 * ERROR_BYTES].decode("utf-8", "replace"))[:ERROR_BYTES]
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return redact(err["message"][:2 * ERROR_BYTES])[:ERROR_BYTES]
        if isinstance(err, str):
            return redact(err[:2 * ERROR_BYTES])[:ERROR_BYTES]
    return redact(raw[:2 * ERROR_BYTES].decode("utf-8", "replace"))[:ERROR_BYTES]


def redirect_error(status: int, location: str) -> str:
    """The ``error`` of a 3xx record: redirects are never followed (both send paths)."""
    return f"redirect not followed: HTTP {status}, Location: {location or '(none)'}"[:ERROR_BYTES]


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


def _status_outcome(status: int | None, sent: int, headers_ns: int | None, done_ns: int, *,
                    body: bytes, location: str, reason: str | None) -> RequestOutcome:
    """Classify a non-200 answer as ``http`` (both send paths).

    The error is the redirect and its target for a 3xx status (``redirect_error``),
    else the server's own message from ``body`` (``_json_error``), else ``reason``
    (the status line's reason phrase).
    """
    err: str | None
    if status is not None and 300 <= status < 400:
        err = redirect_error(status, location)
    else:
        err = _json_error(body) or reason
    return RequestOutcome("http", status, sent, headers_ns, done_ns, error=err)


def _malformed_outcome(exc: StreamError, status: int | None, sent: int, headers_ns: int | None, done_ns: int,
                       res: StreamResult | None = None) -> RequestOutcome:
    """A ``malformed`` outcome for a stream the accountant refused, keeping what it counted (both send paths)."""
    return RequestOutcome("malformed", status, sent, headers_ns, done_ns, res if res is not None else StreamResult(),
                          error=f"{exc.kind}: {exc}"[:ERROR_BYTES])


async def read_upto(stream: aiohttp.StreamReader, limit: int) -> bytes:
    """Read a response body until EOF or until more than ``limit`` bytes arrived.

    ``StreamReader.read(n)`` returns whatever has arrived so far (at most ``n``
    bytes), not ``n`` bytes or EOF: one call truncates a body that comes in more
    than one TCP segment or chunk, e.g. a 160 KB vLLM scrape cut mid-line.

    Args:
        stream: The response's ``content``.
        limit: Bytes wanted at most; one read past it may return up to
            ``limit + 1`` bytes so the caller can tell "exactly limit" from "over".

    Returns:
        The body (``len <= limit + 1``); shorter than ``limit + 1`` only at EOF.
    """
    parts: list[bytes] = []
    got = 0
    while got <= limit:
        chunk = await stream.read(limit + 1 - got)
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


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
        return _malformed_outcome(exc, 200, sent, headers_ns, done_ns)
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
    replica_header: str | None = None,
    seen: list[str] | None = None,
) -> RequestOutcome:
    """One attempt of :func:`send_body` (same arguments), without its stale-connection retry.

    ``replica_header``'s value, when the response has it, is appended to ``seen``.
    """
    sent = now_ns()
    headers_ns: int | None = None
    http_status: int | None = None
    acc = None
    try:
        async with asyncio.timeout(total_timeout_s):
            async with session.post(url, data=raw, headers=headers, allow_redirects=False) as resp:
                headers_ns = now_ns()
                http_status = resp.status
                if replica_header and seen is not None and (v := resp.headers.get(replica_header)):
                    seen.append(v.strip())
                if 300 <= resp.status < 400:
                    return _status_outcome(http_status, sent, headers_ns, now_ns(), body=b"",
                                           location=resp.headers.get("Location", ""), reason=resp.reason)
                if resp.status != 200:
                    body = await read_upto(resp.content, 64 << 10)
                    return _status_outcome(http_status, sent, headers_ns, now_ns(), body=body, location="",
                                           reason=resp.reason)
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
        return _malformed_outcome(exc, http_status, sent, headers_ns, now_ns(), acc.result if acc is not None else None)
    except orjson.JSONDecodeError as exc:
        return RequestOutcome("malformed", http_status, sent, headers_ns, now_ns(),
                              error=f"invalid JSON: {exc}"[:ERROR_BYTES])
    except aiohttp.ConnectionTimeoutError as exc:
        return RequestOutcome("timeout", None, sent, None, now_ns(),
                              error=f"connect_timeout: {exc}"[:ERROR_BYTES], timeout_kind="connect")
    except aiohttp.ServerTimeoutError:
        # sock_read: no byte for read_idle seconds (a silent stream, field case B12).
        res = acc.result if acc is not None else StreamResult()
        kind = "first_byte" if headers_ns is None or res.first_byte_ns is None else "read_idle"
        return RequestOutcome("timeout", http_status, sent, headers_ns, now_ns(), res,
                              error=f"{kind}_timeout", timeout_kind=kind)
    except TimeoutError:
        # asyncio.timeout: the whole-request bound (off by default, field case B12).
        res = acc.result if acc is not None else StreamResult()
        return RequestOutcome("timeout", http_status, sent, headers_ns, now_ns(), res,
                              error="client_total_timeout", timeout_kind="total")
    except aiohttp.ClientConnectorError as exc:
        if exc.os_error is not None and exc.os_error.errno in _CLIENT_ERRNOS:
            return RequestOutcome("client_error", None, sent, None, now_ns(),
                                  error=f"client resources exhausted: {exc.os_error}"[:ERROR_BYTES])
        return RequestOutcome("connect", None, sent, None, now_ns(), error=str(exc)[:ERROR_BYTES] or "connect failed")
    except aiohttp.ClientResponseError as exc:
        # aiohttp's parser refused the status line or headers (its HttpProcessingError): the
        # runner's llhttp client calls that malformed_http too (runner.h1).
        return RequestOutcome("malformed", None, sent, headers_ns, now_ns(),
                              error=f"malformed_http: {exc.message}"[:ERROR_BYTES])
    except aiohttp.ClientPayloadError as exc:
        res = acc.result if acc is not None else StreamResult()
        if "Not enough data" not in str(exc):  # a refused chunk size or framing, not a cut
            return RequestOutcome("malformed", http_status, sent, headers_ns, now_ns(), res,
                                  error=f"malformed_http: {exc}"[:ERROR_BYTES])
        return RequestOutcome("cut" if headers_ns is not None else "write", http_status, sent, headers_ns, now_ns(),
                              res, error=(str(exc) or type(exc).__name__)[:ERROR_BYTES])
    except aiohttp.ServerDisconnectedError as exc:
        res = acc.result if acc is not None else StreamResult()
        status = "cut" if headers_ns is not None else "write"
        return RequestOutcome(status, http_status, sent, headers_ns, now_ns(), res,
                              error=(str(exc) or type(exc).__name__)[:ERROR_BYTES])
    except aiohttp.ClientOSError as exc:
        res = acc.result if acc is not None else StreamResult()
        status = "cut" if headers_ns is not None else "write"
        return RequestOutcome(status, http_status, sent, headers_ns, now_ns(), res,
                              error=(str(exc) or type(exc).__name__)[:ERROR_BYTES])
    except aiohttp.ClientError as exc:
        res = acc.result if acc is not None else StreamResult()
        return RequestOutcome("cut" if headers_ns else "connect", http_status, sent, headers_ns, now_ns(), res,
                              error=(str(exc) or type(exc).__name__)[:ERROR_BYTES])


_CLIENT_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})

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
    replica_header: str | None = None,
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
        replica_header: A response header kept as ``RequestOutcome.replica`` (a fleet target).

    Returns:
        The outcome; never raises for per-request failures.
    """
    seen: list[str] = []
    out = await _send_once(session, url, raw, headers=headers, head_chars=head_chars,
                           total_timeout_s=total_timeout_s, replica_header=replica_header, seen=seen)
    if (
        out.status in ("write", "cut")
        and out.headers_ns is None
        and out.stream.first_byte_ns is None
        and out.done_ns - out.sent_ns < STALE_WINDOW_NS
    ):
        out = await _send_once(session, url, raw, headers=headers, head_chars=head_chars,
                               total_timeout_s=total_timeout_s, replica_header=replica_header, seen=seen)
        out.reconnects = 1
    if seen:
        out.replica = seen[-1][:1024]
    return out
