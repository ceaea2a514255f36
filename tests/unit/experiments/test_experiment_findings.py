"""Findings across experiment steps from synthetic run directories (figures by hand)."""

from __future__ import annotations

import json
from pathlib import Path

from kvreplay.experiments.findings import compare_tables, load_views, restore_findings, tiers


def write_step(out: Path, name: str, phases: list[tuple[str, str, list[tuple[str, dict]]]], *,
               attribution: str = "per_request", comparable_phases: bool = True) -> str:
    """phases: (phase name, order, [(body sha, counter delta), ...]) -> run dir ``name``."""
    d = out / name
    d.mkdir(parents=True)
    recs, sums, plan = [], [], []
    for pname, order, reqs in phases:
        total: dict[str, float] = {}
        for pos, (sha, delta) in enumerate(reqs):
            recs.append({"phase": pname, "position": pos, "body_sha256": sha, "sent": True, "status": "ok",
                         "counter_delta": delta if attribution == "per_request" else None})
            for k, v in delta.items():
                total[k] = total.get(k, 0) + v
        sums.append({"name": pname, "ok": len(reqs), "valid": True, "deferred": False, "attribution": attribution,
                     "counter_delta": total, "tokens": {"cached": 0, "cached_unknown": 0},
                     "ttft_ms": {"p50": 10.0}, "e2e_ms": {"p50": 20.0}})
        plan.append({"name": pname, "order": order, **({} if comparable_phases else {"comparable": False})})
    (d / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (d / "summary.json").write_text(json.dumps({"phases": sums}))
    (d / "plan.json").write_text(json.dumps({"phases": plan}))
    return name


def host(fetched: float, lookups: float = 100.0, hit: float = 50.0) -> dict:
    return {"host_fetched_tokens": fetched, "host_lookups": lookups, "hit_tokens": hit, "lookups": 200.0}


def step(name: str, inc: str, comparable: bool = True) -> dict:
    return {"name": name, "kind": "run", "status": "measured", "run_dir": name, "comparable": comparable,
            "incarnation": inc}


def churn_window(tmp_path: Path) -> list[dict]:
    write_step(tmp_path, "A", [("prime", "forward", [("b1", host(0)), ("b2", host(0))]),
                               ("replay", "reverse", [("b2", host(10)), ("b1", host(0))])])
    write_step(tmp_path, "B", [("prime", "forward", [("b1", host(0)), ("b2", host(0))]),
                               ("replay", "forward", [("b1", host(0)), ("b2", host(0))])])
    # the control: b2 twice in a fresh incarnation; only the second send (7 tokens) is evidence
    write_step(tmp_path, "C", [("control", "forward", [("b2", host(3)), ("b2", host(7))])])
    return [step("A", "A0"), step("B", "B0"), step("C", "C0", comparable=False)]


def test_churn_reads_repeats_only_and_keeps_the_control_apart(tmp_path):
    steps = churn_window(tmp_path)
    views = load_views(tmp_path, steps)
    assert [(v.ref, v.repeats, v.first, v.is_prime) for v in views] == [
        ("A/prime", 0, 2, True), ("A/replay", 2, 0, False), ("B/prime", 0, 2, True),
        ("B/replay", 2, 0, False), ("C/control", 1, 1, False)]
    assert views[4].evidence["host_fetched_tokens"] == 7.0
    (f,) = restore_findings(views)
    assert f["rule"] == "row_checkpoint_churn"
    assert [(e["cell"], e["value"], e["role"]) for e in f["evidence"]] == [
        ("B/replay", 0.0, "forward replay"), ("A/replay", 10.0, "reverse replay"), ("C/control", 7.0, "control")]
    assert "A/prime, B/prime" in f["summary"]
    assert f["next"].startswith("add bounded row/page/eviction counters")


def test_no_restores_anywhere(tmp_path):
    write_step(tmp_path, "A", [("p", "forward", [("b1", host(0))]), ("r", "reverse", [("b1", host(0))])])
    write_step(tmp_path, "B", [("p", "forward", [("b1", host(0))]), ("r", "forward", [("b1", host(0))])])
    (f,) = restore_findings(load_views(tmp_path, [step("A", "A0"), step("B", "B0")]))
    assert f["rule"] == "no_restores" and "eligibility" in f["next"]


def test_restores_everywhere_is_no_churn(tmp_path):
    write_step(tmp_path, "A", [("p", "forward", [("b1", host(0))]), ("r", "reverse", [("b1", host(4))])])
    write_step(tmp_path, "B", [("p", "forward", [("b1", host(0))]), ("r", "forward", [("b1", host(5))])])
    (f,) = restore_findings(load_views(tmp_path, [step("A", "A0"), step("B", "B0")]))
    assert f["rule"] == "no_churn"
    assert [e["value"] for e in f["evidence"]] == [5.0, 4.0]


def test_without_a_host_tier_device_hits_decide_and_the_host_tier_is_absent(tmp_path):
    dev = lambda hit: {"hit_tokens": hit, "lookups": 10.0, "query_tokens": 100.0}  # noqa: E731
    write_step(tmp_path, "A", [("p", "forward", [("b1", dev(0))]), ("r", "reverse", [("b1", dev(96))])])
    write_step(tmp_path, "B", [("p", "forward", [("b1", dev(0))]), ("r", "forward", [("b1", dev(0))])])
    views = load_views(tmp_path, [step("A", "A0"), step("B", "B0")])
    assert tiers(views) == {"host": False, "device": True}
    (f,) = restore_findings(views)
    assert f["rule"] == "row_checkpoint_churn"
    assert {e["metric"] for e in f["evidence"]} == {"hit_tokens"}
    assert f["summary"].startswith("row/checkpoint churn") and "no host tier" in f["summary"]
    (t,) = compare_tables(views, [["A/r", "B/r"]])
    rows = {r["metric"]: r for r in t["rows"]}
    assert rows["host_fetched_tokens"]["a"] == "absent" and rows["hit_tokens"]["a"] == 96.0


def test_phase_only_counters_never_split_a_mixed_phase(tmp_path):
    write_step(tmp_path, "C", [("control", "forward", [("b2", host(3)), ("b2", host(7))])],
               attribution="phase_only")
    (v,) = load_views(tmp_path, [step("C", "C0", comparable=False)])
    assert v.evidence is None and "mixes first sends with repeats" in v.note


def test_missing_forward_replay_is_no_decision(tmp_path):
    write_step(tmp_path, "A", [("p", "forward", [("b1", host(0))]), ("r", "reverse", [("b1", host(4))])])
    (f,) = restore_findings(load_views(tmp_path, [step("A", "A0")]))
    assert f["rule"] == "restore_pattern_incomplete"
    assert f["next"] == "run the missing arm (a forward replay) in its own fresh incarnation"


def test_a_control_is_never_compared_as_a_main_arm(tmp_path):
    steps = churn_window(tmp_path)
    views = load_views(tmp_path, steps)
    (t,) = compare_tables(views, [["A/replay", "C/control"]])
    assert t == {"a": "A/replay", "b": "C/control", "note": "not compared: C/control is a control (comparable = false)"}


def test_a_phase_marked_comparable_false_in_plan_json_is_a_control(tmp_path):
    write_step(tmp_path, "A", [("p", "forward", [("b1", host(0))]), ("r", "forward", [("b1", host(0))])])
    write_step(tmp_path, "K", [("k", "forward", [("b1", host(0)), ("b1", host(2))])], comparable_phases=False)
    views = load_views(tmp_path, [step("A", "A0"), step("K", "K0")])
    assert [v.comparable for v in views] == [True, True, False]
    (f,) = restore_findings(views)
    assert f["rule"] == "row_checkpoint_churn"


def _claims_match_cells(f: dict) -> None:
    """The finding's head cites only arms whose cells it lists (issue 31 item 6)."""
    head, _, text = f["summary"].partition(". ")
    roles = {e["role"] for e in f["evidence"]}
    assert ("in the control" in head) == ("control" in roles), f["summary"]
    assert ("control none measured" in text) == ("control" not in roles), f["summary"]


def test_no_churn_without_a_control_does_not_claim_one(tmp_path):
    write_step(tmp_path, "A", [("p", "forward", [("b1", host(0))]), ("r", "reverse", [("b1", host(4))])])
    write_step(tmp_path, "B", [("p", "forward", [("b1", host(0))]), ("r", "forward", [("b1", host(5))])])
    (f,) = restore_findings(load_views(tmp_path, [step("A", "A0"), step("B", "B0")]))
    assert f["rule"] == "no_churn"
    assert f["summary"].startswith("restores in both orders (no control measured): no churn at this working-set "
                                   "size. host tier restores (host_fetched_tokens, repeats only): forward B/r 5; "
                                   "reverse A/r 4; control none measured")
    _claims_match_cells(f)


def test_no_churn_with_a_control_names_it_and_its_cell(tmp_path):
    write_step(tmp_path, "A", [("p", "forward", [("b1", host(0))]), ("r", "reverse", [("b1", host(4))])])
    write_step(tmp_path, "B", [("p", "forward", [("b1", host(0))]), ("r", "forward", [("b1", host(5))])])
    write_step(tmp_path, "C", [("control", "forward", [("b1", host(3)), ("b1", host(7))])])
    (f,) = restore_findings(load_views(tmp_path, [step("A", "A0"), step("B", "B0"), step("C", "C0", False)]))
    assert f["rule"] == "no_churn"
    assert f["summary"].startswith("restores in every order and in the control: no churn")
    assert "control C/control 7" in f["summary"]
    _claims_match_cells(f)


def test_no_restores_without_a_control_does_not_claim_one(tmp_path):
    write_step(tmp_path, "A", [("p", "forward", [("b1", host(0))]), ("r", "reverse", [("b1", host(0))])])
    write_step(tmp_path, "B", [("p", "forward", [("b1", host(0))]), ("r", "forward", [("b1", host(0))])])
    (f,) = restore_findings(load_views(tmp_path, [step("A", "A0"), step("B", "B0")]))
    assert f["rule"] == "no_restores"
    assert f["summary"].startswith("no restores in either order (no control measured).")
    _claims_match_cells(f)
