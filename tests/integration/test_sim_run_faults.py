"""Issue 5 scenario 4: every simulator fault driven through ``kvreplay run --target sim``.

Each case runs the first bodies of the bundled mtbench-52 workload at C1 against
the in-process simulator (time scale 0) with one ``--sim-fault``, then checks the
record statuses and the summary the runner defines for that failure class
(kvreplay.runner: ``http`` + abort ``auth`` for 401/403, abort ``server_fatal``
for an OOM body, ``stream_error``, ``cut``, ``malformed``, ``timeout``
(read idle), a counter reset for a restart, ``identity_drift`` between phases,
and a failed drain for a held gauge).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvreplay.cli import main

ROOT = Path(__file__).resolve().parents[2]
MTBENCH = ROOT / "fixtures" / "workloads" / "mtbench-52"


def kvrun(tmp_path: Path, fault: str, *extra: str, phases=("a:forward:c1:first4",)) -> tuple[int, list[dict], dict]:
    out = tmp_path / "run"
    argv = ["run", str(MTBENCH), "--target", "sim", "--sim-time-scale", "0", "--sim-output-tokens", "6",
            "--sim-fault", fault, "--out", str(out), "--quiet", *extra]
    for p in phases:
        argv += ["--phase", p]
    rc = main(argv)
    recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    summary = json.loads((out / "summary.json").read_text())
    return rc, recs, summary


@pytest.mark.parametrize(("fault", "code"), [("http401@2", 401), ("http403@2", 403)])
def test_auth_failures_abort(tmp_path, fault, code):
    rc, recs, summary = kvrun(tmp_path, fault)
    assert rc == 3
    assert [r["status"] for r in recs] == ["ok", "http", "aborted", "aborted"]
    assert recs[1]["http_status"] == code
    assert summary["aborted"]["reason"] == "auth"


def test_oom_aborts_as_server_fatal(tmp_path):
    rc, recs, summary = kvrun(tmp_path, "oom500@2")
    assert rc == 3
    assert [r["status"] for r in recs] == ["ok", "http", "aborted", "aborted"]
    assert recs[1]["http_status"] == 500 and "CUDA out of memory" in recs[1]["error"]
    assert summary["aborted"]["reason"] == "server_fatal"


@pytest.mark.parametrize(
    ("fault", "status", "extra", "timeout_kind"),
    [
        ("error-event@2:chunks=2", "stream_error", (), None),
        ("cut@2:chunks=2", "cut", (), None),
        ("malformed@2:chunks=1", "malformed", (), None),
        # headers are out, the first body byte is held back: the runner's first-byte timeout
        ("stall@2:s=1.0,at=first", "timeout", ("--read-timeout", "0.3"), "first_byte"),
        ("stall@2:s=1.0,at=between,chunks=2", "timeout", ("--read-timeout", "0.3"), "read_idle"),
    ],
)
def test_per_request_failures_are_records(tmp_path, fault, status, extra, timeout_kind):
    rc, recs, summary = kvrun(tmp_path, fault, *extra)
    assert rc == 0 and summary["aborted"] is None
    assert [r["status"] for r in recs] == ["ok", status, "ok", "ok"]
    if status == "stream_error":
        assert recs[1]["error"] == "simulated engine error mid-stream"
    if status == "timeout":
        assert recs[1]["timeout_kind"] == timeout_kind
    assert summary["phases"][0]["ok"] == 3


def test_restart_resets_counters(tmp_path):
    rc, recs, summary = kvrun(tmp_path, "restart@3")
    assert rc == 0 and [r["status"] for r in recs] == ["ok"] * 4
    # Request 3 ran on a freshly restarted server: its per-request delta is marked reset.
    assert [bool((r.get("counter_delta") or {}).get("reset")) for r in recs] == [False, False, True, False]
    assert summary["restarts"] >= 1
    assert any("restarted" in why for why in summary["phases"][0]["invalid_reasons"])
    rc, recs, summary = kvrun(tmp_path / "b", "restart@3", "--abort-on-restart")
    assert rc == 3 and summary["aborted"]["reason"] == "restart"
    assert [r["status"] for r in recs] == ["ok", "ok", "ok", "aborted"]


def test_identity_change_aborts_between_phases(tmp_path):
    rc, recs, summary = kvrun(tmp_path, "identity@2", phases=("a:forward:c1:first2", "b:forward:c1:first2"))
    assert rc == 3 and summary["aborted"]["reason"] == "identity_drift"
    assert [(r["phase"], r["status"]) for r in recs] == [("a", "ok"), ("a", "ok"), ("b", "aborted"), ("b", "aborted")]


def test_busy_gauge_fails_the_drain(tmp_path):
    rc, recs, summary = kvrun(tmp_path, "busy-gauge@1:s=3", "--drain-timeout", "0.4",
                              phases=("a:forward:c1:first1", "b:forward:c1:first1:drain"))
    # Issue 14: a failed drain sends nothing for that phase; its position is a check_failed record.
    assert rc == 0 and [(r["status"], r["sent"]) for r in recs] == [("ok", True), ("check_failed", False)]
    assert recs[1]["reason"].startswith("drain: did not pass within 0.4 s: ")
    assert summary["phases"][1]["check_failed"] == recs[1]["reason"]
    assert (summary["phases"][1]["sent"], summary["phases"][1]["not_sent"]) == (0, 1)
    assert any("drain did not pass" in why for why in summary["phases"][1]["invalid_reasons"])
    # on_check_fail "mark": the old behaviour, sent and marked invalid.
    rc, recs, summary = kvrun(tmp_path / "mark", "busy-gauge@1:s=3", "--drain-timeout", "0.4", "--on-check-fail",
                              "mark", phases=("a:forward:c1:first1", "b:forward:c1:first1:drain"))
    assert rc == 0 and [r["status"] for r in recs] == ["ok", "ok"]
    assert summary["phases"][1]["check_failed"] is None
    assert any("drain did not pass" in why for why in summary["phases"][1]["invalid_reasons"])
