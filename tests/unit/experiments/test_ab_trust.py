"""A/B verdicts people can trust (issue 45 item 2): selections, time scale 0, protected intervals, busy hosts."""

from __future__ import annotations

import argparse

import pytest

from kvreplay.commands import ab as ab_cmd
from kvreplay.errors import ConfigError
from kvreplay.experiments.ab.arms import block_phase_specs, parse_select
from kvreplay.experiments.ab.compare import Threshold, compare_blocks, render_compare


def _summary(ttft: float, itl: float = 10.0, cached: int = 100, client: dict | None = None) -> dict:
    return {"phases": [{"name": "c1", "sent": 8, "ok": 8, "planned": 8, "valid": True,
                        "ttft_ms": {"p50": ttft}, "itl_ms": {"p50": itl}, "e2e_ms": {"p50": ttft + 50},
                        "throughput_rps": 1000 / ttft, "tokens": {"cached": cached},
                        "client": client or {"verdict": "quiet"}}]}


def _pairs(base: list[dict], cand: list[dict], scale: float | None = None) -> list[dict]:
    plan = None if scale is None else {"run": {"sim_time_scale": scale}}
    return [{"rep": i, "baseline": {"dir": f"x/blocks/{2 * i:02d}-off", "summary": b, "plan": plan},
             "candidate": {"dir": f"x/blocks/{2 * i + 1:02d}-on", "summary": c, "plan": plan}}
            for i, (b, c) in enumerate(zip(base, cand, strict=True))]


@pytest.mark.parametrize(("text", "want"), [("first8", "first:8"), ("last12", "last:12"), ("first:3", "first:3"),
                                            ("all", "all"), ("First8", "first:8")])
def test_select_takes_the_phase_selectors(text, want):
    assert parse_select(text) == want
    assert [s.select for s in block_phase_specs("c1,c4", "forward", parse_select(text))] == [want, want]


@pytest.mark.parametrize("bad", ["first0", "8", "first", "middle8", "first-2"])
def test_a_bad_select_names_the_flag(bad):
    with pytest.raises(ConfigError) as e:
        parse_select(bad)
    assert e.value.field == "--select" and repr(bad) in str(e.value)


def test_at_time_scale_0_timing_checks_are_not_computed_only_counted_ones():
    # the candidate is 1.5x slower in "TTFT" but the blocks ran at time scale 0: the figures are the
    # host's scheduling, so they are not computed; cached tokens 100 -> 120 (+20%) decide a benefit.
    base = [_summary(100.0, cached=100) for _ in range(3)]
    cand = [_summary(85.0, cached=120) for _ in range(3)]  # "faster": the artefact of issue 45
    checks = [Threshold(None, "ttft_p50", -5.0, "primary"), Threshold(None, "cached_tokens", 5.0, "primary"),
              Threshold(None, "itl_p50", 3.0, "protected")]
    res = compare_blocks(_pairs(base, cand, scale=0), checks, n_boot=200)
    why = ("the simulator ran at time scale 0 (no modelled time) in 00-off, 01-on, 02-off, 03-on and 2 more: "
           "latencies and rates are the host's scheduling, not the arms'; only counted metrics (cached_tokens, "
           "ratio:...) are compared")
    assert [(c["metric"], c["decision"], c.get("reason")) for c in res["checks"]] == [
        ("ttft_p50", "not computed", why), ("cached_tokens", "benefit", None), ("itl_p50", "not computed", why)]
    assert res["metrics"]["c1.ttft_p50"]["cells"] == ["not computed"] * 3
    assert res["metrics"]["c1.ttft_p50"]["change_pct"] is None  # no -15% shown for a slower arm
    assert res["metrics"]["c1.cached_tokens"]["change_pct"] == 20.0
    assert res["caveats"] == [f"timing_not_computed ({why})"]
    assert res["verdict"] == "benefit"
    md = render_compare(res, ["off", "on"])
    assert f"- Caveat: timing_not_computed ({why})" in md
    # timing checks alone: nothing decides
    only = compare_blocks(_pairs(base, cand, scale=0), checks[:1], n_boot=200)
    assert only["verdict"] == "no decision" and only["checks"][0]["decision"] == "not computed"
    # at a scale above 0 the same figures are computed (and the slower arm is seen as it is)
    timed = compare_blocks(_pairs(base, cand, scale=0.05), checks[:1], n_boot=200)
    assert timed["checks"][0]["change_pct"] == -15.0 and timed["caveats"] == []


def test_a_protected_check_wider_than_its_bound_is_no_decision_with_the_interval():
    # ITL 10 ms in the baseline, 6.0 / 9.8 / 10.2 in the candidate: ratios 0.60, 0.98, 1.02; three
    # values give the interval [min, max] = [-40%, +2%] (a resample's median is the minimum with
    # probability 7/27 > 2.5%). hi = +2% <= +3%, so the interval rule alone says "ok"; its width, 42%,
    # is 14 times the bound.
    base = [_summary(100.0, itl=10.0) for _ in range(3)]
    cand = [_summary(100.0, itl=v) for v in (6.0, 9.8, 10.2)]
    chk = compare_blocks(_pairs(base, cand), [Threshold(None, "itl_p50", 3.0, "protected")], n_boot=500)["checks"][0]
    assert chk["ci_change_pct"] == [-40.0, 2.0] and chk["change_pct"] == -2.0
    assert chk["decision"] == "no decision"
    assert chk["reason"] == ("the interval [-40.00%, +2.00%] is 42% wide, wider than the 3% bound: it cannot "
                             "show that the change stays within it")
    # 10.1 / 10.05 / 10.2: [+0.5%, +2%], 1.5% wide: ok
    tight = [_summary(100.0, itl=v) for v in (10.1, 10.05, 10.2)]
    ok = compare_blocks(_pairs(base, tight), [Threshold(None, "itl_p50", 3.0, "protected")], n_boot=500)
    assert ok["checks"][0]["decision"] == "ok" and "reason" not in ok["checks"][0]
    assert ok["checks"][0]["ci_change_pct"] == [0.5, 2.0]


def _busy_pairs(candidate_rep0_client: dict) -> list[dict]:
    # TTFT 100 ms -> 165 / 168 / 170: ratios 1.65, 1.68, 1.70: change +68%, interval [+65%, +70%];
    # spreads: baseline 0, candidate (170 - 165) / 168 = 2.98%; halves +65% and +69% (agree).
    base = [_summary(100.0) for _ in range(3)]
    cand = [_summary(v, client=candidate_rep0_client if i == 0 else None) for i, v in enumerate((165.0, 168.0, 170.0))]
    return _pairs(base, cand)


BUSY = {"verdict": "quiet", "host_cpu_wait_share": 0.4}
T5 = Threshold(None, "ttft_p50", -5.0, "primary")


def test_a_busy_host_withholds_the_decision_unless_a_person_accepts_it_by_a_stated_factor():
    noise = ("client not quiet: the run's client self-check read host_busy (a task on the host waited for a CPU "
             "40% of the phase) in candidate rep 0; rerun on a quieter host")
    withheld = compare_blocks(_busy_pairs(BUSY), [T5], n_boot=500)
    assert (withheld["verdict"], withheld["checks"][0]["decision"], withheld["checks"][0]["reason"]) == (
        "no decision", "no decision", noise)
    # factor 3: the near edge +65% >= 3 x 5% and +68% > 3 x 2 x 2.98%; the halves agree
    acc = compare_blocks(_busy_pairs(BUSY), [T5], n_boot=500, accept_busy_host=3.0)
    cav = ("host_busy (a task on the host waited for a CPU 40% of the phase) in candidate rep 0; accepted with "
           "--accept-busy-host 3: the effect clears every gate 3 times over")
    chk = acc["checks"][0]
    assert (acc["verdict"], chk["decision"], chk.get("reason"), chk["caveats"]) == ("regression", "regression",
                                                                                   None, [cav])
    assert chk["ci_change_pct"] == [65.0, 70.0] and acc["caveats"] == [cav]
    # factor 14: 14 x 5% = 70% > the near edge 65%: still withheld, and why
    far = compare_blocks(_busy_pairs(BUSY), [T5], n_boot=500, accept_busy_host=14.0)["checks"][0]
    assert far["decision"] == "no decision"
    assert far["reason"] == (f"{noise}; not accepted with --accept-busy-host 14: the interval [+65%, +70%] comes "
                             "within 65% of no change, under 14x the 5% threshold")
    # factor 12: the edge clears (60% <= 65%) but 68% <= 12 x 2 x 2.976% = 71.4%: the spread gate
    spread = compare_blocks(_busy_pairs(BUSY), [T5], n_boot=500, accept_busy_host=12.0)["checks"][0]
    assert spread["reason"].endswith("not accepted with --accept-busy-host 12: the effect (68%) is not over 12x the "
                                     "spread gate (2 x the arms' spread 2.98%)")
    # the client itself loud (client_bound), not only the host: never accepted
    loud = compare_blocks(_busy_pairs({"verdict": "client_bound"}), [T5], n_boot=500, accept_busy_host=3.0)
    assert loud["checks"][0]["decision"] == "no decision"
    assert loud["checks"][0]["reason"].endswith("not accepted with --accept-busy-host 3: the client, not only the "
                                                "host, was loud")


def test_the_ab_console_states_the_caveats_and_a_withheld_protected_check(monkeypatch, capsys, tmp_path):
    result = {
        "verdict": "benefit",
        "caveats": ["timing_not_computed (the simulator ran at time scale 0 ...)"],
        "reps": {"planned": 3, "measured": 3},
        "checks": [
            {"phase": "c1", "metric": "ttft_p50", "role": "primary", "threshold_pct": -5.0,
             "decision": "not computed", "n": 0, "reason": "the simulator ran at time scale 0 ..."},
            {"phase": "c1", "metric": "itl_p50", "role": "protected", "threshold_pct": 3.0,
             "decision": "no decision", "change_pct": -2.0, "ci_change_pct": [-40.0, 2.0],
             "reason": "the interval [-40.00%, +2.00%] is 42% wide, wider than the 3% bound"},
        ],
        "ab": {"stopped": False},
        "_out": str(tmp_path),
    }

    async def fake(_args):
        return result

    monkeypatch.setattr(ab_cmd, "ab_async", fake)
    monkeypatch.setattr("kvreplay.report.abreport.write_ab_report", lambda out: f"{out}/report.html")
    assert ab_cmd.run(argparse.Namespace(quiet=False)) == 0
    assert capsys.readouterr().out.splitlines()[:4] == [
        "verdict: benefit",
        "  caveat: timing_not_computed (the simulator ran at time scale 0 ...)",
        "  c1.ttft_p50 (primary -5%): not computed",
        "  c1.itl_p50 (protected +3%): no decision, change -2.00% CI [-40.00%, +2.00%] (the interval "
        "[-40.00%, +2.00%] is 42% wide, wider than the 3% bound)",
    ]


def test_ab_select_first8_runs_exactly_8_bodies(tmp_path):
    import kvreplay
    from kvreplay.rundir import read_json_checked

    res = kvreplay.ab(kvreplay.DEMO_WORKLOAD, arms={"off": "sim:", "on": "sim:prefill_scale=1.5"}, reps=1,
                      phases="c1", select="first8", sim={"time_scale": 0}, primary=["ttft_p50:-5%"],
                      out=tmp_path / "ab")
    assert res["ab"]["phases"] == [{"name": "c1", "concurrency": 1, "requests": 8}]
    for blk in res["ab"]["blocks"]:
        ph = read_json_checked(tmp_path / "ab" / blk["dir"] / "summary.json")["phases"][0]
        assert (ph["planned"], ph["sent"], ph["ok"]) == (8, 8, 8)
    assert res["checks"][0]["decision"] == "not computed"
    assert res["caveats"][0].startswith("timing_not_computed (the simulator ran at time scale 0")


def test_ab_select_past_the_workload_names_the_flag_and_makes_nothing(tmp_path, capsys):
    import kvreplay
    from kvreplay.cli import main

    out = tmp_path / "ab"
    assert main(["ab", str(kvreplay.DEMO_WORKLOAD), "--target", "sim", "--arm", "off=sim:", "--arm",
                 "on=sim:prefill_scale=1.5", "--reps", "1", "--phases", "c1", "--select", "first53",
                 "--sim-time-scale", "0", "--out", str(out), "--quiet"]) == 2
    assert capsys.readouterr().err.strip() == (
        "kvreplay: error: field '--select': phase 'c1' selects first:53 but the workload has 52 bodies "
        "(first:52 or all sends every one)")
    assert not out.exists()
