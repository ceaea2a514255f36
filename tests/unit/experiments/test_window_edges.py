"""Issue 42 item 10: edges no test reached, each with a hand-derived answer.

- ``previous_step_ok`` after a skipped and after a deferred step (false: only ``measured`` is ok);
- a phase that sent nothing and was not deferred (``failed``, its own reason), and a deferred
  phase's fallback reason (``not run: 0 of N positions sent``, else ``not run: nothing sent``);
- a summary phase without a ``valid`` key (valid: measured, no ``invalid_phase`` caveat);
- the ``.tmp`` file a failed atomic write must not leave;
- an incarnation after a failed one (the steps it guards run again).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvreplay.experiments.conditions import Condition, evaluate
from kvreplay.experiments.findings import phase_status
from kvreplay.experiments.publish import _phase_caveats
from kvreplay.safe_io import atomic_write_chunks

ROOT = Path(__file__).resolve().parents[3]
WORKLOAD = ROOT / "fixtures" / "workloads" / "mtbench-52"


@pytest.mark.parametrize("status", ["skipped", "deferred"])
def test_previous_step_ok_is_false_after_a_skipped_or_deferred_step(status):
    got = evaluate((Condition("previous_step_ok", "previous_step_ok"),), time_left_s=None, time_left_until=None,
                   previous=("control", status), statuses={"control": status})
    assert got == {"when": ["previous_step_ok"], "holds": False, "false": ["previous_step_ok"],
                   "seen": {"previous_step": "control", "previous_status": status}}


def test_a_phase_that_sent_nothing_and_was_not_deferred_fails_with_its_own_reason():
    # its fresh check failed before the first send: not deferred (nothing came first), failed
    ph = {"name": "replay", "planned": 12, "not_sent": 12, "sent": 0, "ok": 0,
          "check_failed": "fresh check failed: prefix_cache_queries 40 != 0"}
    assert phase_status(ph, None, "step failed") == ("failed", "fresh check failed: prefix_cache_queries 40 != 0")
    # no reason of its own: the count of positions sent
    assert phase_status({"planned": 12, "not_sent": 12, "sent": 0}, None, None) == (
        "failed", "not run: 0 of 12 positions sent")


def test_a_deferred_phase_falls_back_to_its_count_then_to_nothing_sent():
    assert phase_status({"deferred": True, "planned": 7, "not_sent": 7}, None, None) == (
        "deferred", "not run: 0 of 7 positions sent")
    assert phase_status({"deferred": True}, None, None) == ("deferred", "not run: 0 of 0 positions sent")
    assert phase_status({"deferred": True}, None, "window aborted: interrupt") == (
        "deferred", "window aborted: interrupt")


def test_a_summary_phase_without_a_valid_key_is_valid():
    ph = {"name": "replay", "planned": 4, "not_sent": 0, "sent": 4, "ok": 4}  # no "valid" (an older summary)
    assert phase_status(ph, 4, None) == ("measured", None)
    assert _phase_caveats(ph, "replay", "ttft_p50_ms") == []
    assert _phase_caveats({**ph, "valid": False}, "replay", "ttft_p50_ms") == [
        "invalid_phase: phase replay invalid: no reason given"]


@pytest.mark.parametrize("exc", [OSError(28, "No space left on device"), RuntimeError("the producer failed")])
def test_a_failed_atomic_write_leaves_no_tmp_file_and_the_old_content(tmp_path, exc):
    target = tmp_path / "result.json"
    target.write_bytes(b"old")

    def chunks():
        yield b"new, half"
        raise exc

    with pytest.raises(type(exc)):
        atomic_write_chunks(target, chunks())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["result.json"] and target.read_bytes() == b"old"


def test_an_incarnation_after_a_failed_one_lets_the_steps_after_it_run(tmp_path):
    from kvreplay.cli import main

    f = tmp_path / "w.toml"
    f.write_text(f"""
workload = "{WORKLOAD}"
[server]
target = "sim"
backend = "vllm"
identity = {{models = "kvreplay-sim"}}
[server.sim]
time_scale = 0
[[step]]
name = "bad"
kind = "incarnation"
sim = {{model = "another-model"}}
[[step]]
name = "A"
kind = "run"
phases = ["p:forward:c1:first2"]
[[step]]
name = "good"
kind = "incarnation"
[[step]]
name = "B"
kind = "run"
phases = ["p:forward:c1:first2"]
[[step]]
name = "restore"
kind = "restore"
""")
    out = tmp_path / "o"
    assert main(["experiment", str(f), "--out", str(out), "--quiet"]) == 3
    r = json.loads((out / "result.json").read_text())
    got = [(s["name"], s["status"], s["reason"]) for s in r["steps"]]
    why = "identity pins do not hold: models: 'kvreplay-sim' -> ['another-model']"
    assert got == [("bad", "failed", why), ("A", "deferred", f"incarnation bad failed: {why}"),
                   ("good", "measured", None), ("B", "measured", None), ("restore", "measured", None)]
    # a deferred step never ran in one; the restore ran in the last one (what it replaced)
    assert [s["incarnation"] for s in r["steps"]] == ["bad", None, "good", "good", "good"]


def test_history_lines_tell_each_attempt():
    from kvreplay.experiments.history import history_lines

    part = {"dir": "steps/03-B.interrupted", "records": 30, "sent": 30, "planned": 104}
    atts = [{"n": 1, "started": "T0", "ended": "T1", "how": "killed", "stopped": [],
             "steps": [{"name": "A", "status": "measured"},
                       {"name": "B", "status": "aborted", "reason": "interrupted: the window was killed during this "
                                                                   "step", "partial": part}]},
            {"n": 2, "started": "T2", "ended": "T3", "how": "deadline",
             "stopped": [{"pid": 42, "port": 8000, "attempt": 1, "stop": {"text": "stopped by SIGTERM to its "
                                                                                   "process group in 0.3 s"}}],
             "steps": [{"name": "B0", "status": "measured"}, {"name": "C", "status": "deferred"}]}]
    assert history_lines(atts) == [
        "attempt 1: started T0; killed during step B after 30 of 104 requests (30 records kept in "
        "steps/03-B.interrupted) (last progress T1)",
        "attempt 2: resumed T2; first stopped pid 42 (port 8000, left alive by attempt 1): stopped by SIGTERM to its "
        "process group in 0.3 s; ran B0 (on a fresh incarnation where it followed one); cut by the window's "
        "deadlines, ended T3"]
    assert history_lines([{"n": 1, "started": "T0", "ended": "T1", "how": "completed", "steps": []}]) == []
