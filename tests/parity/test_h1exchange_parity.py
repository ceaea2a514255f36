"""The compiled twin of the runner's HTTP/1.1 exchange against its source (issue 43 item 2).

``kvreplay.runner._h1exchange_c`` is ``runner/_h1exchange.py`` compiled by Cython with the typed
fields of ``ext/_h1exchange_c.pxd``. Both classes read the same responses (well formed, hostile,
cut short), split into socket reads every way below, at the same read times; every field of the
two exchanges and the outcome ``H1Client`` makes of them must be equal.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path

import pytest
from parity.sse_captures import split

from kvreplay.runner import _h1exchange as pure_mod
from kvreplay.runner import h1

native_mod = pytest.importorskip("kvreplay.runner._h1exchange_c")

FIELDS = [f for f in pure_mod._Exchange.__slots__ if f not in ("acc", "conn", "fut", "on_body", "parser", "pieces")]

SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nX-Replica: r2\r\n\r\n"


def _chunked(*payloads: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in payloads) + b"0\r\n\r\n"


_EV = (b'data: {"choices":[{"index":0,"delta":{"content":"a"}}]}\n\n',
       b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
       b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,'
       b'"prompt_tokens_details":{"cached_tokens":3}}}\n\ndata: [DONE]\n\n')

RESPONSES = {
    "sse": SSE_HEAD + _chunked(*_EV),
    "sse_then_junk": SSE_HEAD + _chunked(*_EV) + b"HTTP/1.1 200 OK\r\n",
    "sse_cut": SSE_HEAD + _chunked(_EV[0])[:-5],
    "sse_bad_event": SSE_HEAD + _chunked(b"data: {not json\n\n"),
    "json": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n{\"usage\":1}",
    "interim_then_200": b"HTTP/1.1 100 Continue\r\n\r\n" * 3 + b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    "too_many_interim": b"HTTP/1.1 100 Continue\r\n\r\n" * 17 + b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
    "redirect": b"HTTP/1.1 308 Permanent Redirect\r\nLocation: https://elsewhere.example/v1\r\n"
                b"Content-Length: 0\r\n\r\n",
    "error_500": b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 5\r\n\r\noops!",
    "error_body_over_limit": b"HTTP/1.1 503 Busy\r\nContent-Length: 70000\r\n\r\n" + b"e" * 70000,
    "negative_chunk": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n-6\r\nabcdef\r\n",
    "non_hex_chunk": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhi\r\n",
    "two_lengths": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 3\r\n\r\nabc",
    "length_and_chunked": b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    "head_over_limit": b"HTTP/1.1 200 OK\r\nX: " + b"v" * 70000,
    "framing_over_limit": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhi\r\n5;e=" + b"a" * 70000,
    "upgrade": b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
    "trailers": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/plain\r\n\r\n"
                b"2\r\nhi\r\n0\r\nX-Trailer: " + b"t" * 100 + b"\r\n\r\n",
    "close_delimited": b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{\"a\":",
    "http10_keepalive": b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok",
    "nul_in_header": b"HTTP/1.1 200 OK\r\nX-A: a\x00b\r\nContent-Length: 0\r\n\r\n",
}
"""name -> every byte a server sends; ``close_delimited`` and ``sse_cut`` end with the connection lost."""

LOST_AFTER = {"close_delimited", "sse_cut", "json"}


def _splits(data: bytes, how: str) -> list[bytes]:
    """``parity.sse_captures.split``'s read boundaries, and ``crlf``: a read ending after each CR (no rewriting)."""
    if how != "crlf":
        return split(data, how)
    parts, start = [], 0
    for i in range(len(data) - 1):
        if data[i:i + 2] == b"\r\n":
            parts.append(data[start:i + 1])
            start = i + 1
    return [p for p in [*parts, data[start:]] if p]


def _run(mod, reads: list[bytes], lost: bool, monkeypatch) -> tuple:
    clock = iter(range(1_000, 10**9, 1_000))
    monkeypatch.setattr(mod, "now_ns", lambda: next(clock))
    x = mod._Exchange(None, None, 16, b"x-replica")
    for r in reads:
        if x.state == h1._DONE:
            break
        x.on_data(r)
    if lost:
        x.on_lost(ConnectionResetError(104, "Connection reset by peer"))
    state = {f: getattr(x, f, "<deleted>") for f in FIELDS}
    out = h1.H1Client._outcome(x, 500, 16)
    return state, dataclasses.asdict(out)


@pytest.mark.parametrize("how", ["whole", "1-byte", "7", "crlf", "seed-0", "seed-1", "seed-2"])
@pytest.mark.parametrize("name", sorted(RESPONSES))
def test_the_compiled_exchange_reads_every_response_as_its_source(name, how, monkeypatch):
    reads = _splits(RESPONSES[name], how)
    assert b"".join(reads) == RESPONSES[name]
    lost = name in LOST_AFTER
    native = _run(native_mod, reads, lost, monkeypatch)
    pure = _run(pure_mod, reads, lost, monkeypatch)
    assert native == pure


def test_the_cases_reach_every_ending():
    """The responses above end every way an exchange can: a test that reached only one would prove little."""
    seen = set()
    for name, data in RESPONSES.items():
        with pytest.MonkeyPatch.context() as mp:
            state, out = _run(pure_mod, [data], name in LOST_AFTER, mp)
        seen.add((out["status"], state["exc_status"]))
    assert {("ok", None), ("malformed", "malformed"), ("http", None), ("cut", "cut")} <= seen


def test_the_client_uses_the_compiled_exchange_beside_the_native_accountant():
    from kvreplay.accounting import IMPLEMENTATION

    if IMPLEMENTATION != "native":
        pytest.skip("the pure accountant: the pure exchange")
    assert h1._Exchange is native_mod._Exchange and h1.EXCHANGE_IMPLEMENTATION == "native"
    assert hashlib.sha256(Path(pure_mod.__file__).read_bytes()).hexdigest() == native_mod.SOURCE_SHA256


def test_a_twin_built_from_another_source_is_not_used(monkeypatch):
    from kvreplay.accounting import IMPLEMENTATION

    if IMPLEMENTATION != "native":
        pytest.skip("the pure accountant: the pure exchange, whatever was built")
    monkeypatch.setattr(native_mod, "SOURCE_SHA256", "0" * 64)  # as if _h1exchange.py was edited since the build
    with pytest.warns(RuntimeWarning, match="built from another version of runner/_h1exchange.py"):
        cls, impl = h1._exchange_class()
    assert (cls, impl) == (pure_mod._Exchange, "pure")
    monkeypatch.undo()
    assert h1._exchange_class() == (native_mod._Exchange, "native")


def test_the_compiled_exchange_is_a_cdef_class_with_every_field_typed():
    """The ``.pxd`` reached the build: a static type whose every slot is a C field (a getset of the
    type), not the ``.py`` compiled as an ordinary class with ``__slots__`` (member descriptors)."""
    cls = native_mod._Exchange
    assert not cls.__flags__ & (1 << 9)  # Py_TPFLAGS_HEAPTYPE: a class statement's type, not a cdef class
    kinds = {f: type(cls.__dict__.get(f)).__name__ for f in pure_mod._Exchange.__slots__}
    assert kinds == dict.fromkeys(pure_mod._Exchange.__slots__, "getset_descriptor")
