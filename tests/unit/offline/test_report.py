"""Prefill model parsing, curve rows and the recommendation, by hand."""

from __future__ import annotations

import json

import pytest

from kvreplay.errors import ConfigError
from kvreplay.offline.report import PrefillModel, curve_rows, parse_prefill, recommend


def test_parse_prefill_flag():
    m = parse_prefill("a=1.52,rate=1370")
    assert (m.a_s, m.rate_tokens_per_s, m.r2, m.source) == (1.52, 1370.0, None, "flag")
    assert parse_prefill("rate=100").a_s == 0.0


def test_parse_prefill_verdict(tmp_path):
    p = tmp_path / "verdict.json"
    p.write_text(json.dumps({"prefill_fit": {"a_s": 0.25, "rate_tokens_per_s": 2000, "r2": 0.998}}))
    m = parse_prefill(str(p))
    assert (m.a_s, m.rate_tokens_per_s, m.r2, m.source) == (0.25, 2000.0, 0.998, str(p))


@pytest.mark.parametrize(
    "bad", ["a=1", "a=1,rate=0", "b=2,rate=3", "a=x,rate=1", "/no/such/verdict.json"]
)
def test_parse_prefill_rejects(bad):
    with pytest.raises(ConfigError):
        parse_prefill(bad)


def test_curve_rows_by_hand():
    rows = curve_rows(
        [(10, 3, 2740), (20, 4, 5480)],
        requests=4,
        prompt_tokens=10960,
        prefill=PrefillModel(1.0, 1370.0),
        capacity_tokens=16,
        bytes_per_token=65536,
    )
    assert rows[0] == {
        "capacity": 10,
        "hit_ratio_requests": 0.75,
        "hit_ratio_tokens": 0.25,
        "prefill_s_saved": 2.0,
        "hit_requests": 3,
        "hit_tokens": 2740,
        "capacity_tokens": 160,
        "memory_gib": 160 * 65536 / 2**30,
    }
    assert rows[1]["prefill_s_saved"] == 4.0 and rows[1]["hit_ratio_tokens"] == 0.5
    no_model = curve_rows(
        [(1, 0, 0)],
        requests=0,
        prompt_tokens=0,
        prefill=None,
        capacity_tokens=None,
        bytes_per_token=1,
    )
    assert no_model[0]["prefill_s_saved"] is None and "memory_gib" not in no_model[0]


def test_recommend_smallest_reaching_share():
    rows = [
        {"capacity": c, "hit_ratio_tokens": t, "hit_ratio_requests": 1.0}
        for c, t in [(1, 0.1), (2, 0.5), (4, 0.76), (8, 0.8)]
    ]
    assert recommend(rows, share=0.95, metric="tokens")["capacity"] == 4  # 0.76 >= 0.95 * 0.8
    assert recommend(rows, share=0.96, metric="tokens")["capacity"] == 8  # 0.768 needed
    assert recommend(rows, share=0.5, metric="requests")["capacity"] == 1
    assert recommend([], share=0.9, metric="tokens") is None
