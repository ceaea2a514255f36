"""The recording proxy behind ``kvreplay record``: aiohttp server in; out on the runner's llhttp client or aiohttp's.

A request whose body is read whole (``Content-Length`` up to ``_READ_WHOLE``, not
``HEAD``, an ASCII target) goes to the upstream on one of ``runner.h1``'s keep-alive
connections (``runner.h1relay``: llhttp parses the answer; each socket read's body
bytes are written to the client from ``data_received``, see ``recorder._relay``);
every other request (streamed or chunked uploads, ``HEAD``) on aiohttp's client. Both
paths forward and relay the same bytes, and name an upstream failure alike (the 502's
``upstream unreachable: ClientConnectorError`` / ``ServerDisconnectedError`` /
``ClientResponseError``).

Every origin-form request, on any path and method, is forwarded to the upstream
with its exact body bytes, still encoded as the client sent them (the server side
runs with ``auto_decompress=False``), and its headers minus the hop-by-hop ones
(RFC 9110 section 7.6.1: ``Connection``, ``Keep-Alive``, ``Proxy-*``, ``TE``,
``Trailer``, ``Transfer-Encoding``, ``Upgrade``) and ``Host``, in the client's
framing: a body sent with ``Content-Length`` goes out with the same
``Content-Length`` and bytes, a chunked body goes out chunked. A chunked body or one
over ``_READ_WHOLE`` (256 KiB) is streamed upstream as it arrives, never held whole;
a smaller one is read whole and sent in one write. No header is added (the client's automatic
``User-Agent``/``Accept``/``Accept-Encoding``/``Content-Type`` are skipped).
Absolute-form, authority-form (``CONNECT``) and asterisk-form requests get a 400
and are neither forwarded nor retained.
The response comes back with the upstream's status, reason and headers (less
the hop-by-hop ones), its bytes undecoded (``auto_decompress=False``) and
unbuffered: each chunk the upstream socket delivers is written to the client
before the next is read, so server-sent events keep their timing. A chunked
response's first chunk goes out through aiohttp's writer (with the head); the
rest are written to the client's transport directly, in the same chunked
framing, waiting (``drain``) as aiohttp's writer would once 64 KiB are queued.

Bodies POSTed to the retained paths are fed, as they arrive, to the
:class:`CaptureWriter`'s :class:`Pending` (decoded under a cap, within a memory
budget) and written once whole. A streamed response
(``text/event-stream``) is fed to the project's SSE accountant
(``kvreplay.accounting``) for usage, ``cached_tokens`` and TTFT: read by read,
each with its time, until the first token, then 64 KiB at a time (``_Tally``); a
plain JSON response is kept (up to 1 MiB) and its ``usage`` read at the end.
Neither ever changes what is relayed, and a response the accountant refuses
is still relayed in full.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator
from typing import TextIO

from aiohttp import ClientError, ClientSession, ClientTimeout, DummyCookieJar, TCPConnector, web
from aiohttp.http import HttpVersion11, StreamWriter
from yarl import URL

from kvreplay.clock import now_ns
from kvreplay.recorder._relay import _DRAIN_AT, _JSON_KEEP, _Down, _json_usage, _Result, _Tally
from kvreplay.runner.h1 import H1Client
from kvreplay.runner.h1relay import relay
from kvreplay.safe_io import echo
from kvreplay.workload.capture import CaptureWriter, Pending, Slot

__all__ = ["HOP_BY_HOP", "RecordingProxy"]

HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "proxy-connection",
    "te", "trailer", "trailers", "transfer-encoding", "upgrade",
})
"""Headers that belong to one connection and are never forwarded (RFC 9110 7.6.1, RFC 9112)."""

# Content-Length is forwarded as the client sent it, by _relay (with the streamed body it frames).
_NOT_FORWARDED_REQ = HOP_BY_HOP | {"host", "content-length", "expect"}  # 100-continue: answered here
_NOT_FORWARDED_REQ_B = frozenset(h.encode() for h in _NOT_FORWARDED_REQ)
_READ_WHOLE = 256 << 10  # a Content-Length body up to this size is read whole, then sent (cheaper than streaming)


def _verdict_due(tally: _Tally | None) -> bool:
    """Whether a body's retention verdict may run now: its answer's first token has been relayed.

    The verdict (decode, checks, the secret scan, the body file: 0.1-0.5 ms of CPU) runs on
    the event loop, and any read of the answer that arrives meanwhile waits for it. Before
    the first token it would be added to the client's TTFT: an OpenAI-style stream's first
    event usually carries only the role (``"delta": {"role": "assistant", "content": ""}``,
    field case B04), so running it after the first relayed *chunk* (as before) put it
    between that event and a first token written right after it. A stream with no token
    yet, a refused one and a response that is not a stream have it at their end
    (``_relay``'s cleanup), where nothing of the answer waits.
    """
    return tally is not None and not tally.timed


class RecordingProxy:
    """A transparent reverse proxy that retains generation bodies into a capture folder.

    Args:
        upstream: Base URL of the server (``http://host:port``, optionally with a
            path prefix that is put before every request path).
        writer: Where retained bodies go.
        log: Stream for the one-line notices (limit reached); stderr by default.

    Attributes:
        requests: Requests proxied (all paths).
    """

    def __init__(self, upstream: str, writer: CaptureWriter, *, log: TextIO | None = None,
                 grace_s: float = 2.0) -> None:
        self.upstream = upstream.rstrip("/")
        self.writer = writer
        self.log = log if log is not None else sys.stderr
        self.requests = 0
        self._session: ClientSession | None = None
        self._h1: H1Client | None = None
        self._runner: web.ServerRunner | None = None
        self._limit_said = False
        self._flusher: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()
        self.refused = 0
        self.grace_s = grace_s
        self.stop_waits: list[float] = []  # the timed waits stop() made (seconds each)

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Listen on ``host:port`` (0: a free port); returns ``http://host:port``.

        Raises:
            OSError: the address cannot be bound.
        """
        self._session = ClientSession(
            connector=TCPConnector(limit=0, force_close=False, enable_cleanup_closed=False),
            timeout=ClientTimeout(total=None, sock_connect=30),
            auto_decompress=False,
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
            cookie_jar=DummyCookieJar(),  # never carry one client's cookies to another
        )
        # A body read whole goes out on the runner's llhttp connections (runner.h1relay), the rest on aiohttp's
        # client; an upstream URL H1Client refuses (credentials in it) leaves every request to aiohttp's.
        try:
            self._h1 = H1Client(self.upstream, headers={}, connect_timeout_s=30.0, read_idle_timeout_s=None)
        except ValueError:
            self._h1 = None
        # aiohttp's low-level server: every request goes to _serve, with no application, router or
        # middleware between (each request took their Python: the catch-all route's regex, the middleware
        # chain). auto_decompress=False: the server side hands over the bytes as received, still encoded.
        server = web.Server(self._serve, auto_decompress=False, access_log=None)
        # Handlers are awaited and cancelled by stop() itself: aiohttp's own wait is only a backstop.
        self._runner = web.ServerRunner(server, handle_signals=False, shutdown_timeout=0.2)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        try:
            await site.start()
        except OSError:
            await self._runner.cleanup()
            await self._session.close()
            raise
        sock = site._server.sockets[0]  # type: ignore[union-attr]
        bound = sock.getsockname()
        self._flusher = asyncio.get_running_loop().create_task(self._flush_loop())
        h = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
        return f"http://{h}:{bound[1]}"

    async def stop(self) -> None:
        """Stop listening, let in-flight responses finish (``grace_s``, 2 s), then close the capture.

        One timed wait: the handlers still running after ``grace_s`` are cancelled
        (their bodies' manifest lines say ``interrupted``) and awaited; aiohttp's own
        shutdown then finds nothing left to wait for. Returns within ``grace_s`` plus
        the time the cancelled handlers take to unwind (milliseconds).
        """
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
        if self._runner is not None:
            for site in list(self._runner.sites):
                await site.stop()  # no new connections
            pending = {t for t in self._tasks if not t.done()}
            if pending:
                self.stop_waits.append(self.grace_s)
                _, pending = await asyncio.wait(pending, timeout=self.grace_s)
            for t in pending:
                t.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1.0)  # unwinding takes milliseconds; a backstop only
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()
        if self._h1 is not None:
            self._h1.close()
        self.writer.close()

    async def _flush_loop(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            self.writer.flush_sidecars()

    def _say_limit(self) -> None:
        if not self._limit_said and self.writer.summary.limit_reached:
            self._limit_said = True
            echo(f"kvreplay record: {self.writer.summary.limit_reached} reached: no longer retaining "
                 "bodies (still proxying)", file=self.log)

    async def _upload(self, request: web.BaseRequest, pending: Pending | None, state: dict) -> AsyncIterator[bytes]:
        """The request body as received (still encoded), chunk by chunk, each fed to ``pending`` first."""
        content = request.content
        while True:
            chunk = await content.readany()
            if not chunk:
                break
            state["sent"] += len(chunk)
            if pending is not None:
                pending.feed(chunk)
            yield chunk
        state["whole"] = True
        if pending is not None:
            state["slot"] = self._finish(pending, state)  # retained (written) as soon as it is whole

    async def _drain(self, request: web.BaseRequest, pending: Pending, state: dict) -> None:
        """Read the rest of a body the upstream did not take (still fed to ``pending``)."""
        content = request.content
        while not state["whole"]:
            chunk = await content.readany()
            if not chunk:
                state["whole"] = True
                break
            pending.feed(chunk)

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        arrival = now_ns()  # the handler runs once the request line and headers are in: its first bytes
        self.requests += 1
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            return await self._relay(request, arrival)
        finally:
            if task is not None:
                self._tasks.discard(task)

    async def _serve(self, request: web.BaseRequest) -> web.StreamResponse:
        """Every request: origin-form only (400 otherwise), ``Expect`` answered here, then relayed.

        Absolute-form (a forward-proxy request), authority-form (``CONNECT``) and asterisk-form
        get a 400 and the connection is closed (what follows a CONNECT head is tunnel data, not a
        request): nothing of them is forwarded or retained. ``Expect: 100-continue`` on HTTP/1.1
        is answered with ``100 Continue`` before the body is read, any other expectation with 417
        (RFC 9110 section 10.1.1; what aiohttp's application router did for the proxy before).
        """
        if request.method == "CONNECT" or not request.raw_path.startswith("/"):
            self.requests += 1
            self.refused += 1
            resp = web.json_response(
                {"error": {"message": "kvreplay record: a reverse proxy; send origin-form requests "
                                      "(POST /v1/...), not absolute-form or CONNECT", "type": "bad_request"}},
                status=400)
            resp.force_close()
            return resp
        expect = request.headers.get("Expect")
        if expect is not None and request.version == HttpVersion11:
            if expect.lower() != "100-continue":
                raise web.HTTPExpectationFailed(text=f"Unknown Expect: {expect}")
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            request.writer.output_size = 0  # the interim response is not the answer's bytes
        return await self._handle(request)

    async def _relay(self, request: web.BaseRequest, arrival: int) -> web.StreamResponse:
        pending = self.writer.begin(request.method, request.path, arrival, request.headers,
                                    content_encoding=request.headers.get("Content-Encoding"))
        self._say_limit()
        length = request.headers.get("Content-Length")
        chunked = "chunked" in request.headers.get("Transfer-Encoding", "").lower()
        state: dict = {"sent": 0, "whole": False, "slot": None}
        data: bytes | AsyncIterator[bytes] | None = None
        headers: list[tuple[str, str]] = []  # for aiohttp's client (the llhttp path sends the raw headers)
        n = int(length) if length is not None and length.strip().isdigit() and not chunked else -1
        if 0 < n <= _READ_WHOLE:
            # a small body: read whole (the same Content-Length and bytes go upstream; aiohttp sets it
            # from the bytes); its retention verdict waits until the answer's first token is relayed
            # (off the path to the upstream and off the client's TTFT; ``_verdict_due``)
            try:
                data = await request.content.readexactly(n)
            except (asyncio.IncompleteReadError, ConnectionError, web.HTTPException, ClientError) as exc:
                if pending is not None:  # the client left mid-body: nothing forwarded, nothing retained
                    self.writer.abandon(pending, "incomplete", "the client sent less than its Content-Length")
                raise web.HTTPBadRequest(text="kvreplay record: incomplete request body") from exc
            state["sent"], state["whole"] = n, True
            if pending is not None:
                pending.feed(data)
        elif chunked or (length is not None and length.strip() != "0"):
            data = self._upload(request, pending, state)
            if not chunked and length is not None:
                headers.append(("Content-Length", length))  # the same framing: streamed, not re-chunked
        else:
            state["whole"] = True
        assert self._session is not None
        slot: Slot | None = None
        status: int | None = None
        outcome = "upstream_error"
        tally: _Tally | None = None
        usage: object = None  # the server's usage object, verbatim (checked by the capture writer)
        error: str | None = None
        ttft = e2e = None
        try:
            if self._h1 is not None and isinstance(data, bytes) and request.method != "HEAD" \
                    and request.raw_path.isascii():
                res = _Result()
                try:
                    return await self._relay_h1(request, arrival, pending, state, data, res)
                finally:
                    status, outcome, usage, error, ttft, e2e = (res.status, res.outcome, res.usage, res.error,
                                                                res.ttft, res.e2e)
                    tally = res.tally
            headers[:0] = [(k, v) for k, v in request.headers.items() if k.lower() not in _NOT_FORWARDED_REQ]
            try:
                up = await self._session.request(
                    # encoded=True: the path and query go out as received, not re-quoted by yarl
                    request.method, URL(self.upstream + request.raw_path, encoded=True), data=data,
                    headers=headers, allow_redirects=False,
                )
            except (TimeoutError, ClientError, OSError) as exc:
                error = f"upstream unreachable: {type(exc).__name__}"
                if pending is not None:
                    with contextlib.suppress(Exception):
                        await self._drain(request, pending, state)
                    slot = state["slot"] or (self._finish(pending, state) if pending.state == "open" else None)
                return web.json_response(
                    {"error": {"message": f"kvreplay record: {error}", "type": "bad_gateway"}}, status=502)
            async with up:
                status = up.status
                # the retention verdict (decode, checks, secrets, the body file) waits for the first token
                # relayed, or the end (``_verdict_due``): before it, it would be added to the client's TTFT
                verdict = pending is not None and pending.state == "open" and state["whole"]
                resp = web.StreamResponse(status=up.status, reason=up.reason)
                for k, v in up.headers.items():
                    if k.lower() not in HOP_BY_HOP:
                        resp.headers.add(k, v)
                if "Transfer-Encoding" in up.headers or "Content-Length" not in up.headers:
                    resp.headers.popall("Content-Length", None)
                ctype = up.headers.get("Content-Type", "")
                stream = "text/event-stream" in ctype
                retain = pending is not None
                keep = bytearray() if retain and not stream else None
                if retain and stream:
                    tally = _Tally()
                await resp.prepare(request)
                try:
                    content = up.content
                    writer = request.writer
                    # a chunked response (every token stream) goes out on the transport directly after its
                    # first chunk (which aiohttp sends with the head): the same framing, without aiohttp's
                    # per-write bookkeeping; any other framing stays with aiohttp's writer
                    direct = False
                    while True:
                        chunk = await content.readany()  # each upstream read as it arrives, never held back
                        if not chunk:
                            break
                        if direct:
                            tr = request.transport
                            if tr is None or tr.is_closing():
                                raise ConnectionResetError("Cannot write to closing transport")
                            tr.write(b"%x\r\n%b\r\n" % (len(chunk), chunk))
                            if tr.get_write_buffer_size() > _DRAIN_AT:
                                await writer.drain()  # the client reads slowly: wait as aiohttp's write would
                        else:
                            await resp.write(chunk)
                            direct = isinstance(writer, StreamWriter) and writer.chunked
                        if tally is not None:
                            tally.feed(chunk)
                        elif keep is not None and len(keep) < _JSON_KEEP:
                            keep += chunk
                        if verdict and _verdict_due(tally):
                            verdict = False
                            state["slot"] = self._finish(pending, state)  # type: ignore[arg-type]
                        if tally is not None and tally.ended and not state.get("ended"):
                            self._mark_ended(state)
                    await resp.write_eof()
                except asyncio.CancelledError:
                    outcome = "interrupted"  # the proxy is stopping
                    raise
                except ConnectionResetError:
                    if tally is not None and tally.ended:
                        # the stream's end was relayed, then the client closed (an SDK at [DONE]): complete
                        outcome = "complete"
                        r = tally.partial()
                        usage, error = r.usage, r.error
                        ttft = None if r.first_token_ns is None else r.first_token_ns - arrival
                        e2e = tally.end_ns - arrival  # type: ignore[operator]
                    else:
                        outcome = "client_gone"  # the client left; leaving `async with` drops upstream
                    return resp
                except ClientError:
                    outcome = "upstream_cut"  # pass the cut on: close the client's connection too
                    if request.transport is not None:
                        request.transport.close()
                    return resp
                outcome = "complete"
                end = now_ns()
                e2e = end - arrival
                if tally is not None:
                    r = tally.close()
                    usage, error = r.usage, r.error
                    if r.first_token_ns is not None:
                        ttft = r.first_token_ns - arrival
                elif keep is not None:
                    usage, error = _json_usage(bytes(keep))
                return resp
        finally:
            slot = slot or state["slot"]
            if pending is not None and slot is None and status is not None and pending.state == "open":
                slot = self._finish(pending, state)
            if pending is not None and pending.state == "open":
                self.writer.abandon(pending)
            if slot is not None:
                if tally is not None and usage is None:
                    usage = tally.partial().usage
                self.writer.complete(slot, status=status, outcome=outcome, usage=usage, ttft_ns=ttft,
                                     e2e_ns=e2e, error=error)

    async def _relay_h1(self, request: web.BaseRequest, arrival: int, pending: Pending | None, state: dict,
                        data: bytes, res: _Result) -> web.StreamResponse:
        """A body read whole, on the runner's llhttp connection: each upstream read relayed from ``data_received``.

        The outcome, usage and times go to ``res`` (read by ``_relay``'s cleanup). The same
        relay as the aiohttp path: the first bytes go out with the head through aiohttp's
        writer, the rest on the client's transport as they are read (chunked framing when
        the response is chunked), the upstream read paused while 64 KiB wait for the client.
        """
        assert self._h1 is not None
        hdrs = [(k, v) for k, v in request.raw_headers if k.lower() not in _NOT_FORWARDED_REQ_B]
        down = _Down()
        try:
            x = await relay(self._h1, request.method, request.raw_path, hdrs, data, down)
        except OSError as exc:  # TimeoutError included: the connect bound
            name = "ConnectionTimeoutError" if isinstance(exc, TimeoutError) else "ClientConnectorError"
            return self._bad_gateway(f"upstream unreachable: {name}", pending, state, res)
        if x.http_status is None:
            name = "ClientResponseError" if x.exc_status == "malformed" else "ServerDisconnectedError"
            return self._bad_gateway(f"upstream unreachable: {name}", pending, state, res)
        res.status = x.http_status
        down.ex = x
        # the retention verdict waits for the first token relayed, or the end (``_verdict_due``)
        verdict = pending is not None and pending.state == "open" and state["whole"]
        resp = web.StreamResponse(status=x.http_status, reason=x.reason)
        names = set()
        for k, v in x.raw_headers:
            name = k.decode("utf-8", "surrogateescape")
            low = name.lower()
            names.add(low)
            if low not in HOP_BY_HOP:
                resp.headers.add(name, v.decode("utf-8", "surrogateescape"))
        if "transfer-encoding" in names or "content-length" not in names:
            resp.headers.popall("Content-Length", None)
        if pending is not None:
            if "text/event-stream" in resp.headers.get("Content-Type", ""):
                down.tally = res.tally = _Tally()
            else:
                down.keep = bytearray()
        fut = x.fut
        assert fut is not None
        fut.add_done_callback(down.wake)
        try:
            await resp.prepare(request)
            writer = request.writer
            while not down.buf and not fut.done():
                await down.wait()
            first = down.take()
            if first:
                await resp.write(first)  # with the head, one send
            down.token_wake = verdict and down.tally is not None
            down.on_end = lambda: self._mark_ended(state)
            down.start(request.transport, isinstance(writer, StreamWriter) and writer.chunked, x)
            if down.tally is not None and down.tally.ended and down.on_end is not None:
                down.on_end = None
                self._mark_ended(state)  # the whole stream came with the head (``take``), now relayed
            while True:
                if verdict and _verdict_due(down.tally):
                    verdict = down.token_wake = False
                    state["slot"] = self._finish(pending, state)  # type: ignore[arg-type]
                if down.over:
                    await writer.drain()  # the client reads slowly: the upstream read waits meanwhile
                    down.resume()
                    continue
                if fut.done():
                    break
                await down.wait()
            if down.gone:
                raise ConnectionResetError("the client left")
            if x.exc_status is not None:
                res.outcome = "upstream_cut"  # pass the cut on: close the client's connection too
                if request.transport is not None:
                    request.transport.close()
                return resp
            await resp.write_eof()
        except asyncio.CancelledError:
            res.outcome = "interrupted"  # the proxy is stopping
            if not fut.done():
                x.conn.close()  # type: ignore[union-attr]
            raise
        except ConnectionResetError:
            if not fut.done():
                x.conn.close()  # type: ignore[union-attr]
            t = down.tally
            if t is not None and t.ended:
                # the stream's end was relayed, then the client closed (an SDK at [DONE]): complete
                res.outcome = "complete"
                r = t.partial()
                res.usage, res.error = r.usage, r.error
                res.ttft = None if r.first_token_ns is None else r.first_token_ns - arrival
                res.e2e = t.end_ns - arrival  # type: ignore[operator]
            else:
                res.outcome = "client_gone"  # the client left: drop the upstream connection
            return resp
        res.outcome = "complete"
        res.e2e = now_ns() - arrival
        if down.tally is not None:
            r = down.tally.close()
            res.usage, res.error = r.usage, r.error
            if r.first_token_ns is not None:
                res.ttft = r.first_token_ns - arrival
        elif down.keep is not None:
            res.usage, res.error = _json_usage(bytes(down.keep))
        return resp

    def _bad_gateway(self, error: str, pending: Pending | None, state: dict, res: _Result) -> web.Response:
        """502 for a request the upstream did not answer; a body read whole is still retained."""
        res.error = error
        if pending is not None and pending.state == "open":
            state["slot"] = self._finish(pending, state)
        return web.json_response({"error": {"message": f"kvreplay record: {error}", "type": "bad_gateway"}},
                                 status=502)

    def _finish(self, pending: Pending, state: dict) -> Slot | None:
        """The body's retention verdict once it was forwarded whole (else it is abandoned: ``incomplete``)."""
        if not state["whole"]:
            return None
        slot = self.writer.finish(pending)
        self._say_limit()
        if slot is not None and state.get("ended"):
            self.writer.ended(slot)  # the answer's end was relayed before its verdict ran
        return slot

    def _mark_ended(self, state: dict) -> None:
        """The answer's end was relayed (``_Tally.ended``): its request stops counting as in flight."""
        state["ended"] = True
        if state["slot"] is not None:
            self.writer.ended(state["slot"])
