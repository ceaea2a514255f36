"""The automatic search and the knee on synthetic throughput curves (kvreplay.sweeps.knee)."""

from kvreplay.sweeps import KneeSearch, knee


def search(throughput, *, kind="concurrency", start=1, max_load=256, broken=lambda load: False):
    s = KneeSearch(kind=kind, start=start, max_load=max_load)
    loads = []
    while (load := s.next_load()) is not None:
        loads.append(load)
        s.record(load, throughput(load), broken(load))
    pts = [{kind: m[0], "throughput_rps": m[1], "limit_broken": "x" if m[2] else None} for m in s.measured]
    return loads, knee(pts, kind), s


def test_four_slots_double_then_bisect_to_four():
    loads, k, s = search(lambda c: 10.0 * min(c, 4))
    assert loads == [1, 2, 4, 8, 6, 5]
    assert k[("concurrency")] == 4 and k["throughput_rps"] == 40.0
    assert "(< 5%)" in s.stop_reason


def test_a_gain_under_five_percent_stops_the_doubling():
    # 1 -> 10, 2 -> 19, 4 -> 19.5 (+2.6%): bisect 2..4 at 3 (19.4 is within 5% of 19.5)
    table = {1: 10.0, 2: 19.0, 3: 19.4, 4: 19.5}
    loads, k, _ = search(table.__getitem__)
    assert loads == [1, 2, 4, 3]
    assert k["concurrency"] == 2  # 19.0 >= 0.95 * 19.5


def test_a_broken_limit_bisects_below_it_and_is_never_the_knee():
    loads, k, s = search(lambda c: 10.0 * c, broken=lambda c: c >= 6)
    assert loads == [1, 2, 4, 8, 6, 5]
    assert s.stop_reason == "a limit broke at 8"
    assert k["concurrency"] == 5 and k["throughput_rps"] == 50.0


def test_the_largest_load_ends_the_doubling_without_bracket():
    loads, k, s = search(lambda c: 10.0 * c, max_load=8)
    assert loads == [1, 2, 4, 8]
    assert k["concurrency"] == 8 and "largest allowed (8)" in s.stop_reason


def test_rate_bisection_stops_within_the_gain():
    loads, k, _ = search(lambda r: min(r, 3.0), kind="rate")
    assert loads[:4] == [1, 2, 4, 8]
    # bisect 4..8 while the upper end is more than 5% above the lower (4.25 > 4.2, 4.125 <= 4.2)
    assert loads[4:] == [6.0, 5.0, 4.5, 4.25, 4.125]
    assert k["rate"] == 4


def test_no_point_within_limits_no_knee():
    assert knee([{"concurrency": 1, "throughput_rps": 3.0, "limit_broken": "x"}], "concurrency") is None
