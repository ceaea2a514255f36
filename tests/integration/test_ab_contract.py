"""Issue 14: ``kvreplay ab`` keeps the execution contract.

Arm commands that leave a background process (the ``./switch.sh on &`` field
case), time out or fail; deadlines, bounds and identity pins inside blocks;
TPOT and counter-ratio metrics computed from the blocks' own summaries; the
HTML report of an ab directory, and what it says about missing repetitions.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import write_chat_workload

from kvreplay.cli import main

WORDS = ["alpha", "beta", "gamma", "delta", "river", "stone", "cloud", "light", "north", "south", "quiet", "bright"]


def workload(tmp_path: Path, n: int = 3) -> Path:
    return write_chat_workload(tmp_path / "wl", [("You answer briefly.", f"q{i} " + " ".join(WORDS[:40]))
                                                 for i in range(n)])


@pytest.fixture(scope="module")
def sim_url():
    """A standalone simulator (``kvreplay serve-sim``) that the arm commands leave alone."""
    proc = subprocess.Popen([sys.executable, "-m", "kvreplay", "serve-sim", "--port", "0", "--time-scale", "0.02",
                             "--output-tokens", "4"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = proc.stdout.readline()
        assert "listening on" in line, line
        yield line.split("listening on ", 1)[1].split()[0]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        proc.stdout.close()


def _kill_groups(doc: dict) -> None:
    for b in doc.get("blocks", []):
        pid = (b.get("switch") or {}).get("pid")
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)  # the background 'sleep 120' this test started


def _alive_group(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def test_done_when_background_arm_command_does_not_hold_the_experiment(tmp_path, sim_url):
    out = tmp_path / "ab"
    cmd = 'sh -c "sleep 120 & exit 0"'
    t0 = time.monotonic()
    rc = main(["ab", str(workload(tmp_path)), "--target", sim_url, "--arm", f"off={cmd}", "--arm", f"on={cmd}",
               "--reps", "1", "--phases", "c1", "--out", str(out), "--quiet"])
    took = time.monotonic() - t0
    doc = json.loads((out / "ab.json").read_text())
    try:
        assert rc == 0
        assert took < 30, took  # seconds, not the 600 s --cmd-timeout
        for b in doc["blocks"]:
            sw = b["switch"]
            assert (sw["exit_status"], sw["rc"], sw["timed_out"], sw["command"]) == (0, 0, False, cmd)
            assert sw["duration_s"] < 2.0
            assert sw["log_path"] == str(out / "commands" / f"{Path(b['dir']).name}.log")
            assert Path(sw["log_path"]).exists()
            assert _alive_group(sw["pid"])  # the 'server' it started keeps running
        assert [b["arm"] for b in doc["blocks"]] == ["off", "on"]
        res = json.loads((out / "compare.json").read_text())
        assert res["reps"] == {"planned": 1, "measured": 1}
        assert (out / "report.html").exists()
    finally:
        _kill_groups(doc)


def test_arm_command_timeout_and_failure_stop_the_experiment(tmp_path, sim_url):
    out = tmp_path / "ab"
    rc = main(["ab", str(workload(tmp_path)), "--target", sim_url, "--arm", "off=echo switching; sleep 30",
               "--arm", "on=true", "--reps", "2", "--phases", "c1", "--cmd-timeout", "0.5", "--out", str(out),
               "--quiet"])
    assert rc == 3
    doc = json.loads((out / "ab.json").read_text())
    b0 = doc["blocks"][0]
    assert b0["switch"]["timed_out"] is True and b0["switch"]["rc"] is None
    assert 0.5 <= b0["switch"]["duration_s"] < 4
    assert b0["switch"]["log_tail"] == "switching\n"
    assert doc["stopped"] == "block 0: arm command failed (timed out after 0.5 s): switching"
    assert [b.get("deferred", False) for b in doc["blocks"]] == [True] * 4
    res = json.loads((out / "compare.json").read_text())
    assert res["reps"] == {"planned": 2, "measured": 0}
    assert "fewer repetitions than planned were measured: 0 of 2" in " ".join(res["reasons"])
    page = (out / "report.html").read_text()
    assert 'data-banner="fewer-reps"' in page and 'data-reps-measured="0"' in page
    assert "timed out after" in page

    out2 = tmp_path / "ab2"
    rc = main(["ab", str(workload(tmp_path)), "--target", sim_url, "--arm", "off=true",
               "--arm", "on=echo boom >&2; exit 5", "--reps", "1", "--phases", "c1", "--out", str(out2), "--quiet"])
    assert rc == 3
    doc = json.loads((out2 / "ab.json").read_text())
    assert doc["blocks"][1]["switch"]["exit_status"] == 5
    assert doc["stopped"] == "block 1: arm command failed (rc 5): boom"


def ab_sim(tmp_path: Path, *extra: str, reps: str = "2", out: str = "ab", scale: str = "0.02") -> tuple[int, Path]:
    o = tmp_path / out
    rc = main(["ab", str(workload(tmp_path, 4)), "--target", "sim", "--sim-time-scale", scale,
               "--sim-output-tokens", "6", "--arm", "off=sim:", "--arm", "on=sim:cache_entries=1",
               "--reps", reps, "--out", str(o), "--quiet", *extra])
    return rc, o


def test_stop_new_after_defers_the_rest_and_says_fewer_reps(tmp_path):
    # Time scale 0.2 and 5 decode gaps of 1 model s: each request takes over 1 s, so the
    # four of block 0 cannot all start within 0.5 s of the experiment's start.
    rc, out = ab_sim(tmp_path, "--stop-new-after", "0.5s", "--phases", "c1", "--sim-itl-s", "1.0", scale="0.2")
    assert rc == 3
    doc = json.loads((out / "ab.json").read_text())
    assert doc["limits"]["stop_new_after_s"] == 0.5
    b0 = doc["blocks"][0]
    assert b0["aborted"]["reason"] == "deadline"
    assert doc["stopped"] == "block 0 aborted: deadline"
    assert [b.get("deferred", False) for b in doc["blocks"]] == [False, True, True, True]
    s0 = json.loads((out / b0["dir"] / "summary.json").read_text())
    assert s0["phases"][0]["not_sent"] >= 2 and s0["aborted"]["message"] == "no new requests after 0.5 s"
    res = json.loads((out / "compare.json").read_text())
    assert res["reps"] == {"planned": 2, "measured": 0}


def test_abort_if_and_identity_pin_abort_the_first_block(tmp_path):
    rc, out = ab_sim(tmp_path, "--abort-if", "entries>0", "--phases", "c1", reps="1")
    assert rc == 3
    doc = json.loads((out / "ab.json").read_text())
    assert doc["blocks"][0]["aborted"]["reason"] == "bound"
    assert doc["limits"]["abort_if"] == ["entries>0"]

    rc, out = ab_sim(tmp_path, "--expect-identity", "version.cache.entries=8", "--phases", "c1", reps="1",
                     out="ab2")
    assert rc == 3
    doc = json.loads((out / "ab.json").read_text())
    # off (8 entries) holds the pin; on (cache_entries=1) does not: nothing of it is sent.
    assert doc["blocks"][0]["aborted"] is None
    ab1 = doc["blocks"][1]["aborted"]
    assert (ab1["reason"], ab1["old"], ab1["new"]) == ("identity_mismatch", {"version.cache.entries": "8"},
                                                       {"version.cache.entries": 1})
    s1 = json.loads((out / doc["blocks"][1]["dir"] / "summary.json").read_text())
    assert s1["phases"][0]["sent"] == 0


def test_tpot_and_counter_ratio_are_computed_from_the_blocks(tmp_path):
    rc, out = ab_sim(tmp_path, "--backend", "vllm", "--phases", "c1", "--primary",
                     "ratio:hit_tokens/query_tokens:+5%", "--protected", "tpot_p90:+3%")
    assert rc == 0
    doc = json.loads((out / "ab.json").read_text())
    res = json.loads((out / "compare.json").read_text())

    def phase(i):
        return json.loads((out / doc["order"][i]["dir"] / "summary.json").read_text())["phases"][0]

    by_rep = {}
    for i, o in enumerate(doc["order"]):
        by_rep.setdefault(o["rep"], {})[o["arm"]] = phase(i)
    want_ratio, want_tpot = [], []
    for rep in sorted(by_rep):
        b, c = by_rep[rep]["off"], by_rep[rep]["on"]
        share_b = b["counter_delta"]["hit_tokens"] / b["counter_delta"]["query_tokens"]
        share_c = c["counter_delta"]["hit_tokens"] / c["counter_delta"]["query_tokens"]
        want_ratio.append(round(share_c / share_b, 6) if share_b else "n/a")
        want_tpot.append(round(c["tpot_ms"]["p90"] / b["tpot_ms"]["p90"], 6))
    assert all(isinstance(r, float) for r in want_ratio), want_ratio  # the vllm adapter reads query_tokens
    assert res["metrics"]["c1.ratio:hit_tokens/query_tokens"]["cells"] == want_ratio
    assert res["metrics"]["c1.tpot_p90"]["cells"] == want_tpot
    assert [c["metric"] for c in res["checks"]] == ["ratio:hit_tokens/query_tokens", "tpot_p90"]
    # kvreplay report on the ab directory redraws report.html with the checks and their plots.
    (out / "report.html").unlink()
    assert main(["report", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert 'data-plot="c1.ratio:hit_tokens/query_tokens"' in page and 'data-plot="c1.tpot_p90"' in page
    assert f'data-verdict="{res["verdict"]}"' in page
    assert 'data-reps-measured="2" data-reps-planned="2"' in page
    assert page.count('<tr><td data-status="measured">') >= 4  # four blocks in the blocks table


def test_hard_deadline_cancels_in_flight_and_bounds_arm_commands(tmp_path, sim_url):
    rc, out = ab_sim(tmp_path, "--hard-deadline", "0.5s", "--phases", "c1", "--sim-itl-s", "1.0", scale="0.2")
    assert rc == 3
    doc = json.loads((out / "ab.json").read_text())
    b0 = doc["blocks"][0]
    assert (b0["aborted"]["reason"], b0["aborted"]["message"]) == ("hard_deadline", "hard deadline of 0.5 s")
    assert [b.get("deferred", False) for b in doc["blocks"]] == [False, True, True, True]
    # An arm command gets at most what is left of the hard deadline, not --cmd-timeout (600 s).
    out2 = tmp_path / "ab2"
    t0 = time.monotonic()
    rc = main(["ab", str(workload(tmp_path)), "--target", sim_url, "--arm", "off=sleep 30", "--arm", "on=true",
               "--reps", "1", "--phases", "c1", "--hard-deadline", "1s", "--out", str(out2), "--quiet"])
    assert rc == 3 and time.monotonic() - t0 < 10
    sw = json.loads((out2 / "ab.json").read_text())["blocks"][0]["switch"]
    assert sw["timed_out"] is True and 0.9 <= sw["duration_s"] < 5  # 1 s less the time before it
