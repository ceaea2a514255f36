"""Counters of any size (issue 30 item 2): values that cannot be differenced are invalid, never fatal."""

from __future__ import annotations

from kvreplay.backends import make_backend
from kvreplay.backends._halogen import invalid_of
from kvreplay.backends._profile import load_profile
from kvreplay.backends._prom import parse_exposition
from kvreplay.rundir.counterlog import CounterLog, read_counter_log
from kvreplay.runner.backend import Snapshot, counter_delta, counter_problem
from kvreplay.runner.counters import checked_snapshot

BIG = 2**64 + 1  # 18446744073709551617


def snap(common: dict, invalid: dict | None = None, raw: dict | None = None, t: int = 0) -> Snapshot:
    return Snapshot(taken_ns=t, raw=raw or {}, common=common, invalid=invalid or {})


def test_counter_problem_bounds() -> None:
    assert counter_problem(0) is None
    assert counter_problem(2**64 - 1) is None
    assert counter_problem(-(2**63)) is None
    assert counter_problem(2**64) == "outside the 64-bit range"
    assert counter_problem(-(2**63) - 1) == "outside the 64-bit range"
    assert counter_problem(1e20) == "outside the 64-bit range"
    assert counter_problem(float("nan")) == "not a finite number"
    assert counter_problem(float("-inf")) == "not a finite number"
    assert counter_problem("12") == "not a number (text '12')"
    assert counter_problem(True) == "not a number (a boolean)"
    assert counter_problem(None) == "not a number (a JSON null)"
    assert counter_problem([1]) == "not a number (a JSON list)"


def test_delta_of_an_invalid_counter_is_null_with_the_reason_others_exact() -> None:
    a = snap({"misses": 2.0, "stores": 10.0, "entries": 3.0}, {"hits": "hits: outside the 64-bit range"})
    b = snap({"misses": 5.0, "stores": 17.0, "entries": 4.0}, {"hits": "hits: outside the 64-bit range"}, t=9)
    d = counter_delta(a, b)
    assert d.values == {"misses": 3.0, "stores": 7.0, "entries": 4.0}
    assert d.invalid == {"hits": "hits: outside the 64-bit range"}
    assert not d.reset
    assert d.to_json() == {"misses": 3.0, "stores": 7.0, "entries": 4.0,
                           "invalid": {"hits": "hits: outside the 64-bit range"}}


def test_valid_then_invalid_is_invalid_and_invalid_then_valid_too() -> None:
    ok = snap({"hits": 4.0})
    bad = snap({}, {"hits": "hits: not a number (text 'x')"})
    assert counter_delta(ok, bad).to_json() == {"invalid": {"hits": "hits: not a number (text 'x')"}}
    assert counter_delta(bad, ok).to_json() == {"invalid": {"hits": "hits: not a number (text 'x')"}}
    # absent in one read: absent, as before (not invalid)
    assert counter_delta(snap({}), bad).to_json() == {}
    # a gauge takes the later value: an invalid earlier gauge does not void it
    assert counter_delta(snap({}, {"entries": "entries: x"}), snap({"entries": 5.0})).to_json() == {"entries": 5.0}


def test_halogen_big_ints_and_strings() -> None:
    doc = {"hits": BIG, "misses": 2, "stores": "7", "evicted": 10**400, "entries": 3, "refused": float("nan")}
    be = make_backend("halogen", "http://127.0.0.1:1", None)
    text = ('{"hits": 18446744073709551617, "misses": 2, "stores": "7", "evicted": 1' + "0" * 400
            + ', "entries": 3, "refused": NaN}')
    raw, common, _ = be.parse(text)
    assert raw["evicted"] == 10**400
    assert common == {"misses": 2.0, "entries": 3.0}
    assert raw["hits"] == BIG
    assert invalid_of(raw) == invalid_of(doc) == {
        "hits": "hits: outside the 64-bit range", "lookups": "hits: outside the 64-bit range",
        "stores": "stores: not a number (text '7')", "evictions": "evicted: outside the 64-bit range",
        "refused": "refused: not a finite number"}


def test_prometheus_big_counter_names_the_series() -> None:
    text = ("# TYPE vllm:prefix_cache_queries counter\nvllm:prefix_cache_queries_total 10\n"
            "# TYPE vllm:prefix_cache_hits counter\nvllm:prefix_cache_hits_total 18446744073709551617\n")
    common, _, invalid = load_profile("vllm").apply_checked(parse_exposition(text))
    assert invalid == {"hit_tokens": "vllm:prefix_cache_hits_total: outside the 64-bit range"}
    assert common == {"query_tokens": 10.0}


def test_checked_snapshot_keeps_raw_text_and_notices_once(tmp_path) -> None:
    seen: set[str] = set()
    lines: list[str] = []
    s = Snapshot(taken_ns=5, raw={"hits": float("nan"), "big": BIG, "/metrics": {"x": float("inf")}},
                 common={"misses": float("-inf"), "entries": 1.0}, invalid={"hits": "hits: not a finite number"})
    c = checked_snapshot(s, lines.append, seen)
    assert c.raw == {"hits": "NaN", "big": BIG, "/metrics": {"x": "+Inf"}}
    assert c.common == {"entries": 1.0}
    assert c.invalid == {"hits": "hits: not a finite number", "misses": "misses: not a finite number"}
    assert len(lines) == 3  # raw hits, raw /metrics/x, common misses (common hits: noticed through raw)
    checked_snapshot(s, lines.append, seen)
    assert len(lines) == 3  # once per name
    log = CounterLog(tmp_path / "counters.jsonl", origin_ns=0)
    log.write(c, "p", "before")
    log.close()
    assert read_counter_log(tmp_path / "counters.jsonl")[0]["series"] == {
        "hits": "NaN", "big": "18446744073709551617", "/metrics/x": "+Inf"}


def test_a_duplicate_series_is_invalid_and_distinct_labels_are_summed() -> None:
    """Issue 44 item 3: the same name and labels twice (labels in any order) is invalid, never summed."""
    text = ("# TYPE vllm:prefix_cache_queries counter\n"
            'vllm:prefix_cache_queries_total{engine="0",model="m"} 10\n'
            'vllm:prefix_cache_queries_total{engine="1",model="m"} 30\n'
            "# TYPE vllm:prefix_cache_hits counter\n"
            'vllm:prefix_cache_hits_total{engine="0",model="m"} 4\n'
            'vllm:prefix_cache_hits_total{model="m",engine="0"} 4\n')
    common, _, invalid = load_profile("vllm").apply_checked(parse_exposition(text))
    assert invalid == {"hit_tokens": 'vllm:prefix_cache_hits_total{model="m",engine="0"}: duplicate series '
                                     "(the same name and labels twice in one exposition); not summed"}
    assert common == {"query_tokens": 40.0}
