"""The client_bound / host_stalls findings read the runner's verdict and say what it measured."""

from rundirs import plan_json, record, summarise

from kvreplay.report.diagnose import diagnose

PLAN = plan_json([("a", "forward", 4, [0, 1, 2, 3])])
RECS = [record("a", i, i, c=4, t0_ms=0) for i in range(4)]
# The synthetic starved C256 phase of tests/unit/metrics/test_selfmeasure.py, as the runner writes it.
STARVED = {
    "bound": True, "verdict": "client_bound", "cpu_s": 0.04, "cpu_utilisation": 0.2,
    "starved_s": 0.054, "starvation_share": 0.27, "loop_lag_p50_ms": 0.001,
    "loop_lag_p99_ms": 55.007, "loop_lag_max_ms": 55.007, "loop_lag_samples": 39,
    "loop_late_s": 0.055, "stall_cpu_share": 0.1, "stall_wait_share": 0.9,
}


def _run(client):
    s = summarise(PLAN, RECS, a={"client_bound": client["bound"], "client": client})
    s["phases"][0]["wall_s"] = 0.2
    return diagnose(s, PLAN, RECS)


def test_starved_phase_words_say_what_was_measured_and_the_amount():
    (f,) = _run(STARVED)
    assert f.rule == "client_bound"
    assert f.finding == (
        "phase a: the client may have added up to 55.007 ms to the latencies it stamped (p99 55.007 ms): "
        "its event loop ran late by up to 55.007 ms (loop-lag p99 55.007 ms over 39 probe samples, "
        "ticks a stall swallowed counted), at least 10 ms late for 0.055 s in all of the 0.200 s phase; "
        "the client used 0.2 of a core (its loop thread ran 10% of the late time) and its loop thread "
        "waited 0.054 s runnable for a CPU (27% of the phase, 90% of the late time)."
    )
    assert "latencies are the client's" not in f.finding


def test_lag_alone_is_host_stalls_not_client_bound():
    quiet_cpu = dict(STARVED, bound=False, verdict="host_stalls", starved_s=0.0, starvation_share=0.0,
                     stall_cpu_share=0.0, stall_wait_share=0.0)
    (f,) = _run(quiet_cpu)
    assert f.rule == "host_stalls"
    assert f.finding.startswith(
        "phase a: host scheduling stalls: its event loop ran late by up to 55.007 ms"
    )
    assert "waited 0.0 s runnable for a CPU (0% of the phase, 0% of the late time)" in f.finding
    assert f.finding.endswith("requests in flight then may carry up to 55.007 ms that is not the server's.")


def test_quiet_verdict_no_finding():
    assert _run(dict(STARVED, bound=False, verdict="quiet", loop_lag_p99_ms=2.0)) == []


def test_starvation_unmeasured_is_said():
    (f,) = _run(dict(STARVED, starved_s=None, starvation_share=None, stall_wait_share=None))
    assert "its wait for a CPU was not measured (no /proc/thread-self/schedstat)" in f.finding
