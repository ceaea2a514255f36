"""counters.jsonl: full first read, then changes only; size cap; halogen /cache invariants."""

from __future__ import annotations

import json

from kvreplay.report.units import unit_of
from kvreplay.rundir import CounterLog, cache_violations, raw_changes, read_counter_log
from kvreplay.runner._runner import counter_units
from kvreplay.runner.backend import Snapshot

ORIGIN = 1_000


def snap(t, **raw):
    return Snapshot(taken_ns=ORIGIN + t, raw=raw, common={})


def lines(path):
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_first_read_in_full_then_only_changed_series(tmp_path):
    log = CounterLog(tmp_path / "counters.jsonl", ORIGIN)
    log.write(snap(5, a=1, b=2, host_compactions_total=0), "prime", "before")
    log.write(snap(9, a=1, b=3, host_compactions_total=0), "prime", 0)
    log.write(snap(12, a=1, b=3, host_compactions_total=0), "prime", 1)
    log.write(snap(20, a=4, host_compactions_total=2), "replay", "before")
    log.close()
    assert lines(tmp_path / "counters.jsonl") == [
        {"t_ns": 5, "phase": "prime", "at": "before", "full": True,
         "series": {"a": 1, "b": 2, "host_compactions_total": 0}},
        {"t_ns": 9, "phase": "prime", "at": 0, "changed": {"b": 3}},
        {"t_ns": 12, "phase": "prime", "at": 1},
        {"t_ns": 20, "phase": "replay", "at": "before",
         "changed": {"a": 4, "host_compactions_total": 2}, "removed": ["b"]},
    ]


def test_nested_raw_is_flattened(tmp_path):
    log = CounterLog(tmp_path / "c.jsonl", 0)
    log.write(Snapshot(taken_ns=1, raw={"hits": 1, "/metrics": {"vllm:x": 2}}, common={}), "p", "before")
    log.close()
    assert lines(tmp_path / "c.jsonl")[0]["series"] == {"hits": 1, "/metrics/vllm:x": 2}


def test_size_cap_stops_with_one_truncated_line(tmp_path):
    path = tmp_path / "c.jsonl"
    log = CounterLog(path, ORIGIN, cap_bytes=200)
    for i in range(50):
        log.write(snap(i, x=i, y=2 * i), "p", i)
    log.close()
    got = lines(path)
    assert got[-1] == {"t_ns": got[-1]["t_ns"], "truncated": True, "cap_bytes": 200}
    assert sum(1 for g in got if g.get("truncated")) == 1
    assert path.stat().st_size <= 200 + len(json.dumps(got[-1])) + 1
    assert log.truncated and len(got) < 50


def test_strict_lru_identity_checked_between_reads():
    a = {"stores": 10, "evicted": 3, "entries": 7}
    assert cache_violations(None, {"stores": 10, "evicted": 0, "entries": 4}) == []  # history
    assert cache_violations(a, {"stores": 12, "evicted": 4, "entries": 8}) == []
    bad = cache_violations(a, {"stores": 12, "evicted": 3, "entries": 8})
    assert bad == [{
        "identity": "stores - evicted = entries",
        "numbers": {"stores_before": 10.0, "stores": 12.0, "evicted_before": 3.0, "evicted": 3.0,
                    "entries_before": 7.0, "entries": 8.0, "gap": 1.0},
    }]
    # A flush (entries 0) starts a new baseline: not a break.
    assert cache_violations(a, {"stores": 12, "evicted": 3, "entries": 0}) == []


def test_hit_rate_identity():
    assert cache_violations(None, {"hits": 5, "misses": 1, "hit_rate": 0.833333}) == []
    assert cache_violations(None, {"hits": 0, "misses": 0, "hit_rate": 0.0}) == []
    assert cache_violations(None, {"hits": 5, "misses": 1, "hit_rate": 0.5}) == [{
        "identity": "hit_rate = hits / (hits + misses)",
        "numbers": {"hits": 5.0, "misses": 1.0, "hit_rate": 0.5, "expected": 0.833333},
    }]


def test_violations_are_logged_with_phase_and_position(tmp_path):
    path = tmp_path / "c.jsonl"
    log = CounterLog(path, ORIGIN)
    log.write(snap(1, stores=2, evicted=0, entries=2, hits=0, misses=1, hit_rate=0.0), "a", "before")
    log.write(snap(2, stores=4, evicted=0, entries=3, hits=1, misses=1, hit_rate=0.5), "a", 0)
    log.close()
    assert [(v["identity"], v["phase"], v["at"]) for v in log.violations] == [
        ("stores - evicted = entries", "a", 0)]
    assert lines(path)[1]["violations"][0]["numbers"]["gap"] == 1.0


def test_raw_changes_per_phase(tmp_path):
    path = tmp_path / "c.jsonl"
    log = CounterLog(path, ORIGIN)
    log.write(snap(1, a=0, b=0, c=5), "prime", "before")
    log.write(snap(2, a=3, b=0, c=5), "prime", 0)
    log.write(snap(3, a=3, b=0, c=5), "prime", "after")
    log.write(snap(4, a=3, b=1, c=5), "replay", "before")  # moved between phases: not replay's
    log.write(snap(5, a=3, b=1, c=9), "replay", 0)
    log.write(snap(6, a=3, b=1, c=9, d=1), "replay", "after")
    log.close()
    assert raw_changes(read_counter_log(path)) == {
        "prime": {"a": (0, 3)},
        "replay": {"c": (5, 9), "d": (None, 1)},
    }


def test_counter_units_and_old_runs():
    names = {"hit_tokens", "hits", "stores", "host_hit_tokens"}
    assert counter_units({"stores": "entries", "hits": "tokens"}, names) == {
        "hit_tokens": "tokens", "hits": "lookups", "host_hit_tokens": "tokens", "stores": "entries"}
    # summary.json "units" (written by the runner) is what the report's headers read.
    new = {"units": {"hits": "lookups", "stores": "entries"}}
    assert unit_of("hits", new) == "lookups" and unit_of("stores", new) == "entries"
    assert unit_of("host_hit_tokens", {}) == "tokens"


def _bounds(bounds, common):
    from types import SimpleNamespace

    from kvreplay.runner._runner import _Run

    aborts = []
    run = SimpleNamespace(opts=SimpleNamespace(abort_if=bounds),
                          request_abort=lambda reason, msg: aborts.append((reason, msg)))
    _Run.check_bounds(run, Snapshot(taken_ns=0, raw={}, common=common))
    return aborts


def test_abort_if_accepts_old_and_new_names():
    # New name, token count (vLLM's external hits).
    assert _bounds([("host_hit_tokens", ">", 500.0)], {"host_hit_tokens": 640.0}) == [
        ("bound", "host_hit_tokens=640 crossed >500")]
    # Old name written for vLLM (host_hits was its external hit tokens): reads the token name.
    assert _bounds([("host_hits", ">", 500.0)], {"host_hit_tokens": 640.0}) == [
        ("bound", "host_hit_tokens=640 crossed >500")]
    # Where host_hits exists (lookups, the simulator's profile) it is read as it is.
    assert _bounds([("host_hits", ">", 500.0)], {"host_hits": 18.0, "host_hit_tokens": 640.0}) == []
    assert _bounds([("host_hits", ">=", 18.0)], {"host_hits": 18.0}) == [
        ("bound", "host_hits=18 crossed >=18")]
