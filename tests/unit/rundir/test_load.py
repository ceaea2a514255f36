"""Reading run directories back: HdrHistogram logs, torn records, summary rebuild, load_run."""

import json

import numpy as np
import pytest
from rundirs import plan_json, record, write_run

import kvreplay
from kvreplay.metrics.histograms import PhaseHistograms
from kvreplay.rundir import HistogramArrays, load_run, read_hlog, read_records, rebuild_summary


def test_hlog_round_trip_10k_at_1ms_plus_one_100s_stall(tmp_path):
    # HdrHistogram's classic case: 10,000 x 1 ms and one 100 s stall.
    ph = PhaseHistograms()
    for _ in range(10_000):
        ph.sets["ttft"].record_ns(1_000_000)
    ph.sets["ttft"].record_ns(100_000_000_000)
    files = ph.write_logs(tmp_path, "p", 0.0, 1.0)
    h = read_hlog(tmp_path / files["ttft"])
    assert h.get_total_count() == 10_001
    arr = HistogramArrays.from_histogram(h)
    assert arr.total == 10_001
    assert arr.percentile_ms(50) == pytest.approx(1.0, rel=1e-3)
    assert arr.percentile_ms(99.99) == pytest.approx(1.0, rel=1e-3)
    assert arr.percentile_ms(100) == pytest.approx(100_000.0, rel=1e-3)
    xs, ys = arr.cdf()
    assert ys[-1] == 1.0 and ys[0] == pytest.approx(10_000 / 10_001)
    assert xs[0] == pytest.approx(1.0, rel=1e-3)


def test_torn_last_record_is_skipped(tmp_path):
    p = tmp_path / "records.jsonl"
    p.write_text(json.dumps({"phase": "a", "status": "ok"}) + "\n" + '{"phase": "a", "sta')
    assert read_records(p) == [{"phase": "a", "status": "ok"}]


def test_rebuild_summary_from_records_of_a_killed_run(tmp_path):
    plan = plan_json(
        [("prime", "forward", 1, [0, 1, 2, 3]), ("replay", "reverse", 1, [3, 2, 1, 0])]
    )
    recs = [
        record(
            "prime", 0, 0, ttft_ms=30, cached=0, delta={"hits": 0, "hit_tokens": 0, "entries": 1}
        ),
        record(
            "prime",
            1,
            1,
            ttft_ms=10,
            cached=64,
            t0_ms=50,
            delta={"hits": 1, "hit_tokens": 64, "entries": 2},
        ),
        record("prime", 2, 2, status="http", t0_ms=100, error="boom", attribution="per_request"),
    ]  # killed during prime position 3: no record for it, nothing of replay
    write_run(tmp_path, plan, recs, summary=False)
    s = rebuild_summary(tmp_path, plan, recs)
    prime, replay = s["phases"]
    assert s["rebuilt_from_records"] is True and s["aborted"]["reason"] == "killed"
    assert (prime["planned"], prime["sent"], prime["ok"], prime["not_sent"]) == (4, 3, 2, 1)
    assert prime["failed"] == {"http": 1}
    assert prime["tokens"]["cached"] == 64 and prime["tokens"]["prompt"] == 200
    assert prime["ttft_ms"]["n"] == 2 and prime["ttft_ms"]["max"] == pytest.approx(30.0, rel=1e-3)
    # per-request deltas summed; the gauge keeps the last value
    assert prime["counter_delta"] == {"hits": 1, "hit_tokens": 64, "entries": 2}
    assert (replay["sent"], replay["not_sent"]) == (0, 4)
    if "deferred" in replay:
        assert replay["deferred"] is True and replay["valid"] is False


def test_load_run_rebuilds_and_writes_missing_summary(tmp_path):
    plan = plan_json([("a", "forward", 1, [0, 1])])
    write_run(tmp_path, plan, [record("a", 0, 0), record("a", 1, 1, t0_ms=30)], summary=False)
    assert not (tmp_path / "summary.json").exists()
    run = load_run(tmp_path, write_rebuilt=True)
    assert run.summary_rebuilt and (tmp_path / "summary.json").exists()
    again = load_run(tmp_path)
    assert not again.summary_rebuilt and again.summary["phases"][0]["ok"] == 2


def test_load_run_gives_arrays_and_records(tmp_path):
    plan = plan_json([("a", "forward", 1, [0, 1, 2])])
    write_run(
        tmp_path, plan, [record("a", i, i, ttft_ms=10 * (i + 1), t0_ms=40 * i) for i in range(3)]
    )
    run = kvreplay.load_run(tmp_path)
    ttft = run.histograms["a"]["ttft"]
    assert isinstance(ttft.value_us, np.ndarray) and ttft.total == 3
    assert [round(v / 1000) for v in ttft.value_us] == [10, 20, 30]
    assert len(run.record_list) == 3 and run.plan["phases"][0]["name"] == "a"
    try:
        import pandas as pd
    except ImportError:
        assert run.records == run.record_list
    else:
        assert isinstance(run.records, pd.DataFrame) and len(run.records) == 3
        assert "usage.cached_tokens" in run.records.columns


def test_load_run_without_anything_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_run(tmp_path)


def test_rebuilt_summary_of_a_finished_run_claims_no_abort(tmp_path):
    # Every planned position of every phase has a record: the run finished its
    # requests and only summary.json is missing. Not "killed".
    plan = plan_json([("a", "forward", 1, [0, 1]), ("b", "reverse", 1, [1, 0])])
    recs = [
        record("a", 0, 0),
        record("a", 1, 1, t0_ms=30),
        record("b", 0, 1, t0_ms=60),
        record("b", 1, 0, t0_ms=90, status="http", error="boom"),  # a failed request is still sent
    ]
    write_run(tmp_path, plan, recs, summary=False)
    s = rebuild_summary(tmp_path, plan, recs)
    assert s["rebuilt_from_records"] is True
    assert s["aborted"] is None
    assert load_run(tmp_path).summary["aborted"] is None


def test_rebuilt_summary_counts_the_positions_without_a_record(tmp_path):
    plan = plan_json([("a", "forward", 1, [0, 1, 2]), ("b", "forward", 1, [0, 1])])
    recs = [
        record("a", 0, 0),
        record("a", 1, 1, t0_ms=30),
        record("a", 2, 2, sent=False),  # written, never sent: not run
    ]
    s = rebuild_summary(tmp_path, plan, recs)
    assert s["rebuilt_from_records"] is True and s["aborted"]["reason"] == "killed"
    assert "3 of 5 planned positions have no record of being sent" in s["aborted"]["message"]
    # without plan.json nothing says what was planned: still killed
    s = rebuild_summary(tmp_path, None, recs[:2])
    assert s["aborted"]["reason"] == "killed"
