"""The bundled router-policy A/B (fixtures/experiments/router-ab.toml; issue 33 item 7) against the simulator.

Each block starts a fresh fleet of two radix replicas at C1, so every repetition of an
arm is the same deterministic replay: its routing-loss figures are exact.
"""

from __future__ import annotations

import json
from pathlib import Path

from kvreplay.cli import main

ROOT = Path(__file__).resolve().parents[2]
ROUTER_AB = ROOT / "fixtures" / "experiments" / "router-ab.toml"


def test_router_ab_publishes_per_replica_and_routing_loss_cells(tmp_path):
    out = tmp_path / "exp"
    assert main(["experiment", str(ROUTER_AB), "--out", str(out), "--quiet"]) == 0
    result = json.loads((out / "result.json").read_text())
    cells = {c["metric"]: c["value"] for c in result["cells"] if c["step"] == "router"}
    assert cells["verdict"] == "benefit"
    # round robin: 52 requests split 26/26; the shared system prompt is warmed on both replicas
    assert cells["round_robin.c1.replica0.requests"] == 26.0
    assert cells["round_robin.c1.replica1.requests"] == 26.0
    assert cells["round_robin.c1.routing.observed_cached_tokens"] == 172016.0
    assert cells["round_robin.c1.routing.measured_cached_tokens"] == 172016.0  # exact: its own ground truth
    assert cells["round_robin.c1.routing.round_robin_cached_tokens"] == 172016.0
    # prefix affinity: every body to the replica holding the prefix, the merged-cache bound kept
    assert cells["prefix_affinity.c1.replica0.requests"] == 52.0
    assert cells["prefix_affinity.c1.replica1.requests"] == 0.0
    assert cells["prefix_affinity.c1.routing.observed_cached_tokens"] == 175456.0
    assert cells["prefix_affinity.c1.routing.measured_cached_tokens"] == 175456.0
    assert cells["prefix_affinity.c1.routing.merged_cached_tokens"] == 175456.0
    assert cells["prefix_affinity.c1.routing.kept_pct"] == 100.0
    assert round(cells["round_robin.c1.routing.kept_pct"], 2) == round(100 * 172016 / 175456, 2)
    # every block is a fleet run: each record names one of its block's replicas
    blocks = sorted((out / "steps").glob("*/blocks/*"))
    assert len(blocks) == 4
    for b in blocks:
        urls = [r["url"] for r in json.loads((b / "plan.json").read_text())["run"]["fleet"]["replicas"]]
        recs = [json.loads(ln) for ln in (b / "records.jsonl").read_text().splitlines()]
        assert recs and all(r["replica"] in urls for r in recs if r["sent"])
