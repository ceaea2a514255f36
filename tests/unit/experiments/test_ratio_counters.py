"""A ratio metric naming a counter the backend lacks says so (new-user item 10)."""

from __future__ import annotations

from kvreplay.experiments.ab.compare import compare_blocks, parse_threshold
from kvreplay.experiments.ab.ratios import missing_counter

# what a halogen backend's phase delta holds (sim run, mtbench-52 at C4)
HALOGEN_DELTA = {"hits": 51.0, "misses": 1.0, "stores": 53.0, "evictions": 45.0, "refused": 0.0,
                 "hit_tokens": 175848.0, "entries": 8.0, "bytes": 4.4e9, "lookups": 52.0, "running": 0.0}
HAVE = "lookups, hits, misses, hit_tokens, stores, evictions, refused"


def test_missing_counter_names_counter_backend_and_what_it_has():
    ph = {"counter_delta": HALOGEN_DELTA}
    assert missing_counter(ph, "ratio:hit_tokens/query_tokens", "halogen") == (
        f"query_tokens: no such counter for backend halogen (have: {HAVE})"
    )
    assert missing_counter(ph, "ratio:hit_tokens/lookups", "halogen") is None
    assert missing_counter(ph, "ratio:tokens.cached/tokens.prompt", "halogen") is None
    assert missing_counter({"counter_delta": {}}, "ratio:hits/lookups", "none") == (
        "hits: no counters were read (backend none)"
    )
    assert missing_counter({}, "ratio:hits/lookups", None) == "hits: no counters were read (backend unknown)"
    assert missing_counter({"counter_delta": {"reset": True}}, "ratio:hits/lookups", "vllm") is None


def _summary(hit_tokens):
    ph = {"name": "c4", "planned": 4, "sent": 4, "ok": 4, "valid": True, "deferred": False,
          "counter_delta": HALOGEN_DELTA | {"hit_tokens": hit_tokens}, "tokens": {"cached": 100}}
    return {"aborted": None, "phases": [ph], "identity": {"before": {"backend": "halogen"}}}


def test_compare_check_reason_names_the_missing_counter():
    pairs = [
        {"rep": i, "baseline": {"dir": f"b{i}", "summary": _summary(100.0)},
         "candidate": {"dir": f"c{i}", "summary": _summary(110.0)}}
        for i in range(3)
    ]
    res = compare_blocks(pairs, [parse_threshold("ratio:hit_tokens/query_tokens:+5%", "primary")], n_boot=200)
    chk = res["checks"][0]
    want = f"query_tokens: no such counter for backend halogen (have: {HAVE})"
    assert (chk["decision"], chk["n"], chk["reason"]) == ("no decision", 0, want)
    assert f"c4.ratio:hit_tokens/query_tokens: {want}" in res["reasons"]
    # a counter it has: measured, 1.1 in every pair, +10% >= +5% -> benefit
    res = compare_blocks(pairs, [parse_threshold("ratio:hit_tokens/lookups:+5%", "primary")], n_boot=200)
    assert (res["checks"][0]["decision"], res["checks"][0]["change_pct"]) == ("benefit", 10.0)
    assert "reason" not in res["checks"][0]


def test_backend_from_plan_when_the_summary_has_no_identity():
    s = _summary(100.0)
    del s["identity"]
    pairs = [{"rep": 0, "baseline": {"dir": "b", "summary": s, "plan": {"run": {"backend": "vllm"}}},
              "candidate": {"dir": "c", "summary": s, "plan": {"run": {"backend": "vllm"}}}}]
    res = compare_blocks(pairs, [parse_threshold("ratio:query_tokens/hits:+5%", "primary")], n_boot=200)
    assert res["checks"][0]["reason"] == f"query_tokens: no such counter for backend vllm (have: {HAVE})"
