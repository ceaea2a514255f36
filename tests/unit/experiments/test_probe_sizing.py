"""probe_sizing: bytes per token below the entry cap, hand-made legs."""

from __future__ import annotations

from kvreplay.experiments.probe.sizing import (
    cap_bound,
    entry_bytes_fit,
    refused_stores,
    target_prefix_statement,
)


def leg(prompt, entry, stores=1, refused=0):
    return {
        "status": "ok",
        "prompt_tokens": prompt,
        "last_entry_bytes": entry,
        "counter_delta": {"stores": stores, "refused": refused},
    }


# entries of L - 26 tokens at 10 B/token below a cap of 400 tokens (4000 B)
LEGS = [leg(100, 740), leg(200, 1740), leg(300, 2740), leg(600, 4000), leg(800, 4000)]


def test_cap_legs_left_out_and_slope_exact():
    f = entry_bytes_fit(LEGS)
    assert f["bytes_per_token"] == 10.0
    assert (f["cap_bytes"], f["capped_legs"], f["max_entry_bytes"]) == (4000, 2, 4000)
    assert f["method"].startswith("slope of last_entry_bytes over 3 legs below the entry cap")
    # all legs: slope (least squares) is far from 10
    assert cap_bound(374, 10.0, 4000) is False and cap_bound(400, 10.0, 4000) is True


def test_no_cap_all_legs_used():
    f = entry_bytes_fit(LEGS[:3])
    assert (f["bytes_per_token"], f["cap_bytes"], f["capped_legs"]) == (10.0, None, 0)


def test_refused_sum_and_missing():
    assert refused_stores([leg(1, 1, refused=2), leg(1, 1, refused=1)]) == 3
    assert refused_stores([{"counter_delta": None}]) is None


def test_target_prefix_short_and_cap_bound():
    v = {"cmax_tokens": 400, "cmax_cap_bound": True, "bytes_per_token": 10.0, "entries_per_request": 2}
    t = target_prefix_statement(v, 1024)
    assert t["covered"] is False and t["entry_bytes_needed"] == 10240
    assert "the entry cap is the wall" in t["sentence"]
    t = target_prefix_statement(v, 300)
    assert t["covered"] is True and "2 x (k + 1) entries" in t["sentence"]
