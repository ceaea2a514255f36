"""Issue 14: a control (comparable = false) or a prime is never compared as a main replay arm."""

from rundirs import plan_json, record, summarise

from kvreplay.report.diagnose import diagnose


def plan_with(specs, **extra):
    plan = plan_json(specs)
    for ph in plan["phases"]:
        ph.update(extra.get(ph["name"], {}))
    return plan


def with_deltas(plan, deltas):
    recs = [record(ph["name"], s["position"], s["body_index"], t0_ms=100 * s["position"])
            for ph in plan["phases"] for s in ph["sequence"]]
    return summarise(plan, recs, **{n: {"counter_delta": d, "attribution": "phase_only"} for n, d in deltas.items()})


SPECS = [("prime", "forward", 1, [0, 1, 2, 3]), ("fwd", "forward", 1, [0, 1, 2, 3]),
         ("rev", "reverse", 1, [3, 2, 1, 0])]
DELTAS = {"prime": {"host_fetched_tokens": 0}, "fwd": {"host_fetched_tokens": 0}, "rev": {"host_fetched_tokens": 2048}}


def test_reverse_control_marked_not_comparable_is_not_a_main_arm():
    # Without the mark: churn (fwd 0, rev 2048). With rev a control: only fwd is a replay, all zero.
    assert [f.rule for f in diagnose(with_deltas(plan_json(SPECS), DELTAS), plan_json(SPECS))] == ["churn"]
    plan = plan_with(SPECS, rev={"label": "control", "comparable": False})
    f = diagnose(with_deltas(plan, DELTAS), plan)
    assert [(x.rule, x.phases) for x in f] == [("one_order_zero", ("fwd",))]


def test_a_second_prime_is_never_evidence():
    specs = [("prime", "forward", 1, [0, 1]), ("prime2", "reverse", 1, [1, 0]), ("fwd", "forward", 1, [0, 1])]
    deltas = {"prime2": {"hits": 5}, "fwd": {"hits": 0}}
    plan = plan_with(specs, prime2={"label": "prime"})
    f = diagnose(with_deltas(plan, deltas), plan)
    # prime2 would be a reverse replay with restores (churn); labelled prime it is left out.
    assert [(x.rule, x.phases) for x in f] == [("one_order_zero", ("fwd",))]
