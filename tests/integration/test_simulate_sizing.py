"""simulate --burst / --today: entries, GiB and loop time (issue 18, docs/simulator.md "Sizing").

Workloads built here: MAIN = 10 requests sharing one system block of S tokens, each with
its own short user turn; FOREIGN = 40 prompts, each its own system block. Entries model,
2 snapshots per request, refresh on use. A main hit on the system snapshot stores one
snapshot (its messages); each foreign miss stores two. With a burst of k foreign prompts
between two main requests, k x 2 + 1 snapshots are newer than the system snapshot when
the next main request looks it up, so it survives only with 2k + 2 = 2(k + 1) entries:
k = 9 -> 20 entries (19 loses it).
"""

from __future__ import annotations

import json

import pytest

from kvreplay.cli import main
from kvreplay.offline.sources import interleave
from kvreplay.plan import Interleave, PhaseSpec, interleave_sequence
from kvreplay.sim.tokenizer import render_body

LETTERS = "abcdefghijklmnopqrstuvwxyz"


def word(i: int) -> str:
    return LETTERS[i % 26] + LETTERS[(i // 26) % 26] + LETTERS[(i // 676) % 26]


def body(system: str, user: str) -> dict:
    return {
        "model": "m",
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        "max_tokens": 4,
    }


@pytest.fixture
def workloads(tmp_path):
    system = " ".join(word(i) for i in range(2000))
    main_bodies = [body(system, f"question number {word(7 * i + 3)} please") for i in range(10)]
    foreign = [body(f"other {word(i)} " + " ".join(word(i * 31 + j) for j in range(50)), "hi") for i in range(40)]
    m, f = tmp_path / "main.jsonl", tmp_path / "foreign.jsonl"
    m.write_text("".join(json.dumps(b) + "\n" for b in main_bodies))
    f.write_text("".join(json.dumps(b) + "\n" for b in foreign))
    prompts = [render_body(b) for b in main_bodies]
    return m, f, prompts


def run_json(capsys, *args):
    assert main(["simulate", *map(str, args), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_burst_of_9_needs_20_entries_gib_and_loop_time(workloads, capsys):
    m, f, prompts = workloads
    sys_end = prompts[0].system_end
    n_tok = sum(len(p) for p in prompts)
    rep = run_json(
        capsys, m, "--interleave", f, "--every", "1", "--burst", "9", "--capacities", "19,20",
        "--today", "8", "--prefill", "a=1.52,rate=1370", "--bytes-per-token", "2674",
        "--max-entry-bytes", "116389652",
    )
    assert rep["interleave"] == {"source": str(f), "every": 1, "burst": 9}
    rows = {r["capacity"]: r for r in rep["curve"]}
    assert sorted(rows) == [8, 19, 20]
    assert (rows[19]["hit_requests"], rows[8]["hit_requests"]) == (0, 0)
    assert (rows[20]["hit_requests"], rows[20]["hit_tokens"]) == (9, 9 * sys_end)
    # GiB = entries x the entry cap
    assert rows[20]["memory_gib"] == 20 * 116389652 / 2**30
    assert rep["entry_bytes"] == 116389652
    # loop time: cold = 10 x 1.52 + n_tok / 1370; the 9 hits skip a, their cached tokens,
    # and pay 2e-5 s per restored token
    cold = 10 * 1.52 + n_tok / 1370
    assert rep["prefill_s_cold"] == pytest.approx(cold, abs=1e-9)
    assert rows[8]["loop_s"] == pytest.approx(cold, abs=1e-9)
    assert rows[20]["loop_s"] == pytest.approx(
        cold - 9 * 1.52 - 9 * sys_end / 1370 + 9 * sys_end * 2e-5, abs=1e-9
    )


def test_burst_1_is_the_old_interleave(workloads, capsys):
    m, f, _ = workloads
    a = run_json(capsys, m, "--interleave", f, "--every", "1", "--capacities", "3,4")
    b = run_json(capsys, m, "--interleave", f, "--every", "1", "--burst", "1", "--capacities", "3,4")
    assert a["curve"] == b["curve"]
    # k = 1 -> 2(k + 1) = 4 entries keep the prefix, 3 do not
    assert [r["hit_requests"] for r in a["curve"]] == [0, 9]


def test_text_answer_line(workloads, capsys):
    m, f, prompts = workloads
    args = ["simulate", str(m), "--interleave", str(f), "--burst", "9", "--share", "1", "--today", "8"]
    args += ["--prefill", "a=1.52,rate=1370", "--max-entry-bytes", "116389652", "--bytes-per-token", "2674"]
    assert main(args) == 0
    out = capsys.readouterr().out
    cold = 10 * 1.52 + sum(len(p) for p in prompts) / 1370
    assert (
        "answer: 20 entries (2.168 GiB) reach 100% of the best tokens hit ratio; a loop then costs"
        in out
    )
    assert f"(no cache: {cold:.1f} s); at today's 8 entries a loop costs {cold:.1f} s" in out


def test_interleave_burst_functions():
    # trace-style tuples: the last field (counted) becomes False for foreign requests
    out = interleave([(1, True), (2, True), (3, True)], [("a", True), ("b", True), ("c", True)], 2, 2)
    assert out == [(1, True), (2, True), ("a", False), ("b", False), (3, True)]
    seq = ((0, 0), (1, 0), (2, 0))
    assert interleave_sequence(seq, 10, 3, 1, 2) == (
        (0, 0), (10, 0), (11, 0), (1, 0), (12, 0), (10, 1), (2, 0), (11, 1), (12, 1),
    )
    assert interleave_sequence(seq, 10, 3, 1) == ((0, 0), (10, 0), (1, 0), (11, 0), (2, 0), (12, 0))


def test_plan_toml_interleave_burst():
    spec = PhaseSpec.from_mapping(
        {"name": "p", "order": "forward", "concurrency": 1,
         "interleave": {"workload": "x.jsonl", "every": 1, "burst": 9}},
        where={},
    )
    assert spec.interleave == Interleave(workload="x.jsonl", every=1, burst=9)
    assert spec.interleave.to_json() == {"workload": "x.jsonl", "every": 1, "burst": 9}
    assert Interleave(workload="x.jsonl", every=4).to_json() == {"workload": "x.jsonl", "every": 4}


@pytest.mark.parametrize("burst", [0, True, "9"])
def test_plan_toml_bad_burst(burst):
    from kvreplay.errors import ConfigError

    with pytest.raises(ConfigError, match="burst"):
        PhaseSpec.from_mapping(
            {"name": "p", "interleave": {"workload": "x.jsonl", "every": 1, "burst": burst}},
            where={},
        )


def test_simulate_from_verdict_sets_model_capacity_and_prefill(workloads, tmp_path, capsys):
    m, f, prompts = workloads
    v = {
        "format": "kvreplay-probe/1",
        "backend": "halogen",
        "prefill_fit": {"a_s": 1.52, "rate_tokens_per_s": 1370.0, "r2": 1.0, "source": "ttft"},
        "warm": [],
        "bytes_per_token": 2674.0,
        "bytes_per_token_kind": "prompt_cache_entry",
        "entries_per_request": 2,
        "implied_entries": [8, 9],
        "min_flush_k": 4,
        "entry_cap_bytes": 116389652,
    }
    p = tmp_path / "verdict.json"
    p.write_text(json.dumps(v))
    rep = run_json(capsys, m, "--interleave", f, "--burst", "9", "--capacities", "20", "--sim-from-verdict", p)
    assert rep["model"] == "entries" and rep["bytes_per_token"] == 2674
    assert rep["entry_bytes"] == 116389652
    assert rep["calibration"]["capacity"] == 8
    rows = {r["capacity"]: r for r in rep["curve"]}
    assert sorted(rows) == [8, 20]  # the calibrated capacity is reported as today's
    cold = 10 * 1.52 + sum(len(q) for q in prompts) / 1370
    assert rows[8]["loop_s"] == pytest.approx(cold, abs=1e-9)
    assert rows[20]["hit_requests"] == 9


def test_plan_toml_burst_round_trip(workloads, tmp_path, capsys):
    import orjson

    from kvreplay.plan import build_plan, load_plan_toml
    from kvreplay.rundir import load_plan_json
    from kvreplay.workload import load_workload

    m, f, _ = workloads
    toml = tmp_path / "plan.toml"
    toml.write_text(
        f'workload = "{m}"\n[[phase]]\nname = "loop"\norder = "forward"\nconcurrency = 1\n'
        f'interleave = {{workload = "{f}", every = 1, burst = 9}}\n'
    )
    specs, _meta = load_plan_toml(toml)
    plan = build_plan(load_workload(m), specs)
    seq = plan.phases[0].sequence
    assert len(seq) == 10 * (1 + 9)  # 9 foreign bodies after each of the 10
    assert [bi for bi, _r in seq[:11]] == [0, *range(10, 19), 1]  # foreign indexed after the 10
    pj = tmp_path / "plan.json"
    pj.write_bytes(orjson.dumps(plan.to_json({})))
    again, _ = load_plan_json(pj, load_workload(m))
    assert again.phases[0].sequence == seq
    assert again.phases[0].spec.interleave.burst == 9
    # simulate reads the plan: same hits as --interleave --burst 9 on the workload
    a = run_json(capsys, pj, "--model", "entries", "--capacities", "19,20")
    assert [r["hit_requests"] for r in a["curve"]] == [0, 9]


# --- issue 29: the smallest capacity is exact, not the smallest sample point ---------------


def _abstract_hits(burst: int, capacity: int, n_issues: int = 10, n_foreign: int = 40) -> int:
    """Counted hits of the bundled sizing workload in a plain LRU of whole entries.

    Written from the model's rules, not with kvreplay: issue i stores its system snapshot S
    (shared) and its own messages snapshot M_i; foreign prompt j stores its own two (F_j,
    F_j+); a lookup uses the longest held snapshot of its own prompt and refreshes it (refresh
    on use), a store inserts what is not held as most recent and evicts the least recent.
    """
    seq: list[tuple[bool, tuple[str, str]]] = []
    j = 0
    for i in range(n_issues):
        seq.append((True, ("S", f"M{i}")))
        for _ in range(burst):
            f = j % n_foreign
            seq.append((False, (f"F{f}", f"F{f}+")))
            j += 1
    lru: list[str] = []  # least recent first
    hits = 0
    for counted, snaps in seq:
        used = next((s for s in reversed(snaps) if s in lru), None)
        if used is not None:
            lru.remove(used)
            lru.append(used)
            hits += counted and used == "S"  # M_i is never offered twice
        for s in snaps:
            if s not in lru:
                lru.append(s)
                if len(lru) > capacity:
                    lru.pop(0)
    return hits


@pytest.fixture(scope="module")
def sizing_workload(tmp_path_factory):
    import runpy
    from pathlib import Path

    d = tmp_path_factory.mktemp("sizing")
    root = Path(__file__).resolve().parents[2]
    runpy.run_path(str(root / "fixtures" / "workloads" / "build_sizing.py"))["main"](d)
    return d


@pytest.mark.parametrize("burst", [5, 9, 10, 11, 12, 14])
def test_smallest_capacity_is_exact_and_checked_at_answer_minus_one(sizing_workload, burst, capsys):
    d = sizing_workload
    # by brute force over the abstract model: the smallest capacity keeping all 9 hits
    best = _abstract_hits(burst, 1000)
    assert best == 9
    want = next(c for c in range(1, 100) if _abstract_hits(burst, c) == best)
    # and by hand: S is refreshed by issue i's lookup, then M_i and 2 x burst foreign
    # snapshots are newer when issue i + 1 looks it up: 2 x burst + 2 entries keep it
    assert want == 2 * (burst + 1)
    rep = run_json(
        capsys, d / "issues.jsonl", "--interleave", d / "foreign.jsonl", "--every", "1",
        "--share", "1", "--burst", burst, "--today", "8", "--prefill", "a=1.52,rate=1370",
        "--bytes-per-token", "2674", "--max-entry-bytes", "116389652",
    )
    # the cap (116389652 // 2674 = 43526 tokens) cuts nothing here: the largest snapshot is
    # one issue's messages snapshot, about 24,000 + 120 tokens
    assert rep["entry_bytes"] == 116389652
    rec = rep["recommended"]
    assert rec["capacity"] == want
    assert rec["hit_requests"] == 9
    assert rec["memory_gib"] == want * 116389652 / 2**30
    chk = rec["check"]
    assert chk["at"]["capacity"] == want and chk["at"]["reached"]
    assert chk["below"]["capacity"] == want - 1 and not chk["below"]["reached"]
    assert chk["below"]["hit_requests"] == 0 and chk["holds"]
    # the answer is in the curve (it is not one of the default sample points, except 20)
    assert want in [r["capacity"] for r in rep["curve"]]
    # "loop s saved" is the no-cache loop minus the loop (issue 29): the 9 hits skip a = 1.52 s
    # and their cached tokens' prefill, and pay 2e-5 s per restored token
    ht = rec["hit_tokens"]
    assert rec["loop_s_saved"] == pytest.approx(9 * 1.52 + ht / 1370 - ht * 2e-5, abs=1e-9)
    for r in rep["curve"]:
        assert r["loop_s_saved"] == pytest.approx(rep["prefill_s_cold"] - r["loop_s"], abs=1e-9)


def test_offer_recency_is_read_off_the_curve_and_rechecked(sizing_workload, capsys):
    # refresh on offer is a stack algorithm: the answer comes from the one-pass curve; the
    # check re-runs EntriesCache. Issue i re-offers S after its lookup, so again M_i and
    # 2 x 9 foreign snapshots are newer than S: 20 entries.
    d = sizing_workload
    args = ["simulate", str(d / "issues.jsonl"), "--interleave", str(d / "foreign.jsonl"),
            "--burst", "9", "--share", "1", "--recency", "offer"]
    rep = run_json(capsys, *args[1:])
    assert rep["method"] == "one-pass"
    chk = rep["recommended"]["check"]
    assert rep["recommended"]["capacity"] == 20 and chk["holds"]
    assert chk["method"] == "the simulator's cache class, one run per capacity"
    assert (chk["at"]["hit_requests"], chk["below"]["hit_requests"]) == (9, 0)
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "checked with the simulator's cache class, one run per capacity: at 20 " in out
