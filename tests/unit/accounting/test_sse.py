"""Behaviour of the SSE accountant, run on both twins through the ``impl`` fixture."""

from __future__ import annotations

import orjson
import pytest

from kvreplay.accounting import IMPLEMENTATION, Event, SSEAccountant, StreamResult, sse
from kvreplay.accounting import __all__ as accounting_all
from kvreplay.errors import StreamError


def run(impl, *reads: bytes, **kw) -> StreamResult:
    acc = impl(**kw)
    for i, r in enumerate(reads):
        acc.feed(r, 1000 + i)
    return acc.close()


def chunk(delta: dict | None = None, **top) -> bytes:
    obj = {"choices": [{"index": 0, "delta": delta if delta is not None else {}}], **top}
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def test_public_surface_sorted():
    # isort-style order (ruff RUF022): SCREAMING_CASE constants first, then the rest.
    assert accounting_all == sorted(accounting_all, key=lambda n: (not n.isupper(), n))
    assert IMPLEMENTATION in ("native", "pure")
    assert sse.SSEAccountant is SSEAccountant


@pytest.mark.parametrize("eol", [b"\n", b"\r", b"\r\n"])
def test_line_ends(impl, eol):
    body = (b'data: {"choices":[{"delta":{"content":"a"}}]}' + eol + eol) * 2 + b"data: [DONE]" + eol + eol
    res = run(impl, body)
    assert (res.events, res.content_deltas, res.done_marker, res.text_head) == (3, 2, True, "aa")


def test_crlf_split_between_reads_is_one_line_end(impl):
    res = run(impl, b'data: {"choices":[{"delta":{"content":"a"}}]}\r', b"\n\r", b"\n")
    assert (res.events, res.content_deltas) == (1, 1)


def test_lone_cr_then_lf_in_next_read_is_two_line_ends(impl):
    # CR ends the data line, the LF of the next read is swallowed as its pair,
    # so only the later CR is the blank line.
    acc = impl()
    acc.feed(b'data: {"choices":[{"delta":{"content":"a"}}]}\r', 1)
    assert acc.feed(b"\n", 2) == 0
    assert acc.feed(b"\r", 3) == 1


def test_feed_returns_count_of_completed_events(impl):
    acc = impl()
    assert acc.feed(chunk({"content": "x"}) * 3 + b"data: {", 1) == 3
    assert acc.feed(b'"choices":[]}\n', 2) == 0
    assert acc.feed(b"\n", 3) == 1


def test_multiline_data_joined_with_lf(impl):
    acc = impl(keep_events=True)
    acc.feed(b'data: {"choices":\ndata: [{"delta":{"content":"hi"}}]}\n\n', 7)
    res = acc.close()
    assert acc.events == [Event("", b'{"choices":\n[{"delta":{"content":"hi"}}]}', 7)]
    assert res.text_head == "hi"


def test_comments_unknown_fields_id_retry_ignored(impl):
    res = run(impl, b": ping\nid: 4\nretry: 10\nfoo\n...\n" + chunk({"content": "a"}))
    assert (res.events, res.chunks, res.content_deltas) == (1, 1, 1)


def test_event_name_kept_and_reset(impl):
    acc = impl(keep_events=True)
    acc.feed(b"event: message\n" + chunk({"content": "a"}) + chunk({"content": "b"}), 1)
    acc.close()
    assert [e.name for e in acc.events] == ["message", ""]


def test_blank_line_without_data_dispatches_nothing(impl):
    res = run(impl, b"\n\n\nevent: x\n\n")
    assert res.events == 0 and res.first_byte_ns == 1000


def test_empty_data_event_is_counted_not_decoded(impl):
    res = run(impl, b"data:\n\n")
    assert (res.events, res.chunks, res.error_events) == (1, 0, 0)


def test_done_marker_and_missing_done(impl):
    assert run(impl, chunk({"content": "a"}), b"data: [DONE]\n\n").done_marker
    assert not run(impl, chunk({"content": "a"})).done_marker


def test_usage_only_chunk_variants(impl):
    u = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
    for choices in ([], None, "absent"):
        top = {"usage": u} if choices == "absent" else {"choices": choices, "usage": u}
        res = run(impl, chunk({"content": "a"}), b"data: " + orjson.dumps(top) + b"\n\n")
        assert res.usage == u and res.content_deltas == 1 and list(res.token_ns) == [1000]


def test_continuous_usage_keeps_the_last(impl):
    reads = [chunk({"content": "a"}, usage={"prompt_tokens": 3, "completion_tokens": n}) for n in (1, 2, 3)]
    res = run(impl, *reads)
    assert res.completion_tokens == 3 and res.content_deltas == 3


@pytest.mark.parametrize(
    "details, expected",
    [(None, None), ("absent", None), ({}, None), ({"cached_tokens": None}, None), ({"cached_tokens": 0}, 0),
     ({"cached_tokens": 96}, 96)],
)
def test_cached_tokens_absent_null_zero_distinct(impl, details, expected):
    usage = {"prompt_tokens": 100, "completion_tokens": 1}
    if details != "absent":
        usage["prompt_tokens_details"] = details
    res = run(impl, b"data: " + orjson.dumps({"choices": [], "usage": usage}) + b"\n\n")
    assert res.cached_tokens == expected


def test_reasoning_tokens_and_groq_usage(impl):
    res = run(impl, chunk({}, usage={"completion_tokens": 9, "completion_tokens_details": {"reasoning_tokens": 4}}))
    assert res.reasoning_tokens == 4
    res = run(impl, chunk({}, x_groq={"id": "q", "usage": {"prompt_tokens": 45, "completion_tokens": 2}}))
    assert res.prompt_tokens == 45


def test_llamacpp_timings(impl):
    t = {"cache_n": 12, "prompt_n": 1, "prompt_ms": 3.5, "predicted_ms": 40.25}
    res = run(impl, chunk({}, timings=t))
    assert res.timings == t


@pytest.mark.parametrize(
    "payload, message",
    [
        (b'{"error":{"message":"CUDA out of memory","type":"server_error","code":500}}', "CUDA out of memory"),
        (b'{"object":"error","message":"bad","type":"BadRequestError","code":400}', "bad"),
        (b'{"error":"plain text"}', "plain text"),
    ],
)
def test_error_events_in_data(impl, payload, message):
    res = run(impl, chunk({"content": "a"}), b"data: " + payload + b"\n\n", b"data: [DONE]\n\n")
    assert (res.error_events, res.error) == (1, message)
    assert res.content_deltas == 1


def test_error_null_is_not_an_error(impl):
    res = run(impl, chunk({"content": "a"}, error=None))
    assert res.error_events == 0 and res.content_deltas == 1


def test_named_error_event_and_legacy_error_line(impl):
    res = run(impl, b'event: error\ndata: {"message":"boom"}\n\n')
    assert (res.error_events, res.error) == (1, "boom")
    res = run(impl, b'error: {"code":500,"message":"slot unavailable"}\n\n')
    assert (res.error_events, res.error) == (1, "slot unavailable")
    res = run(impl, b"error: not json\n")
    assert (res.error_events, res.error) == (1, "not json")


def test_error_message_bounded(impl):
    res = run(impl, b'data: {"error":{"message":"' + b"x" * 5000 + b'"}}\n\n')
    assert len(res.error) == 1024


def test_legacy_completions_text(impl):
    res = run(impl, b'data: {"object":"text_completion","choices":[{"text":"The","index":0,"finish_reason":null}]}\n\n')
    assert (res.content_deltas, res.text_head) == (1, "The")


def test_text_ignored_when_delta_is_an_object(impl):
    res = run(impl, b'data: {"choices":[{"delta":{},"text":"x"}]}\n\n')
    assert res.content_deltas == 0


def test_array_content_parts(impl):
    parts = [{"type": "text", "text": "Hel"}, {"type": "image_url"}, {"type": "text", "text": "lo"}]
    res = run(impl, chunk({"content": parts}))
    assert (res.content_deltas, res.text_head) == (1, "Hello")


def test_multiple_choices_one_token_event(impl):
    res = run(impl, b'data: {"choices":[{"index":0,"delta":{"content":"a"}},{"index":1,"delta":{"content":"b"}}]}\n\n')
    assert (res.content_deltas, len(res.token_ns), res.text_head) == (1, 1, "ab")


@pytest.mark.parametrize(
    "raw, text",
    [
        (rb'"\""', '"'),
        (rb'"\\"', "\\"),
        (rb'"\u00e9t\u00e9"', "été"),
        (rb'"\ud83d\ude00"', "\U0001f600"),
        (rb'"a\nb\tc\/"', "a\nb\tc/"),
        ('"日本語"'.encode(), "日本語"),
        (rb'"\u0000"', "\x00"),
    ],
)
def test_escaped_and_non_ascii_content(impl, raw, text):
    res = run(impl, b'data: {"choices":[{"delta":{"content":' + raw + b"}}]}\n\n")
    assert (res.content_deltas, res.text_head) == (1, text)


def test_empty_string_content_is_not_a_token(impl):
    res = run(impl, b'data: {"choices":[{"delta":{"content":"","reasoning_content":"","reasoning":null}}]}\n\n')
    assert (res.content_deltas, res.reasoning_deltas, list(res.token_ns)) == (0, 0, [])


def test_utf8_split_across_reads(impl):
    body = 'data: {"choices":[{"delta":{"content":"é😀"}}]}\n\n'.encode()
    cut = body.index(b"\xf0") + 2  # inside the 4-byte sequence
    res = run(impl, body[:cut], body[cut:])
    assert res.text_head == "é😀"


def test_text_head_bounded_in_characters(impl):
    reads = [chunk({"content": "ab\u00e9"}) for _ in range(10)]
    res = run(impl, *reads, head_chars=7)
    assert res.text_head == "abéabéa"
    assert res.content_deltas == 10


def test_finish_reason_last_non_null(impl):
    res = run(impl, chunk({"content": "a"}), b'data: {"choices":[{"delta":{},"finish_reason":"tool_calls"}]}\n\n')
    assert res.finish_reason == "tool_calls"


def test_token_times_and_first_byte(impl):
    acc = impl()
    acc.feed(b": hi\n\n", 5)
    acc.feed(chunk({"role": "assistant", "content": ""}), 6)
    acc.feed(chunk({"content": "a"}) + chunk({"reasoning": "r"}), 9)
    acc.feed(chunk({"content": "b"}), 15)
    res = acc.close()
    assert (res.first_byte_ns, res.first_token_ns, res.first_content_ns, res.last_token_ns) == (5, 9, 9, 15)
    assert list(res.token_ns) == [9, 9, 15]
    assert res.itl_ns == [0, 6]


def test_result_is_live_and_same_object(impl):
    acc = impl()
    r0 = acc.result
    acc.feed(chunk({"content": "a"}), 3)
    assert acc.result is r0 and acc.result.content_deltas == 1
    assert acc.close() is r0


def test_malformed_json_raises_with_partial(impl):
    acc = impl()
    acc.feed(chunk({"content": "a"}), 1)
    with pytest.raises(StreamError) as ei:
        acc.feed(b'data: {"choices":[\n\n', 2)
    assert ei.value.kind == "malformed" and ei.value.partial == b'{"choices":['
    assert acc.result.content_deltas == 1


def test_non_object_json_raises(impl):
    with pytest.raises(StreamError, match="not a JSON object"):
        run(impl, b"data: [1,2]\n\n")


def test_line_too_long_pending(impl):
    acc = impl(max_line_bytes=64)
    acc.feed(b"data: " + b"x" * 50, 1)
    with pytest.raises(StreamError) as ei:
        acc.feed(b"y" * 20, 2)
    assert ei.value.kind == "line_too_long"
    assert ei.value.partial == b"data: " + b"x" * 50 + b"y" * 20


def test_line_too_long_complete_line_in_one_read(impl):
    acc = impl(max_line_bytes=64)
    with pytest.raises(StreamError) as ei:
        acc.feed(chunk({"content": "ok"}) + b"data: " + b"z" * 80 + b"\n\n", 1)
    assert ei.value.kind == "line_too_long" and ei.value.partial == b"data: " + b"z" * 80
    assert acc.result.content_deltas == 1  # what came before was accounted


def test_line_at_the_limit_is_accepted(impl):
    line = b'data: {"choices":[{"delta":{"content":"' + b"a" * 20 + b'"}}]}'
    res = run(impl, line + b"\n\n", max_line_bytes=len(line))
    assert res.content_deltas == 1


def test_keep_events_off_by_default(impl):
    acc = impl()
    acc.feed(chunk({"content": "a"}), 1)
    assert acc.events == []


def test_close_twice(impl):
    acc = impl()
    acc.feed(b'data: {"choices":[{"delta":{"content":"a"}}]}', 4)
    r1 = acc.close()
    r2 = acc.close()
    assert r1 is r2 and r1.events == 1 and r1.last_event_ns == 4
