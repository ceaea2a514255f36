"""Field case B08: counter reset between scrapes (engine restart), through the vLLM adapter.

Input transcribed from FIELD-CASES.md B08 (NVIDIA-NeMo/RL PR #4052 review thread).
Expected: reset detected; window deltas queries 1200, hits 300 (post-reset values,
Prometheus increase() semantics); window hit ratio 0.25; nothing negative; the
decrease alone triggers the same result when the start-time line is missing.
"""

import pytest

from kvreplay.backends import make_backend
from kvreplay.runner.backend import Snapshot, counter_delta

A = """vllm:prefix_cache_queries_total 10000
vllm:prefix_cache_hits_total 4000
process_start_time_seconds 1.7700000e+09
"""
B = """vllm:prefix_cache_queries_total 1200
vllm:prefix_cache_hits_total 300
process_start_time_seconds 1.770000045e+09
"""


def snap(text, taken_ns):
    raw, common, started = make_backend("vllm", "", None).parse(text)
    return Snapshot(taken_ns=taken_ns, raw=raw, common=common, started=started)


@pytest.mark.parametrize("with_start_time", [True, False])
def test_b08_reset_detected_and_window_uses_post_reset_values(with_start_time):
    a_text, b_text = A, B
    if not with_start_time:
        a_text = "\n".join(x for x in A.splitlines() if not x.startswith("process_start")) + "\n"
        b_text = "\n".join(x for x in B.splitlines() if not x.startswith("process_start")) + "\n"
    a, b = snap(a_text, 0), snap(b_text, 60_000_000_000)
    assert (a.started is not None) == with_start_time
    d = counter_delta(a, b)
    assert d.reset is True
    assert d.values["query_tokens"] == 1200
    assert d.values["hit_tokens"] == 300
    assert "lookups" not in d.values and "hits" not in d.values  # vLLM counts tokens, not lookups
    assert d.values["hit_tokens"] / d.values["query_tokens"] == 0.25
    assert all(v >= 0 for v in d.values.values())
    assert d.elapsed_ns == 60_000_000_000


def test_start_marker_change_alone_is_a_restart():
    # Counters grew (so no decrease), but the process start time changed: still a reset.
    a = snap("vllm:prefix_cache_queries_total 100\nprocess_start_time_seconds 1.0e9\n", 0)
    b = snap("vllm:prefix_cache_queries_total 150\nprocess_start_time_seconds 1.5e9\n", 1)
    d = counter_delta(a, b)
    assert d.reset is True
    assert d.values["query_tokens"] == 150


def test_no_restart_gives_plain_increase():
    a = snap("vllm:prefix_cache_queries_total 100\nprocess_start_time_seconds 1.0e9\n", 0)
    b = snap("vllm:prefix_cache_queries_total 150\nprocess_start_time_seconds 1.0e9\n", 1)
    d = counter_delta(a, b)
    assert d.reset is False
    assert d.values["query_tokens"] == 50
