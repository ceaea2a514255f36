"""Terminal phase lines: "not run (REASON)" for a phase the run never sent, no raw None (new-user item 11)."""

from __future__ import annotations

from pathlib import Path

from kvreplay.cli import main
from kvreplay.runner.observer import phase_end_line

WORKLOAD = Path(__file__).resolve().parents[3] / "fixtures" / "workloads" / "mtbench-52"


def test_measured_phase_line_unchanged():
    ph = {"name": "replay", "ok": 52, "planned": 52, "sent": 52, "ttft_ms": {"p50": 3.7},
          "tokens": {"cached": 175848, "prompt": 190516}}
    assert phase_end_line(ph) == "phase replay: ok 52/52, TTFT p50 3.7 ms, cached 175848/190516 tokens"


def test_no_value_reads_n_a_not_none():
    ph = {"name": "replay", "ok": 0, "planned": 52, "sent": 52, "ttft_ms": {"p50": None},
          "tokens": {"cached": None, "prompt": 0}}
    assert phase_end_line(ph) == "phase replay: ok 0/52, TTFT p50 n/a, cached n/a/0 tokens"


def test_deferred_phase_is_not_run_with_its_reason():
    ph = {"name": "replay", "ok": 0, "planned": 52, "sent": 0, "deferred": True, "not_run": "identity_mismatch",
          "ttft_ms": {"p50": None}, "tokens": {"cached": 0, "prompt": 0}}
    assert phase_end_line(ph) == "phase replay: not run (identity_mismatch)"
    del ph["not_run"]
    assert phase_end_line(ph) == "phase replay: not run (aborted)"


def test_identity_mismatch_before_the_first_request(tmp_path, capsys):
    rc = main(["run", str(WORKLOAD), "--target", "sim", "--sim-time-scale", "0", "--phase", "replay:forward:c4",
               "--expect-identity", "models=llama-3-8b", "--out", str(tmp_path / "r"), "--report", "none"])
    assert rc == 3
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "abort: identity_mismatch: server identity is not the pinned one: models: 'llama-3-8b' -> ['kvreplay-sim']",
        "phase replay: not run (identity_mismatch)",
    ]
    assert "not_run" not in (tmp_path / "r" / "summary.json").read_text()
