"""kvreplay simulate from the command line: traces, workloads, plans, interleaving, outputs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import orjson

from kvreplay.cli import main
from kvreplay.plan import build_plan, parse_phase
from kvreplay.workload import load_workload

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "fixtures" / "traces" / "mooncake_fast25_conversation_trace.jsonl"
WORKLOAD = ROOT / "fixtures" / "workloads" / "mtbench-52"


def run_json(capsys, *args):
    assert main(["simulate", *map(str, args), "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def small_trace(tmp_path):
    p = tmp_path / "t.jsonl"
    rows = [
        {"timestamp": 0, "input_length": 1030, "output_length": 1, "hash_ids": [0, 1, 2]},
        {"timestamp": 1, "input_length": 1100, "output_length": 1, "hash_ids": [0, 1, 3]},
        {"timestamp": 2, "input_length": 600, "output_length": 1, "hash_ids": [0, 4]},
    ]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return p


def test_trace_by_hand(tmp_path, capsys):
    rep = run_json(
        capsys, small_trace(tmp_path), "--capacities", "1,2,3", "--prefill", "a=1,rate=512"
    )
    assert (rep["kind"], rep["model"], rep["method"], rep["unit"], rep["unit_tokens"]) == (
        "trace",
        "radix",
        "one-pass",
        "block",
        512,
    )
    assert rep["requests"] == 3 and rep["prompt_tokens"] == 2730
    # chains of full blocks [0,1] [0,1] [0]; lookups 2, 2, 1. Request 2 hits 0 (d=1) and 1 (d=2);
    # request 3 hits 0 (d=1).
    curve = {r["capacity"]: r for r in rep["curve"]}
    assert (curve[1]["hit_requests"], curve[1]["hit_tokens"]) == (2, 1024)
    assert (curve[2]["hit_requests"], curve[2]["hit_tokens"]) == (2, 1536)
    assert curve[2]["prefill_s_saved"] == 3.0 and curve[2]["hit_ratio_requests"] == 2 / 3
    assert curve[3] == {
        **curve[2],
        "capacity": 3,
        "capacity_tokens": 1536,
        "memory_gib": 1536 * rep["bytes_per_token"] / 2**30,
    }
    assert rep["recommended"]["capacity"] == 2
    assert rep["prefill_s_cold"] == 3 * 1 + 2730 / 512


def test_mooncake_limit_and_keys(capsys):
    rep = run_json(capsys, TRACE, "--limit", "2000", "--points", "10")
    assert rep["requests"] == 2000
    for row in rep["curve"]:
        assert {
            "capacity",
            "hit_ratio_requests",
            "hit_ratio_tokens",
            "prefill_s_saved",
        } <= row.keys()
    caps = [r["capacity"] for r in rep["curve"]]
    assert caps == sorted(caps) and caps[-1] == rep["max_useful_capacity"]
    ratios = [r["hit_ratio_tokens"] for r in rep["curve"]]
    assert ratios == sorted(ratios)
    assert rep["recommended"]["hit_ratio_tokens"] >= 0.95 * ratios[-1]


def test_interleaving_a_trace_lowers_its_curve(tmp_path, capsys):
    base = run_json(capsys, TRACE, "--limit", "1500", "--capacities", "2000")
    mixed = run_json(
        capsys,
        TRACE,
        "--limit",
        "1500",
        "--capacities",
        "2000",
        "--interleave",
        TRACE,
        "--every",
        "1",
    )
    assert mixed["requests"] == base["requests"] == 1500
    assert mixed["interleave"] == {"source": str(TRACE), "every": 1, "burst": 1}
    assert mixed["curve"][0]["hit_tokens"] < base["curve"][0]["hit_tokens"]


def test_plan_json_input_with_reset(tmp_path, capsys):
    wl = load_workload(WORKLOAD)
    replay = dataclasses.replace(parse_phase("replay:forward:c1:first5"), reset=True)
    plan = build_plan(wl, [parse_phase("prime:forward:c1:first5"), replay])
    p = tmp_path / "plan.json"
    p.write_bytes(orjson.dumps(plan.to_json({})))
    a = run_json(capsys, p, "--model", "entries", "--capacities", "16")
    b = run_json(
        capsys,
        WORKLOAD,
        "--phase",
        "prime:forward:c1:first5",
        "--phase",
        "replay:forward:c1:first5",
        "--model",
        "entries",
        "--capacities",
        "16",
    )
    assert a["kind"] == "plan" and a["requests"] == 10
    # no reset: primes 2-5 hit the system snapshot, every replayed body its own messages one
    assert b["curve"][0]["hit_requests"] == 9
    # reset before the replay: its first body misses, the other four hit the system snapshot
    assert a["curve"][0]["hit_requests"] == 8


def test_entries_offer_is_one_pass(capsys):
    rep = run_json(capsys, WORKLOAD, "--model", "entries", "--recency", "offer", "--points", "5")
    assert rep["method"] == "one-pass" and rep["recency"] == "offer"
    assert rep["curve"][-1]["capacity"] == rep["max_useful_capacity"]


def test_host_tier_runs_per_capacity(capsys):
    rep = run_json(
        capsys,
        WORKLOAD,
        "--model",
        "radix",
        "--host-rows",
        "40",
        "--capacities",
        "100,300",
        "--phase",
        "p:forward:c1:first10",
        "--phase",
        "r:reverse:c1:first10",
    )
    dev = run_json(
        capsys,
        WORKLOAD,
        "--model",
        "radix",
        "--capacities",
        "100,300",
        "--phase",
        "p:forward:c1:first10",
        "--phase",
        "r:reverse:c1:first10",
    )
    assert rep["method"] == "per-capacity" and dev["method"] == "one-pass"
    for h, d in zip(rep["curve"], dev["curve"], strict=True):
        host = rep["host_hit_tokens"][str(h["capacity"])]
        assert h["hit_tokens"] == d["hit_tokens"] + host


def test_table_marks_recommendation(tmp_path, capsys):
    assert main(["simulate", str(small_trace(tmp_path)), "--capacities", "1,2,3"]) == 0
    out = capsys.readouterr().out
    assert "model radix (one-pass), capacity in blocks of 512 tokens" in out
    assert any(line.split()[0] == "2" and line.endswith("*") for line in out.splitlines()[2:5])
    # no prefill model: the "-" of the prefill column is explained once, with how to get it
    assert all(line.split()[3] == "-" for line in out.splitlines()[2:5])
    assert out.splitlines().count("prefill s saved: - = no prefill cost model to convert hit tokens into seconds; "
                                  "give --prefill a=S,rate=TOKENS_PER_S or --sim-from-verdict VERDICT.json") == 1
    assert main(["simulate", str(small_trace(tmp_path)), "--capacities", "1,2,3", "--prefill", "a=1,rate=1000"]) == 0
    assert "prefill s saved: -" not in capsys.readouterr().out


def test_entries_on_trace_is_bad_input(tmp_path, capsys):
    assert main(["simulate", str(small_trace(tmp_path)), "--model", "entries"]) == 2
    assert "only --model radix" in capsys.readouterr().err


def test_plot_written(tmp_path, capsys):
    png = tmp_path / "curve.png"
    assert main(["simulate", str(small_trace(tmp_path)), "--plot", str(png)]) == 0
    capsys.readouterr()
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_capacity_in_tokens_and_gib(tmp_path, capsys):
    t = small_trace(tmp_path)
    blocks = run_json(capsys, t, "--capacities", "1,2")
    toks = run_json(capsys, t, "--capacities", "600,1024", "--capacity-unit", "tokens")
    # 600 tokens -> 1 block of 512; 1024 -> 2; at 2**30 bytes per token... use 1 MiB per token:
    gib = run_json(
        capsys,
        t,
        "--capacities",
        "0.5,1",
        "--capacity-unit",
        "gib",
        "--bytes-per-token",
        str(1 << 20),
    )
    # 0.5 GiB = 512 tokens = 1 block; 1 GiB = 1024 tokens = 2 blocks
    assert [r["capacity"] for r in toks["curve"]] == [1, 2] == [r["capacity"] for r in gib["curve"]]
    assert toks["curve"] == blocks["curve"]
    assert (
        main(
            [
                "simulate",
                str(WORKLOAD),
                "--model",
                "entries",
                "--capacities",
                "100",
                "--capacity-unit",
                "tokens",
            ]
        )
        == 2
    )
