"""One small scripted hostile HTTP server (127.0.0.1, port 0), a mode per case (issue 17).

Runs its own asyncio loop on a thread; raw sockets, so it can send anything
(negative chunk sizes, duplicate Content-Length, resets, endless heads...).
``POST`` answers follow the mode; ``GET /metrics`` and ``GET /cache`` serve
counters (hostile ones in the ``metrics_*`` modes). With ``tls=(cert, key)``
it speaks https.

The key-echo modes send back the ``Authorization`` value they received, so a
test proves the client's redaction, not the server's script.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import socket
import ssl
import struct
import threading
from collections.abc import Awaitable, Callable

import orjson

Writer = asyncio.StreamWriter


def _ev(obj: object) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def _delta(text: str, finish: str | None = None) -> bytes:
    return _ev({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]})


USAGE = _ev({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}})
GOOD_SSE = (_ev({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
            + _delta("hel") + _delta("lo") + _delta("", "stop") + USAGE + b"data: [DONE]\n\n")


def chunk(b: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(b), b)


SSE_CHUNKED = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def sse_length(body: bytes, extra: bytes = b"") -> bytes:
    return (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n" % len(body)
            + extra + b"\r\n" + body)


def json_resp(status: str, body: bytes, extra: bytes = b"") -> bytes:
    return (b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n" % (status.encode(), len(body))
            + extra + b"\r\n" + body)


def _reset(w: Writer) -> None:
    sock = w.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    w.transport.abort()


Mode = Callable[[Writer, dict], Awaitable[bool]]
MODES: dict[str, Mode] = {}


def mode(name: str) -> Callable[[Mode], Mode]:
    def deco(f: Mode) -> Mode:
        MODES[name] = f
        return f
    return deco


async def _write(w: Writer, data: bytes) -> None:
    w.write(data)
    await w.drain()


@mode("ok")
async def _ok(w: Writer, req: dict) -> bool:
    await _write(w, SSE_CHUNKED + b"".join(chunk(GOOD_SSE[i:i + 40]) for i in range(0, len(GOOD_SSE), 40))
                 + b"0\r\n\r\n")
    return True


@mode("negative_chunk")
async def _neg(w: Writer, req: dict) -> bool:
    await _write(w, SSE_CHUNKED + chunk(_delta("hi")) + b"-6\r\nabcdef\r\n")
    await asyncio.sleep(30)
    return False


@mode("overlong_chunk_size")
async def _overlong(w: Writer, req: dict) -> bool:
    await _write(w, SSE_CHUNKED + b"f" * 40 + b"\r\n")
    await asyncio.sleep(30)
    return False


@mode("endless_chunk_line")
async def _endless_chunk(w: Writer, req: dict) -> bool:
    await _write(w, SSE_CHUNKED + chunk(_delta("hi")) + b"5;ext=")
    for _ in range(100_000):
        await _write(w, b"a" * 8192)
    return False


@mode("huge_headers")
async def _huge_headers(w: Writer, req: dict) -> bool:
    await _write(w, b"HTTP/1.1 200 OK\r\nX-Big: " + b"b" * (200 << 10) + b"\r\n\r\n")
    await asyncio.sleep(30)
    return False


@mode("endless_headers")
async def _endless_headers(w: Writer, req: dict) -> bool:
    await _write(w, b"HTTP/1.1 200 OK\r\n")
    for i in range(1_000_000):
        await _write(w, b"X-H%d: %s\r\n" % (i, b"v" * 100))
    return False


@mode("slowloris")
async def _slowloris(w: Writer, req: dict) -> bool:
    for b in b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nX-Slow: " + b"z" * 1000:
        await _write(w, bytes([b]))
        await asyncio.sleep(0.2)
    return False


_BOMB: list[bytes] = []


@mode("gzip_bomb")
async def _gzip_bomb(w: Writer, req: dict) -> bool:
    # 64 MiB of zeros, compressed once per server process (~0.4 s of CPU each time:
    # per request, four concurrent ones outran the client's total timeout under load).
    if not _BOMB:
        _BOMB.append(gzip.compress(b"\0" * (64 << 20), 9))
    await _write(w, json_resp("200 OK", _BOMB[0], b"Content-Encoding: gzip\r\n"))
    return True


@mode("duplicate_content_length")
async def _dup_cl(w: Writer, req: dict) -> bool:
    await _write(w, b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n"
                    b"Content-Length: 5\r\n\r\n" % len(GOOD_SSE) + GOOD_SSE)
    return False


@mode("negative_content_length")
async def _neg_cl(w: Writer, req: dict) -> bool:
    await _write(w, b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: -5\r\n\r\n" + GOOD_SSE)
    return False


@mode("te_and_content_length")
async def _te_cl(w: Writer, req: dict) -> bool:
    await _write(w, b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: 10\r\n"
                    b"Transfer-Encoding: chunked\r\n\r\n" + chunk(GOOD_SSE) + b"0\r\n\r\n")
    return False


@mode("http10_close")
async def _http10(w: Writer, req: dict) -> bool:
    await _write(w, b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n" + GOOD_SSE)
    return False


@mode("continue_flood")
async def _continue(w: Writer, req: dict) -> bool:
    await _write(w, b"HTTP/1.1 100 Continue\r\n\r\n" * 1000 + sse_length(GOOD_SSE))
    return True


@mode("reset_before_response")
async def _reset_before(w: Writer, req: dict) -> bool:
    _reset(w)
    return False


@mode("reset_mid_stream")
async def _reset_mid(w: Writer, req: dict) -> bool:
    await _write(w, SSE_CHUNKED + chunk(_delta("hel")))
    await asyncio.sleep(0.05)
    _reset(w)
    return False


@mode("nul_bytes")
async def _nul(w: Writer, req: dict) -> bool:
    body = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a\0b\"}}]}\n\n" + GOOD_SSE
    await _write(w, sse_length(body))
    return True


@mode("invalid_utf8")
async def _utf8(w: Writer, req: dict) -> bool:
    body = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\xff\xfe\xc3\"}}]}\n\n" + GOOD_SSE
    await _write(w, sse_length(body))
    return True


@mode("deep_json")
async def _deep(w: Writer, req: dict) -> bool:
    body = b"data: " + b"[" * 200_000 + b"]" * 200_000 + b"\n\n" + GOOD_SSE
    await _write(w, sse_length(body))
    return True


@mode("endless_stream")
async def _endless(w: Writer, req: dict) -> bool:
    await _write(w, SSE_CHUNKED)
    for _ in range(1_000_000):
        await _write(w, chunk(_delta("x")))
        await asyncio.sleep(0.01)
    return False


@mode("terminal_escapes")
async def _escapes(w: Writer, req: dict) -> bool:
    await _write(w, json_resp("500 Internal Server Error",
                              orjson.dumps({"error": {"message": "boom \x1b[2J\x1b]0;pwned\x07 \x9b31m"}})))
    return True


@mode("status_out_of_range")
async def _status(w: Writer, req: dict) -> bool:
    await _write(w, b"HTTP/1.1 99999999999999999999999 OK\r\nContent-Length: 0\r\n\r\n")
    return False


@mode("usage_out_of_range")
async def _usage(w: Writer, req: dict) -> bool:
    body = (_delta("hi") + _delta("", "stop")
            + _ev({"choices": [], "usage": {"prompt_tokens": 2**64 - 1, "completion_tokens": 1}}) + b"data: [DONE]\n\n")
    await _write(w, sse_length(body))
    return True


@mode("redirect_307")
async def _redirect(w: Writer, req: dict) -> bool:
    await _write(w, b"HTTP/1.1 307 Temporary Redirect\r\nLocation: http://127.0.0.1:9/elsewhere\r\n"
                    b"Content-Length: 0\r\n\r\n")
    return True


# -- key echoes: every place a server may put the Authorization value back --------------------


def _auth(req: dict) -> str:
    return req["headers"].get("authorization", "")


@mode("key_echo_401")
async def _echo_401(w: Writer, req: dict) -> bool:
    await _write(w, json_resp("401 Unauthorized",
                              orjson.dumps({"error": {"message": f"bad key: {_auth(req)}"}})))
    return True


@mode("key_echo_500_cut")
async def _echo_500(w: Writer, req: dict) -> bool:
    # the key straddles the 1 KiB cut of the error text
    msg = "e" * (1024 - 16) + _auth(req) + " trailing"
    await _write(w, json_resp("500 Internal Server Error", orjson.dumps({"error": {"message": msg}})))
    return True


@mode("key_echo_sse_error")
async def _echo_sse_err(w: Writer, req: dict) -> bool:
    body = _delta("hi") + _ev({"error": {"message": f"upstream said {_auth(req)}"}})
    await _write(w, sse_length(body))
    return True


@mode("key_echo_content")
async def _echo_content(w: Writer, req: dict) -> bool:
    key = _auth(req)
    # split across events and across the 256-character cut of text_head
    body = (_delta("c" * 240) + _delta(key[:10]) + _delta(key[10:]) + _delta(" and " + key, "stop")
            + _ev({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 3, key: key},
                   "timings": {"note": key}}) + b"data: [DONE]\n\n")
    await _write(w, SSE_CHUNKED + chunk(body) + b"0\r\n\r\n")
    return True


@mode("key_echo_json")
async def _echo_json(w: Writer, req: dict) -> bool:
    key = _auth(req)
    body = orjson.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": f"your key {key}"},
                                      "finish_reason": "stop"}],
                         "usage": {"prompt_tokens": 1, "completion_tokens": 3, "echo": key}})
    await _write(w, json_resp("200 OK", body))
    return True


# -- counters -------------------------------------------------------------------------------------

GOOD_METRICS = (b"# TYPE vllm:prefix_cache_queries counter\nvllm:prefix_cache_queries_total 10\n"
                b"# TYPE vllm:prefix_cache_hits counter\nvllm:prefix_cache_hits_total 4\n"
                b"vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n")


_BIG_METRICS: list[bytes] = []


def big_metrics() -> bytes:
    """About 5 MB of exposition: 50,000 histogram-bucket series under the scrape bounds, built once."""
    if not _BIG_METRICS:
        lines = [b"# HELP vllm:junk_seconds junk\n# TYPE vllm:junk_seconds histogram\n"]
        lines += [b'vllm:junk_seconds_bucket{model_name="some-model-name-of-some-length",engine="%d",'
                  b'le="%d.0"} %d\n' % (i // 1000, i % 1000, i) for i in range(50_000)]
        _BIG_METRICS.append(GOOD_METRICS + b"".join(lines))
    return _BIG_METRICS[0]


def metrics_body(kind: str) -> bytes:
    if kind == "metrics_5mb":
        return big_metrics()
    if kind == "metrics_many_labels":
        labels = ",".join(f'l{i}="v"' for i in range(1000))
        return GOOD_METRICS + b"vllm:junk{" + labels.encode() + b"} 1\n"
    if kind == "metrics_long_line":
        return GOOD_METRICS + b"vllm:junk{a=\"" + b"x" * (5 << 20) + b"\"} 1\n"
    if kind == "metrics_many_series":
        return GOOD_METRICS + b"".join(b'vllm:junk{i="%d"} 1\n' % i for i in range(400_000))
    if kind == "metrics_huge":  # a counter of 2^64 + 1, printed as an integer (exact only as text)
        return GOOD_METRICS.replace(b"_hits_total 4", b"_hits_total 18446744073709551617")
    if kind == "metrics_duplicate":  # one series printed twice with the same labels (issue 44 item 3)
        return GOOD_METRICS.replace(b"_queries_total 10\n", b"_queries_total 10\nvllm:prefix_cache_queries_total 10\n")
    if kind == "metrics_nan":
        return GOOD_METRICS.replace(b"_hits_total 4", b"_hits_total NaN") + b"vllm:gpu_cache_usage_perc +Inf\n"
    return GOOD_METRICS


def cache_body(kind: str) -> bytes:
    if kind == "cache_nan":
        return b'{"hits": NaN, "misses": 1e400, "entries": 3, "max_entries": 8, "hit_tokens": -Infinity}'
    if kind == "cache_huge":  # 2^64 + 1 and -2^70: outside the 64-bit range
        return (b'{"hits": 18446744073709551617, "misses": 2, "entries": 3, "max_entries": 8, '
                b'"stores": -1180591620717411303424}')
    if kind == "cache_strings":
        return b'{"hits": "12", "misses": 2, "entries": "three", "max_entries": 8}'
    if kind == "cache_deep":
        return b'{"hits": 1, "misses": 2, "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    return b'{"hits": 1, "misses": 2, "entries": 3, "max_entries": 8}'


class HostileServer:
    """The scripted server; ``with HostileServer("negative_chunk") as s: s.url``.

    Args:
        mode: A key of ``MODES`` for POST answers (``metrics_*`` modes answer POST with ``ok``).
        tls: ``(certfile, keyfile)`` to serve https.
        vanish_after: After this many ``GET /metrics`` answered it stops listening and
            closes the connection (a replica that dies mid-phase).
    """

    def __init__(self, mode: str, tls: tuple[str, str] | None = None, *, vanish_after: int | None = None) -> None:
        self.mode = mode
        self.vanish_after = vanish_after  # after this many GET /metrics it stops listening (a replica that dies)
        self.metrics_reads = 0
        self.answer = MODES.get(mode, MODES["ok"])
        self.tls = tls
        self.port = 0
        self.requests = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def __enter__(self) -> HostileServer:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _shutdown(self) -> None:
        self._srv.close()
        await self._srv.wait_closed()
        me = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not me]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        ctx = None
        if self.tls:
            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            ctx.load_cert_chain(*self.tls)
        self._srv = srv = self._loop.run_until_complete(
            asyncio.start_server(self._conn, "127.0.0.1", 0, ssl=ctx, limit=1 << 20))
        self.port = srv.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    async def _conn(self, r: asyncio.StreamReader, w: Writer) -> None:
        try:
            while True:
                head = await r.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path = lines[0].split(" ")[:2]
                headers = {}
                for ln in lines[1:]:
                    if ":" in ln:
                        k, v = ln.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                n = int(headers.get("content-length", "0"))
                body = await r.readexactly(n) if n else b""
                req = {"method": method, "path": path, "headers": headers, "body": body}
                if method == "GET":
                    if path == "/cache" and self.mode.startswith("cache_"):
                        await _write(w, json_resp("200 OK", cache_body(self.mode)))
                    elif path == "/metrics" and self.vanish_after is not None \
                            and self.metrics_reads >= self.vanish_after:
                        self._srv.close()  # gone: this connection closed, new ones refused
                        break
                    elif path == "/metrics" and not self.mode.startswith("cache_"):
                        self.metrics_reads += 1
                        await _write(w, b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n"
                                     % len(mb := metrics_body(self.mode)) + mb)
                    else:
                        await _write(w, b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    continue
                self.requests += 1
                if not await self.answer(w, req):
                    break
        except (asyncio.IncompleteReadError, ConnectionError, OSError, asyncio.LimitOverrunError,
                asyncio.CancelledError):
            pass  # a client that went away, or the server shutting down
        finally:
            with contextlib.suppress(Exception):  # noqa: BLE001
                w.close()
