"""The native and pure SSE accountants give identical results (yarl/aiohttp-style parity).

Every capture in fixtures/sse/ under several chunkings, then generated streams
(valid chunks of many shapes, serialised in several styles) and byte soup
(tokens of JSON and SSE glued at random) with random read boundaries. The
comparison covers the whole ``StreamResult``, the kept events, the count each
``feed`` returned and the first ``StreamError`` (type, kind, partial, message).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from parity.sse_captures import CHUNKINGS, SSE_CAPTURES, load_capture, run, split

from kvreplay.accounting import _sse_py

NO_EXT = os.environ.get("KVREPLAY_NO_EXTENSIONS", "") == "1"
pytestmark = pytest.mark.skipif(NO_EXT, reason="KVREPLAY_NO_EXTENSIONS=1: pure twin only")


def _native():
    return importlib.import_module("kvreplay.accounting._sse_c").SSEAccountant


def test_extension_loaded():
    """Fails when the native module silently did not build or import."""
    from kvreplay.accounting import sse

    assert sse.IMPLEMENTATION == "native"
    assert sse.SSEAccountant is _native()
    assert sse.SSEAccountant is not _sse_py.SSEAccountant


def test_captures_found():
    assert len(SSE_CAPTURES) >= 12


def both(chunks, **kw):
    a = run(_native(), chunks, **kw)
    b = run(_sse_py.SSEAccountant, chunks, **kw)
    assert a == b
    return b


@pytest.mark.parametrize("capture", SSE_CAPTURES, ids=lambda p: p.name)
@pytest.mark.parametrize("chunking", CHUNKINGS)
def test_c_equals_py(capture, chunking):
    result, events, _, err = both(split(load_capture(capture), chunking))
    assert err is None
    assert result["events"] == len(events) > 0


@pytest.mark.parametrize("capture", SSE_CAPTURES, ids=lambda p: p.name)
def test_c_equals_py_small_head_and_line_limit(capture):
    data = load_capture(capture)
    both(split(data, "seed-3"), head_chars=3)
    both(split(data, "seed-4"), max_line_bytes=200)  # most captures have longer lines: errors must match


# ------------------------------------------------------------------ generated streams
_text = st.text(max_size=12) | st.sampled_from(["", "a", '"', "\\", "é", "\U0001f600", "\x00", "\u2028", "\n"])
_maybe_str = st.none() | _text | st.integers(-3, 3) | st.just([]) | st.just({})


@st.composite
def _delta(draw):
    d = {}
    keys = st.sampled_from(["role", "content", "reasoning_content", "reasoning", "tool_calls", "refusal"])
    for key in draw(st.lists(keys, max_size=4, unique=True)):
        if key == "content" and draw(st.integers(0, 5)) == 0:
            d[key] = [draw(st.fixed_dictionaries({"type": st.sampled_from(["text", "thinking", "image_url"]),
                                                  "text": _text}))]
        elif key == "tool_calls":
            d[key] = [{"index": 0, "function": {"arguments": draw(_text)}}]
        else:
            d[key] = draw(_maybe_str)
    return d


@st.composite
def _choice(draw):
    c = {"index": draw(st.integers(0, 2))}
    kind = draw(st.integers(0, 9))
    if kind < 7:
        c["delta"] = draw(_delta())
    elif kind == 7:
        c["text"] = draw(_text)
    elif kind == 8:
        c["delta"] = None
        c["text"] = draw(_maybe_str)
    if draw(st.booleans()):
        c["finish_reason"] = draw(st.none() | st.sampled_from(["stop", "length"]) | st.integers(0, 2))
    if draw(st.integers(0, 4)) == 0:
        c["logprobs"] = {"content": [{"token": "a", "logprob": -0.25, "bytes": [97]}]}
    return c


@st.composite
def _payload(draw) -> dict | list | int:
    shape = draw(st.integers(0, 19))
    if shape == 0:
        return draw(st.sampled_from([[1], 3, "x", None]))
    obj = {"id": "chatcmpl-1", "object": draw(st.sampled_from(["chat.completion.chunk", "text_completion", "error"])),
           "created": 1760031300}
    cs = draw(st.integers(0, 9))
    if cs == 0:
        obj["choices"] = None
    elif cs == 1:
        obj["choices"] = []
    elif cs > 2:
        obj["choices"] = draw(st.lists(_choice() | st.sampled_from([None, 1, "s"]), min_size=1, max_size=3))
    u = draw(st.integers(0, 6))
    if u == 0:
        obj["usage"] = None
    elif u == 1:
        obj["usage"] = {"prompt_tokens": 7, "completion_tokens": 1,
                        "prompt_tokens_details": draw(st.none() | st.just({"cached_tokens": 0}))}
    elif u == 2:
        obj["x_groq"] = {"id": "q"} if draw(st.booleans()) else {"usage": {"prompt_tokens": 3}}
    if draw(st.integers(0, 9)) == 0:
        obj["timings"] = {"cache_n": 1, "prompt_n": 2, "prompt_ms": 1.5}
    if draw(st.integers(0, 9)) == 0:
        obj["error"] = draw(st.none() | st.just({"message": "boom", "code": 500}) | _text)
    if draw(st.integers(0, 5)) == 0:
        obj["big"] = draw(st.sampled_from([10**19, -(10**20), 1.5e300, 0.1, -0.0, True, False]))
    return obj


def _dump(obj, style: int) -> bytes:
    if style == 0:
        try:
            return orjson.dumps(obj)
        except TypeError:  # integers over 64 bits
            return json.dumps(obj, separators=(",", ":")).encode()
    if style == 1:
        return json.dumps(obj).encode()  # ensure_ascii: \uXXXX escapes, surrogate pairs
    if style == 2:
        return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode()
    return json.dumps(obj, indent=1, ensure_ascii=False).encode()  # multi-line -> several data: lines


@st.composite
def _stream(draw) -> bytes:
    eol = draw(st.sampled_from([b"\n", b"\r\n", b"\r"]))
    out = []
    for obj in draw(st.lists(_payload(), max_size=6)):
        if draw(st.integers(0, 6)) == 0:
            out.append(b": keep-alive" + eol)
        if draw(st.integers(0, 12)) == 0:
            out.append(b"event: " + draw(st.sampled_from([b"error", b"message"])) + eol)
        if draw(st.integers(0, 15)) == 0:
            out.append(b'error: {"message":"old"}' + eol)
        space = draw(st.sampled_from([b" ", b""]))
        for line in _dump(obj, draw(st.integers(0, 3))).split(b"\n"):
            out.append(b"data:" + space + line + eol)
        out.append(eol)
    if draw(st.booleans()):
        out.append(b"data: [DONE]" + eol + eol)
    body = b"".join(out)
    if draw(st.integers(0, 4)) == 0:
        body = body[: draw(st.integers(0, len(body)))]  # cut connection
    return body


def _cut(data: bytes, points: list[int]) -> list[bytes]:
    cuts = sorted({p % (len(data) + 1) for p in points})
    out, prev = [], 0
    for c in cuts:
        out.append(data[prev:c])
        prev = c
    out.append(data[prev:])
    return out  # empty reads included on purpose


_SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(body=_stream(), points=st.lists(st.integers(0, 10**6), max_size=12))
def test_generated_streams(body, points):
    both(_cut(body, points))


@_SETTINGS
@given(body=_stream(), head=st.integers(0, 6))
def test_generated_streams_1_byte_small_head(body, head):
    both(split(body, "1-byte"), head_chars=head)


_SOUP = st.sampled_from(
    [b"{", b"}", b"[", b"]", b":", b",", b" ", b"\n", b'"', b"\\", b"\\u", b"d83d", b"\\ude00", b"\\ud800", b"00e9",
     b'"choices"', b'"delta"', b'"content"', b'"reasoning"', b'"reasoning_content"', b'"text"', b'"finish_reason"',
     b'"usage"', b'"error"', b'"object"', b'"x_groq"', b'"timings"', b"null", b"true", b"0", b"-", b"12", b"1.5",
     b"e5", b"01", b'"a"', b'""', b"\xc3\xa9", b"\xc3", b"\xed\xa0\x80", b"\xf0\x9f\x98\x80", b"\x01", b"\x7f",
     b"\xff", b"\t", b'"co\\u006etent"']
)


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(_SOUP, max_size=40))
def test_byte_soup_payloads(parts):
    payload = b"".join(parts).replace(b"\n", b" ")
    both([b"data: " + payload + b"\n\n"])


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(_SOUP, max_size=30),
       prefix=st.sampled_from([b'{"choices":[{"delta":{"content":', b'{"choices":[{"text":', b'{"choices":[', b'{"']))
def test_byte_soup_inside_a_chunk(parts, prefix):
    payload = prefix + b"".join(parts).replace(b"\n", b" ")
    both([b"data: " + payload + b"\n\n"])


@settings(max_examples=200, deadline=None)
@given(raw=st.binary(max_size=300), points=st.lists(st.integers(0, 400), max_size=6))
def test_random_bytes(raw, points):
    both(_cut(raw, points), max_line_bytes=120)


# ------------------------------------------------------------------ hand-picked edges
# (payload, True when orjson must reject it). Invalid ones must raise the same
# StreamError from both twins; valid ones must account identically.
EDGES = [
    (b'{"choices":[{"delta":{"content":"\xff"}}]}', True),
    (b'{"choices":[{"delta":{"content":"\xc3"}}]}', True),
    (b'{"choices":[{"delta":{"content":"\xc0\xaf"}}]}', True),  # overlong
    (b'{"choices":[{"delta":{"content":"\xed\xa0\x80"}}]}', True),  # UTF-8 surrogate
    (b'{"choices":[{"delta":{"content":"\xe0\x80\xaf"}}]}', True),  # overlong 3-byte "/"
    (b'{"choices":[{"delta":{"content":"a\xe0\x9f\xbf"}}]}', True),  # overlong 3-byte U+07FF
    (b'{"choices":[{"delta":{"content":"\xf0\x80\x80\xaf"}}]}', True),  # overlong 4-byte
    (b'{"choices":[{"delta":{"content":"\xed\xbf\xbf"}}]}', True),  # UTF-8 low surrogate
    (b'{"choices":[{"delta":{"content":"\xf4\x90\x80\x80"}}]}', True),  # > U+10FFFF
    (b'{"id":"\xe2\x82","choices":[{"delta":{"content":"a"}}]}', True),
    (b'{"choices":[{"delta":{"content":"\\ud800"}}]}', True),
    (b'{"choices":[{"delta":{"content":"\\udc00\\ud800"}}]}', True),
    (b'{"choices":[{"delta":{"content":"\\ud800\\u0041"}}]}', True),
    (b'{"choices":[{"delta":{"content":"\\ud800\\n"}}]}', True),
    (b'{"choices":[{"delta":{"content":"\\x41"}}]}', True),
    (b'{"choices":[{"delta":{"content":"a\x01"}}]}', True),
    (b'{"choices":[{"delta":{"content":"a"}}],}', True),
    (b'{"choices":[{"delta":{"content":"a"}},]}', True),
    (b'{"choices":[{"delta":{"content":"a"}}]} x', True),
    (b'{"created":01,"choices":[{"delta":{"content":"a"}}]}', True),
    (b'{"created":1e999,"choices":[{"delta":{"content":"a"}}]}', True),
    (b'{"created":' + b"9" * 400 + b',"choices":[{"delta":{"content":"a"}}]}', True),
    (b'{"created":1.,"choices":[{"delta":{"content":"a"}}]}', True),
    (b'{"created":-,"choices":[]}', True),
    (b'{"created":nul,"choices":[]}', True),
    (b'{"choices":' + b"[" * 1100 + b"]" * 1100 + b"}", True),
    (b'\xef\xbb\xbf{"choices":[]}', True),
    (b'{"choices":[{"delta":{"content":"\xf0\x9f\x98\x80\xe2\x82\xac\xc3\xa9"}}]}', False),
    (b'{"choices":[{"delta":{"content":"\\ud83d\\ude00"}}]}', False),
    (b'{"choices":[{"delta":{"content":"\x7f"}}]}', False),
    (b'{"choices":[{"delta":{"content":"a","content":""}}]}', False),  # duplicate: last wins
    (b'{"choices":[{"delta":{"content":"","content":"b"}}]}', False),
    (b'{"choices":[{"delta":{"\\u0063ontent":"esc"}}]}', False),  # escaped key spells "content"
    (b'{"choices":[{"delta":{"content":"a"}}],"choices":[]}', False),
    (b'{"choices":[{"delta":{"content":"a"},"delta":{}}]}', False),
    (b'{"choices":[{"delta":{},"finish_reason":"stop","finish_reason":null}]}', False),
    # the finish reason and the usage object, read natively (issue 43 item 2)
    (b'{"choices":[{"delta":{},"finish_reason":"stop"}]}', False),
    (b'{"choices":[{"delta":{},"finish_reason":""}]}', False),
    (b'{"choices":[{"delta":{},"finish_reason":"st\\u006fp"}]}', False),  # escaped: orjson
    (b'{"choices":[{"delta":{},"finish_reason":null,"finish_reason":"length"}]}', False),
    (b'{"choices":[{"delta":{},"finish_reason":"stop","finish_reason":"length"}]}', False),
    (b'{"choices":[{"finish_reason":"stop"},{"finish_reason":null},{"finish_reason":"length"},{"text":"t"}]}', False),
    (b'{"choices":[{"finish_reason":"\xf0\x9f\x98\x80"}]}', False),
    (b'{"choices":[{"finish_reason":"\xc3"}]}', True),
    (b'{"choices":[{"finish_reason":"\xed\xa0\x80"}]}', True),
    (b'{"choices":[{"finish_reason":"a\x01"}]}', True),
    (b'{"choices":[{"finish_reason":7}]}', False),
    (b'{"choices":[{"finish_reason":["stop"]}]}', False),
    (b'{"usage":{"prompt_tokens":1},"usage":null,"choices":[]}', False),
    (b'{"usage":null,"usage":{"prompt_tokens":2},"choices":[]}', False),
    (b'{"usage":{},"choices":[]}', False),
    (b'{"usage":[1],"choices":[]}', False),
    (b'{"usage":"u","choices":[]}', False),
    (b'{"usage":{"prompt_tokens":1,"prompt_tokens":2}}', False),
    (b'{"usage":{"a":[1,{"b":"\\u00e9"}],"t":1.5,"n":null,"big":' + b"9" * 30 + b'}}', False),
    (b'{"usage":{"x":"\xc3"},"choices":[]}', True),
    (b'{"usage":{"x":1,},"choices":[]}', True),
    (b'{"choices":[{"delta":{"content":"a"},"finish_reason":"length"}],"usage":{"prompt_tokens":5},'
     b'"x_groq":{"usage":{"prompt_tokens":9}}}', False),
    (b'{"object":"error","object":"chat.completion.chunk","choices":[]}', False),
    (b'{"object":"err\\u006fr","message":"escaped"}', False),
    (b'{"created":1e5,"choices":[{"delta":{"content":"a"}}]}', False),
    (b'{"created":' + b"9" * 30 + b',"choices":[{"delta":{"content":"a"}}]}', False),
    (b' \t {"choices":[{"delta":{"content":"ws"}}]} \t ', False),
    (b'{"choices":[{"delta":{"content":{"x":1}}}]}', False),
    (b'{"choices":[{"delta":{"content":7}}]}', False),
    (b'{"choices":[{"delta":{"reasoning":"r","reasoning":""}}]}', False),
    (b'{"choices":[{"delta":null,"text":"t"}]}', False),
    (b'{"choices":[{"text":"t","text":""}]}', False),
    (b'{"choices":[1,null,{"delta":{"content":"a"}},"s"]}', False),
    (b'{"choices":' + b"[" * 100 + b"]" * 100 + b"}", False),
    (b'{"choices":[{"delta":{"content":"' + b"a" * 40 + b'"}}' + b',{"delta":{"content":"b"}}' * 9 + b"]}", False),
]


@pytest.mark.parametrize("payload, invalid", EDGES, ids=range(len(EDGES)))
def test_edges(payload, invalid):
    for reads in ([b"data: " + payload + b"\n\n"], split(b"data: " + payload + b"\n\n", "1-byte")):
        result, _, _, err = both(reads)
        assert (err is not None and err[1] == "malformed") is invalid
        # Only StreamError from either twin (never UnicodeDecodeError or another type).
        assert err is None or err[0] == "StreamError"
    for head in (0, 1):  # a full head must not skip validation either
        result, _, _, err = both([b"data: " + payload + b"\n\n"], head_chars=head)
        assert (err is not None and err[:2] == ("StreamError", "malformed")) is invalid


def test_native_scanner_handles_common_chunks_without_orjson():
    """The native path is really taken: only odd chunks fall back (x_groq, timings, errors, escapes).

    The finish chunk and the usage chunk are read natively too (issue 43 item 2).
    """
    acc = _native()()
    acc.feed(load_capture("openai_chat_gpt-4.1-nano_text.chunks.jsonl"), 0)
    res = acc.close()
    assert (res.chunks, res.finish_reason, res.prompt_tokens, res.completion_tokens) == (303, "stop", 16, 300)
    assert acc.fallbacks == 0
    acc = _native()()
    acc.feed(load_capture("deepseek_chat_deepseek-reasoner_reasoning.chunks.jsonl"), 0)
    res = acc.close()
    assert (res.finish_reason, res.reasoning_tokens) == ("stop", 205)
    assert acc.fallbacks == 0  # the final chunk carries finish_reason and usage
    acc = _native()()
    acc.feed(load_capture("groq_chat_llama-3.3-70b_text.chunks.jsonl"), 0)
    acc.close()
    assert acc.fallbacks == 2  # x_groq objects: orjson


# ------------------------------------------------------------------ shared payload prefixes
# The native scanner keeps the bytes of the last payload before its "choices" value and
# resumes the walk there when the next payload starts with them (issue 21 item 2).
_PFX = b'{"id":"chatcmpl-9","object":"chat.completion.chunk","created":1,"model":"m","choices":'


def _ev(payload: bytes) -> bytes:
    return b"data: " + payload + b"\n\n"


def test_shared_prefix_resumes_only_when_every_byte_matches():
    body = b"".join([
        _ev(_PFX + b'[{"index":0,"delta":{"content":"a"}}]}'),         # scanned in full; prefix kept
        _ev(_PFX + b'[{"index":0,"delta":{"content":"b"}}]}'),         # resumed
        _ev(_PFX + b'[{"index":0,"delta":{"content":"c"}}],"choices":[]}'),  # resumed; duplicate key -> orjson
        _ev(_PFX.replace(b'"m"', b'"n"') + b'[{"delta":{"content":"d"}}]}'),  # other prefix: full scan
        _ev(_PFX + b'[{"index":0,"delta":{"content":"e"}}]}'),         # the new prefix does not match: full
        _ev(_PFX + b'[{"index":0,"delta":{"content":"f"}}],"usage":{"prompt_tokens":3}}'),  # resumed; usage read
        # one byte differs inside the prefix ("object":"error"): a full scan, which hands it to orjson
        _ev(_PFX.replace(b'"chat.completion.chunk"', b'"error"') + b'[{"index":0,"delta":{"content":"g"}}]}'),
    ])
    native = _native()(head_chars=64)
    native.feed(body, 5)
    res = native.close()
    assert native.fallbacks == 2
    # the duplicate "choices" keeps the last (empty) array: no delta from event 3
    assert (res.content_deltas, res.text_head, res.prompt_tokens) == (6, "abdefg", 3)
    both(split(body, "1-byte"))
    both([body])



def test_a_usage_before_choices_is_never_a_resumed_prefix():
    """A usage object before ``choices`` is state: its bytes are no prefix to resume after (issue 43 item 2)."""
    u1 = b'{"id":"x","usage":{"prompt_tokens":1},"choices":'
    body = b"".join([
        _ev(u1 + b'[{"delta":{"content":"a"}}]}'),                     # usage 1, native
        _ev(b'{"id":"x","usage":{"prompt_tokens":2},"x_groq":{"id":"g"},"choices":[]}'),  # usage 2, orjson
        _ev(u1 + b'[{"delta":{"content":"b"}}]}'),                     # same bytes as the first: usage 1 again
    ])
    native = _native()(head_chars=64)
    native.feed(body, 5)
    res = native.close()
    assert (native.fallbacks, res.prompt_tokens, res.text_head) == (1, 1, "ab")
    both(split(body, "1-byte"))
    both([body])


def test_a_prefix_that_differs_in_one_byte_is_walked_in_full():
    """Same length, one byte apart, anywhere in the prefix: never resumed."""
    p1 = b'{"id":"x","object":"aaaaa","model":"m","choices":'
    body = b"".join([
        _ev(p1 + b'[{"delta":{"content":"a"}}]}'),
        _ev(p1.replace(b'"aaaaa"', b'"error"') + b'[{"delta":{"content":"b"}}]}'),  # an error object: orjson
        _ev(p1 + b'[{"delta":{"content":"c"}}]}'),
        _ev(p1.replace(b'"choices"', b'"choicez"') + b'[{"delta":{"content":"d"}}]}'),  # no choices: no delta
        _ev(p1 + b'[{"delta":{"content":"e"}}]}'),
    ])
    native = _native()(head_chars=64)
    native.feed(body, 5)
    res = native.close()
    assert native.fallbacks == 1
    assert (res.content_deltas, res.text_head) == (4, "abce")
    both([body])
    # invalid UTF-8 inside a prefix of the same length: malformed from both, not resumed
    _, _, _, err = both([body + _ev(p1.replace(b'"m"', b'"\xff"') + b'[{"delta":{"content":"f"}}]}')])
    assert err is not None and err[1] == "malformed"
    # the prefix's last byte (the colon) differs: not JSON, malformed from both
    _, _, _, err = both([body + _ev(p1[:-1] + b' [{"delta":{"content":"f"}}]}')])
    assert err is not None and err[1] == "malformed"


@settings(max_examples=300, deadline=None)
@given(rests=st.lists(st.lists(_SOUP, max_size=14).map(b"".join), min_size=1, max_size=6),
       points=st.lists(st.integers(0, 4000), max_size=8))
def test_shared_prefix_then_byte_soup(rests, points):
    first = _ev(_PFX + b'[{"index":0,"delta":{"content":"x"}}]}')
    body = first + b"".join(_ev(_PFX + r.replace(b"\n", b" ")) for r in rests) + first
    both(_cut(body, points))


# ------------------------------------------------------------------ through the HTTP framing
# Issue 30 item 8: the same SSE stream, framed as an HTTP/1.1 response (chunked transfer coding
# with arbitrary chunk sizes and extensions, or Content-Length) and read in arbitrary socket
# reads through the runner's own exchange (``runner.h1._Exchange`` on llhttp), accounts exactly
# as with the native and with the pure accountant, and exactly as the body fed whole to the
# pure accountant (same read time): the framing and the read boundaries change nothing.
_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"


def _http_response(body: bytes, sizes: list[int], framing: str, ext: bool) -> bytes:
    if framing == "length":
        return _HEAD + b"Content-Length: %d\r\n\r\n" % len(body) + body
    out, pos, i = [], 0, 0
    while pos < len(body):
        n = max(1, sizes[i % len(sizes)] if sizes else len(body))
        part = body[pos:pos + n]
        out.append(b"%x%s\r\n%s\r\n" % (len(part), b";k=v" if ext else b"", part))
        pos, i = pos + n, i + 1
    return _HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + b"".join(out) + b"0\r\n\r\n"


def _through_exchange(cls, reads: list[bytes], monkeypatch, head_chars: int = 8) -> tuple:
    """Feed ``reads`` to one ``_Exchange`` whose accountant is ``cls``; every read at the same time."""
    from kvreplay.runner import h1

    hx = importlib.import_module(h1._Exchange.__module__)  # the names of the exchange in use (pure or compiled)
    monkeypatch.setattr(hx, "SSEAccountant", cls)
    monkeypatch.setattr(hx, "now_ns", lambda: 7_000)
    x = h1._Exchange(None, None, head_chars)
    for r in reads:
        if x.state == h1._DONE:
            break
        x.on_data(r)
    assert x.acc is not None and isinstance(x.acc, cls)
    return x.exc_status, x.error, x.complete, dataclasses.asdict(x.acc.close())


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(body=_stream(), sizes=st.lists(st.integers(1, 300), max_size=6), framing=st.sampled_from(["chunked", "length"]),
       ext=st.booleans(), points=st.lists(st.integers(0, 10**6), max_size=12))
def test_http_framing_and_reads_change_nothing(body, sizes, framing, ext, points, monkeypatch):
    reads = [r for r in _cut(_http_response(body, sizes, framing, ext), points) if r]  # a socket read is never empty
    native = _through_exchange(_native(), reads, monkeypatch)
    pure = _through_exchange(_sse_py.SSEAccountant, reads, monkeypatch)
    assert native == pure
    # the body fed whole to the pure accountant at the same time gives the same accounting
    whole, _, _, err = run(_sse_py.SSEAccountant, [body], times=[7_000], head_chars=8)
    status, error, complete, result = pure
    assert result == whole
    if err is None:
        assert (status, error, complete) == (None, None, True)
    else:  # the accountant's StreamError ends the exchange as a malformed record, named
        assert status == "malformed" and error == f"{err[1]}: {err[3]}"[:1024]
