"""Issue 27 item 7: counters.jsonl's ``at`` names the kind of every read, and a per-request
delta is taken between request boundaries only (monitor and drain reads skipped)."""

from __future__ import annotations

import gzip

import orjson

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
    assert AT_KINDS == ("before", "monitor", "drain", "phase_end", "run_end")



def test_series_the_backend_does_not_read_are_logged_at_the_first_and_last_reads_only(tmp_path):
    """Issue 42 item 8: with ``kept`` (the sample names the backend maps) a later line carries only
    those; the others (vLLM's histogram buckets) are in the first line and in one ``run_end`` line
    with the last read's time and phase, and the report reads their movement over the whole run."""
    path = tmp_path / "counters.jsonl"
    log = CounterLog(path, 0, kept=frozenset({"hits"}))

    def read(t: int, hits: int, b1: int, b2: int | None) -> Snapshot:
        raw = {"hits": hits, 'ttft_bucket{le="1"}': b1}
        if b2 is not None:
            raw['ttft_bucket{le="2"}'] = b2
        return Snapshot(taken_ns=t, raw=raw, common={})

    log.write(read(1, 0, 0, 0), "a", "before")
    log.write(read(2, 5, 1, 1), "a", 0)
    log.write(read(3, 5, 1, 1), "a", "phase_end")
    log.write(read(4, 5, 1, 1), "b", "before")
    log.write(read(5, 9, 3, None), "b", "phase_end")  # the le="2" bucket vanished
    log.close()
    # counters.jsonl itself holds only the kept series; the others are two gzip members beside it
    on_disk = [orjson.loads(x) for x in path.read_bytes().splitlines()]
    assert on_disk[0] == {"t_ns": 1, "phase": "a", "at": "before", "full": True, "series": {"hits": 0},
                          "raw_in": "counters-raw.jsonl.gz"}
    assert all(set(ln.get("changed") or {}) <= {"hits"} for ln in on_disk) and len(on_disk) == 5
    side = (tmp_path / "counters-raw.jsonl.gz").read_bytes()
    assert [orjson.loads(x) for x in gzip.decompress(side).splitlines()] == [
        {"t_ns": 1, "phase": "a", "at": "before", "full": True,
         "series": {'ttft_bucket{le="1"}': 0, 'ttft_bucket{le="2"}': 0}},
        {"t_ns": 5, "phase": "b", "at": "run_end", "changed": {'ttft_bucket{le="1"}': 3},
         "removed": ['ttft_bucket{le="2"}']}]
    assert side.count(b"\x1f\x8b\x08") == 2  # two members: the first is on disk before the run ends
    lines = read_counter_log(path)
    assert lines[0] == {"t_ns": 1, "phase": "a", "at": "before", "full": True, "raw_in": "counters-raw.jsonl.gz",
                        "series": {"hits": 0, 'ttft_bucket{le="1"}': 0, 'ttft_bucket{le="2"}': 0}}
    assert [(ln["at"], ln.get("changed"), ln.get("removed")) for ln in lines[1:]] == [
        (0, {"hits": 5}, None), ("phase_end", None, None), ("before", None, None),
        ("phase_end", {"hits": 9}, None),
        ("run_end", {'ttft_bucket{le="1"}': 3}, ['ttft_bucket{le="2"}'])]
    assert (lines[-1]["t_ns"], lines[-1]["phase"]) == (5, "b")
    assert raw_changes(lines) == {"a": {"hits": (0, 5)}, "b": {"hits": (5, 9)},
                                  "(whole run)": {'ttft_bucket{le="1"}': (0, 3), 'ttft_bucket{le="2"}': (0, None)}}
    b = request_boundaries(lines)
    assert [(ph, at, st["hits"]) for ph, at, st in b] == [("a", "before", 0), ("a", 0, 5), ("b", "before", 5)]


def test_a_killed_run_keeps_the_first_read_of_the_other_series_and_a_torn_member_is_skipped(tmp_path):
    """The side file's first member is written at the first read: a run killed before ``close`` (no
    ``run_end``) still reads every series at its first read; a half-written second member is skipped."""
    path = tmp_path / "counters.jsonl"
    log = CounterLog(path, 0, kept=frozenset({"hits"}))
    log.write(_snap(1, hits=0, other=4), "a", "before")
    log.write(_snap(2, hits=3, other=6), "a", "phase_end")
    side = tmp_path / "counters-raw.jsonl.gz"
    first = side.read_bytes()  # as a kill -9 here would leave it
    log.close()
    whole = side.read_bytes()
    assert len(whole) > len(first)
    for cut in (whole[: len(first)], whole[: len(first) + (len(whole) - len(first)) // 2]):
        side.write_bytes(cut)
        lines = read_counter_log(path)
        assert lines[0]["series"] == {"hits": 0, "other": 4}
        assert [ln["at"] for ln in lines] == ["before", "phase_end"]
        assert raw_changes(lines) == {"a": {"hits": (0, 3)}}
    side.write_bytes(whole)
    assert raw_changes(read_counter_log(path)) == {"a": {"hits": (0, 3)}, "(whole run)": {"other": (4, 6)}}


def test_a_run_whose_other_series_did_not_move_writes_no_run_end_line(tmp_path):
    path = tmp_path / "counters.jsonl"
    log = CounterLog(path, 0, kept=frozenset({"hits"}))
    log.write(_snap(1, hits=0, other=4), "a", "before")
    log.write(_snap(2, hits=3, other=4), "a", "phase_end")
    log.close()
    log.close()  # twice: still one file, nothing added
    assert [ln["at"] for ln in read_counter_log(path)] == ["before", "phase_end"]


def test_fleet_series_names_have_one_slash_before_metrics():
    from kvreplay.rundir.counterlog import flatten_raw

    raw = {"http://127.0.0.1:8001": {"/metrics": {"vllm:prefix_cache_hits_total": 5.0}, "slots": {"busy": 1}},
           "http://127.0.0.1:8002/": {"/metrics": {"vllm:prefix_cache_hits_total": 7.0}}}
    assert flatten_raw(raw) == {"http://127.0.0.1:8001/metrics/vllm:prefix_cache_hits_total": 5.0,
                                "http://127.0.0.1:8001/slots/busy": 1,
                                "http://127.0.0.1:8002/metrics/vllm:prefix_cache_hits_total": 7.0}
    # one server (halogen's companion /metrics): as before
    assert flatten_raw({"/metrics": {"hits": 1}, "entries": 3}) == {"/metrics/hits": 1, "entries": 3}
