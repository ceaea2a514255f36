"""Issue 27 item 6: an A/B check knows its resolution (figures derived by hand in each case)."""

from __future__ import annotations

from kvreplay.experiments.ab.compare import Threshold, compare_blocks
from kvreplay.experiments.ab.resolution import resolution_gate, split_half, spread_pct, step_us


def test_hdr_step():
    assert [step_us(v) for v in (1, 999, 1000, 1500, 9999, 10_000, 123_456)] == [1, 1, 10, 10, 10, 100, 1000]


def test_spread_and_split_half():
    assert spread_pct([9.0, 10.0, 11.0]) == 20.0  # (11 - 9) / 10
    assert spread_pct([5.0]) is None
    # ratios 1.10, 1.20 | 0.90, 0.80: halves +15% and -15%: disagree
    assert split_half([1.10, 1.20, 0.90, 0.80]) == {"first_pct": 15.0, "second_pct": -15.0, "agree": False}
    # odd count: the middle pair goes to the second half; 1.1 | median(1.2, 1.3) = 1.25
    assert split_half([1.1, 1.2, 1.3]) == {"first_pct": 10.0, "second_pct": 25.0, "agree": True}


def _entry(base, cand, metric="itl_p50"):
    ratios = [c / b for b, c in zip(base, cand, strict=True)]
    s = sorted(ratios)
    med = s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2
    return {"metric": metric, "values_baseline": base, "values_candidate": cand, "ratios": ratios,
            "change_pct": (med - 1) * 100}


def test_values_at_the_histogram_floor_are_below_resolution():
    # ITL p50 2 µs in both arms: the step is 1 µs = 50% of the value, coarser than 3% / 2
    d, why = resolution_gate(_entry([0.002] * 3, [0.002] * 3), 3.0, "ok", True)
    assert d == "no decision"
    assert why == ("below resolution: itl_p50 is 2 µs, where the histogram's step is 1 µs (50%), coarser than "
                   "half the 3% threshold")
    # 200 µs: the step is 0.5%, finer than 1.5%: the decision stands
    assert resolution_gate(_entry([0.2] * 3, [0.2] * 3), 3.0, "ok", True) == ("ok", None)
    # not a latency: no histogram gate
    assert resolution_gate(_entry([2.0] * 3, [2.0] * 3, "throughput"), 3.0, "ok", False) == ("ok", None)


def test_an_effect_not_over_twice_the_spread_is_no_decision():
    # baseline 10, 14, 10 ms (spread 40%), candidate +20%: the effect is inside the noise
    d, why = resolution_gate(_entry([10.0, 14.0, 10.0], [12.0, 16.8, 12.0], "ttft_p50"), -5.0, "regression", True)
    assert d == "no decision"
    assert why == "below resolution: the effect (20%) is not over twice the arms' spread across repetitions (40%)"
    # the bound is twice the larger spread, inclusive: baseline 10, 10.5, 10 (spread 5%), candidate 10% more
    # in every pair: 10% is not over 2 x 5% -> withheld; 10.5% (2 x 5% + 0.5) -> the regression stands
    base = [10.0, 10.5, 10.0]
    d, why = resolution_gate(_entry(base, [11.0, 11.55, 11.0], "ttft_p50"), -5.0, "regression", True)
    assert d == "no decision" and why.startswith("below resolution: the effect (10%) is not over twice"), why
    assert resolution_gate(_entry(base, [11.05, 11.6025, 11.05], "ttft_p50"), -5.0,
                           "regression", True) == ("regression", None)
    # an effect over 1x but not 2x the spread (the rule before): 8% against 5%: withheld
    d, _ = resolution_gate(_entry(base, [10.8, 11.34, 10.8], "ttft_p50"), -5.0, "regression", True)
    assert d == "no decision"
    # a tight baseline (10, 10.2, 10.1: 1.98%) and +20%: the regression stands
    assert resolution_gate(_entry([10.0, 10.2, 10.1], [12.0, 12.24, 12.12], "ttft_p50"), -5.0,
                           "regression", True) == ("regression", None)
    # a counted metric (not a latency) keeps the 1x bound: 8% against 5% stands, 4% against 5% does not
    assert resolution_gate(_entry(base, [10.8, 11.34, 10.8], "cached_tokens"), 5.0,
                           "benefit", False) == ("benefit", None)
    d, why = resolution_gate(_entry([10.0, 10.5, 10.0], [10.4, 10.9, 10.4], "cached_tokens"), 3.0, "benefit", False)
    assert d == "no decision" and why == ("below resolution: the effect (4%) is not over the arms' spread across "
                                          "repetitions (5%)"), why


def test_halves_that_disagree_are_not_repeatable():
    e = _entry([10.0] * 4, [11.0, 11.0, 10.9, 9.0], "ttft_p50")
    e["values_baseline"] = [10.0] * 4  # no spread in the baseline
    e["values_candidate"] = [11.0, 11.0, 10.9, 10.95]  # spread 0.9%: not the gate that fires
    e["ratios"] = [1.10, 1.10, 0.95, 0.90]  # halves +10% and -7.5%
    e["change_pct"] = 2.5
    d, why = resolution_gate(e, -2.0, "regression", True)
    assert d == "no decision" and why.startswith("not repeatable: the two halves of the repetitions disagree")


def _summary(itl_ms: float, ttft_ms: float) -> dict:
    return {"phases": [{"name": "c1", "sent": 4, "ok": 4, "planned": 4, "valid": True,
                        "itl_ms": {"p50": itl_ms}, "ttft_ms": {"p50": ttft_ms}}]}


def test_compare_blocks_says_below_resolution_and_states_split_half():
    pairs = [{"rep": i, "baseline": {"dir": f"b{i}", "summary": _summary(0.001, 5.0)},
              "candidate": {"dir": f"c{i}", "summary": _summary(0.001, 5.0)}} for i in range(4)]
    res = compare_blocks(pairs, [Threshold(None, "itl_p50", 3.0, "protected")], n_boot=200)
    (chk,) = res["checks"]
    assert chk["decision"] == "no decision" and chk["reason"].startswith("below resolution: itl_p50 is 1 µs")
    assert chk["split_half"] == {"first_pct": 0.0, "second_pct": 0.0, "agree": True}
    assert res["verdict"] == "no decision"


def test_a_too_fast_time_scale_is_flagged_before_the_run(tmp_path, capsys):
    from pathlib import Path

    from kvreplay.cli import main
    from kvreplay.experiments.timescale import fast_scale_warning

    # 20 ms x 0.001 = 20 µs: the 1 µs step is 5% of it
    assert fast_scale_warning(0.001) == (
        "time scale 0.001 makes the simulator's ITL 20 µs (20 ms x 0.001): the latency histograms step by 1 µs "
        "(5% of it), so ITL checks of a few percent will read 'no decision: below resolution'; use a time scale "
        "of at least 0.005 for A/B decisions on ITL")
    assert fast_scale_warning(0.05) is None and fast_scale_warning(0) is None and fast_scale_warning(1.0) is None
    wl = Path(__file__).resolve().parents[3] / "fixtures" / "workloads" / "mtbench-52"
    f = tmp_path / "w.toml"
    f.write_text(f'workload = "{wl}"\n[server]\ntarget = "sim"\n[server.sim]\ntime_scale = 0.01\n'
                 '[[step]]\nname = "A0"\nkind = "incarnation"\nsim = {time_scale = 0.001}\n'
                 '[[step]]\nname = "A"\nkind = "run"\nphases = ["p:forward:c1:first2"]\n')
    assert main(["experiment", str(f), "--dry-run", "--out", str(tmp_path / "x")]) == 0
    out = capsys.readouterr().out
    assert "warning: step A0: time scale 0.001 makes the simulator's ITL 20 µs" in out
    assert "warning: time scale 0.01" not in out  # 200 µs at the window's own scale: fine


def test_bootstrap_interval_is_the_95_percent_one_by_hand():
    # Medians of 9-draw resamples of 1..9: P(median <= k) = P(at least 5 of 9 draws <= k), draws
    # uniform: P(<= 1) = 0.00145, P(<= 2) = 0.0304, P(<= 3) = 0.145 (binomial sums, by hand).
    # The 2.5% quantile is therefore 2 and the 97.5% quantile 8 (symmetry); a 90% interval
    # (5% / 95%) would be [3, 7].
    from kvreplay.experiments.stats import bootstrap_median_ci

    for seed in range(3):
        assert bootstrap_median_ci(list(range(1, 10)), seed=seed) == (2.0, 8.0)


def test_client_noise_names_every_block_whose_self_check_was_not_quiet():
    from kvreplay.experiments.ab.resolution import client_noise

    blocks = [{"side": "baseline", "rep": 0, "client": {"verdict": "quiet", "loop_lag_p99_ms": 2.0}},
              {"side": "candidate", "rep": 0, "client": {"verdict": "client_bound", "loop_lag_p99_ms": 15.75}},
              {"side": "baseline", "rep": 1, "client": None},  # a run older than the self-check: quiet
              {"side": "candidate", "rep": 2, "client": {"verdict": "host_stalls", "loop_lag_p99_ms": 11.0}}]
    assert client_noise(blocks) == (
        "client not quiet: the run's client self-check read client_bound in candidate rep 0, host_stalls in "
        "candidate rep 2 (loop lag p99 up to 15.8 ms); rerun on a quieter host")
    assert client_noise(blocks[:1] + blocks[2:3]) is None and client_noise([]) is None
    assert client_noise([{"side": "baseline", "rep": 3, "client": {"verdict": "host_stalls"}}]) == (
        "client not quiet: the run's client self-check read host_stalls in baseline rep 3; rerun on a quieter host")


def test_a_busy_host_withholds_timing_decisions_though_the_client_was_quiet():
    from kvreplay.experiments.ab.resolution import client_noise, host_busy

    assert host_busy({"verdict": "quiet", "host_load_1m": 2.01, "host_cpus": 2}) is True
    assert host_busy({"verdict": "quiet", "host_load_1m": 2.0, "host_cpus": 2}) is False  # at the CPU count: not over
    assert host_busy({"verdict": "quiet"}) is False and host_busy(None) is False  # older runs: not busy
    assert host_busy({"host_load_1m": None, "host_cpus": 2}) is False
    blocks = [{"side": "baseline", "rep": 0, "client": {"verdict": "quiet", "host_load_1m": 1.5, "host_cpus": 2}},
              {"side": "candidate", "rep": 1, "client": {"verdict": "quiet", "loop_lag_p99_ms": 1.0,
                                                        "host_load_1m": 7.12, "host_cpus": 2}}]
    assert client_noise(blocks) == (
        "client not quiet: the run's client self-check read host_busy (load average 7.12 on 2 CPUs) in candidate "
        "rep 1 (loop lag p99 up to 1 ms); rerun on a quieter host")
    assert client_noise(blocks[:1]) is None


def test_host_cpu_pressure_withholds_timing_decisions_at_a_load_under_the_cpus():
    # one CPU-bound process beside a same-host server: load 1.7 on 2 CPUs (not over), but some
    # task waited for a CPU 45% of the phase (PSI); the gate's bound is 10%, inclusive
    from kvreplay.experiments.ab.resolution import HOST_CPU_WAIT_SHARE, client_noise, host_busy

    assert HOST_CPU_WAIT_SHARE == 0.1
    busy = {"verdict": "quiet", "host_load_1m": 1.7, "host_cpus": 2, "host_cpu_wait_share": 0.45}
    assert host_busy(busy) is True
    assert host_busy({**busy, "host_cpu_wait_share": 0.1}) is True
    assert host_busy({**busy, "host_cpu_wait_share": 0.0999}) is False
    assert host_busy({**busy, "host_cpu_wait_share": None}) is False  # no PSI on this kernel: the load alone
    blocks = [{"side": "baseline", "rep": 0, "client": {**busy, "host_cpu_wait_share": 0.09}},
              {"side": "candidate", "rep": 2, "client": busy}]
    assert client_noise(blocks) == (
        "client not quiet: the run's client self-check read host_busy (a task on the host waited for a CPU 45% "
        "of the phase) in candidate rep 2; rerun on a quieter host")
    # both figures over: the pressure is named (it is the phase's own, the load a 1-minute average)
    both = {"verdict": "quiet", "host_load_1m": 3.0, "host_cpus": 2, "host_cpu_wait_share": 0.6}
    assert client_noise([{"side": "baseline", "rep": 1, "client": both}]) == (
        "client not quiet: the run's client self-check read host_busy (a task on the host waited for a CPU 60% "
        "of the phase) in baseline rep 1; rerun on a quieter host")


def test_cpu_pressure_reads_the_some_total_and_the_monitor_takes_its_delta(tmp_path, monkeypatch):
    import asyncio

    from kvreplay.metrics import selfmeasure
    from kvreplay.metrics.selfmeasure import ClientMonitor, CpuPressure

    psi = tmp_path / "cpu"
    psi.write_text("some avg10=0.73 avg60=0.41 avg300=0.77 total=9391006956\n"
                   "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n")
    monkeypatch.setattr(CpuPressure, "PATH", str(psi))
    assert CpuPressure.read() == 9391006956
    psi.write_text("full avg10=0.00 avg60=0.00 avg300=0.00 total=5\nsome total=x\n")
    assert CpuPressure.read() is None  # a malformed total: unmeasured, not 0
    monkeypatch.setattr(CpuPressure, "PATH", str(tmp_path / "absent"))
    assert CpuPressure.read() is None

    # the phase's share: (total at stop - total at start) µs over the phase's wall time
    reads = iter([1_000_000, 1_450_000])
    monkeypatch.setattr(CpuPressure, "read", classmethod(lambda cls: next(reads)))
    clock = iter([10_000_000_000, 12_000_000_000])  # start, stop: 2 s of wall
    monkeypatch.setattr(selfmeasure, "now_ns", lambda: next(clock))

    async def phase() -> ClientMonitor:
        m = ClientMonitor()
        m.start()
        m.stop()
        return m

    m = asyncio.run(phase())
    assert m.host_cpu_wait_s == 0.45 and m.wall_s == 2.0
    assert m.to_json()["host_cpu_wait_share"] == 0.225


def test_host_load_figures_are_the_platforms():
    import os

    from kvreplay.metrics.selfmeasure import host_load

    got = host_load()
    assert got["host_cpus"] == len(os.sched_getaffinity(0))
    assert isinstance(got["host_load_1m"], float) and got["host_load_1m"] >= 0


def _loud(ttft: float, itl: float, verdict: str = "quiet", cached: int = 100) -> dict:
    return {"phases": [{"name": "c4", "sent": 4, "ok": 4, "planned": 4, "valid": True, "ttft_ms": {"p50": ttft},
                        "itl_ms": {"p50": itl}, "tokens": {"cached": cached},
                        "client": {"verdict": verdict, "loop_lag_p99_ms": 12.0}}]}


def test_a_busy_client_turns_a_decision_into_no_decision_on_timing_metrics_only():
    # identical TTFT, ITL +10% in every pair (tight: no spread, halves agree): a protected regression when
    # every block is quiet; with one block client-bound it is "no decision" naming that block.
    def pairs(verdict_of_rep1_candidate: str) -> list[dict]:
        return [{"rep": i, "baseline": {"dir": f"b{i}", "summary": _loud(100.0, 6.0, cached=100)},
                 "candidate": {"dir": f"c{i}", "summary": _loud(
                     100.0, 6.6, verdict_of_rep1_candidate if i == 1 else "quiet", cached=120)}}
                for i in range(3)]

    checks = [Threshold(None, "itl_p50", 3.0, "protected"), Threshold(None, "cached_tokens", 5.0, "primary")]
    quiet = compare_blocks(pairs("quiet"), checks, n_boot=500)
    assert [(c["decision"], c.get("reason")) for c in quiet["checks"]] == [("regression", None), ("benefit", None)]
    assert quiet["verdict"] == "regression"
    loud = compare_blocks(pairs("client_bound"), checks, n_boot=500)
    why = ("client not quiet: the run's client self-check read client_bound in candidate rep 1 (loop lag p99 up "
           "to 12 ms); rerun on a quieter host")
    # cached tokens are counted, not timed: the client's speed does not move them, their decision stands
    assert [(c["decision"], c.get("reason")) for c in loud["checks"]] == [("no decision", why), ("benefit", None)]
    assert loud["verdict"] == "no decision"
    assert loud["reasons"] == [f"c4.itl_p50: no decision: {why}"]
    # the interval is still stated: the gate withholds the decision, not the figures
    assert loud["checks"][0]["ci_change_pct"] == quiet["checks"][0]["ci_change_pct"] == [10.0, 10.0]


def test_compare_blocks_interval_is_the_95_percent_one_by_hand():
    # candidate/baseline = 1.01 .. 1.09 (one pair each): the medians of 9-draw resamples put
    # P(<= 1.01) = 0.00145, P(<= 1.02) = 0.0304, P(<= 1.03) = 0.145 (binomial sums, as in
    # test_bootstrap_interval_is_the_95_percent_one_by_hand), so the 2.5% / 97.5% quantiles are
    # 1.02 / 1.08: change [+2%, +8%]. A 90% interval (5% / 95%) would be [+3%, +7%].
    pairs = [{"rep": k, "baseline": {"dir": f"b{k}", "summary": _loud(100.0, 6.0)},
              "candidate": {"dir": f"c{k}", "summary": _loud(100.0 + k + 1, 6.0)}} for k in range(9)]
    res = compare_blocks(pairs, [Threshold(None, "ttft_p50", -1.0, "primary")])
    m = res["metrics"]["c4.ttft_p50"]
    assert m["ci_ratio"] == [1.02, 1.08]
    assert m["ci_change_pct"] == [2.0, 8.0]
    assert m["change_pct"] == 5.0
    assert res["bootstrap"]["alpha"] == 0.05


def test_arms_whose_medians_sit_on_either_side_of_a_histogram_step_are_read_at_the_smaller():
    # baseline 1,000 µs (step 10 µs: 1%), candidate 999 µs (step 1 µs: 1/999 = 0.1001%); a 0.3%
    # threshold needs a step finer than 0.15%: the smaller arm's (0.1001%) is, the larger's is not.
    e = _entry([1.0] * 3, [0.999] * 3)
    assert resolution_gate(e, 0.3, "ok", True) == ("ok", None)
    # the same the other way round (the baseline below the step)
    assert resolution_gate(_entry([0.999] * 3, [1.0] * 3), 0.3, "ok", True) == ("ok", None)
    # 10,000 µs (step 100 µs: 1%) against 9,990 µs (step 10 µs: 0.1001%), threshold 1%: stands
    assert resolution_gate(_entry([10.0] * 3, [9.99] * 3), 1.0, "ok", True) == ("ok", None)
    # a 0.15% threshold: half is 0.075%, and even the finer step (0.1001%) is coarser
    d, why = resolution_gate(e, 0.15, "ok", True)
    assert d == "no decision"
    assert why == ("below resolution: itl_p50 is 999 µs, where the histogram's step is 1 µs (0.1%), coarser "
                   "than half the 0.15% threshold")
