"""Field cases B01, B02, B04, B05, B06 and B14 (FIELD-CASES.md) at the accountant level.

Times in the cases are milliseconds after the request was written; they are
passed as ``recv_ns`` (ms * 1_000_000). Expected values are the ones the case
states, typed in here, not recomputed from the code under test.
"""

from __future__ import annotations

import pytest
from parity.sse_captures import load_capture, split

MS = 1_000_000


def feed_timed(impl, timed: list[tuple[int, bytes]], **kw):
    """Feed ``(ms, bytes)`` reads in order; return (accountant, closed result)."""
    acc = impl(keep_events=True, **kw)
    for ms, data in timed:
        acc.feed(data, ms * MS)
    return acc, acc.close()


def lines(timed: list[tuple[int, str]]) -> list[tuple[int, bytes]]:
    """``(ms, 'data: ...')`` -> one read per event, framed with a blank line."""
    return [(ms, (line + "\n\n").encode()) for ms, line in timed]


# ---------------------------------------------------------------- B01
B01_READS = [
    b'data: {"choices":[{"ind',
    b'ex":0,"delta":{"content":"Hel"}}]}\n\ndata: {"choices":[{"index":0,"delta":{"content":"lo"}}]}\n\ndata: [DO',
    b"NE]\n\n",
]
B01_WHOLE = b"".join(B01_READS)


def _b01_variants() -> dict[str, list[bytes]]:
    crlf = B01_WHOLE.replace(b"\n", b"\r\n")
    return {
        "three-reads": B01_READS,
        "a-1-byte": split(B01_WHOLE, "1-byte"),
        "b-one-read": [B01_WHOLE],
        "c-crlf": [crlf],
        "c-crlf-1-byte": split(crlf, "1-byte"),
        "d-comment": [b": keep-alive\n\n" + B01_WHOLE],
        "e-no-space": [B01_WHOLE.replace(b"data: ", b"data:")],
    }


@pytest.mark.parametrize("variant", list(_b01_variants()))
def test_b01_events_do_not_align_with_reads(impl, variant):
    reads = _b01_variants()[variant]
    acc = impl(keep_events=True)
    for i, r in enumerate(reads):
        acc.feed(r, i)
    res = acc.close()
    assert res.content_deltas == 2
    assert res.text_head == "Hello"
    assert [e.data for e in acc.events][-1] == b"[DONE]"
    assert [e.data for e in acc.events][:2] == [
        b'{"choices":[{"index":0,"delta":{"content":"Hel"}}]}',
        b'{"choices":[{"index":0,"delta":{"content":"lo"}}]}',
    ]
    assert res.done_marker is True
    assert res.error_events == 0 and res.error is None
    assert res.events == 3 and res.chunks == 2


# ---------------------------------------------------------------- B02
B02 = [
    (100, 'data: {"id":"c1","object":"chat.completion.chunk",'
          '"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}'),
    (110, 'data: {"id":"c1","object":"chat.completion.chunk",'
          '"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}'),
    (400, 'data: {"id":"c1","object":"chat.completion.chunk","choices":[],'
          '"usage":{"prompt_tokens":7,"completion_tokens":1,"total_tokens":8}}'),
    (401, "data: [DONE]"),
]


def test_b02_usage_only_final_chunk(impl):
    _, res = feed_timed(impl, lines(B02))
    assert res.text_head == "Hi"
    assert (res.prompt_tokens, res.completion_tokens, res.usage["total_tokens"]) == (7, 1, 8)
    assert res.finish_reason == "stop"
    assert res.first_token_ns == 100 * MS  # TTFT: the usage chunk never moves it
    assert res.last_token_ns == 100 * MS
    assert res.last_event_ns == 401 * MS  # E2E
    assert res.done_marker


def test_b02_vllm_usage_chunk_capture(impl):
    body = load_capture("vllm_chat_deepseek-v3.1_usage-chunk_nearai-doc_exact-body.sse")
    _, res = feed_timed(impl, [(0, body)])
    assert res.text_head == "Okay."
    assert (res.prompt_tokens, res.completion_tokens, res.usage["total_tokens"]) == (13, 3, 16)
    assert res.content_deltas == 2
    assert len(res.itl_ns) == 1
    assert res.cached_tokens is None  # no prompt_tokens_details at all


@pytest.mark.parametrize(
    "name, text_start, usage",
    [
        ("openai_chat_gpt-4.1-nano_text.chunks.jsonl", "**Holiday Name:** Harmony Day", (16, 300, 316)),
        ("azure_chat_gpt-5-nano_model-router.chunks.jsonl", "Capital of Denmark.", (15, 78, 93)),
    ],
)
def test_b02_other_usage_chunk_captures(impl, name, text_start, usage):
    _, res = feed_timed(impl, [(0, load_capture(name))])
    assert res.text_head.startswith(text_start)
    assert (res.prompt_tokens, res.completion_tokens, res.usage["total_tokens"]) == usage
    assert res.cached_tokens == 0  # reported as 0, kept distinct from absent
    assert res.finish_reason == "stop"


# ---------------------------------------------------------------- B04
B04 = [
    (5, 'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}'),
    (840, 'data: {"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}'),
    (860, 'data: {"choices":[{"index":0,"delta":{"content":" there"},"finish_reason":null}]}'),
    (880, 'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}'),
    (881, "data: [DONE]"),
]


def test_b04_role_prelude_is_not_the_first_token(impl):
    _, res = feed_timed(impl, lines(B04))
    assert res.first_token_ns == 840 * MS
    assert res.itl_ns == [20 * MS]
    assert res.first_byte_ns == 5 * MS


def test_b04_azure_first_text_is_line_3(impl):
    raw = load_capture("azure_chat_gpt-5-nano_model-router.chunks.jsonl")
    events = [e + b"\n\n" for e in raw.split(b"\n\n") if e]
    _, res = feed_timed(impl, [(10 * (i + 1), e) for i, e in enumerate(events)])
    assert res.first_byte_ns == 10 * MS
    assert res.first_token_ns == 30 * MS
    assert res.text_head.startswith("Capital")


def test_b04_role_and_first_token_in_one_chunk(impl):
    raw = load_capture("proxy_chat_llama-3.3-70b_role-with-content_nearai-doc_exact-body.sse")
    events = [e + b"\n\n" for e in raw.split(b"\n\n") if e.strip()]
    _, res = feed_timed(impl, [(10 * (i + 1), e) for i, e in enumerate(events)])
    assert res.first_token_ns == 10 * MS  # that chunk *is* the first token
    assert res.text_head == "I agree"


# ---------------------------------------------------------------- B05
def _b05(key: str, capped: bool) -> list[tuple[int, str]]:
    def d(v):
        return '{"' + key + '":"' + v + '"}'

    head = [
        (300, 'data: {"choices":[{"index":0,"delta":' + d("Let") + "}]}"),
        (320, 'data: {"choices":[{"index":0,"delta":' + d(" me") + "}]}"),
    ]
    if capped:
        return [*head, (340, 'data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}'),
                (341, "data: [DONE]")]
    return [
        *head,
        (2300, 'data: {"choices":[{"index":0,"delta":{"content":"Answer"}}]}'),
        (2320, 'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}'),
        (2321, "data: [DONE]"),
    ]


@pytest.mark.parametrize("key", ["reasoning_content", "reasoning"])
def test_b05_reasoning_starts_ttft(impl, key):
    _, res = feed_timed(impl, lines(_b05(key, capped=False)))
    assert res.first_token_ns == 300 * MS
    assert res.first_content_ns == 2300 * MS
    assert res.text_head == "Answer"
    assert (res.reasoning_deltas, res.content_deltas) == (2, 1)


@pytest.mark.parametrize("key", ["reasoning_content", "reasoning"])
def test_b05_capped_while_reasoning(impl, key):
    _, res = feed_timed(impl, lines(_b05(key, capped=True)))
    assert res.first_token_ns == 300 * MS
    assert res.first_content_ns is None
    assert res.finish_reason == "length"
    assert not res.eof_before_finish and res.error_events == 0  # still successful
    assert not res.visible


def test_b05_thinking_array_content(impl):
    think = '{"type":"thinking","thinking":[{"type":"text","text":"Let"}]}'
    timed = [
        (300, 'data: {"choices":[{"index":0,"delta":{"content":[' + think + "]}}]}"),
        (2300, 'data: {"choices":[{"index":0,"delta":{"content":[{"type":"text","text":"Answer"}]}}]}'),
        (2320, 'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}'),
    ]
    _, res = feed_timed(impl, lines(timed))
    assert res.first_token_ns == 300 * MS
    assert res.first_content_ns == 2300 * MS
    assert res.text_head == "Answer"
    assert (res.reasoning_deltas, res.content_deltas) == (1, 1)


# ---------------------------------------------------------------- B06
def test_b06_deepseek_reasoner_capture(impl):
    _, res = feed_timed(impl, [(0, load_capture("deepseek_chat_deepseek-reasoner_reasoning.chunks.jsonl"))])
    assert res.output_tokens == 219 and not res.output_tokens_estimated
    assert res.reasoning_tokens == 205
    assert res.content_tokens == 14
    assert len(res.token_ns) == 218
    assert (res.reasoning_deltas, res.content_deltas) == (205, 13)
    assert len(res.itl_ns) == 217
    assert res.chunks == 220


def _b06_minimal(with_usage: bool) -> list[tuple[int, str]]:
    usage = ',"usage":{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13}' if with_usage else ""
    return [
        (100, 'data: {"choices":[{"index":0,"delta":{"reasoning_content":"a"}}]}'),
        (110, 'data: {"choices":[{"index":0,"delta":{"reasoning_content":"b"}}]}'),
        (120, 'data: {"choices":[{"index":0,"delta":{"reasoning_content":"c"},"finish_reason":"length"}]'
              + usage + "}"),
        (121, "data: [DONE]"),
    ]


def test_b06_minimal_reasoning_only(impl):
    _, res = feed_timed(impl, lines(_b06_minimal(True)))
    assert res.output_tokens == 3
    assert res.content_tokens == 0
    seconds = (res.last_token_ns - res.first_token_ns) / 1e9
    assert seconds == pytest.approx(0.020)
    assert res.output_tokens / seconds > 0
    assert res.finish_reason == "length"


def test_b06_no_usage_counts_deltas_as_estimate(impl):
    _, res = feed_timed(impl, lines(_b06_minimal(False)))
    assert res.output_tokens == 3
    assert res.output_tokens_estimated
    assert res.content_tokens == 0


# ---------------------------------------------------------------- B14
IK = "ik_llama.cpp_v3715_chat_phi-4_no-DONE_curl-capture-elided.http"


@pytest.mark.parametrize("chunking", ["whole", "1-byte", "crlf-split"])
def test_b14_no_done_marker_is_success(impl, chunking):
    acc = impl(keep_events=True)
    for i, c in enumerate(split(load_capture(IK), chunking)):
        acc.feed(c, i)
    res = acc.close()
    assert not res.eof_before_finish and res.error_events == 0
    assert res.text_head == "Once,"
    assert res.finish_reason == "length"
    assert (res.prompt_tokens, res.completion_tokens, res.usage["total_tokens"]) == (14, 50, 64)
    assert res.done_marker is False
    assert len(acc.events) == 3  # the "..." line is an unknown field, ignored


def test_b14_cut_after_first_event(impl):
    body = load_capture(IK)
    first = body.index(b"\n\n") + 2
    _, res = feed_timed(impl, [(1, body[:first])])
    assert res.eof_before_finish
    assert res.text_head == "Once"
    assert not res.eof_truncated


def test_b14_cut_inside_an_event(impl):
    body = load_capture(IK)
    cut = body.index(b'"finish_reason":"length"')
    _, res = feed_timed(impl, [(1, body[:cut])])
    assert res.eof_before_finish
    assert res.eof_truncated
    assert res.text_head == "Once,"


def test_b14_llamacpp_b5517_has_done(impl):
    capture = load_capture("llama.cpp_b5517_chat_phi-4_usage-timings-DONE_curl-capture-elided.http")
    _, res = feed_timed(impl, [(0, capture)])
    assert res.done_marker is True
    assert (res.prompt_tokens, res.completion_tokens, res.usage["total_tokens"]) == (13, 50, 63)
    assert res.timings["prompt_n"] == 13
    assert res.finish_reason == "length"
