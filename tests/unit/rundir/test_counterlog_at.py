"""Issue 27 item 7: counters.jsonl's ``at`` names the kind of every read, and a per-request
delta is taken between request boundaries only (monitor and drain reads skipped)."""

from __future__ import annotations

from kvreplay.rundir import CounterLog, read_counter_log
from kvreplay.rundir.counterlog import AT_KINDS, raw_changes, request_boundaries
from kvreplay.runner.backend import Snapshot


def _snap(t: int, **raw: int) -> Snapshot:
    return Snapshot(taken_ns=t, raw=raw, common={})


def test_monitor_and_drain_reads_are_not_request_boundaries(tmp_path):
    path = tmp_path / "counters.jsonl"
    log = CounterLog(path, 0)
    log.write(_snap(1, hits=0), "p", "drain")
    log.write(_snap(2, hits=0), "p", "drain")
    log.write(_snap(3, hits=0), "p", "before")
    log.write(_snap(4, hits=7), "p", "monitor")  # mid-request: request 0 has counted 7 of its 10
    log.write(_snap(5, hits=10), "p", 0)
    log.write(_snap(6, hits=14), "p", "monitor")
    log.write(_snap(7, hits=30), "p", 1)
    log.write(_snap(8, hits=30), "p", "phase_end")
    log.close()
    lines = read_counter_log(path)
    assert [ln["at"] for ln in lines] == ["drain", "drain", "before", "monitor", 0, "monitor", 1, "phase_end"]
    b = request_boundaries(lines)
    assert [(ph, at) for ph, at, _s in b] == [("p", "before"), ("p", 0), ("p", 1)]
    deltas = [cur["hits"] - prev["hits"] for (_p, _a, prev), (_q, _b, cur) in zip(b, b[1:], strict=False)]
    assert deltas == [10, 20]  # consecutive lines would give 7, 3, 4, 16: false per-request deltas
    # the phase's movement starts at its opening read, not at the drain before it
    assert raw_changes(lines) == {"p": {"hits": (0, 30)}}
    assert AT_KINDS == ("before", "monitor", "drain", "phase_end")



def test_fleet_series_names_have_one_slash_before_metrics():
    from kvreplay.rundir.counterlog import flatten_raw

    raw = {"http://127.0.0.1:8001": {"/metrics": {"vllm:prefix_cache_hits_total": 5.0}, "slots": {"busy": 1}},
           "http://127.0.0.1:8002/": {"/metrics": {"vllm:prefix_cache_hits_total": 7.0}}}
    assert flatten_raw(raw) == {"http://127.0.0.1:8001/metrics/vllm:prefix_cache_hits_total": 5.0,
                                "http://127.0.0.1:8001/slots/busy": 1,
                                "http://127.0.0.1:8002/metrics/vllm:prefix_cache_hits_total": 7.0}
    # one server (halogen's companion /metrics): as before
    assert flatten_raw({"/metrics": {"hits": 1}, "entries": 3}) == {"/metrics/hits": 1, "entries": 3}
