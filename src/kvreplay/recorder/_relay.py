"""The capture proxy's side of a relayed response: the client's writes, the accountant's feed, the outcome.

``recorder._proxy`` relays each upstream read as it arrives; what it does with a
read lives here: :class:`_Down` writes it to the client's transport (from the upstream
connection's ``data_received`` on the runner's llhttp path), :class:`_Tally` feeds the
SSE accountant (read by read until the first token, then in bulk), and
:func:`_json_usage` reads the usage of a plain JSON answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import orjson

from kvreplay.accounting import SSEAccountant, StreamResult
from kvreplay.accounting.sse import end_marker_in
from kvreplay.clock import now_ns
from kvreplay.errors import StreamError
from kvreplay.runner.h1relay import RelayExchange

_JSON_KEEP = 1 << 20  # bytes of a non-streamed response kept to read its usage
_BULK = 64 << 10  # after the first token, stream bytes fed to the accountant this many at a time
_DRAIN_AT = 1 << 16  # bytes queued on the client's transport before a write waits (aiohttp's own limit)


class _Result:
    """What ``_relay_h1`` found out (``_relay`` writes it to the manifest)."""

    __slots__ = ("e2e", "error", "outcome", "status", "tally", "ttft", "usage")

    def __init__(self) -> None:
        self.status: int | None = None
        self.outcome = "upstream_error"
        self.usage: object = None
        self.error: str | None = None
        self.ttft: int | None = None
        self.e2e: int | None = None
        self.tally: _Tally | None = None


class _Down:
    """The client's side of a response relayed from the upstream connection's ``data_received``.

    Until ``start`` (the head is not out yet) each read is held in ``buf``; after it,
    each read is written to the client's transport as it arrives. Past ``_DRAIN_AT``
    queued bytes the upstream read is paused (``over``) until the handler drained the
    client. A closing client transport stops the relay (``gone``) and drops the upstream
    connection. Every read also goes to the accountant (``tally``) or the JSON kept (``keep``).
    """

    __slots__ = ("buf", "chunked", "ex", "gone", "held", "keep", "on_end", "over", "tally", "times", "token_wake",
                 "tr", "waiter", "x")

    def __init__(self) -> None:
        self.buf: list[bytes] = []
        self.times: list[int] = []  # when each read in ``buf`` came (ns)
        self.held = 0  # bytes in ``buf``
        self.ex: RelayExchange | None = None  # the exchange, once its head is in (``x``: once relaying)
        self.tr: asyncio.Transport | None = None
        self.chunked = False
        self.gone = self.over = False
        self.tally: _Tally | None = None
        self.keep: bytearray | None = None
        self.waiter: asyncio.Future | None = None
        self.x: RelayExchange | None = None
        self.token_wake = False  # wake the handler once the accountant saw the first token (its verdict)
        self.on_end: Callable[[], None] | None = None  # called once, when the stream's end was relayed

    def __call__(self, data: bytes) -> None:
        if self.x is None:  # before the head is relayed (and, for the first reads, before it is read)
            self.buf.append(data)
            self.times.append(now_ns())
            self.held += len(data)
            if self.held > _DRAIN_AT:  # the client has not taken the head yet: hold no more than this
                self._pause(self.ex)
            self.wake()
            return
        if not self.gone:
            self._write(data)
        self._count(data, None)
        if self.token_wake and not self.tally.timed:  # type: ignore[union-attr]
            self.token_wake = False
            self.wake()  # the first token is out: the handler runs the body's retention verdict

    def _count(self, data: bytes, at: int | None) -> None:
        if self.tally is not None:
            self.tally.feed(data, at)
            if self.tally.end_ns is not None and self.on_end is not None and self.x is not None:
                cb, self.on_end = self.on_end, None
                cb()  # relayed (``x`` set: the head is out): the request no longer in flight
        elif self.keep is not None and len(self.keep) < _JSON_KEEP:
            self.keep += data

    def take(self) -> bytes:
        """The reads held so far, joined; each counted (accountant, JSON kept) with its own read time."""
        for data, at in zip(self.buf, self.times, strict=True):
            self._count(data, at)
        data = b"".join(self.buf)
        self.buf.clear()
        self.times.clear()
        self.held = 0
        return data

    def _write(self, data: bytes) -> None:
        tr = self.tr
        x = self.x
        assert x is not None
        if tr is None or tr.is_closing():
            self.gone = True
            if not x.complete:
                x.conn.close()  # type: ignore[union-attr]
            self.wake()
            return
        tr.write(b"%x\r\n%b\r\n" % (len(data), data) if self.chunked else data)
        if tr.get_write_buffer_size() > _DRAIN_AT:
            self._pause(x)

    def _pause(self, x: RelayExchange | None) -> None:
        """Stop reading the upstream until the handler drained the client (``over``); wakes it."""
        if self.over or x is None or x.complete or x.conn is None or x.conn.transport is None:
            return  # a complete exchange reads nothing more (and its connection may be reused)
        self.over = True
        x.conn.transport.pause_reading()
        self.wake()

    def start(self, tr: asyncio.Transport | None, chunked: bool, x: RelayExchange) -> None:
        """The head is out: write what arrived meanwhile, then every read as it arrives."""
        self.tr, self.chunked, self.x = tr, chunked, x
        held = list(zip(self.buf, self.times, strict=True))
        self.buf, self.times, self.held = [], [], 0
        for data, at in held:
            if not self.gone:
                self._write(data)
            self._count(data, at)

    def wait(self) -> asyncio.Future:
        """A future that ``wake`` resolves."""
        self.waiter = asyncio.get_running_loop().create_future()
        return self.waiter

    def wake(self, *_: object) -> None:
        """Wake the handler (a read to relay, the upstream paused, or the exchange done)."""
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    def resume(self) -> None:
        """The client drained: read the upstream again."""
        self.over = False
        x = self.x
        if x is not None and not x.conn.closed:  # type: ignore[union-attr]
            ut = x.conn.transport  # type: ignore[union-attr]
            if ut is not None:
                ut.resume_reading()


class _Tally:
    """The SSE accountant of one relayed stream, fed cheaply: per read until the first token, then in bulk.

    The first token's time (the manifest's ``ttft_ms``) needs the read it arrived in;
    ``usage`` and the error message need every byte but no timing, so after the first
    token the reads are joined and fed ``_BULK`` (64 KiB) at a time and at the end.
    A stream the accountant refuses (``StreamError``) stops being fed; what it saw stays.
    """

    __slots__ = ("acct", "end_ns", "held", "later", "on", "tail", "timed")

    def __init__(self) -> None:
        self.acct = SSEAccountant(head_chars=0)
        self.on = True  # False once the accountant refused the stream
        self.timed = True  # fed read by read, with its time, until the first token
        self.later: list[bytes] = []
        self.held = 0
        self.end_ns: int | None = None  # when the read that ended the stream was relayed (``ended``)
        self.tail = b""  # the previous read (its last 8 bytes are looked at): a marker cut between two reads is found

    def feed(self, chunk: bytes, at: int | None = None) -> None:
        """One upstream read, as relayed; ``at``: when it was read (ns; None: now)."""
        if not self.on:
            return
        if self.timed:
            try:
                done = self.acct.feed(chunk, now_ns() if at is None else at)
                if done and self.acct.result.first_token_ns is not None:
                    self.timed = False
            except StreamError:
                self.on = False  # keep relaying; stop accounting
            self._check_end(chunk, at)
            return
        self.later.append(chunk)
        self.held += len(chunk)
        if self.held >= _BULK:
            self._flush()
        self._check_end(chunk, at)

    def _check_end(self, chunk: bytes, at: int | None) -> None:
        """Note when the stream ended: its ``[DONE]``, or a usage object after the finish reason.

        ``end_marker_in`` looks for either marker in the read and cut between it and the
        previous one (native: ``memmem``); the accountant (flushed) decides only when one is found.
        """
        if self.end_ns is not None:
            return
        prev, self.tail = self.tail, chunk
        if not end_marker_in(prev, chunk):
            return
        self._flush()
        r = self.acct.result
        if r.done_marker or (r.usage is not None and r.finish_reason is not None):
            self.end_ns = now_ns() if at is None else at

    @property
    def ended(self) -> bool:
        """The stream's end was relayed: complete, whatever the client does next (issue 42 item 9)."""
        return self.end_ns is not None

    def _flush(self) -> None:
        if not self.later:
            return
        data = b"".join(self.later)
        self.later.clear()
        self.held = 0
        if self.on:
            try:
                self.acct.feed(data, now_ns())
            except StreamError:
                self.on = False

    def partial(self) -> StreamResult:
        """What the bytes relayed so far say (a cut stream: no end-of-stream check)."""
        self._flush()
        return self.acct.result

    def close(self) -> StreamResult:
        """The whole stream was relayed: the accountant's final result (a malformed last event: what it saw)."""
        self._flush()
        if not self.on:
            return self.acct.result
        try:
            return self.acct.close()
        except StreamError:
            return self.acct.result


def _json_usage(data: bytes) -> tuple[object, str | None]:
    """``(usage, error message)`` of a non-streamed JSON response; ``(None, None)`` when unreadable."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None, None
    if not isinstance(obj, dict):
        return None, None
    err = obj.get("error")
    msg = None
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        msg = err["message"]
    elif isinstance(err, str):
        msg = err
    return obj.get("usage"), msg
