"""H1Client's read-idle watch: one timer for every exchange in flight (issue 43 item 2).

Three concurrent requests against a local server, read-idle bound 0.4 s: one answer
trickles a chunk every 0.1 s for 0.6 s (never silent for 0.4 s: it finishes), one
stops after its first event (``read_idle``), one never answers (``first_byte``). The
watch then holds nothing.
"""

from __future__ import annotations

import asyncio

from kvreplay.runner.h1 import H1Client

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
EVENT = b'data: {"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}\n\n'
LAST = b'data: {"choices":[{"index":0,"delta":{"content":"y"},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'


def _chunk(b: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(b), b)


class _Server(asyncio.Protocol):
    def connection_made(self, transport):  # noqa: ANN001
        self.t, self.buf = transport, b""

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if b"\r\n\r\n" not in self.buf:
            return
        path = self.buf.split(b" ", 2)[1]
        if path.endswith(b"/silent"):
            return  # never a byte: first_byte
        self.t.write(HEAD + _chunk(EVENT))
        if path.endswith(b"/trickle"):
            asyncio.ensure_future(self._trickle())
        # /stall: nothing after the first event: read_idle

    async def _trickle(self) -> None:
        for _ in range(6):
            await asyncio.sleep(0.1)
            self.t.write(_chunk(EVENT))
        self.t.write(_chunk(LAST) + b"0\r\n\r\n")


def test_one_watch_times_out_the_silent_exchanges_only():
    async def go():
        loop = asyncio.get_running_loop()
        srv = await loop.create_server(_Server, "127.0.0.1", 0)
        base = f"http://127.0.0.1:{srv.sockets[0].getsockname()[1]}"
        h1 = H1Client(base, headers={"Content-Type": "application/json"}, read_idle_timeout_s=0.4)
        try:
            outs = await asyncio.gather(*(h1.send(p, b"{}") for p in ("/trickle", "/stall", "/silent")))
            left = (len(h1._watched), h1._watch_timer is not None)
            h1.close()
            return outs, left, h1._watch_timer
        finally:
            srv.close()

    (trickle, stall, silent), left, timer = asyncio.run(go())
    assert (trickle.status, trickle.stream.finish_reason, trickle.stream.content_deltas) == ("ok", "stop", 8)
    assert (stall.status, stall.timeout_kind, stall.error) == ("timeout", "read_idle", "read_idle_timeout")
    assert (silent.status, silent.timeout_kind, silent.error) == ("timeout", "first_byte", "first_byte_timeout")
    assert left[0] == 0 and timer is None
