"""kvreplay ab against the embedded simulator: arms, frozen alternating order, verdicts.

With ``prefill_scale=1.1`` every prefill of the "on" arm takes 10% longer; the
bodies' long unique user turns keep TTFT mostly prefill (a = 1.52 s plus ~800
uncached tokens / 1370 tokens/s, about 2.1 model s = 126 ms at time scale 0.06),
so TTFT rises by a little under 10% (the client and loop overhead is the same in
both arms). The short system block is a cache hit after the first body, so the
arms run with ``--sim-hit-base-s 1.52``: a hit pays the same fixed cost as a miss
(the default 0 would leave ~0.6 model s = 35 ms, closer to event-loop jitter).
Decode is 8 tokens at 0.1 model s (6 ms) each, long enough that the protected ITL
check measures the simulator rather than event-loop jitter. With identical arms the
paired ratios scatter around 1.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from helpers import write_chat_workload

from kvreplay.cli import main
from kvreplay.experiments.ab.arms import Arm, run_ab
from kvreplay.experiments.ab.compare import compare_blocks, load_pairs, parse_threshold
from kvreplay.experiments.ab.resolution import host_busy
from kvreplay.plan import PhaseSpec, build_plan
from kvreplay.sim import SimConfig, SimServer
from kvreplay.workload import load_workload

WORDS = ["alpha", "beta", "gamma", "delta", "river", "stone", "cloud", "light", "north", "south", "quiet", "bright"]


def workload(tmp_path: Path, n: int = 6) -> Path:
    """n bodies, each with its own ~800-token user turn: TTFT is mostly uncached prefill."""
    system = "You answer briefly."
    users = [
        f"question {i}: " + " ".join(WORDS[(i + j * 7) % len(WORDS)] for j in range(800))
        for i in range(n)
    ]
    return write_chat_workload(tmp_path / "wl", [(system, u) for u in users])


def ab(tmp_path: Path, on: str, *extra: str, out: str = "ab") -> tuple[int, Path]:
    wl = workload(tmp_path)
    o = tmp_path / out
    rc = main(
        [
            "ab",
            str(wl),
            "--target",
            "sim",
            "--sim-time-scale",
            "0.06",
            "--sim-hit-base-s",
            "1.52",
            "--sim-output-tokens",
            "8",
            "--sim-itl-s",
            "0.1",
            "--arm",
            "off=sim:",
            "--arm",
            f"on={on}",
            "--primary",
            "ttft_p50:-5%",
            "--protected",
            "itl_p50:+3%",
            "--out",
            str(o),
            "--quiet",
            *extra,
        ]
    )
    return rc, o


@pytest.mark.slow
def test_slower_prefill_is_a_ttft_regression(tmp_path):
    rc, out = ab(tmp_path, "sim:prefill_scale=1.1")
    assert rc == 0
    res = json.loads((out / "compare.json").read_text())
    ttft = {c["phase"]: c for c in res["checks"] if c["metric"] == "ttft_p50"}
    assert all(c["decision"] in ("regression", "no decision") for c in ttft.values())
    # The ITL of both arms is the same: never a regression there, on any host.
    assert all(c["decision"] != "regression" for c in res["checks"] if c["metric"] == "itl_p50"), res["checks"]
    doc = json.loads((out / "ab.json").read_text())
    clients = [p.get("client") or {} for b in doc["order"]
               for p in json.loads((out / b["dir"] / "summary.json").read_text())["phases"]]
    if all(c.get("verdict") == "quiet" and not host_busy(c) for c in clients):
        # a quiet host decides; on a loaded one (the run's client self-check not quiet, e.g. two
        # CPU-bound processes beside the test) the TTFT figures scatter and the comparison may
        # withhold the decision (issue 27 item 6: no verdict from a busy client)
        assert res["verdict"] == "regression"
        assert "regression" in {ttft["c1"]["decision"], ttft["c4"]["decision"]}
        assert 1.05 <= res["metrics"]["c1.ttft_p50"]["median_ratio"] <= 1.15
    else:  # the loaded host's own delays are in the figures (1.0175 seen under two CPU hogs)
        assert res["verdict"] in ("regression", "no decision")
    # the same cache behaviour in both arms: cached tokens identical in every pair
    assert res["metrics"]["c1.cached_tokens"]["ratios"] == [1.0, 1.0, 1.0]
    assert [b["arm"] for b in doc["order"]] == ["off", "on", "on", "off", "off", "on"]
    builds = {b["arm"]: b["identity"]["version"]["build"] for b in doc["blocks"]}
    assert builds == {"off": "sim-1+off", "on": "sim-1+on"}  # re-baselined per block, no abort
    assert all(b["aborted"] is None for b in doc["blocks"])
    shas = {
        json.loads((out / b["dir"] / "plan.json").read_text())["plan_sha256"] for b in doc["order"]
    }
    assert shas == {doc["plan_sha256"]}
    # kvreplay compare re-reads the same blocks against other thresholds: a 50% bar is not crossed
    assert (
        main(
            [
                "compare",
                str(out),
                "--primary",
                "c1.ttft_p50:-50%",
                "--out",
                str(tmp_path / "cmp"),
                "--quiet",
            ]
        )
        == 0
    )
    again = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert again["verdict"] == "no change"
    assert again["metrics"]["c1.ttft_p50"]["ratios"] == res["metrics"]["c1.ttft_p50"]["ratios"]
    for b in doc["order"]:  # a drain preceded every phase of every block
        s = json.loads((out / b["dir"] / "summary.json").read_text())
        assert [p["drain"]["passed"] for p in s["phases"]] == [True, True]
        assert [p["concurrency"] for p in s["phases"]] == [1, 4]


@pytest.mark.slow
@pytest.mark.parametrize("order", ["forward", "shuffle:7"])
def test_identical_arms_never_decide(tmp_path, order):
    # Independent of the machine's speed (issue 27 item 6): under load the client self-check of
    # some block is not quiet and every timing check withholds its decision ("client not quiet");
    # on a quiet host the arms' spread and split halves hold it. Shown with two CPU-bound
    # processes beside it: 2 passed, checks "no decision: client not quiet".
    rc, out = ab(tmp_path, "sim:", "--order", order)
    assert rc == 0
    pairs, _ = load_pairs([out])
    checks = [
        parse_threshold("ttft_p50:-5%", "primary"),
        parse_threshold("itl_p50:+3%", "protected"),
    ]
    for seed in range(5):
        res = compare_blocks(pairs, checks, seed=seed, n_boot=2000)
        assert res["verdict"] in ("no decision", "no change"), res["checks"]
        assert all(c["decision"] not in ("benefit", "regression") for c in res["checks"])


def test_identity_drift_inside_a_block_aborts(tmp_path):
    # the "on" simulator changes its build string on its 3rd request, inside the c1 phase
    rc, out = ab(tmp_path, "sim:faults=identity@3", "--reps", "2")
    assert rc == 3
    doc = json.loads((out / "ab.json").read_text())
    assert doc["blocks"][1]["aborted"]["reason"] == "identity_drift"
    assert [b.get("deferred", False) for b in doc["blocks"]] == [False, False, True, True]
    res = json.loads((out / "compare.json").read_text())
    assert res["verdict"] == "no decision"
    assert res["metrics"]["c1.ttft_p50"]["cells"] == [
        "failed",
        "deferred",
    ]  # drifted block, then not run
    assert "aborted" in res["reasons"][0]
    md = (out / "compare.md").read_text()
    assert "| failed | deferred |" in md


def test_arm_commands_run_before_each_block_against_a_url(tmp_path):
    log = tmp_path / "switch.log"
    wl = load_workload(workload(tmp_path, 3))
    plan = build_plan(wl, [PhaseSpec(name="c1", concurrency=1, drain=True)])

    async def go():
        srv = SimServer(SimConfig(time_scale=0))
        await srv.start()
        try:
            return await run_ab(
                workload=wl,
                plan=plan,
                reps=2,
                out=tmp_path / "ab",
                target=srv.base_url,
                arms=[Arm("off", f"echo off >> {log}"), Arm("on", f"echo on >> {log}")],
                backend_name="auto",
                thresholds=[parse_threshold("ttft_p50:-5%", "primary")],
            )
        finally:
            await srv.stop()

    res = asyncio.run(go())
    assert log.read_text().split() == ["off", "on", "on", "off"]
    assert [b["switch"]["rc"] for b in res["ab"]["blocks"]] == [0, 0, 0, 0]
    assert all(b["ready"]["ready"] for b in res["ab"]["blocks"])


def test_failing_arm_command_stops_the_experiment(tmp_path):
    wl = load_workload(workload(tmp_path, 2))
    plan = build_plan(wl, [PhaseSpec(name="c1", concurrency=1)])

    async def go():
        srv = SimServer(SimConfig(time_scale=0))
        await srv.start()
        try:
            return await run_ab(
                workload=wl,
                plan=plan,
                reps=1,
                out=tmp_path / "ab",
                target=srv.base_url,
                arms=[Arm("off", "true"), Arm("on", "exit 7")],
                backend_name="none",
                thresholds=[],
            )
        finally:
            await srv.stop()

    res = asyncio.run(go())
    blocks = res["ab"]["blocks"]
    assert blocks[1]["switch"]["rc"] == 7 and blocks[1]["deferred"]
    assert res["verdict"] == "no decision"
