"""The run directory stays valid after SIGINT, SIGTERM and kill -9 of kvreplay itself."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import MTBENCH

from kvreplay.cli import main


def start_run(out: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "kvreplay", "run", str(MTBENCH), "--target", "sim", "--sim-time-scale", "0.05",
           "--phase", "prime:forward:c2", "--phase", "replay:reverse:c1", "--out", str(out), "--quiet"]
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / "stderr.txt", "wb") as err:
        return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)


def stderr_of(out: Path) -> str:
    return (out.parent / "stderr.txt").read_text(errors="replace")[-2000:]


def wait_for_records(out: Path, n: int, proc: subprocess.Popen, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    rec = out / "records.jsonl"
    while time.monotonic() < deadline:
        if rec.exists() and len(rec.read_bytes().splitlines()) >= n:
            return
        if proc.poll() is not None:
            pytest.fail(f"kvreplay exited early: {stderr_of(out)}")
        time.sleep(0.05)
    proc.kill()
    pytest.fail("no records appeared in time")


def read_records(out: Path) -> list[dict]:
    raw = (out / "records.jsonl").read_bytes()
    assert raw.endswith(b"\n")  # every record line is complete
    return [json.loads(x) for x in raw.splitlines()]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_stops_new_requests_and_writes_everything(tmp_path, sig):
    out = tmp_path / "run"
    proc = start_run(out)
    wait_for_records(out, 3, proc)
    proc.send_signal(sig)
    try:
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert rc == 3, stderr_of(out)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["aborted"]["reason"] == "interrupt"
    recs = read_records(out)
    assert len(recs) == 104  # every planned position accounted for: ok + failed + not sent
    sent = [r for r in recs if r["sent"]]
    assert all(r["status"] == "ok" for r in sent)  # in-flight requests finished normally
    assert sum(p["sent"] + p["not_sent"] for p in summary["phases"]) == 104
    assert summary["phases"][1]["deferred"] is True
    assert (out / "report.md").exists() and (out / "plan.json").exists()


def test_kill_9_keeps_every_completed_record_and_report_rebuilds(tmp_path):
    out = tmp_path / "run"
    proc = start_run(out)
    wait_for_records(out, 4, proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    recs = read_records(out)
    assert len(recs) >= 4 and all(r["status"] == "ok" for r in recs)
    assert not (out / "summary.json").exists()
    plan = json.loads((out / "plan.json").read_text())
    seq = [s["body_sha256"] for s in plan["phases"][0]["sequence"]]
    # At C2 a kill can land with an earlier position still in flight, so the kept
    # records need not be a prefix; each one is still its position's body.
    assert all(r["body_sha256"] == seq[r["position"]] for r in recs)
    assert len({r["position"] for r in recs}) == len(recs)
    assert main(["report", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["phases"][0]["ok"] == len(recs)
