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
