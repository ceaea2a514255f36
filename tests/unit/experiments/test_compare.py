import json

import pytest

from kvreplay.errors import ConfigError
from kvreplay.experiments.ab.arms import Arm, block_order, parse_arm, sim_arm_config
from kvreplay.experiments.ab.compare import (
    Threshold,
    _decide,
    compare_blocks,
    load_pairs,
    parse_threshold,
    render_compare,
)
from kvreplay.sim import SimConfig


def T(text, role="primary"):
    return parse_threshold(text, role)


def test_parse_threshold():
    assert T("ttft_p50:-5%") == Threshold(None, "ttft_p50", -5.0, "primary")
    assert T("c4.itl_p50:+3%", "protected") == Threshold("c4", "itl_p50", 3.0, "protected")
    assert T("throughput:2.5%").pct == 2.5
    for bad in ("ttft_p50:-5", "nope:-5%", "ttft_p50:0%", "ttft_p50"):
        with pytest.raises(ConfigError):
            T(bad)


@pytest.mark.parametrize(
    ("text", "role", "lo", "hi", "want"),
    [
        # primary, lower is better, 5%
        ("ttft_p50:-5%", "primary", -0.09, -0.06, "benefit"),
        (
            "ttft_p50:-5%",
            "primary",
            -0.05,
            -0.01,
            "no decision",
        ),  # touches -5%: not strictly inside
        ("ttft_p50:-5%", "primary", -0.049, 0.049, "no change"),
        ("ttft_p50:-5%", "primary", 0.06, 0.12, "regression"),
        ("ttft_p50:-5%", "primary", 0.04, 0.12, "no decision"),
        # primary, higher is better
        ("throughput:+5%", "primary", 0.05, 0.09, "benefit"),
        ("throughput:+5%", "primary", -0.2, -0.06, "regression"),
        # protected: rising by more than 3% is harm
        ("itl_p50:+3%", "protected", 0.031, 0.05, "regression"),
        ("itl_p50:+3%", "protected", -0.02, 0.03, "ok"),
        ("itl_p50:+3%", "protected", -0.02, 0.04, "no decision"),
        # protected: falling by more than 3% is harm
        ("throughput:-3%", "protected", -0.1, -0.031, "regression"),
        ("throughput:-3%", "protected", -0.03, 0.2, "ok"),
    ],
)
def test_decide(text, role, lo, hi, want):
    assert _decide(T(text, role), lo, hi) == want


def summary(ttft, itl=1.0, *, aborted=None, ok=4, sent=4, valid=True, name="c1"):
    ph = {
        "name": name,
        "planned": 4,
        "sent": sent,
        "ok": ok,
        "valid": valid,
        "deferred": sent == 0,
        "ttft_ms": {"p50": ttft, "p90": ttft, "p99": ttft},
        "itl_ms": {"p50": itl, "p90": itl, "p99": itl},
        "e2e_ms": {"p50": ttft + 10},
        "throughput_rps": 1000 / ttft,
        "output_tokens_per_s": 5.0,
        "tokens": {"cached": 100},
    }
    return {"aborted": aborted, "phases": [ph]}


def pairs_of(values):
    return [
        {
            "rep": i,
            "baseline": {"dir": f"b{i}", "summary": summary(b)},
            "candidate": {"dir": f"c{i}", "summary": summary(c)},
        }
        for i, (b, c) in enumerate(values)
    ]


def test_compare_regression_from_three_pairs():
    res = compare_blocks(
        pairs_of([(100, 110), (100, 108), (100, 112)]), [T("ttft_p50:-5%")], n_boot=2000
    )
    m = res["metrics"]["c1.ttft_p50"]
    assert m["ratios"] == pytest.approx([1.10, 1.08, 1.12])
    assert m["median_ratio"] == pytest.approx(1.10)
    assert m["ci_ratio"] == pytest.approx([1.08, 1.12])  # 3 values: [min, max]
    assert res["verdict"] == "regression"
    assert res["metrics"]["c1.cached_tokens"]["ratios"] == [1.0, 1.0, 1.0]


def test_compare_benefit_needs_protected_ok():
    prs = pairs_of([(100, 90), (100, 88), (100, 91)])
    assert compare_blocks(prs, [T("ttft_p50:-5%")])["verdict"] == "benefit"
    # the same pairs with a protected ITL check whose CI crosses +3% -> no decision
    for i, itl in enumerate((1.0, 1.05, 0.99)):
        prs[i]["candidate"]["summary"]["phases"][0]["itl_ms"]["p50"] = itl
    res = compare_blocks(prs, [T("ttft_p50:-5%"), T("itl_p50:+3%", "protected")])
    assert res["verdict"] == "no decision"


def test_never_a_verdict_from_one_pair():
    res = compare_blocks(pairs_of([(100, 150)]), [T("ttft_p50:-5%")])
    assert res["verdict"] == "no decision"
    assert res["checks"][0]["n"] == 1


def test_failed_and_deferred_blocks_are_cells_not_blanks():
    prs = pairs_of([(100, 110), (100, 110), (100, 110)])
    prs[1]["candidate"]["summary"] = summary(110, aborted={"reason": "identity_drift"})
    prs[2]["candidate"]["summary"] = None
    res = compare_blocks(prs, [T("ttft_p50:-5%")])
    assert res["metrics"]["c1.ttft_p50"]["cells"] == [1.1, "failed", "deferred"]
    assert res["verdict"] == "no decision"
    md = render_compare(res, ["off", "on"])
    assert "| 1.1000 | failed | deferred |" in md


def test_load_pairs_plain_run_dirs(tmp_path):
    dirs = []
    for i, t in enumerate((100, 110, 100, 111)):
        d = tmp_path / f"r{i}"
        d.mkdir()
        (d / "summary.json").write_text(json.dumps(summary(t)))
        dirs.append(d)
    pairs, arms = load_pairs(dirs)
    assert len(pairs) == 2 and arms == ["baseline", "candidate"]
    with pytest.raises(ConfigError):
        load_pairs(dirs[:3])


def test_block_order_alternates():
    arms = [Arm("off", ""), Arm("on", "")]
    order = block_order(arms, 4)
    assert [b["arm"] for b in order] == ["off", "on", "on", "off", "off", "on", "on", "off"]
    assert [b["rep"] for b in order] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert order[2]["dir"] == "blocks/02-on"
    with pytest.raises(ConfigError):
        block_order([Arm("a", "")], 3)
    with pytest.raises(ConfigError):
        block_order([Arm("a", ""), Arm("a", "")], 3)


def test_parse_arm():
    assert parse_arm("on=./switch.sh on=1") == Arm("on", "./switch.sh on=1")
    assert parse_arm("off=") == Arm("off", "")
    with pytest.raises(ConfigError):
        parse_arm("no-equals")


def test_sim_arm_config_prefill_scale():
    base = SimConfig(prefill_base_s=2.0, prefill_tokens_per_s=1000.0)
    cfg = sim_arm_config(base, Arm("on", "sim:prefill_scale=1.1,cache_entries=4"))
    assert cfg.prefill_base_s == pytest.approx(2.2)
    assert cfg.prefill_tokens_per_s == pytest.approx(1000 / 1.1)
    assert cfg.cache_entries == 4 and cfg.build == "sim-1+on"
    # 1000 tokens: (2 + 1) s -> (2.2 + 1.1) s, 10% slower
    assert (cfg.prefill_base_s + 1000 / cfg.prefill_tokens_per_s) / 3.0 == pytest.approx(1.1)
    assert sim_arm_config(base, Arm("off", "sim:")).prefill_base_s == 2.0
    with pytest.raises(ConfigError):
        sim_arm_config(base, Arm("x", "sim:nonsense=1"))


def plan_of(*, workload="a" * 64, c=1, arrival=None, rate=None, bodies=(0, 1, 2, 3), name="c1"):
    ph = {
        "name": name,
        "order": "forward",
        "concurrency": c,
        "repeats": 1,
        "sequence": [
            {"position": p, "body_index": b, "body_sha256": f"{b:064x}", "repetition": 0}
            for p, b in enumerate(bodies)
        ],
    }
    if arrival:
        ph.update(arrival=arrival, rate=rate, time_scale=1.0)
    return {
        "format": "kvreplay-plan/1",
        "workload": {"path": f"wl-{workload[:4]}", "n_bodies": 4, "sha256": workload},
        "phases": [ph],
        "plan_sha256": "p" * 64,
    }


def run_dirs(tmp_path, plans, ttfts=None):
    dirs = []
    for i, plan in enumerate(plans):
        d = tmp_path / f"r{i}"
        d.mkdir()
        s = summary((ttfts or [100, 60] * len(plans))[i])
        s["phases"][0]["concurrency"] = plan["phases"][0]["concurrency"]
        (d / "summary.json").write_text(json.dumps(s))
        (d / "plan.json").write_text(json.dumps(plan))
        dirs.append(d)
    return dirs


def compare_dirs(dirs):
    pairs, arms = load_pairs(dirs)
    res = compare_blocks(pairs, [T("ttft_p50:-5%")], n_boot=500)
    return res, render_compare(res, arms)


def test_same_plan_compares_without_warnings(tmp_path):
    res, md = compare_dirs(run_dirs(tmp_path, [plan_of()] * 4))
    assert res["comparability"] == {"comparable": True, "warnings": []}
    assert res["verdict"] == "benefit"
    assert "WARNING" not in md and "not comparable" not in md


@pytest.mark.parametrize(
    ("candidate", "field", "values"),
    [
        (plan_of(workload="b" * 64), "workload sha256", ("aaaaaaaaaaaa", "bbbbbbbbbbbb")),
        (plan_of(c=4), "concurrency", ("1", "4")),
        (plan_of(c=1, arrival="constant", rate=10.0), "arrival", ("closed loop", "open loop (constant, 10/s)")),
    ],
)
def test_different_workload_concurrency_or_arrival_gives_no_verdict(tmp_path, candidate, field, values):
    res, md = compare_dirs(run_dirs(tmp_path, [plan_of(), candidate] * 2))
    assert res["verdict"] == "not comparable"
    assert res["comparability"]["comparable"] is False
    w = [w for w in res["comparability"]["warnings"] if w["field"] == field]
    assert w and w[0]["blocking"] is True
    assert all(v in w[0]["message"] for v in values)
    assert all(c["decision"] == "not comparable" for c in res["checks"])
    assert res["reasons"][0].startswith("not comparable: ")
    assert "**Verdict: not comparable: " in md and field in md
    assert "benefit" not in md and "regression" not in md


def test_different_body_order_is_a_warning_not_a_stop(tmp_path):
    res, md = compare_dirs(run_dirs(tmp_path, [plan_of(), plan_of(bodies=(3, 2, 1, 0))] * 2))
    assert res["verdict"] == "benefit"
    (w,) = res["comparability"]["warnings"]
    assert (w["field"], w["phase"], w["blocking"]) == ("sequence", "c1", False)
    assert "first difference at position 0: body 0 vs body 3" in w["message"]
    assert "WARNING" in md and "sequence" in md


def test_pairs_of_different_workloads_are_not_pooled(tmp_path):
    # each pair is self-consistent, but pair 1 ran another workload than pair 0
    other = plan_of(workload="b" * 64)
    res, _ = compare_dirs(run_dirs(tmp_path, [plan_of(), plan_of(), other, other]))
    assert res["verdict"] == "not comparable"
    (w,) = res["comparability"]["warnings"]
    assert w["field"] == "workload sha256" and w["pairs"] == [1]


def test_compare_command_writes_the_warning_and_no_verdict(tmp_path, capsys):
    from kvreplay.cli import main

    dirs = run_dirs(tmp_path, [plan_of(), plan_of(c=4)])
    out = tmp_path / "cmp"
    assert main(["compare", *map(str, dirs), "--primary", "ttft_p50:-5%", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "**Verdict: not comparable: concurrency differs in phase c1**" in text
    assert "concurrency differs in phase c1: 1 (" in text
    doc = json.loads((out / "compare.json").read_text())
    assert doc["verdict"] == "not comparable"
    assert doc["comparability"]["warnings"][0]["field"] == "concurrency"
    assert "not comparable" in (out / "compare.md").read_text()
    main(["compare", *map(str, dirs), "--out", str(out), "--quiet"])
    assert "kvreplay compare: not comparable: concurrency differs" in capsys.readouterr().err


def test_change_and_ci_words_shared_by_compare_md_and_the_ab_report():
    from kvreplay.report.abreport import change_pct_text, ci_pct_range_text

    assert change_pct_text(None) == "n/a"
    assert change_pct_text(3.14159) == "+3.14%"
    assert change_pct_text(-0.005) == "-0.01%"
    assert ci_pct_range_text(None) == "n/a" and ci_pct_range_text([]) == "n/a"
    assert ci_pct_range_text([-0.342, 17.471]) == "-0.34% .. +17.47%"


def test_block_phase_specs_of_the_ab_command_and_the_ab_step():
    import pytest

    from kvreplay.errors import ConfigError
    from kvreplay.experiments.ab.arms import block_phase_specs

    a, b = block_phase_specs(" c1, ,c4 ", "reverse", "first:2", field="step[3].phases")
    assert (a.name, a.concurrency, a.order, a.select, a.drain) == ("c1", 1, "reverse", "first:2", True)
    assert (b.name, b.concurrency) == ("c4", 4)
    assert block_phase_specs("c2", "forward")[0].select == "all"
    with pytest.raises(ConfigError, match="'c0': phases are concurrencies like c1,c4") as err:
        block_phase_specs("c1,c0", "forward", field="step[3].phases")
    assert err.value.field == "step[3].phases"
    with pytest.raises(ConfigError, match="no phases"):
        block_phase_specs(" , ", "forward")


def test_checks_with_different_numbers_of_usable_pairs():
    # 3 pairs, every phase ok. ttft usable in all 3; ITL n/a in pair 2 (baseline 0); cached
    # tokens n/a in pairs 0 and 1 (baseline 0, candidate missing): n = 3, 2, 1.
    prs = pairs_of([(100, 110), (100, 108), (100, 112)])
    for i, itl in enumerate((2.02, 2.04)):
        prs[i]["baseline"]["summary"]["phases"][0]["itl_ms"]["p50"] = 2.0
        prs[i]["candidate"]["summary"]["phases"][0]["itl_ms"]["p50"] = itl
    prs[2]["baseline"]["summary"]["phases"][0]["itl_ms"]["p50"] = 0.0
    prs[0]["baseline"]["summary"]["phases"][0]["tokens"]["cached"] = 0
    del prs[1]["candidate"]["summary"]["phases"][0]["tokens"]["cached"]
    res = compare_blocks(prs, [T("ttft_p50:-5%"), T("itl_p50:+3%", "protected"),
                               T("cached_tokens:+5%", "protected")], n_boot=2000)
    m = res["metrics"]
    assert [m[k]["n"] for k in ("c1.ttft_p50", "c1.itl_p50", "c1.cached_tokens")] == [3, 2, 1]
    assert m["c1.itl_p50"]["cells"] == [1.01, 1.02, "n/a"]
    assert m["c1.cached_tokens"]["cells"] == ["n/a", "n/a", 1.0]
    # two ratios 1.01, 1.02: median 1.015 (+1.5%); every resample's median is one of 1.01, 1.015,
    # 1.02 with chances 1/4, 1/2, 1/4, so the 2.5th and 97.5th percentiles are 1.01 and 1.02
    assert m["c1.itl_p50"]["median_ratio"] == pytest.approx(1.015)
    assert m["c1.itl_p50"]["ci_ratio"] == pytest.approx([1.01, 1.02])
    assert [(c["metric"], c["n"], c["decision"]) for c in res["checks"]] == [
        ("ttft_p50", 3, "regression"), ("itl_p50", 2, "ok"), ("cached_tokens", 1, "no decision")]
    assert res["checks"][2]["reason"] == "1 usable pair(s); at least 2 are needed"
    assert res["reasons"] == ["c1.cached_tokens: only 1 usable pair(s)"]
    assert res["verdict"] == "regression"
    assert res["reps"] == {"planned": 3, "measured": 3}
