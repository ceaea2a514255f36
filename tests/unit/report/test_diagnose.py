"""Each diagnosis rule on a hand-built run where it must fire, and on one where it must not.

The order rules follow the evidence rules (``kvreplay.evidence.engine``): a tier
whose lookup counter did not move is absent, not zero.
"""

from rundirs import plan_json, record, summarise

from kvreplay.evidence.engine import counter_cached, phase_evidence
from kvreplay.report.diagnose import diagnose

FWD_REV = plan_json(
    [
        ("prime", "forward", 1, [0, 1, 2, 3]),
        ("fwd", "forward", 1, [0, 1, 2, 3]),
        ("rev", "reverse", 1, [3, 2, 1, 0]),
    ]
)


def with_deltas(plan, deltas, **extra):
    """Phase summaries whose counter_delta is given per phase name.

    Usage agrees with the counters: the phase's counted cached tokens (device
    hit tokens plus host tokens) are reported by its first request.
    """
    recs = []
    for ph in plan["phases"]:
        d = deltas.get(ph["name"]) or {}
        counted = counter_cached(d) if "hit_tokens" in d else 0
        for s in ph["sequence"]:
            cached = int(counted) if s["position"] == 0 else 0
            recs.append(
                record(ph["name"], s["position"], s["body_index"], cached=cached,
                       t0_ms=100 * s["position"])
            )
    over = {n: {"counter_delta": d, "attribution": "phase_only"} for n, d in deltas.items()}
    for n, e in extra.items():
        over.setdefault(n, {}).update(e)
    return summarise(plan, recs, **over)


def rules(findings):
    return [f.rule for f in findings]


# vLLM 0.32 without a KV connector: the external (host) series exist and read 0.
NO_CONNECTOR = {"host_lookups": 0, "host_query_tokens": 0, "host_hit_tokens": 0,
                "host_fetched_tokens": 0}


# ---------------------------------------------------------------- churn


def test_churn_fires_when_forward_restores_nothing_and_reverse_restores():
    s = with_deltas(
        FWD_REV,
        {
            "prime": {"host_lookups": 4, "host_fetched_tokens": 0},
            "fwd": {"host_lookups": 4, "host_fetched_tokens": 0},
            "rev": {"host_lookups": 4, "host_fetched_tokens": 2048},
        },
    )
    f = diagnose(s, FWD_REV)
    assert rules(f) == ["churn"]
    assert "host_fetched_tokens 0 (host_lookups 4)" in f[0].finding
    assert "host_fetched_tokens 2048 (host_lookups 4)" in f[0].finding
    assert "--phase control:forward:c1:x2:lastN" in f[0].next_experiment
    assert f[0].phases == ("fwd", "rev")
    assert f[0].evidence == {
        "fwd": {"host_fetched_tokens": 0.0, "host_lookups": 4.0, "usage cached_tokens": 0.0,
                "ok answers": 4.0},
        "rev": {"host_fetched_tokens": 2048.0, "host_lookups": 4.0,
                "usage cached_tokens": 0.0, "ok answers": 4.0},
    }


def test_churn_does_not_fire_when_the_forward_replay_restored_on_the_device():
    # The host tier did not move in fwd (absent, not zero); the device restored there.
    s = with_deltas(
        FWD_REV,
        {
            "fwd": {"host_lookups": 0, "host_fetched_tokens": 0, "query_tokens": 400,
                    "hit_tokens": 384},
            "rev": {"host_lookups": 4, "host_fetched_tokens": 2048, "query_tokens": 400,
                    "hit_tokens": 0},
        },
    )
    assert diagnose(s, FWD_REV) == []


def test_churn_with_a_control_that_already_ran_reports_it_instead_of_asking():
    plan = plan_json(
        [
            ("prime", "forward", 1, [0, 1, 2, 3]),
            ("fwd", "forward", 1, [0, 1, 2, 3]),
            ("rev", "reverse", 1, [3, 2, 1, 0]),
            ("control", "forward", 1, [2, 3]),
        ]
    )
    plan["phases"][3]["select"] = "last:2"
    dev = lambda h: {"query_tokens": 400, "hit_tokens": h}  # noqa: E731
    s = with_deltas(plan, {"fwd": dev(0), "rev": dev(300), "control": dev(150)})
    f = diagnose(s, plan)
    assert rules(f) == ["churn"]
    assert "Control control already ran: hit_tokens 150 (query_tokens 400)" in f[0].finding
    assert "churn confirmed" in f[0].finding
    assert "lastN" not in f[0].next_experiment and "kvreplay simulate" in f[0].next_experiment
    # A control that restored nothing does not confirm it.
    s = with_deltas(plan, {"fwd": dev(0), "rev": dev(300), "control": dev(0)})
    f = diagnose(s, plan)
    assert "churn is not confirmed" in f[0].finding
    assert "kvreplay inspect" in f[0].next_experiment and "body #2" in f[0].next_experiment


# ---------------------------------------------------------------- no_restores


def test_no_restores_fires_when_both_orders_restore_nothing_on_live_tiers():
    d = {"host_lookups": 4, "host_fetched_tokens": 0, "query_tokens": 400, "hit_tokens": 0}
    s = with_deltas(FWD_REV, {"fwd": dict(d), "rev": dict(d)})
    f = diagnose(s, FWD_REV)
    assert rules(f) == ["no_restores"] and "kvreplay inspect" in f[0].next_experiment
    assert "body #0" in f[0].next_experiment
    assert f[0].evidence["rev"]["query_tokens"] == 400.0


def test_no_restores_does_not_fire_on_a_host_tier_that_never_looked():
    # The old report's "no_restores ... eviction is not the cause" on a vLLM run
    # without a connector: device hits in both orders, external series at 0.
    s = with_deltas(
        FWD_REV,
        {
            "fwd": {**NO_CONNECTOR, "query_tokens": 33254, "hit_tokens": 28672},
            "rev": {**NO_CONNECTOR, "query_tokens": 33254, "hit_tokens": 31744},
        },
    )
    assert diagnose(s, FWD_REV) == []
    ev = phase_evidence(s["phases"][2])
    assert ev.absent == {"host": "host_lookups 0, host_query_tokens 0 in this phase"}
    assert [t.tier for t in ev.tiers] == ["device", "usage"]


# ---------------------------------------------------------------- one_order_zero


def test_vllm_prime_forward_replay_reverse_without_connector_has_no_finding():
    # The field case: reverse replay restored 31,744 of 33,254 prompt tokens on the
    # device; the connector series read 0 because there is no connector.
    plan = plan_json([("prime", "forward", 1, [0, 1, 2]), ("replay", "reverse", 1, [2, 1, 0])])
    s = with_deltas(
        plan,
        {
            "prime": {**NO_CONNECTOR, "query_tokens": 33254, "hit_tokens": 0},
            "replay": {**NO_CONNECTOR, "query_tokens": 33254, "hit_tokens": 31744},
        },
    )
    assert diagnose(s, plan) == []


def test_one_order_zero_all_reverse_asks_for_a_forward_replay():
    plan = plan_json([("prime", "forward", 2, [0, 1, 2]), ("replay", "reverse", 2, [2, 1, 0])])
    s = with_deltas(plan, {"replay": {"query_tokens": 300, "hit_tokens": 0}})
    f = diagnose(s, plan)
    assert rules(f) == ["one_order_zero"]
    assert f[0].next_experiment.startswith("add a forward replay (e.g. --phase replay-fwd:forward:c2)")
    assert "hit_tokens 0 (query_tokens 300)" in f[0].finding


def test_one_order_zero_all_forward_asks_for_a_reverse_replay():
    plan = plan_json([("prime", "forward", 1, [0, 1, 2]), ("again", "forward", 1, [0, 1, 2])])
    s = with_deltas(plan, {"again": {"lookups": 3, "hits": 0}})
    f = diagnose(s, plan)
    assert rules(f) == ["one_order_zero"]
    assert f[0].next_experiment.startswith("add a reverse replay (e.g. --phase replay-rev:reverse:c1)")


def test_one_order_zero_does_not_fire_on_absent_counters_alone():
    # Counters exported but never moving, and no usage figure: no evidence at all.
    plan = plan_json([("prime", "forward", 1, [0, 1, 2]), ("again", "forward", 1, [0, 1, 2])])
    recs = [record(p["name"], s["position"], s["body_index"], cached=None)
            for p in plan["phases"] for s in p["sequence"]]
    s = summarise(plan, recs, again={"counter_delta": dict(NO_CONNECTOR), "attribution": "phase_only"})
    assert diagnose(s, plan, recs) == []


def test_prime_phases_are_never_evidence():
    # "prime-2" re-sends the bodies (a replay by hashes) but is a prime by name;
    # "warm" is marked not comparable (helper #14's flag). Only "rev" counts.
    plan = plan_json(
        [
            ("prime", "forward", 1, [0, 1, 2]),
            ("prime-2", "forward", 1, [0, 1, 2]),
            ("warm", "forward", 1, [0, 1, 2]),
            ("rev", "reverse", 1, [2, 1, 0]),
        ]
    )
    dev = lambda h: {"query_tokens": 300, "hit_tokens": h}  # noqa: E731
    s = with_deltas(plan, {"prime-2": dev(0), "warm": dev(0), "rev": dev(200)},
                    warm={"comparable": False})
    assert diagnose(s, plan) == []
    s = with_deltas(plan, {"prime-2": dev(0), "warm": dev(0), "rev": dev(200)})
    assert rules(diagnose(s, plan)) == ["churn"]  # comparable by default: warm is a forward replay


def test_no_order_finding_when_replays_restore():
    d = lambda v: {"host_lookups": 4, "host_fetched_tokens": v}  # noqa: E731
    s = with_deltas(FWD_REV, {"fwd": d(10), "rev": d(20)})
    assert diagnose(s, FWD_REV) == []


def test_invalid_phase_takes_no_part():
    d = lambda v: {"host_lookups": 4, "host_fetched_tokens": v}  # noqa: E731
    s = with_deltas(FWD_REV, {"fwd": d(0), "rev": d(99)})
    assert rules(diagnose(s, FWD_REV)) == ["churn"]
    s["phases"][2]["valid"] = False
    s["phases"][2]["invalid_reasons"] = ["drain did not pass"]
    assert rules(diagnose(s, FWD_REV)) == ["one_order_zero"]


def test_old_run_without_plan_finds_replays_from_the_records():
    # A run directory of an earlier version: summary.json and records, no plan.json.
    recs = [record("prime", i, i, cached=0) for i in range(3)]
    recs += [record("again", i, 2 - i, cached=0) for i in range(3)]
    s = summarise(
        plan_json([("prime", "forward", 1, [0, 1, 2]), ("again", "reverse", 1, [2, 1, 0])]),
        recs,
        again={"counter_delta": {"query_tokens": 300, "hit_tokens": 0}, "attribution": "phase_only"},
    )
    f = diagnose(s, None, recs)
    assert rules(f) == ["one_order_zero"]
    assert f[0].phases == ("again",) and "unknown replay again" in f[0].finding
    # summary.json alone: no replay can be told, so no order finding.
    assert diagnose(s, None, None) == []


# ---------------------------------------------------------------- usage vs counters


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
    assert "counters hit_tokens 192 vs usage cached_tokens 256: gap -64 tokens" in text
    assert "1 requests disagree (positions 1)" in text
    assert s["phases"][0]["cross_check"]["gap_tokens"] == -64  # same sign as the summary
    assert f[0].evidence["a"]["gap_tokens"] == -64.0 and f[0].records == (1,)


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


def test_host_tier_restores_counted_in_usage_give_no_usage_finding():
    # Usage cached = device hits + host-fetched: the simulator host-tier run that restores.
    plan = plan_json([("a", "forward", 1, [0, 1])])
    d0 = {"hit_tokens": 64, "host_lookups": 1, "host_fetched_tokens": 256}
    d1 = {"hit_tokens": 128, "host_lookups": 1, "host_fetched_tokens": 0}
    recs = [
        record("a", 0, 0, cached=320, delta=d0),
        record("a", 1, 1, cached=128, t0_ms=50, delta=d1),
    ]
    tot = {"hit_tokens": 192, "host_lookups": 2, "host_fetched_tokens": 256}
    s = summarise(plan, recs, a={"counter_delta": tot, "attribution": "per_request"})
    xc = s["phases"][0]["cross_check"]
    assert (xc["agree"], xc["gap_tokens"], xc["counter_hit_tokens"]) == (True, 0, 448)
    assert diagnose(s, plan, recs) == []
    # vLLM names the connector tier host_hit_tokens: counted the same way.
    tot2 = {"hit_tokens": 192, "host_query_tokens": 900, "host_hit_tokens": 256}
    s2 = summarise(plan, [dict(r, counter_delta=None) for r in recs],
                   a={"counter_delta": tot2, "attribution": "phase_only"})
    assert diagnose(s2, plan) == []


def test_a_timeout_with_counted_hits_is_explained_not_a_disagreement():
    # vLLM counted the timed-out request's hits at admission; its usage never arrived.
    plan = plan_json([("a", "forward", 1, [0, 1, 2])])
    recs = [
        record("a", 0, 0, cached=64, delta={"hit_tokens": 64}),
        record("a", 1, 1, status="timeout", t0_ms=50, delta={"hit_tokens": 512}),
        record("a", 2, 2, cached=32, t0_ms=90, delta={"hit_tokens": 32}),
    ]
    s = summarise(plan, recs, a={"counter_delta": {"hit_tokens": 608}, "attribution": "per_request"})
    xc = s["phases"][0]["cross_check"]
    assert xc["gap_tokens"] == 512 and xc["requests_disagreeing"] == 0
    assert xc["requests_without_usage"] == {
        "n": 1, "by_status": {"timeout": 1}, "positions": [1], "counter_tokens": 512}
    assert xc["unexplained_gap_tokens"] == 0 and xc["explained"] is True
    assert "1 requests without usage (timeout 1) account for +512" in xc["note"]
    f = diagnose(s, plan, recs)
    assert rules(f) == ["usage_missing"]
    assert "gap +512 tokens (counters − usage)" in f[0].finding
    assert "1 requests without usage (timeout 1, positions 1) account for 512" in f[0].finding
    assert f[0].records == (1,)
    assert f[0].sources() == "From phase a; records at position 1."
    # Without the timeout the same run is quiet.
    ok = [recs[0], dict(recs[2], position=1)]
    s = summarise(plan_json([("a", "forward", 1, [0, 2])]), ok,
                  a={"counter_delta": {"hit_tokens": 96}, "attribution": "per_request"})
    assert diagnose(s, None, ok) == []


def test_failed_requests_above_c1_are_named_but_cannot_close_the_gap():
    plan = plan_json([("a", "forward", 4, [0, 1, 2, 3])])
    recs = [record("a", i, i, cached=10, c=4) for i in range(3)]
    recs.append(record("a", 3, 3, status="cut", c=4))
    s = summarise(plan, recs, a={"counter_delta": {"hit_tokens": 530}, "attribution": "phase_only"})
    f = [x for x in diagnose(s, plan, recs) if x.rule != "client_bound"]
    assert rules(f) == ["usage_vs_counters"]
    assert "gap +500 tokens" in f[0].finding
    assert "1 requests without usage (cut 1) may account for part of it" in f[0].finding
    assert "replay phase a at C1" in f[0].next_experiment
    assert s["phases"][0]["cross_check"]["unexplained_gap_tokens"] is None


def test_counters_without_usage_cached_tokens():
    plan = plan_json([("a", "forward", 1, [0])])
    recs = [record("a", 0, 0, cached=None)]
    s = summarise(plan, recs, a={"counter_delta": {"hit_tokens": 50}, "attribution": "phase_only"})
    f = diagnose(s, plan, recs)
    assert rules(f) == ["usage_vs_counters"] and "no answer reported" in f[0].finding
    s = summarise(plan, recs, a={"counter_delta": {"hit_tokens": 0}, "attribution": "phase_only"})
    assert diagnose(s, plan, recs) == []


def test_usage_rule_uses_the_summary_cross_check_when_there_are_no_records():
    # An old summary's cross_check (no gap_tokens / requests_without_usage keys).
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
    assert "gap -100 tokens" in f[0].finding
    assert "2 requests disagree (positions 0, 2)" in f[0].finding


# ---------------------------------------------------------------- cache invariants


def test_cache_invariant_violation_is_a_finding_with_the_numbers():
    plan = plan_json([("a", "forward", 1, [0])])
    s = summarise(plan, [record("a", 0, 0)])
    v = [
        {"identity": "stores - evicted = entries", "phase": "a", "at": 0,
         "numbers": {"stores": 10, "evicted": 3, "entries": 8}},
        {"identity": "stores - evicted = entries", "phase": "a", "at": "after",
         "numbers": {"stores": 11, "evicted": 3, "entries": 9}},
    ]
    f = diagnose(s, plan, None, v)
    assert rules(f) == ["cache_invariant"]
    assert f[0].finding == (
        "/cache broke stores - evicted = entries in 2 snapshot(s); first phase a at 0: "
        "stores 10, evicted 3, entries 8."
    )
    assert f[0].evidence == {"a": {"stores": 10.0, "evicted": 3.0, "entries": 8.0}}
    assert diagnose(s, plan, None, []) == []


# ---------------------------------------------------------------- client


def test_client_bound_label_from_the_runner():
    plan = plan_json([("a", "forward", 4, [0, 1, 2, 3])])
    recs = [record("a", i, i, c=4, t0_ms=0) for i in range(4)]
    s = summarise(plan, recs, a={"client_bound": True, "client": {"loop_lag_p99_ms": 85.0}})
    f = diagnose(s, plan, recs)
    assert rules(f) == ["client_bound"] and "latencies are the client's" in f[0].finding
    assert "85.0" in f[0].finding
    ev = f[0].evidence["a"]
    assert (ev["loop_lag_p99_ms"], ev["concurrency"]) == (85.0, 4.0)


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




def test_old_vllm_summary_with_lookup_names_in_tokens_is_read_right():
    # A run directory written before host_hit_tokens: vLLM's series under the lookup
    # names, in tokens. The connector series read 0 and did not move: host absent.
    plan = plan_json([("prime", "forward", 1, [0, 1, 2]), ("replay", "reverse", 1, [2, 1, 0])])
    old = {"lookups": 33254, "hits": 31744, "query_tokens": 33254, "hit_tokens": 31744,
           "host_lookups": 0, "host_hits": 0, "host_query_tokens": 0, "host_fetched_tokens": 0}
    s = with_deltas(plan, {"replay": old})
    assert diagnose(s, plan) == []
    ev = phase_evidence(s["phases"][1])
    assert ev.tiers[0].text() == "hit_tokens 31744 (lookups 33254, query_tokens 33254)"


def test_host_tier_churn_is_judged_on_the_host_tier_when_it_looked_in_every_replay():
    # Scenario 3a shape: the device hits the shared system block in every replay; the
    # host tier (looked up in both) restored nothing forward and some in reverse.
    d = lambda host: {"query_tokens": 4000, "hit_tokens": 3440,  # noqa: E731
                      "host_lookups": 4, "host_query_tokens": 560, "host_fetched_tokens": host}
    s = with_deltas(FWD_REV, {"fwd": d(0), "rev": d(512)})
    f = diagnose(s, FWD_REV)
    assert rules(f) == ["churn"]
    assert f[0].finding.startswith("forward replay restored nothing on the host tier while")
    assert "hit_tokens 3440 (query_tokens 4000)" in f[0].finding  # the device figures are shown
    # Host tier consulted in reverse only: the comparison falls back to the device.
    s = with_deltas(FWD_REV, {"fwd": {**d(0), "host_lookups": 0, "host_query_tokens": 0},
                              "rev": d(512)})
    assert diagnose(s, FWD_REV) == []


def test_client_bound_advice_fits_the_runs_shape():
    """Issue 31 item 6: no "fewer workers per process" for a one-process C1 run."""
    plan = plan_json([("a", "forward", 1, [0, 1, 2, 3])])
    recs = [record("a", i, i, c=1, t0_ms=0) for i in range(4)]
    s = summarise(plan, recs, a={"client_bound": True, "attribution": "per_request",
                                 "client": {"loop_lag_p99_ms": 85.0}})
    (f,) = diagnose(s, plan, recs)
    assert f.next_experiment == (
        "rerun the phase on a quieter host (or with the client pinned to an idle core), and once with "
        "--no-per-request-counters to see what the counter reads cost (phases[].counter_reads), "
        "and compare the TTFT and ITL percentiles.")
    assert "workers" not in f.next_experiment
    s["phases"][0]["attribution"] = "phase_only"
    assert diagnose(s, plan, recs)[0].next_experiment == (
        "rerun the phase on a quieter host (or with the client pinned to an idle core), "
        "and compare the TTFT and ITL percentiles.")
    # C4 in one process: spread it; over 2 processes already: more of them
    s["phases"][0]["concurrency"] = 4
    assert diagnose(s, plan, recs)[0].next_experiment.startswith("spread the C4 over several processes (--workers N)")
    s["workers"] = 2
    assert diagnose(s, plan, recs)[0].next_experiment.startswith("spread the C4 over more processes (--workers 4)")
    s["client_includes_server"] = True
    assert diagnose(s, plan, recs)[0].next_experiment.startswith("run the simulator as its own process")
