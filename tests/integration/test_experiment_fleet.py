"""An experiment file's ``[fleet]``: run and A/B steps against a router and its replicas (issue 33 item 1).

The fleet is ``kvreplay serve-sim --replicas 2 --router round_robin`` in a subprocess
(a fresh one per run, so both runs start from empty caches and the router's turn at
replica 0): at C1 request ``i`` goes to replica ``i mod 2``, so 8 bodies are 4 and 4.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvreplay.cli import main

ROOT = Path(__file__).resolve().parents[2]
MTBENCH = ROOT / "fixtures" / "workloads" / "mtbench-52"


class _Fleet:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kvreplay", "serve-sim", "--replicas", "2", "--router", "round_robin",
             "--port", "0", "--time-scale", "0", "--output-tokens", "4"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        lines = [self.proc.stdout.readline() for _ in range(3)]  # type: ignore[union-attr]
        assert all("listening on" in ln for ln in lines), lines
        self.router, *self.replicas = [ln.split("listening on ", 1)[1].split()[0] for ln in lines]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def fleet():
    f = _Fleet()
    try:
        yield f
    finally:
        f.stop()


def _experiment(tmp_path: Path, router: str, replicas: list[str], steps: str) -> Path:
    reps = ", ".join(f'"{u}"' for u in replicas)
    f = tmp_path / "fleet.toml"
    f.write_text(f'workload = "{MTBENCH}"\n\n[server]\ntarget = "{router}"\nbackend = "halogen"\n\n'
                 f'[fleet]\nreplicas = [{reps}]\n\n{steps}')
    return f


RUN_STEP = '[[step]]\nname = "A"\nkind = "run"\nphases = ["p:forward:c1:first8"]\n'


def _records(d: Path) -> list[dict]:
    return [json.loads(ln) for ln in (d / "records.jsonl").read_text().splitlines()]


def _summary(d: Path) -> dict:
    return json.loads((d / "summary.json").read_text())


def _fleet_sections(summary: dict) -> list[tuple]:
    """Per phase: its replicas and fleet sections, without the timings (which differ run to run)."""
    def keep(x):
        return {k: v for k, v in x.items() if not k.endswith("_ms")} if isinstance(x, dict) else x

    return [([keep(r) for r in ph["replicas"]], keep(ph["fleet"]), ph.get("routing_loss"))
            for ph in summary["phases"]]


def test_a_run_step_on_a_fleet_is_kvreplay_run_with_replicas(tmp_path):
    f1 = _Fleet()
    try:
        spec = _experiment(tmp_path, f1.router, f1.replicas, RUN_STEP)
        # a pin every replica holds (runner.identity.check_pins applies it to each)
        pin = '\n[server.identity]\nmodels = "kvreplay-sim"\n'
        spec.write_text(spec.read_text().replace("\n[fleet]", pin + "\n[fleet]"))
        assert main(["experiment", str(spec), "--out", str(tmp_path / "exp"), "--quiet"]) == 0
    finally:
        f1.stop()
    step = tmp_path / "exp" / "steps" / "00-A"
    recs = [r for r in _records(step) if r.get("phase") == "p"]
    assert len(recs) == 8
    # every record names the replica that served it; round robin: position i on replica i mod 2
    assert [r["replica"] for r in recs] == [f1.replicas[i % 2] for i in range(8)]
    summ = _summary(step)
    ph = summ["phases"][0]
    assert [r["url"] for r in ph["replicas"]] == f1.replicas
    assert [r["requests"] for r in ph["replicas"]] == [4, 4]
    # each replica's own counters: its first request is cold, the next three hit the shared system prompt
    assert [r["counter_delta"]["lookups"] for r in ph["replicas"]] == [4, 4]
    assert [r["counter_delta"]["hits"] for r in ph["replicas"]] == [3, 3]
    assert [r["counter_delta"]["misses"] for r in ph["replicas"]] == [1, 1]
    for r in ph["replicas"]:  # a replica's tokens are its records' own
        mine = [x for x in recs if x["replica"] == r["url"]]
        assert r["tokens"]["cached"] == sum(x["usage"]["cached_tokens"] for x in mine) == r["counter_delta"][
            "hit_tokens"]
        assert r["tokens"]["prompt"] == sum(x["usage"]["prompt_tokens"] for x in mine)
    fl = ph["fleet"]
    assert fl["requests"] == 8 and fl["unattributed"]["requests"] == 0 and fl["attribution"] == "per_request"
    for key in ("prompt", "cached", "completion"):  # the fleet's totals are the replicas' sums
        assert fl["tokens"][key] == sum(r["tokens"][key] for r in ph["replicas"]), key
    plan = json.loads((step / "plan.json").read_text())
    assert plan["run"]["fleet"] == {"router": f1.router, "replica_header": "x-kvreplay-replica",
                                    "replicas": [{"url": u, "backend": None, "profile": None}
                                                 for u in f1.replicas]}
    # the window read its identity from every replica, never from the router
    result = json.loads((tmp_path / "exp" / "result.json").read_text())
    assert result["identity"]["kvreplay_fleet"] == f1.replicas
    assert sorted(result["identity"]["replicas"]) == sorted(f1.replicas)
    frozen = json.loads((tmp_path / "exp" / "experiment.json").read_text())
    assert frozen["server"]["fleet"] == {"replicas": [{"url": u, "backend": None, "profile": None}
                                                      for u in f1.replicas]}

    f2 = _Fleet()  # the same run by `kvreplay run --target ROUTER --replica ...` on a fresh fleet
    try:
        args = ["run", str(MTBENCH), "--target", f2.router, "--backend", "halogen", "--out", str(tmp_path / "run"),
                "--quiet", "--phase", "p:forward:c1:first8"]
        for u in f2.replicas:
            args += ["--replica", u]
        assert main(args) == 0
    finally:
        f2.stop()
    other = _summary(tmp_path / "run")
    assert [r["replica"] for r in _records(tmp_path / "run") if r.get("phase") == "p"] == [
        f2.replicas[i % 2] for i in range(8)]
    # the same figures, replica URLs aside (each fleet has its own ports)
    ours = json.dumps(_fleet_sections(summ))
    theirs = json.dumps(_fleet_sections(other))
    for a, b in zip(f1.replicas + [f1.router], f2.replicas + [f2.router], strict=True):
        theirs = theirs.replace(b, a)
    assert ours == theirs


def test_an_ab_step_on_a_fleet_reads_every_replica_in_every_block(tmp_path, fleet):
    step = ('[[step]]\nname = "AB"\nkind = "ab"\nreps = 1\nphases = "c1"\nselect = "first:4"\n'
            'arms = [{name = "a"}, {name = "b"}]\n')
    spec = _experiment(tmp_path, fleet.router, fleet.replicas, step)
    assert main(["experiment", str(spec), "--out", str(tmp_path / "exp"), "--quiet"]) in (0, 3)
    ab = json.loads((tmp_path / "exp" / "steps" / "00-AB" / "ab.json").read_text())
    assert [b["arm"] for b in ab["blocks"]] == ["a", "b"] and not any(b.get("aborted") for b in ab["blocks"])
    for blk in ab["blocks"]:
        d = tmp_path / "exp" / "steps" / "00-AB" / blk["dir"]
        recs = [r for r in _records(d) if r.get("sent")]
        # 4 bodies a block, round robin from replica 0 each time (4 is even): 2 and 2
        assert [r["replica"] for r in recs] == [fleet.replicas[i % 2] for i in range(4)]
        ph = _summary(d)["phases"][0]
        assert [(r["url"], r["requests"], r["counter_delta"]["lookups"]) for r in ph["replicas"]] == [
            (fleet.replicas[0], 2, 2), (fleet.replicas[1], 2, 2)]
        assert ph["fleet"]["requests"] == 4
        assert json.loads((d / "plan.json").read_text())["run"]["fleet"]["router"] == fleet.router


def test_identity_pins_hold_on_every_replica_or_the_step_aborts(tmp_path, fleet):
    pin = '\n[server.identity]\nmodels = "another-model"\n'
    spec = _experiment(tmp_path, fleet.router, fleet.replicas, RUN_STEP)
    spec.write_text(spec.read_text().replace('backend = "halogen"\n', 'backend = "halogen"\n' + pin, 1))
    assert main(["experiment", str(spec), "--out", str(tmp_path / "exp"), "--quiet"]) == 3
    result = json.loads((tmp_path / "exp" / "result.json").read_text())
    # read on each replica before the first step: both named, nothing sent
    assert result["aborted"]["reason"] == "identity_pins"
    assert result["aborted"]["message"] == "before the first step: " + "; ".join(
        f"replicas.{u}.models: 'another-model' -> ['kvreplay-sim']" for u in fleet.replicas)
    assert result["steps"][0]["status"] == "deferred"


def test_quiesce_incarnation_and_restore_read_every_replica(tmp_path, fleet):
    steps = ('[[step]]\nname = "Q"\nkind = "quiesce"\ncmd = "true"\ndrain_timeout = "5s"\n\n'
             '[[step]]\nname = "I"\nkind = "incarnation"\n\n' + RUN_STEP + '\n[[step]]\nname = "R"\nkind = "restore"\n')
    spec = _experiment(tmp_path, fleet.router, fleet.replicas, steps)
    spec.write_text(spec.read_text().replace('backend = "halogen"\n', 'backend = "halogen"\nstart = "true"\n'
                                             'restore = "true"\n', 1))
    assert main(["experiment", str(spec), "--out", str(tmp_path / "exp"), "--quiet"]) == 0
    result = json.loads((tmp_path / "exp" / "result.json").read_text())
    by = {s["name"]: s for s in result["steps"]}
    assert [s["status"] for s in result["steps"]] == ["measured"] * 4
    # the drain is checked on the replicas' own load gauges (the router has no /metrics: it would fail)
    assert by["Q"]["checks"]["drain"]["passed"] is True
    for name in ("I", "R"):  # identity read on every replica, the same before and after the run
        assert by[name]["checks"]["identity"]["kvreplay_fleet"] == fleet.replicas
    assert by["R"]["checks"]["identity"] == by["I"]["checks"]["identity"] == result["identity"]
