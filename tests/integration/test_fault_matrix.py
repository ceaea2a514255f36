"""Issue 9: the fault matrix, each simulator fault x {C1, C4} through ``kvreplay run --target sim``.

The cases and the run-directory check live in bench/fault_matrix.py (which also
prints the table for docs/reliability.md); the expected outcomes below are
written out by hand from the failure classes and abort rules of the runner
(docs/simulator.md's fault table), not derived from the code under test.

Eight positions per run, a request about 0.2 s (time scale 0.05). A fault on
request 2 at C4 fires while requests 1-4 are in flight: an abort then lets the
other three finish and sends none of the last four. At C1 request 1 is done
and requests 3-8 are never sent. Counters are read per request only at C1, so
a restart is seen on the request that hit it at C1, and only at the phase's
closing snapshot at C4: ``--abort-on-restart`` then aborts after every request
ran (exit 3, nothing left unsent).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load_matrix():
    spec = importlib.util.spec_from_file_location(
        "kvreplay_bench_fault_matrix", ROOT / "bench" / "fault_matrix.py"
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


fm = _load_matrix()
CASES = {c.name: c for c in fm.CASES}

# (case, concurrency) -> (exit code, statuses counted, abort reason)
EXPECTED: dict[tuple[str, int], tuple[int, dict[str, int], str | None]] = {
    ("none", 1): (0, {"ok": 8}, None),
    ("none", 4): (0, {"ok": 8}, None),
    ("http401", 1): (3, {"ok": 1, "http": 1, "not_sent": 6}, "auth"),
    ("http401", 4): (3, {"ok": 3, "http": 1, "not_sent": 4}, "auth"),
    ("http403", 1): (3, {"ok": 1, "http": 1, "not_sent": 6}, "auth"),
    ("http403", 4): (3, {"ok": 3, "http": 1, "not_sent": 4}, "auth"),
    ("oom500", 1): (3, {"ok": 1, "http": 1, "not_sent": 6}, "server_fatal"),
    ("oom500", 4): (3, {"ok": 3, "http": 1, "not_sent": 4}, "server_fatal"),
    ("error-event", 1): (0, {"ok": 7, "stream_error": 1}, None),
    ("error-event", 4): (0, {"ok": 7, "stream_error": 1}, None),
    ("cut", 1): (0, {"ok": 7, "cut": 1}, None),
    ("cut", 4): (0, {"ok": 7, "cut": 1}, None),
    ("malformed", 1): (0, {"ok": 7, "malformed": 1}, None),
    ("malformed", 4): (0, {"ok": 7, "malformed": 1}, None),
    ("stall first", 1): (0, {"ok": 7, "timeout": 1}, None),
    ("stall first", 4): (0, {"ok": 7, "timeout": 1}, None),
    ("stall between", 1): (0, {"ok": 7, "timeout": 1}, None),
    ("stall between", 4): (0, {"ok": 7, "timeout": 1}, None),
    ("stall, total timeout", 1): (0, {"ok": 7, "timeout": 1}, None),
    ("stall, total timeout", 4): (0, {"ok": 7, "timeout": 1}, None),
    ("restart", 1): (0, {"ok": 8}, None),
    ("restart", 4): (0, {"ok": 8}, None),
    ("restart, --abort-on-restart", 1): (3, {"ok": 3, "not_sent": 5}, "restart"),
    ("restart, --abort-on-restart", 4): (3, {"ok": 8}, "restart"),
    # Issue 14: identity is re-read at every counter read, so at C1 the drift is seen after
    # request 2 (the one that changed it); at C4 (all four in flight at once) after phase a.
    ("identity", 1): (3, {"ok": 2, "not_sent": 6}, "identity_drift"),
    ("identity", 4): (3, {"ok": 4, "not_sent": 4}, "identity_drift"),
    # Issue 14: the failed drain sends nothing for phase b (check_failed records).
    ("busy-gauge", 1): (0, {"ok": 4, "not_sent": 4}, None),
    ("busy-gauge", 4): (0, {"ok": 4, "not_sent": 4}, None),
}

TIMEOUT_KIND = {
    "stall first": ("first_byte", "first_byte_timeout"),
    "stall between": ("read_idle", "read_idle_timeout"),
    "stall, total timeout": ("total", "client_total_timeout"),
}


def test_every_case_has_an_expectation_at_both_concurrencies():
    assert set(EXPECTED) == {(name, c) for name in CASES for c in fm.CONCURRENCIES}


@pytest.mark.parametrize("concurrency", fm.CONCURRENCIES, ids=lambda c: f"C{c}")
@pytest.mark.parametrize("name", list(CASES))
def test_fault_outcome(tmp_path, name, concurrency):
    case = CASES[name]
    o = fm.run_case(case, concurrency, tmp_path / "run")
    code, statuses, reason = EXPECTED[(name, concurrency)]
    assert o.valid, o.problems
    assert (o.exit_code, o.statuses, o.aborted) == (code, statuses, reason)
    recs = o.records
    # Records never sent say so, and carry the abort reason.
    for r in recs:
        if not r["sent"] and name == "busy-gauge":
            assert r["status"] == "check_failed" and r["error"].startswith("drain: did not pass within 0.5 s")
        elif not r["sent"]:
            assert r["status"] == "aborted" and r["error"] == reason
    if name in ("http401", "http403", "oom500"):
        (bad,) = [r for r in recs if r["status"] == "http"]
        assert bad["http_status"] == {"http401": 401, "http403": 403, "oom500": 500}[name]
        if name == "oom500":
            assert "CUDA out of memory" in bad["error"]
        # The abort stopped new requests: none was sent after the failing one came back
        # (at C4 up to the three already in flight finish, and nothing else starts).
        late = [r for r in recs if r["sent"] and r["t_sent_ns"] > bad["t_done_ns"]]
        assert late == []
    if name in TIMEOUT_KIND:
        (t,) = [r for r in recs if r["status"] == "timeout"]
        assert (t["timeout_kind"], t["error"]) == TIMEOUT_KIND[name]
        if name != "stall first":
            assert t["content_deltas"] >= 2  # what arrived before the silence is kept
    if name == "error-event":
        assert [r["error"] for r in recs if r["status"] == "stream_error"] == [
            "simulated engine error mid-stream"
        ]
    if name.startswith("restart"):
        assert o.summary["restarts"] >= 1
        resets = [bool((r.get("counter_delta") or {}).get("reset")) for r in recs]
        if concurrency == 1:
            # C1: per-request counters; the request served by the restarted server is marked.
            assert [r["position"] for r, z in zip(recs, resets, strict=True) if z] == [2]
        else:
            # C4: no per-request attribution; the phase delta says it.
            assert not any(resets) and {r["attribution"] for r in recs} == {"phase_only"}
            assert any("restarted" in why for why in o.summary["phases"][0]["invalid_reasons"])
    if name == "identity":
        n_a = 2 if concurrency == 1 else 4
        assert [
            (r["phase"], r["sent"]) for r in sorted(recs, key=lambda r: (r["phase"], r["position"]))
        ] == [("a", True)] * n_a + [("a", False)] * (4 - n_a) + [("b", False)] * 4
        assert o.summary["aborted"]["old"] == {"version.build": "sim-1"}
        assert o.summary["aborted"]["new"] == {"version.build": "sim-1+1"}
    if name == "busy-gauge":
        assert any("drain did not pass" in why for why in o.summary["phases"][1]["invalid_reasons"])
        assert o.summary["phases"][0]["invalid_reasons"] == []


def test_check_run_dir_flags_a_missing_record(tmp_path):
    # The validity check can fail: drop one record and it says which.
    out = tmp_path / "run"
    o = fm.run_case(CASES["none"], 4, out)
    assert o.valid
    lines = (out / "records.jsonl").read_text().splitlines()
    (out / "records.jsonl").write_text("\n".join(lines[:-1]) + "\n")
    problems, _, _ = fm.check_run_dir(out)
    assert any("without a record" in p for p in problems)
    assert any("summary" in p for p in problems)


def test_abort_on_restart_stops_new_requests_within_a_c4_phase(tmp_path):
    # 48 requests at C4, ~0.2 s each: about 2.4 s of phase; the server restarts at request 3.
    # Counters read every second (as for --abort-if) would see it well before the end.
    case = fm.Case(
        "restart, long phase", "restart@3", ("--abort-on-restart",), ("a:forward:c4:first48",)
    )
    o = fm.run_case(case, 4, tmp_path / "run")
    assert o.valid and o.aborted == "restart"
    assert o.statuses.get("not_sent", 0) > 0
