"""Each diagnosis rule on a hand-built run that triggers it, and on one that must not."""

from rundirs import plan_json, record, summarise

from kvreplay.report.diagnose import diagnose

FWD_REV = plan_json(
    [
        ("prime", "forward", 1, [0, 1, 2, 3]),
        ("fwd", "forward", 1, [0, 1, 2, 3]),
        ("rev", "reverse", 1, [3, 2, 1, 0]),
    ]
)


def with_deltas(plan, deltas):
    """Phase summaries whose counter_delta is given per phase name."""
    recs = [
        record(ph["name"], s["position"], s["body_index"], t0_ms=100 * s["position"])
        for ph in plan["phases"]
        for s in ph["sequence"]
    ]
    return summarise(
        plan,
        recs,
        **{n: {"counter_delta": d, "attribution": "phase_only"} for n, d in deltas.items()},
    )


def rules(findings):
    return [f.rule for f in findings]


def test_churn_zero_forward_some_reverse():
    s = with_deltas(
        FWD_REV,
        {
            "prime": {"host_fetched_tokens": 0},
            "fwd": {"host_fetched_tokens": 0},
            "rev": {"host_fetched_tokens": 2048},
        },
    )
    f = diagnose(s, FWD_REV)
    assert rules(f) == ["churn"]
    assert "host_fetched_tokens" in f[0].finding and "2048" in f[0].finding
    assert "small-working-set control" in f[0].next_experiment and set(f[0].phases) == {
        "fwd",
        "rev",
    }


def test_host_tier_preferred_over_device_hits():
    # Host restores only in reverse while device hits are zero in both: the host tier wins.
    s = with_deltas(
        FWD_REV,
        {"fwd": {"hit_tokens": 0, "host_hits": 0}, "rev": {"hit_tokens": 0, "host_hits": 3}},
    )
    f = diagnose(s, FWD_REV)
    assert rules(f) == ["churn"] and "host_hits" in f[0].finding


def test_zero_in_both_orders_points_to_inspect():
    s = with_deltas(FWD_REV, {"fwd": {"host_fetched_tokens": 0}, "rev": {"host_fetched_tokens": 0}})
    f = diagnose(s, FWD_REV)
    assert rules(f) == ["no_restores"] and "kvreplay inspect" in f[0].next_experiment


def test_one_order_only_asks_for_the_other():
    plan = plan_json([("prime", "forward", 1, [0, 1, 2]), ("again", "forward", 1, [0, 1, 2])])
    s = with_deltas(plan, {"again": {"hits": 0}})
    f = diagnose(s, plan)
    assert rules(f) == ["one_order_zero"] and "reverse" in f[0].next_experiment


def test_no_order_finding_when_replays_restore():
    s = with_deltas(
        FWD_REV, {"fwd": {"host_fetched_tokens": 10}, "rev": {"host_fetched_tokens": 20}}
    )
    assert diagnose(s, FWD_REV) == []


def test_invalid_phase_takes_no_part():
    s = with_deltas(
        FWD_REV, {"fwd": {"host_fetched_tokens": 0}, "rev": {"host_fetched_tokens": 99}}
    )
    s["phases"][2]["valid"] = False
    s["phases"][2]["invalid_reasons"] = ["drain did not pass"]
    assert "churn" not in rules(diagnose(s, FWD_REV))


def test_usage_disagrees_with_counters_names_both_and_the_gap():
    plan = plan_json([("a", "forward", 1, [0, 1])])
    recs = [
        record("a", 0, 0, cached=64, delta={"hit_tokens": 64}),
        record("a", 1, 1, cached=192, t0_ms=50, delta={"hit_tokens": 128}),
    ]
    s = summarise(
        plan, recs, a={"counter_delta": {"hit_tokens": 192}, "attribution": "per_request"}
    )
    f = diagnose(s, plan, recs)
    assert rules(f) == ["usage_vs_counters"]
    text = f[0].finding
    assert "256" in text and "192" in text and "gap 64" in text and "positions 1" in text


def test_usage_agreeing_with_counters_is_quiet():
    plan = plan_json([("a", "forward", 1, [0, 1])])
    recs = [
        record("a", 0, 0, cached=64, delta={"hit_tokens": 64}),
        record("a", 1, 1, cached=64, t0_ms=50, delta={"hit_tokens": 64}),
    ]
    s = summarise(
        plan, recs, a={"counter_delta": {"hit_tokens": 128}, "attribution": "per_request"}
    )
    assert diagnose(s, plan, recs) == []


def test_counters_without_usage_cached_tokens():
    plan = plan_json([("a", "forward", 1, [0])])
    recs = [record("a", 0, 0, cached=None)]
    s = summarise(plan, recs, a={"counter_delta": {"hit_tokens": 50}, "attribution": "phase_only"})
    f = diagnose(s, plan, recs)
    assert rules(f) == ["usage_vs_counters"] and "no answer reported" in f[0].finding


def test_client_bound_label_from_the_runner():
    plan = plan_json([("a", "forward", 4, [0, 1, 2, 3])])
    recs = [record("a", i, i, c=4, t0_ms=0) for i in range(4)]
    s = summarise(plan, recs, a={"client_bound": True, "client": {"loop_lag_p99_ms": 85.0}})
    f = diagnose(s, plan, recs)
    assert rules(f) == ["client_bound"] and "latencies are the client's" in f[0].finding
    assert "85.0" in f[0].finding


def test_client_bound_from_low_occupancy():
    # C4, eight 1 ms requests spread over 1 s: on average far below 2 in flight.
    plan = plan_json([("a", "forward", 4, list(range(8)))])
    recs = [record("a", i, i, c=4, e2e_ms=1.0, t0_ms=125 * i) for i in range(8)]
    s = summarise(plan, recs)
    s["phases"][0]["wall_s"] = 1.0
    assert rules(diagnose(s, plan, recs)) == ["client_bound"]
    # the same requests packed into 2 ms keep 4 in flight: quiet
    s["phases"][0]["wall_s"] = 0.002
    assert diagnose(s, plan, recs) == []


def test_client_bound_from_an_open_loop_schedule_not_kept():
    plan = plan_json([("a", "forward", 4, [0, 1, 2, 3])])
    recs = [record("a", i, i, c=4, t0_ms=0) for i in range(4)]
    sched = {
        "open_loop": True,
        "kept_schedule": False,
        "note": "client could not keep schedule: sends up to 250.0 ms late",
    }
    # Late with free slots (peak 2 of 4): the client held the sends back.
    s = summarise(plan, recs, a={"schedule": sched, "peak_in_flight": 2})
    f = diagnose(s, plan, recs)
    assert [x.rule for x in f] == ["client_bound"] and "250.0 ms late" in f[0].finding
    # Late with every slot busy: the cap, not the client.
    s = summarise(plan, recs, a={"schedule": sched, "peak_in_flight": 4})
    f = diagnose(s, plan, recs)
    assert [x.rule for x in f] == ["schedule_cap"] and "at most 4 requests in flight" in f[0].finding
    sched["kept_schedule"] = True
    assert diagnose(summarise(plan, recs, a={"schedule": sched, "peak_in_flight": 2}), plan, recs) == []


def test_usage_rule_uses_the_summary_cross_check_when_there_are_no_records():
    plan = plan_json([("a", "forward", 1, [0, 1, 2])])
    recs = [record("a", i, i, cached=100, t0_ms=40 * i) for i in range(3)]
    xc = {
        "usage_cached_tokens": 300,
        "counter_hit_tokens": 200,
        "agree": False,
        "requests_disagreeing": 2,
        "disagreements": [{"position": 0}, {"position": 2}],
    }
    s = summarise(
        plan,
        recs,
        a={"counter_delta": {"hit_tokens": 200}, "attribution": "per_request", "cross_check": xc},
    )
    f = diagnose(s, plan)  # no records passed
    assert [x.rule for x in f] == ["usage_vs_counters"]
    assert "gap 100" in f[0].finding and "2 requests disagree (positions 0, 2)" in f[0].finding
