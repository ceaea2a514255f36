"""The runner's HTTP/1.1 client (runner.h1, llhttp): chunked decoding under any split, parity with send_body."""

import asyncio
import random

import aiohttp
import orjson
import pytest

from kvreplay.runner.h1 import H1Client, _Exchange
from kvreplay.runner.http import send_body

HEAD_200_CHUNKED = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"


def chunked(
    payload: bytes, rng: random.Random, *, ext: bool = False, trailers: bool = False
) -> bytes:
    out, i = [], 0
    while i < len(payload):
        n = rng.randint(1, 40)
        piece = payload[i : i + n]
        i += n
        size = b"%x" % len(piece)
        if ext and rng.random() < 0.3:
            size += b";name=value"
        out.append(size + b"\r\n" + piece + b"\r\n")
    out.append(b"0\r\n" + (b"X-Trailer: 1\r\n" if trailers else b"") + b"\r\n")
    return b"".join(out)


def dechunk_all(wire: bytes, cuts: list[int]) -> tuple[bytes, int]:
    """Feed a chunked 200 response (head, then ``wire`` cut at ``cuts``) to one exchange.

    Returns the body it kept and the index of the piece that completed it (-1: never).
    """
    x = _Exchange(None, None, 0)
    x.on_data(HEAD_200_CHUNKED)
    assert x.exc_status is None and x.http_status == 200
    ended_at = -1
    prev = 0
    for k, c in enumerate(cuts + [len(wire)]):
        piece = wire[prev:c]
        prev = c
        if not piece:
            continue
        x.on_data(piece)
        assert x.exc_status is None, x.error
        if x.complete:
            ended_at = k
            break
    return b"".join(x.body or ()), ended_at


@pytest.mark.parametrize("seed", range(40))
def test_dechunk_recovers_the_payload_under_any_split(seed):
    rng = random.Random(seed)
    # SSE with LF and CRLF line ends, so some frames hold CRLF (the fast path must refuse those)
    events = [
        b'data: {"i": %d}\n\n' % i if i % 3 else b'data: {"i": %d}\r\n\r\n' % i for i in range(50)
    ]
    payload = b"".join(events)
    wire = chunked(payload, rng, ext=seed % 2 == 0, trailers=seed % 4 == 1)
    cuts = sorted(rng.sample(range(1, len(wire)), rng.randint(0, 30)))
    got, ended_at = dechunk_all(wire, cuts)
    assert got == payload
    assert ended_at >= 0  # the terminal chunk was seen


def test_dechunk_one_byte_at_a_time():
    payload = b'data: {"a": 1}\n\n' * 7
    wire = chunked(payload, random.Random(1), trailers=True)
    got, ended = dechunk_all(wire, list(range(1, len(wire))))
    assert got == payload and ended == len(wire) - 1


def test_dechunk_whole_body_in_one_read():
    payload = b"".join(b'data: {"i": %d}\n\n' % i for i in range(200))
    wire = (
        b"".join(
            b"%x\r\n%s\r\n" % (len(e), e)
            for e in payload.split(b"\n\n")[:-1]
            for e in [e + b"\n\n"]
        )
        + b"0\r\n\r\n"
    )
    got, ended = dechunk_all(wire, [])
    assert got == payload and ended == 0


# --------------------------------------------------------------------------- parity with aiohttp


def _sse_body() -> bytes:
    ev = [
        {
            "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
            ]
        }
    ]
    ev += [
        {"choices": [{"index": 0, "delta": {"content": f"t{i}"}, "finish_reason": None}]}
        for i in range(5)
    ]
    ev += [
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        {
            "choices": [],
            "usage": {
                "prompt_tokens": 3,
                "completion_tokens": 5,
                "prompt_tokens_details": {"cached_tokens": 2},
            },
        },
    ]
    return b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in ev) + b"data: [DONE]\n\n"


SSE = _sse_body()
JSON_OK = orjson.dumps(
    {
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1},
    }
)


def _frames(body: bytes) -> bytes:
    return (
        b"".join(
            b"%x\r\n%s\r\n" % (len(p), p)
            for p in [body[i : i + 50] for i in range(0, len(body), 50)]
        )
        + b"0\r\n\r\n"
    )


SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
SSE_CHUNKED = SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n"
ERR_HEAD = (
    b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n"
    b"Content-Length: 36\r\n\r\n"
)

RESPONSES = {
    "/sse-chunked": SSE_CHUNKED + _frames(SSE),
    "/sse-length": SSE_HEAD + b"Content-Length: %d\r\n\r\n" % len(SSE) + SSE,
    "/sse-close": b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    + SSE,
    "/json": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
    % len(JSON_OK)
    + JSON_OK,
    "/err500": ERR_HEAD + b'{"error": {"message": "bad thing!"}}',
    "/cut": SSE_CHUNKED + _frames(SSE)[:150],
    "/stream-error": SSE_CHUNKED
    + _frames(SSE[:100].rsplit(b"\n\n", 1)[0] + b'\n\ndata: {"error": {"message": "boom"}}\n\n'),
    "/malformed": SSE_CHUNKED + _frames(b"data: {not json\n\n"),
}


class _Canned(asyncio.Protocol):
    def __init__(self):
        self.buf = b""

    def connection_made(self, t):
        self.t = t

    def data_received(self, data):
        self.buf += data
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = self.buf[:end].decode()
        n = int(
            next(
                ln.split(":")[1]
                for ln in head.split("\r\n")
                if ln.lower().startswith("content-length")
            )
        )
        if len(self.buf) < end + 4 + n:
            return
        self.buf = self.buf[end + 4 + n :]
        path = head.split(" ")[1]
        resp = RESPONSES[path]
        for i in range(0, len(resp), 97):  # several writes
            self.t.write(resp[i : i + 97])
        if path in ("/sse-close", "/cut"):
            self.t.close()


def _comparable(out):
    r = out.stream
    return (
        out.status,
        out.http_status,
        out.error,
        out.streamed,
        r.chunks,
        r.content_deltas,
        r.finish_reason,
        r.done_marker,
        r.usage,
        r.text_head,
        len(r.token_ns),
        r.error_events,
        r.first_token_ns is not None,
        out.headers_ns is not None,
    )


@pytest.mark.parametrize("path", sorted(RESPONSES))
def test_h1client_outcome_equals_send_body(path):
    async def go():
        loop = asyncio.get_running_loop()
        srv = await loop.create_server(_Canned, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        base = f"http://127.0.0.1:{port}"
        raw = b'{"messages": [{"role": "user", "content": "x"}], "stream": true}'
        try:
            h1 = H1Client(base, headers={"Content-Type": "application/json"}, read_idle_timeout_s=5)
            a = await h1.send(path, raw)
            a2 = await h1.send(path, raw)  # reuse (or reconnect after a close)
            h1.close()
            async with aiohttp.ClientSession(auto_decompress=False) as s:
                b = await send_body(
                    s, base + path, raw, headers={"Content-Type": "application/json"}
                )
        finally:
            srv.close()
        return a, a2, b

    a, a2, b = asyncio.run(go())
    assert _comparable(a) == _comparable(b)
    assert _comparable(a2) == _comparable(b)
    assert a.sent_ns <= (a.headers_ns or a.done_ns) <= a.done_ns


def test_h1client_connect_refused_and_http_only():
    async def go():
        loop = asyncio.get_running_loop()
        srv = await loop.create_server(_Canned, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        srv.close()
        await srv.wait_closed()
        h1 = H1Client(f"http://127.0.0.1:{port}", headers={})
        return await h1.send("/json", b"{}")

    out = asyncio.run(go())
    assert out.status == "connect" and out.http_status is None and "Cannot connect" in out.error
    H1Client("https://example.invalid", headers={})  # https shares the path (TLS transport)
    with pytest.raises(ValueError):
        H1Client("ftp://example.invalid", headers={})
    with pytest.raises(ValueError):
        H1Client("http://u:secret@example.invalid", headers={})
    with pytest.raises(ValueError):
        H1Client("http://example.invalid", headers={"Authorization": "Bearer k\r\nX-Injected: 1"})


# --------------------------------------------------------------------------- limits (issue 17)


def _feed(*reads: bytes) -> _Exchange:
    x = _Exchange(None, None, 0)
    for r in reads:
        x.on_data(r)
    return x


def test_negative_chunk_size_is_malformed_at_once():
    x = _feed(HEAD_200_CHUNKED + b"2\r\nhi\r\n-6\r\nabcdef\r\n")
    assert (x.exc_status, x.error) == ("malformed", "malformed_http: Invalid character in chunk size")
    assert x.body == [b"hi"]  # what arrived before the bad size line is kept


def test_chunk_framing_over_the_limit_between_two_chunks():
    from kvreplay.runner.h1 import MAX_FRAMING_BYTES

    x = _feed(HEAD_200_CHUNKED + b"2\r\nhi\r\n5;e=", *[b"a" * 8192] * (MAX_FRAMING_BYTES // 8192))
    assert x.exc_status is None  # 8 reads of 8 KiB after the head's read: exactly 65536 bytes, at the limit
    x.on_data(b"a" * 8192)
    assert (x.exc_status, x.error) == ("malformed",
                                       "malformed_http: chunk framing over 65536 bytes between two chunks")


def test_head_and_interim_limits():
    x = _feed(b"HTTP/1.1 200 OK\r\nX: " + b"v" * 40000, b"v" * 30000)
    assert x.error == "malformed_http: response head over 65536 bytes"
    x = _feed(b"HTTP/1.1 100 Continue\r\n\r\n" * 16 + b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    assert x.exc_status is None and x.complete and x.interim == 16 and x.body == [b"ok"]
    x = _feed(b"HTTP/1.1 100 Continue\r\n\r\n" * 17 + b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    assert x.error == "malformed_http: over 16 interim (1xx) responses"


def test_redirect_is_an_http_record_with_its_location():
    x = _feed(b"HTTP/1.1 308 Permanent Redirect\r\nLocation: https://elsewhere.example/v1\r\n"
              b"Content-Length: 0\r\n\r\n")
    out = H1Client._outcome(x, 0, 0)
    assert (out.status, out.http_status) == ("http", 308)
    assert out.error == "redirect not followed: HTTP 308, Location: https://elsewhere.example/v1"


def test_enobufs_on_the_socket_is_a_client_error():
    import errno as _errno

    x = _feed(HEAD_200_CHUNKED + b"2\r\nhi\r\n")
    x.on_lost(OSError(_errno.ENOBUFS, "No buffer space available"))
    assert (x.exc_status, x.error) == ("client_error",
                                       "client resources exhausted: [Errno 105] No buffer space available")
