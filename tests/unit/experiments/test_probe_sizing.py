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


# --- issue 29: entries per request from legs below the cap, cross-checked ------------------

from kvreplay.experiments.probe.sizing import capped_sizes, entries_per_request  # noqa: E402


def cold(size, prompt, stores):
    return {"size_tokens": size, "prompt_tokens": prompt, "counter_delta": {"stores": stores}}


def warm(size, prompt, cached):
    return {"size_tokens": size, "prompt_tokens": prompt, "cached_tokens": cached}


def point(k, stores):
    return {"k": k, "foreign_counter_delta": None if stores is None else {"stores": stores}}


def test_capped_sizes_from_cached_tokens_and_from_the_bytes_fit():
    # warm shares 16358/16384 = 0.998 and 43526/65536 = 0.664 < 0.9 x 0.998: 64k on the cap
    w = [warm(16384, 16384, 16358), warm(65536, 65536, 43526)]
    c = [cold(16384, 16384, 2), cold(65536, 65536, 1)]
    assert capped_sizes(c, w, None) == {65536}
    # 0.95 is not under 0.9 x 0.998: not on the cap
    assert capped_sizes(c, [warm(16384, 16384, 16358), warm(65536, 65536, 62259)], None) == set()
    # the bytes fit's smallest capped leg (tokens) marks every cold leg at or past it
    assert capped_sizes(c, [], 60000) == {65536} and capped_sizes(c, [], 16384) == {16384, 65536}


def test_entries_per_request_leaves_capped_legs_out_and_agrees_with_eviction():
    c = [cold(16384, 16384, 2), cold(65536, 65536, 1)]
    pts = [point(0, 0), point(6, 12), point(3, 6), point(4, 8)]
    e = entries_per_request(c, pts, {65536})
    assert (e["value"], e["from_cold_legs"], e["from_eviction_points"], e["agree"]) == (2, 2.0, 2.0, True)
    assert (e["cold_legs"], e["cold_legs_on_cap"], e["eviction_points"]) == (1, 1, 3)
    assert e["evidence"] == (
        "2 stores per cold leg (median of 1 below the entry cap; 1 on the cap, which store one,"
        " left out) and 2 stores per foreign request (median over 3 eviction points' foreign"
        " blocks) agree"
    )
    # the old rule: both legs counted, median 1.5 -> 1; here the two sources then disagree
    bad = entries_per_request(c, pts, set())
    assert bad["value"] is None and bad["agree"] is False
    assert bad["evidence"].startswith("the evidence disagrees: 1.5 stores per cold leg")
    assert bad["evidence"].endswith("; not picking one")


def test_entries_per_request_from_one_source():
    c = [cold(65536, 65536, 1)]
    only_evict = entries_per_request(c, [point(4, 8)], {65536})
    assert (only_evict["value"], only_evict["agree"], only_evict["from_cold_legs"]) == (2, None, None)
    assert only_evict["evidence"].startswith("no cold leg below the entry cap (1 on the cap")
    only_legs = entries_per_request([cold(1024, 1024, 1)], [point(2, None)], set())
    assert (only_legs["value"], only_legs["from_eviction_points"]) == (1, None)
    none = entries_per_request([], [], set())
    assert none["value"] is None and none["evidence"] == "no store counts reported"
    # 3 stores over 2 foreign requests: 1.5 per request is no whole count
    assert entries_per_request([], [point(2, 3)], set())["value"] is None


def test_target_prefix_over_the_cap_counts_one_entry():
    v = {"cmax_tokens": 43526, "cmax_cap_bound": True, "bytes_per_token": 2674.0, "entries_per_request": 2}
    t = target_prefix_statement(v, 50000)
    assert t["covered"] is False
    # its first 43,526 tokens are one entry: 2 x 9 + 1 = 19 keep it through 9 foreign requests
    assert t["sentence"].endswith(
        "the cache keeps its first 43526 tokens in one entry (both snapshots cut to the cap"
        " coincide): 2 x k + 1 entries keep that through k foreign requests."
    )


from kvreplay.experiments.probe.sizing import reuse_cap  # noqa: E402


def test_reuse_cap_from_cached_tokens():
    c = [cold(16384, 16384, 2), cold(65536, 65536, 1)]
    w = [warm(16384, 16384, 16358), warm(65536, 65536, 43526)]
    # a k = 0 point over the cap (44,032 -> 43,526: 506 short > 2 x 26 + 256) and one k = 4
    # point partly evicted (ignored: something was sent in between)
    pts = [
        {"k": 0, "prefix_tokens": 44032, "cached_second": 43526, "flushed": False},
        {"k": 4, "prefix_tokens": 8192, "cached_second": 4000, "flushed": False},
    ]
    r = reuse_cap(c, w, pts)
    assert (r["cap_tokens"], r["tail_tokens"], r["reuses"], r["cut_reuses"]) == (43526, 26, 3, 2)
    # block rounding on a radix server (up to 255 tokens more than the tail) is no cap
    r = reuse_cap([cold(8192, 8192, 0), cold(16384, 16384, 0)],
                  [warm(8192, 8192, 8166), warm(16384, 16384, 16384 - 26 - 255)], [])
    assert r["cap_tokens"] is None and r["tail_tokens"] == 26
    assert reuse_cap([], [], [])["evidence"] == "no reuse with cached tokens"


def test_entry_bytes_fit_leaves_out_legs_over_the_cap_from_cached_tokens():
    # 10 B/token, entries (L - 26) x 10; cap 400 tokens (4000 B). The 430-token leg is just
    # over it: 4000 / 430 = 9.30 B per prompt token is not under 0.9 x the others' median
    # (1740 / 200 = 8.70), so the entry bytes alone keep it and the slope bends
    legs = [leg(100, 740), leg(200, 1740), leg(300, 2740), leg(430, 4000)]
    assert entry_bytes_fit(legs)["bytes_per_token"] != 10.0  # the near-cap leg bends the slope
    f = entry_bytes_fit(legs, over_tokens=400 + 26)
    assert (f["bytes_per_token"], f["cap_bytes"], f["capped_legs"], f["capped_from_tokens"]) == (10.0, 4000, 1, 430)


def test_prefix_exactly_at_cmax_is_covered_and_cap_bound_edges_are_exact():
    # Cmax 400 = cap 4000 B / 10 B per token: a 400-token prefix is covered (Cmax >= prefix,
    # not >), one token more is not, and needs 401 x 10 = 4010 bytes in one entry.
    v = {"cmax_tokens": 400, "cmax_cap_bound": True, "bytes_per_token": 10.0, "entries_per_request": 2}
    at = target_prefix_statement(v, 400)
    assert (at["covered"], at["entry_bytes_needed"]) == (True, 4000)
    assert at["sentence"] == (
        "Cmax 400 tokens covers the 400-token prefix: one entry holds it, so the entry size is"
        " not the wall; the entry count is (2 x (k + 1) entries keep it through k foreign requests)."
    )
    over = target_prefix_statement(v, 401)
    assert (over["covered"], over["entry_bytes_needed"]) == (False, 4010)
    # cap-bound: within 1 % of 400 tokens, i.e. 396..404 inclusive; 395 and 405 are not
    assert [cap_bound(c, 10.0, 4000) for c in (395, 396, 400, 404, 405)] == [False, True, True, True, False]
