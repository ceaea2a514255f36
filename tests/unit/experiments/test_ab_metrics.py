"""Issue 14: TPOT and counter-ratio metrics, repetitions measured vs planned."""

from __future__ import annotations

import pytest

from kvreplay.errors import ConfigError
from kvreplay.experiments.ab.compare import Threshold, compare_blocks, parse_threshold, render_compare
from kvreplay.experiments.ab.ratios import check_ratio_metric, ratio_value


def phase(hit, query, *, tpot=10.0, cached=50, prompt=100, name="c1", ok=4, reset=False):
    delta = {"hit_tokens": hit, "query_tokens": query}
    if reset:
        delta["reset"] = True
    return {
        "name": name, "planned": 4, "sent": 4, "ok": ok, "valid": True, "deferred": False,
        "ttft_ms": {"p50": 100.0}, "tpot_ms": {"p50": tpot, "p90": tpot * 2, "p99": tpot * 3},
        "tokens": {"prompt": prompt, "cached": cached, "completion": 8},
        "counter_delta": delta,
    }


def pair(i, base, cand):
    return {"rep": i, "baseline": {"dir": f"b{i}", "summary": {"phases": [base]}},
            "candidate": {"dir": f"c{i}", "summary": {"phases": [cand]}}}


def test_ratio_syntax():
    assert parse_threshold("ratio:hit_tokens/query_tokens:+5%", "primary") == Threshold(
        None, "ratio:hit_tokens/query_tokens", 5.0, "primary")
    assert parse_threshold("c4.ratio:tokens.cached/tokens.prompt:-2.5%", "protected") == Threshold(
        "c4", "ratio:tokens.cached/tokens.prompt", -2.5, "protected")
    assert check_ratio_metric("ratio:hit_tokens/query_tokens") == ("hit_tokens", "query_tokens")
    for bad, msg in [("ratio:hit_tokens/nope:+5%", "neither a common counter"),
                     ("ratio:hit_tokens/hit_tokens:+5%", "the same"),
                     ("ratio:hit_tokens:+5%", "expected"),
                     ("tpot_p42:+5%", "unknown metric")]:
        with pytest.raises(ConfigError, match=msg):
            parse_threshold(bad, "primary")


def test_ratio_value():
    assert ratio_value(phase(60, 100), "ratio:hit_tokens/query_tokens") == 0.6
    assert ratio_value(phase(60, 100, cached=30, prompt=120), "ratio:tokens.cached/tokens.prompt") == 0.25
    assert ratio_value(phase(60, 0), "ratio:hit_tokens/query_tokens") is None  # DEN 0
    assert ratio_value(phase(60, 100, reset=True), "ratio:hit_tokens/query_tokens") is None
    assert ratio_value({"counter_delta": None}, "ratio:hit_tokens/query_tokens") is None
    assert ratio_value({"counter_delta": {"hit_tokens": 5}}, "ratio:hit_tokens/query_tokens") is None


def test_compare_counter_ratio_and_tpot_by_hand():
    # Baseline hit shares 0.50, 0.40, 0.50; candidate 0.60, 0.50, 0.55:
    # paired ratios 1.2, 1.25, 1.1 -> median 1.2 (+20%), every ratio >= 1.1 > 1.05: benefit.
    # TPOT p90: baseline 20, 20, 20 ms, candidate 20.2, 20.4, 20.0 ms -> ratios 1.01, 1.02, 1.0:
    # median 1.01 (+1%), whole interval within +3%: ok.
    pairs = [pair(0, phase(50, 100), phase(60, 100, tpot=10.1)),
             pair(1, phase(40, 100), phase(50, 100, tpot=10.2)),
             pair(2, phase(50, 100), phase(55, 100, tpot=10.0))]
    res = compare_blocks(pairs, [parse_threshold("ratio:hit_tokens/query_tokens:+5%", "primary"),
                                 parse_threshold("tpot_p90:+3%", "protected")], n_boot=2000)
    m = res["metrics"]["c1.ratio:hit_tokens/query_tokens"]
    assert m["cells"] == [1.2, 1.25, 1.1] and m["median_ratio"] == 1.2 and m["change_pct"] == 20.0
    t = res["metrics"]["c1.tpot_p90"]
    assert t["cells"] == [1.01, 1.02, 1.0] and t["change_pct"] == 1.0
    assert res["metrics"]["c1.tpot_p50"]["cells"] == [1.01, 1.02, 1.0]
    assert [c["decision"] for c in res["checks"]] == ["benefit", "ok"]
    assert res["verdict"] == "benefit"
    assert res["reps"] == {"planned": 3, "measured": 3}
    assert not any("fewer repetitions" in r for r in res["reasons"])


def test_fewer_repetitions_than_planned_are_said():
    pairs = [pair(0, phase(50, 100), phase(60, 100)),
             pair(1, phase(50, 100), phase(60, 100, ok=3))]  # a failed request: the pair is not measured
    pairs.append({"rep": 2, "baseline": {"dir": "b2", "summary": None}, "candidate": {"dir": "c2", "summary": None}})
    res = compare_blocks(pairs, [parse_threshold("ttft_p50:-5%", "primary")], n_boot=200, reps_planned=4)
    assert res["reps"] == {"planned": 4, "measured": 1}
    assert "fewer repetitions than planned were measured: 1 of 4" in res["reasons"][-1]
    md = render_compare(res, ["off", "on"])
    assert "Repetitions measured: 1 of 4 planned (FEWER THAN PLANNED)." in md
