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
