"""Issue 14: a control (comparable = false) or a phase labelled prime is never compared as a main replay arm."""

from rundirs import plan_json, record, summarise

from kvreplay.report.diagnose import diagnose


def with_deltas(plan, deltas, **extra):
    recs = [record(ph["name"], s["position"], s["body_index"], t0_ms=100 * s["position"])
            for ph in plan["phases"] for s in ph["sequence"]]
    over = {n: {"counter_delta": d, "attribution": "phase_only"} for n, d in deltas.items()}
    for n, e in extra.items():
        over.setdefault(n, {}).update(e)
    return summarise(plan, recs, **over)


SPECS = [("prime", "forward", 1, [0, 1, 2, 3]), ("fwd", "forward", 1, [0, 1, 2, 3]),
         ("rev", "reverse", 1, [3, 2, 1, 0])]
DELTAS = {"prime": {"host_lookups": 4, "host_fetched_tokens": 0},
          "fwd": {"host_lookups": 4, "host_fetched_tokens": 0},
          "rev": {"host_lookups": 4, "host_fetched_tokens": 2048}}


def test_reverse_control_marked_not_comparable_is_not_a_main_arm():
    plan = plan_json(SPECS)
    assert [f.rule for f in diagnose(with_deltas(plan, DELTAS), plan)] == ["churn"]
    # The same run with rev written as a control (summary.json "comparable": false): no churn from it.
    f = diagnose(with_deltas(plan, DELTAS, rev={"label": "control", "comparable": False}), plan)
    assert "churn" not in [x.rule for x in f]
    assert all("rev" not in x.phases for x in f)


def test_a_phase_labelled_prime_is_never_evidence():
    specs = [("prime", "forward", 1, [0, 1]), ("warm", "reverse", 1, [1, 0]), ("fwd", "forward", 1, [0, 1])]
    deltas = {"prime": {"host_lookups": 2, "host_fetched_tokens": 0},
              "warm": {"host_lookups": 2, "host_fetched_tokens": 512},
              "fwd": {"host_lookups": 2, "host_fetched_tokens": 0}}
    plan = plan_json(specs)
    assert [f.rule for f in diagnose(with_deltas(plan, deltas), plan)] == ["churn"]
    f = diagnose(with_deltas(plan, deltas, warm={"label": "prime"}), plan)
    assert "churn" not in [x.rule for x in f]
    assert all("warm" not in x.phases for x in f)
