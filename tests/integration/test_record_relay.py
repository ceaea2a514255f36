"""The capture proxy's cheap relay (issue 31 item 2): bulk accounting after the first token, direct writes.

After the first chunk of a chunked response the proxy writes each upstream read to the
client's transport itself (the same chunked framing aiohttp writes), and after the first
token it feeds the SSE accountant 64 KiB at a time instead of read by read. These tests
pin what must not change: the bytes the client gets, the manifest's usage, cached tokens
and TTFT, and what a refused or cut stream leaves.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import socket

import orjson
import pytest
from aiohttp import web

from kvreplay.recorder import _relay as rp
from kvreplay.recorder._proxy import RecordingProxy
from kvreplay.workload.capture import MANIFEST, CaptureWriter

ROLE = b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n'
USAGE = {"prompt_tokens": 40, "completion_tokens": 3000, "total_tokens": 3040,
         "prompt_tokens_details": {"cached_tokens": 32}}
BODY = (b'{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true,'
        b'"stream_options":{"include_usage":true}}')


def token(i: int) -> bytes:
    return b'data: {"choices":[{"index":0,"delta":{"content":"t%05d"}}]}\n\n' % i


def long_stream(n: int = 3000) -> list[bytes]:
    """One role event (75 bytes), ``n`` token events (62 bytes each: 186 KB for 3000), usage, [DONE]."""
    return [ROLE, *(token(i) for i in range(n)),
            b'data: {"choices":[],"usage":' + orjson.dumps(USAGE) + b"}\n\n", b"data: [DONE]\n\n"]


def split(data: bytes, size: int) -> list[bytes]:
    return [data[i:i + size] for i in range(0, len(data), size)]


def ticking(monkeypatch) -> None:
    """``now_ns`` in the proxy module returns 1000, 1001, ... (one tick per call)."""
    it = iter(range(1000, 10**9))
    monkeypatch.setattr(rp, "now_ns", lambda: next(it))


def test_bulk_accounting_after_the_first_token_keeps_usage_and_first_token_time(monkeypatch):
    # 37-byte reads cut events anywhere; the role event (75 bytes, 0..74) ends in read 2
    # (bytes 74..110), the first token (62 bytes, 75..136) in read 3 (111..147): fed with the
    # 4th tick, 1003.
    ticking(monkeypatch)
    data = b"".join(long_stream())
    reads = split(data, 37)
    t = rp._Tally()
    end = next(i for i, r in enumerate(reads) if b'"us' in r)  # the read where the usage event starts
    for r in reads[:end]:
        t.feed(r)
    assert not t.timed and t.later  # after the first token: held for the bulk feed
    assert len(t.later) < end - 3  # fed 64 KiB at a time on the way, not all at the end
    assert not t.ended
    for r in reads[end:]:
        t.feed(r)
    # the usage event (cut between reads) made it look at what it held: the stream has ended
    assert t.ended and not t.later
    res = t.close()
    assert res.first_token_ns == 1003
    assert res.usage == USAGE
    assert res.content_deltas == 3000 and res.events == 3003 and res.done_marker
    assert res.error is None


def test_a_refused_event_after_the_first_token_stops_accounting_as_before(monkeypatch):
    # the broken event comes mid-bulk: what came after it (the usage) is not read, as when
    # each read was fed; the first token's time stays.
    ticking(monkeypatch)
    events = [ROLE, token(0), token(1), b"data: {not json\n\n",
              b'data: {"choices":[],"usage":' + orjson.dumps(USAGE) + b"}\n\n", b"data: [DONE]\n\n"]
    t = rp._Tally()
    for e in events:
        t.feed(e)
    res = t.close()
    assert (res.first_token_ns, res.usage, res.content_deltas) == (1001, None, 2)
    assert not t.on


def test_a_cut_stream_reports_the_usage_it_relayed(monkeypatch):
    # no [DONE]: the stream was cut after the usage event; partial() feeds what is held first
    ticking(monkeypatch)
    t = rp._Tally()
    for e in long_stream(10)[:-2]:
        t.feed(e)
    assert t.later  # the last token events are still held
    t.feed(long_stream(10)[-2])  # the usage event: a look at what is held (no finish reason: not an end)
    assert not t.later and not t.ended
    res = t.partial()
    assert res.usage == USAGE and res.content_deltas == 10 and not res.done_marker


async def _serve(handler) -> tuple[web.AppRunner, int]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]


def _dechunk(raw: bytes) -> tuple[bytes, bytes]:
    """(head, body) of a chunked HTTP/1.1 response read whole (test-side check of the framing)."""
    head, _, rest = raw.partition(b"\r\n\r\n")
    body = bytearray()
    while True:
        size_line, _, rest = rest.partition(b"\r\n")
        n = int(size_line, 16)
        if n == 0:
            assert rest == b"\r\n", rest[:50]  # the terminating chunk, nothing after it
            return head, bytes(body)
        body += rest[:n]
        assert rest[n:n + 2] == b"\r\n"
        rest = rest[n + 2:]


def test_a_long_stream_reaches_a_slow_client_byte_exact_and_is_accounted(tmp_path):
    # 3000 token events in reads of 1 to 3 events, then a 512 KiB event (over the transport's
    # drain limit); the client (a raw socket with a small receive buffer) reads slowly.
    events = long_stream()
    big = b'data: {"choices":[{"index":0,"delta":{"content":"' + b"y" * (512 << 10) + b'"}}]}\n\n'
    events.insert(-2, big)
    sent = b"".join(events)

    async def upstream(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "X-Up": "1"})
        await resp.prepare(request)
        i = 0
        while i < len(events):
            step = 1 + i % 3
            await resp.write(b"".join(events[i:i + step]))
            i += step
        await resp.write_eof()
        return resp

    async def go() -> bytes:
        runner, port = await _serve(upstream)
        writer = CaptureWriter(tmp_path / "W")
        proxy = RecordingProxy(f"http://127.0.0.1:{port}", writer, log=io.StringIO())
        url = await proxy.start()
        host, pport = url.rsplit("/", 1)[1].split(":")
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.setblocking(False)
        loop = asyncio.get_running_loop()
        try:
            await loop.sock_connect(s, (host, int(pport)))
            await loop.sock_sendall(s, b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                       b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%b"
                                       % (len(BODY), BODY))
            got = bytearray()
            while True:
                b = await loop.sock_recv(s, 65536)
                if not b:
                    break
                got += b
                if len(got) < (1 << 20):
                    await asyncio.sleep(0.002)  # slow for the first MiB: the proxy must wait, not drop
        finally:
            s.close()
            await proxy.stop()
            await runner.cleanup()
        return bytes(got)

    raw = asyncio.run(asyncio.wait_for(go(), 60))
    head, body = _dechunk(raw)
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"\r\nX-Up: 1\r\n" in head
    assert b"Transfer-Encoding: chunked" in head
    assert body == sent
    (m,) = [json.loads(x) for x in (tmp_path / "W" / "capture.jsonl").read_text().splitlines()]
    assert (m["outcome"], m["status"], m["usage"], m["cached_tokens"]) == ("complete", 200, USAGE, 32)
    assert 0 < m["ttft_ms"] <= m["e2e_ms"]
    assert (tmp_path / "W" / "000000.json").read_bytes() == BODY


def test_a_connection_the_upstream_closed_is_not_reused_and_a_dropped_request_is_a_502(tmp_path):
    # A raw upstream that answers one request per connection, then closes it without saying so
    # (no Connection: close): the proxy does not send the next request on the closed connection
    # (a new one each time); a request the upstream drops without answering is a 502 named as
    # aiohttp's client names it (the same text on both of the proxy's upstream paths).
    answer = b'{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}'
    conns: list[int] = []

    async def serve(reader: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        conns.append(1)
        head = await reader.readuntil(b"\r\n\r\n")
        n = int(next(v for k, _, v in (ln.partition(b": ") for ln in head.split(b"\r\n"))
                     if k.lower() == b"content-length"))
        body = await reader.readexactly(n)
        if b"DROP" not in body:
            w.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%b"
                    % (len(answer), answer))
            await w.drain()
        await asyncio.sleep(0.05)
        w.close()

    async def go() -> list:
        server = await asyncio.start_server(serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        proxy = RecordingProxy(f"http://127.0.0.1:{port}", CaptureWriter(tmp_path / "W"), log=io.StringIO())
        url = await proxy.start()
        import aiohttp

        got = []
        try:
            async with aiohttp.ClientSession() as client:
                for body in (BODY, BODY, BODY.replace(b"hi", b"DROP")):
                    async with client.post(url + "/v1/chat/completions", data=body) as r:
                        got.append((r.status, await r.read()))
                    await asyncio.sleep(0.15)  # the upstream has closed the connection by now
        finally:
            await proxy.stop()
            server.close()
        return got

    got = asyncio.run(asyncio.wait_for(go(), 30))
    assert got[:2] == [(200, answer), (200, answer)]
    assert got[2][0] == 502
    assert json.loads(got[2][1]) == {"error": {"message": "kvreplay record: upstream unreachable: "
                                                          "ServerDisconnectedError", "type": "bad_gateway"}}
    assert len(conns) >= 3  # one connection per request: each closed connection was replaced
    man = sorted((json.loads(x) for x in (tmp_path / "W" / "capture.jsonl").read_text().splitlines()),
                 key=lambda m: m["index"])
    assert [(m["status"], m["outcome"], m["usage"]) for m in man] == [
        (200, "complete", {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}),
        (200, "complete", {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}),
        (None, "upstream_error", None)]
    assert man[2]["error"] == "upstream unreachable: ServerDisconnectedError"


@pytest.mark.parametrize("path", ["llhttp", "aiohttp"])
def test_the_retention_verdict_runs_after_the_first_token_not_before(tmp_path, path):
    """The body is checked and written once the first token is relayed: not on the TTFT path, not at the end.

    The upstream sends the role event, waits, sends one token, waits, then ends. With the
    role event relayed nothing is retained yet (before, the verdict ran right after the
    first chunk, between the role event and the first token, and its CPU was added to
    TTFT); once the token is relayed the body is on disk while the stream is still open.
    ``aiohttp``: the proxy's other relay (an upstream its llhttp client refuses).
    """
    go_token, go_end = asyncio.Event(), asyncio.Event()

    async def upstream(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(len(BODY))

        def chunk(b: bytes) -> bytes:
            return b"%x\r\n%b\r\n" % (len(b), b)

        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                     + chunk(ROLE))
        await go_token.wait()
        writer.write(chunk(token(0)))
        await go_end.wait()
        writer.write(chunk(b'data: {"choices":[],"usage":' + orjson.dumps(USAGE) + b"}\n\n")
                     + chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        await writer.drain()
        writer.close()

    async def go():
        server = await asyncio.start_server(upstream, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        w = CaptureWriter(tmp_path / "W")
        proxy = RecordingProxy(f"http://127.0.0.1:{port}", w, log=io.StringIO())
        url = await proxy.start()
        if path == "aiohttp":
            proxy._h1 = None
        host, pport = url.removeprefix("http://").rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(pport))
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%b" % (len(BODY), BODY))
        got = await asyncio.wait_for(reader.readuntil(b'"content":""}}]}\n\n'), 5)
        await asyncio.sleep(0.05)  # the loop has run whatever the relay of the role event scheduled
        after_role = w.summary.retained
        go_token.set()
        got += await asyncio.wait_for(reader.readuntil(b't00000"}}]}\n\n'), 5)
        for _ in range(200):  # the handler runs the verdict on its next turn (bounded: 2 s)
            if w.summary.retained:
                break
            await asyncio.sleep(0.01)
        after_token = w.summary.retained
        on_disk = sorted(p.name for p in (tmp_path / "W").glob("*.json") if p.name[0].isdigit())
        go_end.set()
        got += await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), 5)
        writer.close()
        await proxy.stop()
        server.close()
        return after_role, after_token, on_disk, got

    after_role, after_token, on_disk, got = asyncio.run(asyncio.wait_for(go(), 30))
    assert (after_role, after_token) == (0, 1)
    assert on_disk == ["000000.json"]  # written while the stream was still open
    assert (tmp_path / "W" / "000000.json").read_bytes() == BODY
    assert got.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")
    (line,) = [json.loads(x) for x in (tmp_path / "W" / MANIFEST).read_text().splitlines()]
    assert (line["outcome"], line["usage"], line["cached_tokens"]) == ("complete", USAGE, 32)


@pytest.mark.parametrize("path", ["llhttp", "aiohttp"])
def test_a_client_that_leaves_at_done_is_complete_and_never_overlaps_its_next_request(tmp_path, path):
    """Issue 42 item 9: the OpenAI Python SDK reads to ``[DONE]``, closes, and sends its next request.

    The upstream relays the role, one token, the usage chunk and ``[DONE]``, then holds its
    response open (the terminal chunk not sent) until both requests are in. The client
    reads to ``[DONE]``, closes its connection and sends the second request at once.
    Before, the first request was in flight until its upstream ended: the second arrived
    with ``in_flight_at_arrival`` 2 (a one-at-a-time client captured as C2), and a client
    gone before the proxy's last write was logged ``client_gone`` with no TTFT or E2E. Now
    the end of the stream ends the request: both are ``complete``, each alone in flight,
    with usage, TTFT and an E2E that stops at ``[DONE]`` (not at the upstream's close,
    held here until the second request was admitted).
    """
    release = asyncio.Event()

    async def upstream(reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(len(BODY))

        def chunk(b: bytes) -> bytes:
            return b"%x\r\n%b\r\n" % (len(b), b)

        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                     + chunk(ROLE) + chunk(token(0))
                     + chunk(b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}\n\n')
                     + chunk(b'data: {"choices":[],"usage":' + orjson.dumps(USAGE) + b"}\n\n")
                     + chunk(b"data: [DONE]\n\n"))
        await writer.drain()
        await release.wait()
        with contextlib.suppress(ConnectionError):
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        writer.close()

    async def one(host: str, port: int) -> None:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\n\r\n%b" % (len(BODY), BODY))
        await asyncio.wait_for(reader.readuntil(b"data: [DONE]\n\n"), 5)
        writer.close()  # as the SDK does once it has read [DONE]: the terminal chunk is never read

    async def go():
        server = await asyncio.start_server(upstream, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        w = CaptureWriter(tmp_path / "W")
        proxy = RecordingProxy(f"http://127.0.0.1:{port}", w, log=io.StringIO())
        url = await proxy.start()
        if path == "aiohttp":
            proxy._h1 = None
        host, pport = url.removeprefix("http://").rsplit(":", 1)
        await one(host, int(pport))
        await one(host, int(pport))
        for _ in range(200):  # both admitted (bounded: 2 s)
            if w.summary.retained == 2:
                break
            await asyncio.sleep(0.01)
        release.set()
        for _ in range(200):  # both handlers done (bounded: 2 s)
            if not w._open:
                break
            await asyncio.sleep(0.01)
        await proxy.stop()
        server.close()
        return w

    w = asyncio.run(asyncio.wait_for(go(), 30))
    lines = [json.loads(x) for x in (tmp_path / "W" / MANIFEST).read_text().splitlines()]
    assert [(ln["index"], ln["outcome"], ln["in_flight_at_arrival"]) for ln in lines] == [
        (0, "complete", 1), (1, "complete", 1)]
    for ln in lines:
        assert (ln["usage"], ln["cached_tokens"]) == (USAGE, 32)
        assert ln["ttft_ms"] is not None and ln["e2e_ms"] is not None and ln["ttft_ms"] <= ln["e2e_ms"]
    assert w.peak_in_flight == 1


def test_an_end_marker_cut_between_two_reads_is_still_the_end(monkeypatch):
    """``[DONE]`` split as ``[DO`` | ``NE]``: the tally keeps the previous read's last bytes."""
    ticking(monkeypatch)
    t = rp._Tally()
    events = b"".join([ROLE, token(0)])
    t.feed(events)
    t.feed(b"data: [DO")
    assert not t.ended
    t.feed(b"NE]\n\n")
    assert t.ended and t.close().done_marker
