"""Issue 30 item 8: property tests over the HTTP/1.1 framing, the capture's scanners and decoders, the importers.

Budget: ``KVREPLAY_FUZZ_EXAMPLES`` examples per property (default 40, so ``make test``
stays fast); the longer run is documented in docs/reliability.md
(``KVREPLAY_FUZZ_EXAMPLES=2000``). Examples are derandomized (tests/conftest.py).

- HTTP/1.1 framing (``runner.h1.H1Client``): the same SSE bytes framed by
  ``Content-Length``, by chunks of random sizes (with chunk extensions) or by the
  connection's close, written in random pieces, give the same accounting as the bytes
  fed straight to the accountant; random bytes as a response give a record, never an
  exception.
- ``workload.jsonscan`` / ``body_value_span``: the span of any JSON value, in any of
  several serialisations (escaped or not, spaced or not), is exactly its bytes.
- ``workload.encoding``: gzip/deflate round trips under the cap; past the cap
  ``too_large``; random bytes labelled gzip give ``DecodeRefused``, never another error.
- ``workload.secrets``: a key in any JSON escaping is found, and the redacted body holds none.
- the importers: random Batch lines and HAR documents give a capture or ``WorkloadError``.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import zlib

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvreplay.accounting import SSEAccountant
from kvreplay.errors import ConfigError, WorkloadError
from kvreplay.runner.h1 import H1Client
from kvreplay.workload.encoding import BodyDecoder, DecodeRefused
from kvreplay.workload.importers_capture import body_value_span, import_har, import_openai_batch
from kvreplay.workload.jsonscan import iter_strings
from kvreplay.workload.secrets import find_secrets, redact_body

EXAMPLES = int(os.environ.get("KVREPLAY_FUZZ_EXAMPLES", "40"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
    max_leaves=20,
)


def _serialisations(v: object) -> list[bytes]:
    return [orjson.dumps(v), json.dumps(v).encode(), json.dumps(v, ensure_ascii=False).encode(),
            json.dumps(v, indent=1).encode(), json.dumps(v, separators=(",", ":")).encode()]


# -- jsonscan ---------------------------------------------------------------------------------


@FUZZ
@given(json_values, json_values)
def test_the_body_span_is_the_values_exact_bytes(body, other):
    for enc in _serialisations(body):
        for o in _serialisations(other)[:2]:
            line = b'{"custom_id": "c", "a": ' + o + b', "body": ' + enc + b', "z": ' + o + b"}"
            span = body_value_span(line)
            assert span is not None and line[span[0]:span[1]] == enc


@FUZZ
@given(json_values)
def test_iter_strings_yields_every_string_token(v):
    def strings(x: object) -> list[str]:
        if isinstance(x, str):
            return [x]
        if isinstance(x, dict):
            return [s for k, y in x.items() for s in [k, *strings(y)]]
        if isinstance(x, list):
            return [s for y in x for s in strings(y)]
        return []

    for enc in _serialisations(v):
        got = [json.loads(enc[a:b]) for a, b, _ in iter_strings(enc)]
        assert got == strings(v)


# -- encoding ---------------------------------------------------------------------------------


@FUZZ
@given(st.binary(max_size=5000), st.sampled_from(["gzip", "deflate", "identity"]), st.integers(1, 6000),
       st.lists(st.integers(1, 700), max_size=8))
def test_decoding_round_trips_under_the_cap_and_refuses_past_it(data, enc, cap, cuts):
    wire = {"gzip": gzip.compress, "deflate": zlib.compress, "identity": bytes}[enc](data)
    d = BodyDecoder(enc, cap)
    pieces, i = [], 0
    for c in cuts:
        pieces.append(wire[i:i + c])
        i += c
    pieces.append(wire[i:])
    try:
        for p in pieces:
            d.feed(p)
        out = d.finish()
    except DecodeRefused as exc:
        assert len(data) > cap and exc.reason == "too_large"
        assert len(d.out) == 0
    else:
        assert len(data) <= cap and out == data


@FUZZ
@given(st.binary(max_size=300), st.sampled_from(["gzip", "deflate"]))
def test_random_bytes_labelled_compressed_never_raise_another_error(data, enc):
    d = BodyDecoder(enc, 1000)
    try:
        d.feed(data)
        d.finish()
    except DecodeRefused as exc:
        assert exc.reason in ("encoding", "too_large")


# -- secrets ----------------------------------------------------------------------------------


@FUZZ
@given(json_values, st.sets(st.integers(0, 29), max_size=30), st.text(max_size=10))
def test_a_key_in_any_json_escaping_is_found_and_redacted(v, escaped, before):
    key = "sk-proj-0123456789abcdefQRSTuv"[:30]
    text = "".join(f"\\u{ord(c):04x}" if i in escaped else c for i, c in enumerate(key))
    content = json.dumps(before + " ")[1:-1]  # a key shape starts a word
    raw = (b'{"model":"m","extra":' + orjson.dumps(v) + b',"messages":[{"role":"user","content":"'
           + content.encode() + text.encode() + b'"}]}')
    assert json.loads(raw)["messages"][0]["content"] == before + " " + key
    assert any(f.where == "messages[0].content" for f in find_secrets(raw))
    own = find_secrets(raw, [key])
    assert own and own[0].kind == "the request's own credential"
    red = redact_body(raw, [key])
    assert red is not None and find_secrets(red, [key]) == [] and key.encode() not in red
    assert json.loads(red)["extra"] == json.loads(raw)["extra"]


# -- importers --------------------------------------------------------------------------------


@FUZZ
@given(st.lists(st.one_of(json_values.map(orjson.dumps), st.binary(max_size=60),
                          st.builds(lambda b, u: orjson.dumps({"custom_id": "x", "method": "POST", "url": u,
                                                               "body": b}),
                                    st.dictionaries(st.sampled_from(["model", "messages", "prompt", "stream"]),
                                                    json_values, max_size=4),
                                    st.sampled_from(["/v1/completions", "/v1/chat/completions", "/v1/e"]))),
                max_size=5))
def test_random_batch_files_give_a_capture_or_a_workload_error(tmp_path_factory, lines):
    tmp = tmp_path_factory.mktemp("batch")
    src = tmp / "b.jsonl"
    src.write_bytes(b"\n".join(lines))
    try:
        res = import_openai_batch(src, tmp / "W")
    except (WorkloadError, ConfigError):
        return
    assert res.summary.retained == len(list((tmp / "W").glob("*.json")))


@FUZZ
@given(json_values, st.lists(st.dictionaries(st.sampled_from(["startedDateTime", "request", "response", "time"]),
                                             json_values, max_size=4), max_size=3))
def test_random_har_documents_give_a_capture_or_a_workload_error(tmp_path_factory, junk, entries):
    tmp = tmp_path_factory.mktemp("har")
    for doc in (junk, {"log": {"entries": entries}}):
        src = tmp / "s.har"
        src.write_bytes(orjson.dumps(doc))
        try:
            import_har(src, tmp / "W")
        except (WorkloadError, ConfigError):
            continue


# -- HTTP/1.1 framing -------------------------------------------------------------------------


def _events(texts: list[str]) -> bytes:
    out = [b"data: " + orjson.dumps({"choices": [{"index": 0, "delta": {"content": t}}]}) + b"\n\n" for t in texts]
    out.append(b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":%d}}\n\n' % len(texts))
    return b"".join(out) + b"data: [DONE]\n\n"


def _framed(body: bytes, framing: str, sizes: list[int], ext: bool) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    if framing == "length":
        return head + b"Content-Length: %d\r\n\r\n" % len(body) + body
    if framing == "close":
        return head + b"Connection: close\r\n\r\n" + body
    out, i, k = [head + b"Transfer-Encoding: chunked\r\n\r\n"], 0, 0
    while i < len(body):
        n = sizes[k % len(sizes)] if sizes else len(body)
        k += 1
        piece = body[i:i + n]
        i += n
        out.append(b"%x%s\r\n%s\r\n" % (len(piece), b";x=1" if ext else b"", piece))
    out.append(b"0\r\n\r\n")
    return b"".join(out)


async def _exchange(response: bytes, cuts: list[int]):
    async def serve(reader, writer):
        try:
            await reader.readuntil(b"\r\n\r\n")
            i = 0
            for c in [*cuts, len(response)]:
                writer.write(response[i:i + c])
                i += c
                await writer.drain()
                await asyncio.sleep(0)
            writer.write(response[i:])
            await writer.drain()
        finally:
            writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = H1Client(f"http://127.0.0.1:{port}", headers={}, read_idle_timeout_s=5)
    try:
        return await asyncio.wait_for(client.send("/v1/chat/completions", b"{}"), 10)
    finally:
        client.close()
        server.close()
        await server.wait_closed()


@FUZZ
@given(st.lists(st.text(min_size=1, max_size=6), min_size=1, max_size=6),
       st.sampled_from(["length", "chunked", "close"]), st.lists(st.integers(1, 40), max_size=5), st.booleans(),
       st.lists(st.integers(1, 60), max_size=6))
def test_any_framing_of_the_same_stream_gives_the_same_accounting(texts, framing, sizes, ext, cuts):
    body = _events(texts)
    ref = SSEAccountant(head_chars=0)
    ref.feed(body, 0)
    want = ref.close()
    out = asyncio.run(_exchange(_framed(body, framing, sizes, ext), cuts))
    assert out.status == "ok", (out.status, out.error)
    got = out.stream
    assert (got.events, got.chunks, got.content_deltas, got.usage, got.done_marker) == (
        want.events, want.chunks, want.content_deltas, want.usage, want.done_marker)


@FUZZ
@given(st.binary(max_size=200), st.lists(st.integers(1, 50), max_size=4))
def test_random_bytes_as_a_response_give_a_record(junk, cuts):
    out = asyncio.run(_exchange(b"HTTP/1.1 200 OK\r\n" + junk, cuts))
    assert out.status in ("ok", "malformed", "cut", "http", "timeout", "write", "empty", "error"), out.status


def test_the_budget_is_an_env_var():
    assert FUZZ.max_examples == int(os.environ.get("KVREPLAY_FUZZ_EXAMPLES", "40"))


pytestmark = pytest.mark.timeout(300)
