"""A run directory written by an earlier version of kvreplay still loads, reports and rebuilds.

``data/run-dbea9ba`` was written by kvreplay at commit dbea9ba (2026-11-29, "Replay against the
simulator"): ``kvreplay run WL --target sim --sim-time-scale 0 --phase prime:forward:c1
--phase replay:reverse:c1`` over three chat bodies (system "a b c d", users "u", "v", "w"), with
that commit's code. It has no counters.jsonl, one-interval ``.hlog`` files, a summary.json
without ``units``, ``client_thresholds`` or ``client``, and records without ``worker``,
``label`` or ``t_intended_ns`` values.

Counter deltas by hand (tests/integration/test_replay_sim.py, entries model, capacity 8, two
snapshots per request): prime forward hits 2, misses 1, stores 4, hit tokens 0 + 9 + 9 = 18;
replay reverse hits 3, stores 0, hit tokens 3 x 15 = 45. ``entries`` is a gauge: the phase's
value is the last request's (4), never the sum of the per-request values (2 + 3 + 4 = 9).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import kvreplay
from kvreplay.cli import main
from kvreplay.rundir import load_run, open_run, read_violations

OLD = Path(__file__).resolve().parent / "data" / "run-dbea9ba"


@pytest.fixture
def old_run(tmp_path: Path) -> Path:
    d = tmp_path / "run"
    shutil.copytree(OLD, d)
    return d


def test_old_run_loads_as_written(old_run):
    run = kvreplay.load_run(old_run)  # the public entry point
    assert run.summary_rebuilt is False
    assert [(r["phase"], r["position"], r["body_index"]) for r in run.record_list] == [
        ("prime", 0, 0), ("prime", 1, 1), ("prime", 2, 2), ("replay", 0, 2), ("replay", 1, 1), ("replay", 2, 0)]
    assert [(p["name"], p["ok"], p["planned"]) for p in run.summary["phases"]] == [("prime", 3, 3), ("replay", 3, 3)]
    assert [[e["body_index"] for e in p["sequence"]] for p in run.plan["phases"]] == [[0, 1, 2], [2, 1, 0]]
    assert {ph: sorted(m) for ph, m in run.histograms.items()} == {
        "prime": ["e2e", "itl", "tpot", "ttft"], "replay": ["e2e", "itl", "tpot", "ttft"]}
    assert run.histograms["prime"]["ttft"].total == 3 and run.histograms["prime"]["itl"].total == 9
    assert read_violations(old_run) == []  # no counters.jsonl then


def test_old_run_streamed_matches_loaded(old_run):
    full, streamed = load_run(old_run), open_run(old_run)
    assert streamed.streamed and streamed.record_list == []
    assert list(streamed.iter_records()) == full.record_list
    assert [p["sequence_length"] for p in streamed.plan["phases"]] == [3, 3]


def test_old_run_without_summary_is_rebuilt_with_hand_derived_counters(old_run):
    written = load_run(OLD).summary
    (old_run / "summary.json").unlink()
    run = load_run(old_run, write_rebuilt=True)
    s = run.summary
    assert run.summary_rebuilt and s["rebuilt_from_records"] is True
    assert s["aborted"] is None  # every planned position has a sent record
    assert s["records"] == 6
    prime, replay = s["phases"]
    assert (prime["ok"], replay["ok"]) == (3, 3)
    assert {k: prime["counter_delta"][k] for k in ("hits", "misses", "stores", "hit_tokens", "entries")} == {
        "hits": 2, "misses": 1, "stores": 4, "hit_tokens": 18, "entries": 4}
    assert {k: replay["counter_delta"][k] for k in ("hits", "misses", "stores", "hit_tokens", "entries")} == {
        "hits": 3, "misses": 0, "stores": 0, "hit_tokens": 45, "entries": 4}
    # the same HdrHistogram rules then and now: the rebuilt TTFT and ITL equal what that version wrote
    for new, old in zip(s["phases"], written["phases"], strict=True):
        assert new["ttft_ms"] == old["ttft_ms"] and new["itl_ms"]["n"] == old["itl_ms"]["n"]
    assert (old_run / "summary.json").exists()


def test_old_run_reports(old_run, capsys):
    assert main(["report", str(old_run)]) == 0
    md = (old_run / "report.md").read_text()
    assert md.startswith("# kvreplay run report") and "prime" in md and "replay" in md
