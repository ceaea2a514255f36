"""``kvreplay run --target sim --sim-replicas N`` and ``phases[].routing_loss`` (issue 33 items 4, 5).

The embedded fleet is its own ground truth: at C1 its round-robin router sends
request ``i`` of the run (all phases) to replica ``i mod 2``; the offline
routing loss of that observed assignment must equal what the replicas served.
"""

from __future__ import annotations

import json
from pathlib import Path

import kvreplay
from kvreplay.cli import main
from kvreplay.offline.runloss import NO_MODEL, run_routing_loss

ROOT = Path(__file__).resolve().parents[2]
MTBENCH = ROOT / "fixtures" / "workloads" / "mtbench-52"


def _read(out: Path) -> tuple[dict, dict, list[dict]]:
    plan = json.loads((out / "plan.json").read_text())
    summary = json.loads((out / "summary.json").read_text())
    recs = [json.loads(ln) for ln in (out / "records.jsonl").read_text().splitlines()]
    return plan, summary, recs


def test_sim_fleet_round_robin_c1_routing_loss_is_exact(tmp_path):
    out = tmp_path / "run"
    rc = main(["run", str(MTBENCH), "--target", "sim", "--sim-replicas", "2", "--sim-router", "round_robin",
               "--sim-time-scale", "0", "--sim-output-tokens", "4", "--out", str(out), "--quiet",
               "--phase", "prime:forward:c1", "--phase", "rev:reverse:c1"])
    assert rc == 0
    plan, summary, recs = _read(out)
    urls = [r["url"] for r in plan["run"]["fleet"]["replicas"]]
    assert len(urls) == 2 and plan["run"]["fleet"]["router"] == "sim"
    assert plan["run"]["sim_fleet"]["router"] == "round_robin"
    # exact attribution: round robin over the run, prime then rev (52 is even: rev restarts at replica 0)
    by_phase = {"prime": 0, "rev": 1}
    for r in recs:
        assert r["replica"] == urls[r["position"] % 2], r["position"]
    assert len(recs) == 104
    for ph in summary["phases"]:
        loss = ph["routing_loss"]
        mine = [r for r in recs if r["phase"] == ph["name"]]
        measured = sum(r["usage"]["cached_tokens"] for r in mine)
        assert loss["measured_cached_tokens"] == measured
        obs = loss["policies"]["observed"]
        assert obs["cached_tokens"] == measured  # exact: the simulator is its own ground truth
        assert loss["observed_vs_measured_pct"] == 100.0
        # the simulator counts its own tokens: the unit conversion is exactly 1 and changes no figure
        assert loss["server_tokens_per_sim_token"] == 1.0
        assert all(f["cached_tokens_server"] == f["cached_tokens"] for f in loss["policies"].values())
        assert loss["observed_vs_measured_pct_sim_tokens"] == 100.0
        # per replica too, against each replica's own counters over the phase (hit_tokens)
        own = [e["counter_delta"]["hit_tokens"] for e in ph["replicas"]]
        assert obs["per_replica_cached_tokens"] == own
        # per position: the observed replica and cached tokens of every record in send order
        mine.sort(key=lambda r: r["position"])
        assert loss["observed"]["replica"] == [urls.index(r["replica"]) for r in mine]
        assert loss["observed"]["cached_tokens"] == [r["usage"]["cached_tokens"] for r in mine]
        # the router was round_robin: its simulated figure is the observed one
        assert loss["policies"]["round_robin"]["cached_tokens"] == obs["cached_tokens"]
        assert loss["note"] is None
        assert by_phase[ph["name"]] in (0, 1)
    prime, rev = (p["routing_loss"] for p in summary["phases"])
    # pinned figures of this workload (8-entry caches, two snapshots a request)
    assert prime["policies"]["observed"]["per_replica_cached_tokens"] == [86200, 86200]
    assert prime["policies"]["merged"]["cached_tokens"] == 175848
    # rev starts from the caches prime left (a cold start would give prime-like figures)
    assert rev["policies"]["observed"]["per_replica_cached_tokens"] == [89648, 89648]
    assert rev["sentence"] == ("the routing kept 97.0% of the reuse available "
                               "(merged-cache bound 184,832, greedy affinity 181,879)")
    # kvreplay report: the "Routing loss" section, and the same object rebuilt from records + plan alone
    first = json.loads((out / "summary.json").read_text())
    (out / "summary.json").unlink()
    assert main(["report", str(out), "--html"]) == 0
    report = (out / "report.md").read_text()
    assert "the routing kept 98.0% of the reuse available (merged-cache bound 175,848, greedy affinity 175,848)" \
        in report
    assert "routing-loss:rev" in (out / "report.html").read_text()
    rebuilt = json.loads((out / "summary.json").read_text())
    assert [p["routing_loss"] for p in rebuilt["phases"]] == [p["routing_loss"] for p in first["phases"]]


def test_api_replay_sim_fleet_prefix_affinity_header_attribution(tmp_path):
    res = kvreplay.replay(MTBENCH, phases=["p:forward:c4:first16"], out=tmp_path / "r",
                          sim={"replicas": 2, "router": "prefix_affinity", "time_scale": 0, "output_tokens": 4})
    plan, summary, recs = _read(tmp_path / "r")
    urls = [r["url"] for r in plan["run"]["fleet"]["replicas"]]
    assert len(recs) == 16
    assert all(r["replica"] in urls and r["replica_source"] == "header" for r in recs)
    ph = summary["phases"][0]
    assert ph["fleet"]["requests"] == 16
    assert "exact only at C1" in ph["routing_loss"]["note"]
    assert res is not None


def test_no_cache_model_says_so():
    run_block = {"fleet": {"replicas": [{"url": "http://127.0.0.1:1"}]}}
    assert run_routing_loss([("p", False, 1)], None, run_block, []) == {"p": {"note": NO_MODEL}}
    assert run_routing_loss([("p", False, 1)], None, {}, []) == {}


def test_replica_cache_from_verdict_gives_an_external_fleet_its_cache_model(tmp_path):
    """serve-sim's fleet calibrated from a verdict, replayed as an external fleet with the same verdict."""
    import subprocess
    import sys

    v = {"format": "kvreplay-probe/1", "backend": "halogen",
         "prefill_fit": {"a_s": 0.05, "rate_tokens_per_s": 2000.0, "source": "ttft"}, "warm": [],
         "bytes_per_token": 100.0, "bytes_per_token_kind": "prompt_cache_entry", "entries_per_request": 2,
         "entry_cap_bytes": 1_000_000, "min_flush_k": None, "eviction_note": ""}
    vpath = tmp_path / "verdict.json"
    vpath.write_text(json.dumps(v))
    proc = subprocess.Popen([sys.executable, "-m", "kvreplay", "serve-sim", "--replicas", "2", "--router",
                             "round_robin", "--port", "0", "--time-scale", "0", "--from-verdict", str(vpath)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        lines = [proc.stdout.readline() for _ in range(4)]  # type: ignore[union-attr]
        flags = lines[3].split("run flags: ", 1)[1].split()
        out = tmp_path / "ext"
        assert main(["run", str(MTBENCH), *flags, "--out", str(out), "--quiet", "--phase", "p:forward:c1:first12",
                     "--replica-cache-from", str(vpath)]) == 0
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        proc.stdout.close()  # type: ignore[union-attr]
    plan, summary, recs = _read(out)
    assert plan["run"]["replica_cache"]["source"] == str(vpath)
    loss = summary["phases"][0]["routing_loss"]
    measured = sum(r["usage"]["cached_tokens"] for r in recs)
    assert measured > 0
    assert loss["policies"]["observed"]["cached_tokens"] == measured == loss["measured_cached_tokens"]
    assert "calibrated from the probe verdict" in loss["note"]
    assert loss["cache"]["per_replica"] == [1_000_000, 1_000_000]  # the verdict's unbounded entries


def test_an_external_serve_sim_fleet_gives_its_cache_model_through_version(tmp_path):
    """Issue 45 item 5: no verdict, no --replica-cache-from: each replica's /version cache config is the model."""
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "kvreplay", "serve-sim", "--replicas", "2", "--router",
                             "round_robin", "--port", "0", "--time-scale", "0", "--cache-entries", "3"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        lines = [proc.stdout.readline() for _ in range(4)]  # type: ignore[union-attr]
        flags = lines[3].split("run flags: ", 1)[1].split()
        out = tmp_path / "ext"
        assert main(["run", str(MTBENCH), *flags, "--out", str(out), "--quiet", "--phase", "p:forward:c1:first12"]) == 0
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        proc.stdout.close()  # type: ignore[union-attr]
    plan, summary, recs = _read(out)
    assert "replica_cache" not in plan["run"]  # nothing given: the model came from the replicas themselves
    loss = summary["phases"][0]["routing_loss"]
    measured = sum(r["usage"]["cached_tokens"] for r in recs)
    assert measured > 0
    # the same cache class as the replicas, the same assignment: the observed figure is exact at C1
    assert loss["policies"]["observed"]["cached_tokens"] == measured == loss["measured_cached_tokens"]
    assert loss["cache"]["per_replica"] == [3, 3]
    assert loss["note"].startswith("each replica's cache model read from its /version")
