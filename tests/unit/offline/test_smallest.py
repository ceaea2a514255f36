"""The smallest-capacity search between sample points and its boundary check, by hand."""

from __future__ import annotations

from kvreplay.offline.smallest import check, reached, search

# hits (requests, tokens) at every capacity of a made-up curve that turns between samples
TOKENS = {1: 0, 2: 0, 3: 10, 4: 10, 5: 10, 6: 50, 7: 90, 8: 100, 9: 100, 10: 100, 16: 100}


def point(c):
    return (c, int(TOKENS[c] > 0), TOKENS[c])


def test_search_fills_in_between_the_last_miss_and_the_first_reach():
    asked: list[list[int]] = []

    def run(cs):
        asked.append(cs)
        return [point(c) for c in cs]

    samples = [point(c) for c in (1, 2, 3, 4, 5, 10, 16)]
    # target 0.9 x 100 = 90: first sampled reach is 10, last sampled miss 5 -> 6..9 simulated
    ans, best, filled = search(samples, run, share=0.9, metric="tokens")
    assert (ans, best) == (point(7), 100)
    assert asked == [[6, 7, 8, 9]] and [p[0] for p in filled] == [6, 7, 8, 9]
    # share 1: 8 (not 10, the sample point)
    assert search(samples, run, share=1.0, metric="tokens")[0] == point(8)
    # by requests: 3 already has a hit, the best is 1 request; nothing to fill in below 3
    asked.clear()
    assert search(samples, run, share=1.0, metric="requests")[0] == point(3)
    assert asked == []
    assert search([], run, share=1.0, metric="tokens") == (None, 0, [])


def test_check_records_both_sides_of_the_boundary():
    def run(cs):
        return [point(c) for c in cs]

    ok = check(7, run, best=100, share=0.9, metric="tokens", method="m")
    assert ok["at"] == {"capacity": 7, "hit_requests": 1, "hit_tokens": 90, "reached": True}
    assert ok["below"] == {"capacity": 6, "hit_requests": 1, "hit_tokens": 50, "reached": False}
    assert ok["holds"] and ok["target_hits"] == 90.0 and ok["method"] == "m"
    # a wrong answer (one too large) fails the check
    assert not check(8, run, best=100, share=0.9, metric="tokens", method="m")["holds"]
    # capacity 1: one below holds nothing and is not simulated
    one = check(1, lambda cs: [(c, 1, 5) for c in cs], best=5, share=1.0, metric="tokens", method="m")
    assert one["below"] == {"capacity": 0, "hit_requests": 0, "hit_tokens": 0, "reached": False}
    assert one["holds"]


def test_reached_is_inclusive():
    assert reached(95, 100, 0.95) and not reached(94, 100, 0.95)
    assert reached(0, 0, 1.0)
