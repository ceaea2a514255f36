"""The routing loss in the server's tokens (``offline.runloss.add_server_units``), figures derived by hand.

Two requests by hand: A = tokens 1..100 (100 simulator tokens), B = A + 101..200
(200 tokens, sharing A's 100). Radix, block size 4, ample capacity: A is cold (0
cached), B on the replica holding A hits its 25 blocks, ``min(25, (200 - 1) // 4) x 4
= 100`` tokens, else 0. ``random.Random(0).randrange(2)`` gives 1, 1: both on replica 1.

The server counted 300 and 500 prompt tokens for them: R = 800 / 300 = 8 / 3, so
100 cached simulator tokens are round(800 / 3) = round(266.67) = 267 of the server's.
"""

from __future__ import annotations

from pathlib import Path

from kvreplay.offline.routing import routing_loss
from kvreplay.offline.runloss import add_server_units, run_routing_loss
from kvreplay.offline.sources import ModelRequest
from kvreplay.sim.config import SimConfig

A = tuple(range(1, 101))
B = A + tuple(range(101, 201))
REQS = [ModelRequest(A, (), 100, 100, True, 0), ModelRequest(B, (), 100, 200, True, 0)]
RADIX = SimConfig(cache="radix", block_size=4, device_blocks=1000, time_scale=0)


def _loss(measured=250):
    return routing_loss(REQS, [RADIX, RADIX], observed=[0, 0], measured_cached_tokens=measured)


def test_ratio_scales_every_policy_and_the_observed_vs_measured_figure():
    loss = _loss()
    sim = {k: v["cached_tokens"] for k, v in loss["policies"].items()}
    assert sim == {"observed": 100, "merged": 100, "prefix_affinity": 100, "round_robin": 0, "random": 100}
    add_server_units(loss, 300 + 500, 100 + 200)
    assert loss["server_tokens_per_sim_token"] == 800 / 300
    assert {k: v["cached_tokens_server"] for k, v in loss["policies"].items()} == {
        "observed": 267, "merged": 267, "prefix_affinity": 267, "round_robin": 0, "random": 267}
    assert loss["policies"]["observed"]["cached_tokens"] == 100  # the simulator-token figure kept
    assert loss["observed_vs_measured_pct_sim_tokens"] == 100.0 * 100 / 250  # 40.0
    assert loss["observed_vs_measured_pct"] == 100.0 * 267 / 250  # 106.8
    assert loss["sentence"] == ("the routing kept 100.0% of the reuse available (merged-cache bound 267, "
                                "greedy affinity 267) (in the server's tokens: simulator tokens × 2.667)")


def test_rounding_is_exact_not_float():
    # 100 cached x 23/40 = 57.5 exactly: round half to even gives 58; the float product
    # 100 * (23 / 40) is 57.49999999999999 and would round to 57
    loss = _loss()
    add_server_units(loss, 23, 40)
    assert loss["policies"]["observed"]["cached_tokens_server"] == 58
    assert loss["server_tokens_per_sim_token"] == 0.575


def test_ratio_one_leaves_the_figures_and_sentence_unchanged():
    loss = _loss(measured=100)
    before = loss["sentence"]
    add_server_units(loss, 300, 300)
    assert loss["server_tokens_per_sim_token"] == 1.0
    assert all(v["cached_tokens_server"] == v["cached_tokens"] for v in loss["policies"].values())
    assert loss["observed_vs_measured_pct"] == loss["observed_vs_measured_pct_sim_tokens"] == 100.0
    assert loss["sentence"] == before == ("the routing kept 100.0% of the reuse available "
                                          "(merged-cache bound 100, greedy affinity 100)")


def test_no_server_count_keeps_the_simulator_figure():
    loss = _loss()
    add_server_units(loss, None, 0)
    assert loss["server_tokens_per_sim_token"] is None
    assert all(v["cached_tokens_server"] is None for v in loss["policies"].values())
    assert loss["observed_vs_measured_pct"] == loss["observed_vs_measured_pct_sim_tokens"] == 40.0
    assert "server's tokens" not in loss["sentence"]


def test_run_routing_loss_takes_the_ratio_from_the_records_usage():
    """Wiring: the ratio is the counted records' usage.prompt_tokens over their simulated prompt tokens."""
    from kvreplay.offline.sources import model_requests
    from kvreplay.workload import load_workload

    wl = load_workload(Path(__file__).resolve().parents[3] / "fixtures" / "workloads" / "mtbench-52")
    sim = [len(q.tokens) for q in model_requests(wl, [0, 1, 2])]
    run_block = {"fleet": {"replicas": [{"url": "u0"}, {"url": "u1"}]},
                 "replica_cache": {"source": "v.json", "config": {"cache": "radix", "block_size": 16}}}
    # server counts 3x the simulator's for bodies 0 and 1; body 2's record carries no usage.prompt_tokens
    recs = [{"sent": True, "phase": "p", "position": i, "body_index": i, "replica": f"u{i % 2}",
             "usage": {"cached_tokens": 0, **({"prompt_tokens": 3 * sim[i]} if i < 2 else {})}}
            for i in range(3)]
    loss = run_routing_loss([("p", False, 1)], wl, run_block, recs)["p"]
    assert loss["server_tokens_per_sim_token"] == 3.0
    assert loss["prompt_tokens"] == sum(sim)
    assert "from the 2 of 3 requests" in loss["note"]
    # measured 0: no observed-vs-measured figure in either unit
    assert loss["observed_vs_measured_pct"] is None and loss["observed_vs_measured_pct_sim_tokens"] is None


def test_report_line_says_the_unit():
    """The "Routing loss" section's note: the server-unit figure, then the simulator-token one beside it."""
    from kvreplay.report.fleet import routing_loss_section
    from kvreplay.rundir import RunData

    loss = _loss()
    add_server_units(loss, 800, 300)
    loss["note"] = None
    run = RunData(path=Path("."), plan=None, summary={"phases": [{"name": "p", "routing_loss": loss}]},
                  records=[], record_list=[])
    _tables, notes = routing_loss_section(run)  # type: ignore[misc]
    assert ("; measured cached tokens 250, observed figure 106.80% of it in the server's tokens "
            "(simulator tokens x 2.667; 40.00% in the simulator's tokens)") in notes[0]
    assert notes[0].startswith("p: the routing kept 100.0% of the reuse available (merged-cache bound 267,")


RADIX8 = SimConfig(cache="radix", block_size=8, device_blocks=1000, time_scale=0)


def test_a_mixed_fleet_gets_each_replicas_model_and_token_ratio():
    """Issue 45 item 5: replica 0 a radix cache of 4-token blocks, replica 1 of 8-token blocks (no merged cache).

    Sequence A, B, A, B observed on replicas 0, 0, 1, 1. Replica 0: A cold (0), B hits A's 25 blocks
    (100). Replica 1: A cold (0) and stores its 12 whole blocks (96 tokens), B hits them: 96. Server
    counts: replica 0 300 + 600 prompt tokens for 100 + 200 simulated (ratio 3), replica 1 150 + 300
    (ratio 1.5). In the servers' tokens: 100 x 3 = 300 and 96 x 1.5 = 144, 444 in all; the fleet's one
    ratio (1350 / 600 = 2.25) would say 196 x 2.25 = 441. Measured cached tokens 300 and 150: 100% and 96%.
    """
    from kvreplay.offline.runloss import _per_replica_units

    reqs = [REQS[0], REQS[1], REQS[0], REQS[1]]
    loss = routing_loss(reqs, [RADIX, RADIX8], observed=[0, 0, 1, 1], measured_cached_tokens=450)
    assert "merged" not in loss["policies"] and loss["cache"]["model"] == "mixed"
    assert loss["cache"]["models"] == ["radix (blocks, block 4)", "radix (blocks, block 8)"]
    assert loss["policies"]["observed"]["per_replica_cached_tokens"] == [100, 96]
    assert all(f["kept_pct"] is None for f in loss["policies"].values())
    add_server_units(loss, 1350, 600)
    assert loss["policies"]["observed"]["cached_tokens_server"] == 441  # one ratio for both: 196 x 2.25
    recs = [{"usage": {"prompt_tokens": p, "cached_tokens": c}} for p, c in ((300, 0), (600, 300), (150, 0),
                                                                              (300, 150))]
    _per_replica_units(loss, ["u0", "u1"], [(r, q, k) for r, q, k in zip(recs, reqs, [0, 0, 1, 1], strict=True)])
    assert loss["server_tokens_per_sim_token_per_replica"] == [3.0, 1.5]
    assert loss["policies"]["observed"]["cached_tokens_server"] == 444
    assert loss["per_replica_vs_measured"] == [
        {"url": "u0", "observed_cached_tokens_server": 300, "measured_cached_tokens": 300, "pct": 100.0},
        {"url": "u1", "observed_cached_tokens_server": 144, "measured_cached_tokens": 150, "pct": 96.0}]
    assert loss["observed_vs_measured_pct"] == 100.0 * 444 / 450
    # the sentence names each replica's ratio, not the fleet's one (444 / 196 is 2.265, not 2.25); greedy
    # affinity sends all 392 simulated cached tokens to replica 0: 392 x 3 = 1,176 in its server's tokens
    assert loss["sentence"] == ("the observed routing served 444 cached tokens (no merged-cache bound: replicas of "
                                "different cache models, greedy affinity 1,176) (in each replica's server's tokens: "
                                "simulator tokens × 3, × 1.5)")


def test_replica_verdict_parses_and_stays_out_of_old_plans():
    from kvreplay.runner.fleet import Replica, parse_replica, replicas_from_mapping

    r = parse_replica("http://127.0.0.1:8001,backend=llamacpp,verdict=runs/probe-llama/verdict.json")
    assert r == Replica(url="http://127.0.0.1:8001", backend="llamacpp", verdict="runs/probe-llama/verdict.json")
    assert r.to_json()["verdict"] == "runs/probe-llama/verdict.json"
    assert "verdict" not in Replica(url="http://127.0.0.1:8001").to_json()  # plan.json of fleets without it unchanged
    _router, (t,) = replicas_from_mapping({"replicas": [{"url": "http://127.0.0.1:8002", "verdict": "v.json"}]})
    assert t.verdict == "v.json"


def _verdict(tmp_path, name: str, cap: int) -> str:
    import json

    v = {"format": "kvreplay-probe/1", "backend": "halogen",
         "prefill_fit": {"a_s": 0.05, "rate_tokens_per_s": 2000.0, "source": "ttft"}, "warm": [],
         "bytes_per_token": 100.0, "bytes_per_token_kind": "prompt_cache_entry", "entries_per_request": 2,
         "entry_cap_bytes": cap, "min_flush_k": None, "eviction_note": ""}
    p = tmp_path / name
    p.write_text(json.dumps(v))
    return str(p)


def test_replica_verdicts_give_each_replica_its_own_cache_model_in_plan_json(tmp_path):
    import argparse

    import pytest

    from kvreplay.api.fleet import replica_cache_extra
    from kvreplay.errors import ConfigError
    from kvreplay.runner.fleet import Replica

    va, vb = _verdict(tmp_path, "a.json", 1_000_000), _verdict(tmp_path, "b.json", 500_000)
    reps = (Replica(url="http://h:1", verdict=va), Replica(url="http://h:2", verdict=vb))
    rc = replica_cache_extra(argparse.Namespace(replica_cache_from=None), reps)["replica_cache"]
    assert [(e["url"], e["source"], e["config"]["max_entry_bytes"]) for e in rc["per_replica"]] == [
        ("http://h:1", va, 1_000_000), ("http://h:2", vb, 500_000)]
    assert rc["config"] == rc["per_replica"][0]["config"]
    # one replica without a verdict: the --replica-cache-from one stands for it; with neither, refused
    half = (reps[0], Replica(url="http://h:2"))
    rc2 = replica_cache_extra(argparse.Namespace(replica_cache_from=vb), half)["replica_cache"]
    assert [e["source"] for e in rc2["per_replica"]] == [va, vb]
    with pytest.raises(ConfigError) as e:
        replica_cache_extra(argparse.Namespace(replica_cache_from=None), half)
    assert e.value.field == "--replica" and "replica http://h:2 has no cache model" in str(e.value)
    # no verdict anywhere: nothing (as before)
    assert replica_cache_extra(argparse.Namespace(replica_cache_from=None), (Replica(url="http://h:1"),)) == {}

    # the routing loss reads each replica's model: replica 1's smaller entry cap is its own
    from kvreplay.workload import load_workload

    wl = load_workload(Path(__file__).resolve().parents[3] / "fixtures" / "workloads" / "mtbench-52")
    run_block = {"fleet": {"replicas": [{"url": "http://h:1"}, {"url": "http://h:2"}]}, "replica_cache": rc}
    recs = [{"sent": True, "phase": "p", "position": i, "body_index": i, "replica": f"http://h:{1 + i % 2}",
             "usage": {"cached_tokens": 0}} for i in range(4)]
    loss = run_routing_loss([("p", False, 1)], wl, run_block, recs)["p"]
    assert f"http://h:1: {va}, http://h:2: {vb}" in loss["note"]
    assert loss["server_tokens_per_sim_token_per_replica"] == [None, None]  # no usage.prompt_tokens recorded


def test_report_line_states_each_replica_against_its_measured_figure():
    from kvreplay.offline.runloss import _per_replica_units
    from kvreplay.report.fleet import routing_loss_section
    from kvreplay.rundir import RunData

    reqs = [REQS[0], REQS[1], REQS[0], REQS[1]]
    loss = routing_loss(reqs, [RADIX, RADIX8], observed=[0, 0, 1, 1], measured_cached_tokens=450)
    add_server_units(loss, 1350, 600)
    recs = [{"usage": {"prompt_tokens": p, "cached_tokens": c}} for p, c in ((300, 0), (600, 300), (150, 0),
                                                                              (300, 150))]
    _per_replica_units(loss, ["u0", "u1"], [(r, q, k) for r, q, k in zip(recs, reqs, [0, 0, 1, 1], strict=True)])
    loss["note"] = None
    run = RunData(path=Path("."), plan=None, summary={"phases": [{"name": "p", "routing_loss": loss}]},
                  records=[], record_list=[])
    _tables, notes = routing_loss_section(run)  # type: ignore[misc]
    assert notes[0].endswith("(radix (blocks, block 4), radix (blocks, block 8)); u0: observed 300 of measured 300 "
                             "cached tokens (100.00%); u1: observed 144 of measured 150 cached tokens (96.00%)")
    # 444 of 450 in the servers' tokens, each replica's own ratio; 196 of 450 in the simulator's
    assert ("; measured cached tokens 450, observed figure 98.67% of it in each replica's server's tokens "
            "(simulator tokens x 3 / 1.5; 43.56% in the simulator's tokens)") in notes[0]


def test_a_verdicts_block_in_the_servers_tokens_is_modelled_in_the_simulators():
    """A verdict block of 8 server tokens at 2 server tokens per simulator token is a 4-token block.

    A, B (100 and 200 simulator tokens) on one replica; the server counted 200 and 400 prompt
    tokens (ratio 2) and shares A's 200 of its tokens with B, so it hits 200 // 8 x 8 = 200. The
    model with the verdict's 8 taken as simulator tokens hits 100 // 8 x 8 = 96 (192 of the
    server's, 96%); with the block converted, 8 / 2 = 4: 100 // 4 x 4 = 100 (200, 100%).
    """
    from fractions import Fraction

    from kvreplay.offline.runloss import _per_replica_units, run_ratios, server_blocks

    recs = [{"usage": {"prompt_tokens": 200, "cached_tokens": 0}},
            {"usage": {"prompt_tokens": 400, "cached_tokens": 200}}]
    # replica 1 served none: the fleet's ratio stands for it
    assert run_ratios(recs, REQS, [0, 0], 2, per_replica=True) == [Fraction(2), Fraction(2)]
    assert run_ratios([recs[0], {"usage": {"prompt_tokens": 300}}], REQS, [0, 1], 2, per_replica=True) == [
        Fraction(2), Fraction(3, 2)]
    assert run_ratios([recs[0], {"usage": {"prompt_tokens": 300}}], REQS, [0, 1], 2, per_replica=False) == [
        Fraction(5, 3), Fraction(5, 3)]  # (200 + 300) / (100 + 200)
    assert run_ratios([{"usage": None}, {}], REQS, [0, 1], 2, per_replica=True) == [None, None]
    blk8 = SimConfig(cache="radix", block_size=8, device_blocks=1000, time_scale=0)
    for models, want in (([blk8, blk8], 192), (server_blocks([blk8, blk8], [8, 8], [Fraction(2), None],
                                                             ["u0", "u1"])[0], 200)):
        loss = routing_loss(REQS, models, observed=[0, 0], measured_cached_tokens=200)
        add_server_units(loss, 600, 300)
        _per_replica_units(loss, ["u0", "u1"], [(r, q, 0) for r, q in zip(recs, REQS, strict=True)])
        assert loss["per_replica_vs_measured"][0]["observed_cached_tokens_server"] == want
    models, notes = server_blocks([blk8, blk8], [8, 8], [Fraction(2), None], ["u0", "u1"])
    assert [m.block_size for m in models] == [4, 8]  # no ratio for u1: its model stays
    assert notes == ["u0: the verdict's 8-token block (the server's tokens) modelled as 4 simulator tokens (÷ 2)"]
    # rounding (ties to even) and what is left alone: 40 / 3 = 13.3 -> 13; 128 / 1.8 = 71.1 -> 71; 6 / 4 = 1.5
    # -> 2; a block the verdict did not give (None), a model whose block is not the verdict's, the entries model
    blk40, blk128, blk6 = (SimConfig(cache="radix", block_size=b, device_blocks=10, time_scale=0) for b in (40, 128, 6))
    ent = SimConfig(cache="entries", time_scale=0)
    got, _ = server_blocks([blk40, blk128, blk6, blk8, blk8, ent], [40, 128, 6, None, 16, 8],
                           [Fraction(3), Fraction(9, 5), Fraction(4), Fraction(2), Fraction(2), Fraction(2)],
                           list("abcdef"))
    assert [(m.cache, m.block_size, m.device_blocks) for m in got[:5]] == [
        ("radix", 13, 10), ("radix", 71, 10), ("radix", 2, 10), ("radix", 8, 1000), ("radix", 8, 1000)]
    assert got[5] is ent


def test_replica_cache_records_the_verdicts_block_in_the_servers_tokens(tmp_path):
    """A vLLM-like verdict's warm legs (1,152 and 2,048 cached) give a 128-token block: plan.json keeps it."""
    import argparse
    import json

    from kvreplay.api.fleet import replica_cache_extra
    from kvreplay.offline.runloss import _server_block_sizes
    from kvreplay.runner.fleet import Replica

    v = {"format": "kvreplay-probe/1", "backend": "vllm",
         "prefill_fit": {"a_s": 0.01, "rate_tokens_per_s": 10000.0, "source": "ttft"},
         "warm": [{"prompt_tokens": 1200, "cached_tokens": 1152, "warm_ttft_s": 0.05},
                  {"prompt_tokens": 2100, "cached_tokens": 2048, "warm_ttft_s": 0.05}], "points": []}
    vv = tmp_path / "vllm.json"
    vv.write_text(json.dumps(v))
    hal = _verdict(tmp_path, "h.json", 1_000_000)
    reps = (Replica(url="http://h:1", verdict=str(vv)), Replica(url="http://h:2", verdict=hal))
    rc = replica_cache_extra(argparse.Namespace(replica_cache_from=None), reps)["replica_cache"]
    assert [e.get("server_block_size") for e in rc["per_replica"]] == [128, None]
    run_block = {"replica_cache": rc}
    assert _server_block_sizes(run_block, ["http://h:1", "http://h:2"], "per_replica") == [128, None]
    shared = replica_cache_extra(argparse.Namespace(replica_cache_from=str(vv)),
                                 (Replica(url="http://h:2"),))["replica_cache"]
    assert shared["server_block_size"] == 128
    assert _server_block_sizes({"replica_cache": shared}, ["http://h:2"], "replica_cache") == [128]
    # a plan.json written before the key: nothing converted (its figures stay as they were)
    old = {"replica_cache": {**shared, "server_block_size": None}}
    assert _server_block_sizes(old, ["http://h:2"], "replica_cache") == [None]
