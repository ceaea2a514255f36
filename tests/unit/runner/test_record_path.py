"""The runner's per-request record path (issue 43 item 2): usage read once, the same bytes as before.

``outcomes.check_usage`` returns the usage counts that ``RecordMaking.record`` used to
read through ``StreamResult``'s properties, and ``record`` given them (and the body's
hex SHA-256) writes the same record, byte for byte, as ``record`` reading them itself.
"""

from __future__ import annotations

import hashlib
import types

import orjson
import pytest

from kvreplay.accounting.events import StreamResult, usage_counts
from kvreplay.rundir.records import RecordWriter
from kvreplay.runner._records import RecordMaking
from kvreplay.runner.http import RequestOutcome
from kvreplay.runner.outcomes import NO_COUNTS, check_usage
from kvreplay.workload._loader import Body

RAW = b'{"prompt":"hi","max_tokens":1,"stream":true}'
SHA = hashlib.sha256(RAW).hexdigest()


def _outcome(usage, status=200):
    r = StreamResult()
    r.first_byte_ns, r.first_token_ns, r.last_token_ns = 1_050, 1_060, 1_090
    r.first_content_ns, r.token_ns = 1_060, [1_060, 1_070, 1_090]
    r.finish_reason, r.done_marker, r.chunks, r.content_deltas = "stop", True, 4, 3
    r.usage, r.text_head = usage, "abc"
    return RequestOutcome("ok", status, 1_000, 1_040, 1_100, r)


def _maker():
    m = RecordMaking()
    m.workload = types.SimpleNamespace(bodies=[Body(0, RAW, SHA, "w.jsonl:1", "completions", True)], sessions=None)
    m.opts = types.SimpleNamespace(history="none", replicas=())
    m.clock = types.SimpleNamespace(origin_ns=1_000)
    m.abort, m.prev_done, m.sent_sha = None, {}, {}
    return m


PHASE = types.SimpleNamespace(name="p", spec=types.SimpleNamespace(concurrency=2, label=None, comparable=True))

USAGES = [
    {"prompt_tokens": 7, "completion_tokens": 3, "prompt_tokens_details": {"cached_tokens": 4},
     "completion_tokens_details": {"reasoning_tokens": 1}},
    {"prompt_tokens": 7, "completion_tokens": True, "prompt_cache_hit_tokens": 2},  # a bool is no count
    {"prompt_tokens": 7, "completion_tokens": 1 << 53},  # out of range: dropped
    {"prompt_tokens": -1},
    [1, 2],  # not an object
    None,
]


@pytest.mark.parametrize("usage", USAGES)
def test_usage_counts_are_the_stream_results_properties(usage):
    r = StreamResult()
    r.usage = usage
    assert usage_counts(usage) == (r.prompt_tokens, r.completion_tokens, r.cached_tokens, r.reasoning_tokens)


def test_check_usage_returns_the_counts_and_drops_an_out_of_range_usage():
    assert check_usage(_outcome(dict(USAGES[0]))) == (7, 3, 4, 1)
    assert check_usage(_outcome(dict(USAGES[1]))) == (7, None, 2, None)
    out = _outcome(dict(USAGES[2]))
    assert check_usage(out) == NO_COUNTS
    assert (out.status, out.stream.usage, out.error) == (
        "malformed", None, "usage value out of range (a count outside [0, 2^53))")
    out = _outcome({"prompt_tokens": 5}, status=1000)  # the status is out of range: usage kept and read
    assert check_usage(out) == (5, None, None, None)
    assert (out.status, out.http_status) == ("malformed", None)
    assert check_usage(_outcome(None)) == NO_COUNTS


@pytest.mark.parametrize("usage", USAGES)
def test_a_record_given_the_counts_is_the_same_bytes(usage, tmp_path):
    m = _maker()
    a, b = _outcome(usage if not isinstance(usage, dict) else dict(usage)), _outcome(
        usage if not isinstance(usage, dict) else dict(usage))
    check_usage(a)  # the counts not passed on: the record reads them itself
    counts = check_usage(b)
    w = RecordWriter(tmp_path / "records.jsonl")
    w.write(m.record(PHASE, 0, 0, 0, a, None, "none", 1_010))
    w.write(m.record(PHASE, 0, 0, 0, b, None, "none", 1_010, counts, SHA))
    w.close()
    first, second = (tmp_path / "records.jsonl").read_bytes().splitlines()
    assert first == second
    rec = orjson.loads(first)
    assert (rec["body_sha256"], rec["t_intended_ns"], rec["t_sent_ns"], rec["ttft_ns"], rec["e2e_ns"],
            rec["queue_ns"], rec["t_done_ns"]) == (SHA, 10, 0, 60, 100, 0, 100)
    if usage is USAGES[0]:
        assert rec["usage"] == {"prompt_tokens": 7, "completion_tokens": 3, "cached_tokens": 4,
                                "reasoning_tokens": 1}
        assert rec["tpot_ns"] == 15  # (1090 - 1060) // (3 - 1)


# -- the record's template (issue 43 item 2): every key in records.jsonl's order, exact values --------

def _expected_ok(attribution="none"):
    """The record of ``_outcome(USAGES[0])`` at position 3, body 0, repetition 1, closed loop, by hand."""
    return [
        ("phase", "p"), ("repetition", 1), ("position", 3), ("body_index", 0), ("body_sha256", SHA),
        ("body_bytes", len(RAW)), ("concurrency", 2),
        ("sent", True), ("status", "ok"), ("http_status", 200), ("finish_reason", "stop"),
        ("terminal", "finished"), ("done_marker", True), ("visible", True), ("reasoning_only", False),
        ("chunks", 4), ("content_deltas", 3), ("reasoning_deltas", 0),
        ("usage", {"prompt_tokens": 7, "completion_tokens": 3, "cached_tokens": 4, "reasoning_tokens": 1}),
        ("usage_raw", USAGES[0]), ("timings", None), ("error", None), ("timeout_kind", None), ("reconnects", 0),
        ("t_intended_ns", None), ("t_sent_ns", 0), ("t_headers_ns", 40), ("t_first_byte_ns", 50),
        ("t_first_token_ns", 60), ("t_first_content_ns", 60), ("t_last_token_ns", 90), ("t_done_ns", 100),
        ("ttft_ns", 60), ("tpot_ns", 15), ("e2e_ns", 100), ("queue_ns", None), ("ttft_from_intended_ns", None),
        ("e2e_from_intended_ns", None),
        # gaps 10 and 20 ns: mean 15 ns, p50 of two gaps the lower (the native and pure ITL summaries agree)
        ("itl", {"n": 2, "mean_ms": 0.0, "p50_ms": 0.0, "max_ms": 0.0}),
        ("text_head", "abc"), ("attribution", attribution), ("counter_delta", None),
    ]


def test_a_plain_record_has_every_key_in_order_with_its_value():
    m = _maker()
    out = _outcome(dict(USAGES[0]))
    rec = m.record(PHASE, 3, 0, 1, out, None, "none", None, check_usage(out), SHA, len(RAW))
    assert list(rec.items()) == _expected_ok()
    # the index's size and digest when the caller holds neither: the same record
    out = _outcome(dict(USAGES[0]))
    assert list(m.record(PHASE, 3, 0, 1, out, None, "none").items()) == _expected_ok()


def test_a_labelled_record_is_the_plain_one_with_its_label_after_the_head():
    """The general path (label, not comparable) and the template's fill the same keys in the same order."""
    m = _maker()
    labelled = types.SimpleNamespace(name="p", spec=types.SimpleNamespace(concurrency=2, label="L", comparable=False))
    out = _outcome(dict(USAGES[0]))
    rec = m.record(labelled, 3, 0, 1, out, {"hit_tokens": 4}, "per_request", None, check_usage(out), SHA)
    want = _expected_ok("per_request")
    want[-1] = ("counter_delta", {"hit_tokens": 4})
    assert list(rec.items()) == want[:7] + [("label", "L"), ("comparable", False)] + want[7:]


def test_an_open_loop_record_fills_the_intended_times():
    m = _maker()
    out = _outcome(dict(USAGES[0]))
    rec = m.record(PHASE, 3, 0, 1, out, None, "none", 1_020, check_usage(out), SHA)
    # intended 1,020 (20 after the origin), sent 1,000: not queued; first token 1,060; done 1,100
    assert (rec["t_intended_ns"], rec["queue_ns"], rec["ttft_from_intended_ns"], rec["e2e_from_intended_ns"]) == (
        20, 0, 40, 80)
    rec = m.record(PHASE, 3, 0, 1, _outcome(None), None, "none", 990)  # sent 10 ns after its intended time
    assert (rec["t_intended_ns"], rec["queue_ns"], rec["ttft_from_intended_ns"], rec["e2e_from_intended_ns"]) == (
        -10, 10, 70, 110)


def test_a_failed_record_keeps_none_where_nothing_came():
    m = _maker()
    r = StreamResult()
    out = RequestOutcome("cut", None, 1_000, None, 1_500, r, error="Server disconnected")
    rec = dict(m.record(PHASE, 0, 0, 0, out, None, "none"))
    assert {k: rec[k] for k in ("status", "terminal", "t_headers_ns", "t_first_byte_ns", "t_first_token_ns",
                                "t_first_content_ns", "t_last_token_ns", "ttft_ns", "tpot_ns", "itl", "e2e_ns",
                                "t_done_ns", "usage", "error")} == {
        "status": "cut", "terminal": "errored", "t_headers_ns": None, "t_first_byte_ns": None,
        "t_first_token_ns": None, "t_first_content_ns": None, "t_last_token_ns": None, "ttft_ns": None,
        "tpot_ns": None, "itl": None, "e2e_ns": 500, "t_done_ns": 500,
        "usage": {"prompt_tokens": None, "completion_tokens": None, "cached_tokens": None,
                  "reasoning_tokens": None},
        "error": "Server disconnected"}
    # the template is not changed by a record made from it
    again = m.record(PHASE, 0, 0, 0, _outcome(None), None, "none")
    assert (again["error"], again["t_headers_ns"]) == (None, 40)


class _UsageDict(dict):
    """A dict subclass: takes the general path."""


SHAPES = [
    ({"prompt_tokens": 9, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 5}}, (9, 2, 5, None)),
    ({"prompt_tokens": 9, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 0}}, (9, 2, 0, None)),
    ({"prompt_tokens": 9, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": True}},
     (9, 2, None, None)),  # a bool is no count
    ({"prompt_tokens": 9, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": None},
      "input_tokens_details": {"cached_tokens": 3}}, (9, 2, 3, None)),  # the next key is read
    ({"prompt_tokens": 9, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 5},
      "completion_tokens_details": {"reasoning_tokens": 1}}, (9, 2, 5, 1)),
    ({"prompt_tokens": 9, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 5},
      "output_tokens_details": {"reasoning_tokens": 4}}, (9, 2, 5, 4)),
    ({"prompt_tokens": True, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 5}},
     (None, 2, 5, None)),
    ({"prompt_tokens": 9, "completion_tokens": 2.0, "prompt_tokens_details": {"cached_tokens": 5}},
     (9, None, 5, None)),
    ({"prompt_tokens": 9, "completion_tokens": 2, "prompt_tokens_details": [5]}, (9, 2, None, None)),
    ({"prompt_tokens": 9, "completion_tokens": 2, "prompt_cache_hit_tokens": 6}, (9, 2, 6, None)),  # DeepSeek
    (_UsageDict(prompt_tokens=9, completion_tokens=2, prompt_tokens_details={"cached_tokens": 5}), (9, 2, 5, None)),
    ({}, (None, None, None, None)),
    ("not an object", (None, None, None, None)),
]


@pytest.mark.parametrize(("usage", "want"), SHAPES)
def test_usage_counts_read_the_common_shape_as_the_general_path_does(usage, want):
    """The common shape's short path (``usage_counts``) and the general one give the same, by-hand counts."""
    from kvreplay.accounting.events import _usage_counts

    assert usage_counts(usage) == want
    if isinstance(usage, dict):
        assert _usage_counts(usage) == want
