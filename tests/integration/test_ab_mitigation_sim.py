"""Mitigation experiments against the simulator: order by-prefix, then interleaved traffic.

Workload: 4 groups x 4 bodies, each group its own system block, stored in
round-robin order (g0b0 g1b0 g2b0 g3b0 g0b1 ...); entries model with 3 entries
and 2 snapshots per request (system, messages). Derived by hand (LRU, oldest
first; sK = group K's system snapshot, mKJ = body J's messages snapshot):

- forward (round robin): each body finds its group's system snapshot evicted
  by the three other groups' stores in between: 16 misses, 0 hits.
- by-prefix: per group, b0 misses (stores sK, mK0); b1..b3 hit sK (refreshing
  it) and store one snapshot each, evicting an older messages snapshot, so sK
  stays: 3 hits per group, 12 hits.
- by-prefix with one foreign body (its own system block) after every 2:
  b0 miss, b1 hit sK -> [mK0, sK, mK1]; the foreign body stores 2, evicting
  mK0 then sK; b2 misses and re-stores sK; b3 hits; the next foreign body
  evicts sK again: 2 hits per group, 8 hits, and 16 + 8 = 24 lookups.
"""

from __future__ import annotations

import json

from helpers import INTERLEAVE_SIM, interleave_scenario

from kvreplay.cli import main


def test_grouped_order_loses_hits_when_interleaved(tmp_path):
    wl, plan = interleave_scenario(tmp_path)
    out = tmp_path / "run"
    rc = main(["run", str(wl), "--plan", str(plan), *INTERLEAVE_SIM, "--out", str(out), "--quiet"])
    assert rc == 0
    phases = {p["name"]: p for p in json.loads((out / "summary.json").read_text())["phases"]}
    hits = {n: p["counter_delta"]["hits"] for n, p in phases.items()}
    assert hits == {"forward": 0, "grouped": 12, "mixed": 8}
    assert phases["mixed"]["counter_delta"]["lookups"] == 24
    assert phases["mixed"]["planned"] == 24 and phases["mixed"]["ok"] == 24
    plan_json = json.loads((out / "plan.json").read_text())
    seq = [it["body_index"] for it in plan_json["phases"][2]["sequence"]]
    assert seq[:6] == [
        0,
        4,
        16,
        8,
        12,
        17,
    ]  # group 0 in workload order, a foreign body after every 2
    recs = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert sum(1 for r in recs if r["phase"] == "mixed" and r["body_index"] >= 16) == 8
