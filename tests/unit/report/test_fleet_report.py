"""The report's "Replicas" table of a fleet run (report.fleet), from a hand-made summary."""

from __future__ import annotations

from pathlib import Path

from kvreplay.report.fleet import replica_section
from kvreplay.rundir.load import RunData

A, B = "http://127.0.0.1:8001", "http://127.0.0.1:8002"


def _phase(**fleet_extra: object) -> dict:
    reps = [{"url": A, "requests": 3, "ok": 3, "tokens": {"prompt": 300, "cached": 170, "completion": 12},
             "hit_rate": 0.566667, "ttft_ms": {"p50": 2.0}, "itl_ms": {"p50": None},
             "counter_delta": {"lookups": 3}},
            {"url": B, "requests": 1, "ok": 1, "tokens": {"prompt": 100, "cached": 0, "completion": 4},
             "hit_rate": 0.0, "ttft_ms": {"p50": 3.5}, "itl_ms": {"p50": 1.25}, "counter_delta": None}]
    fleet = {"requests": 4, "ok": 4, "tokens": {"prompt": 400, "cached": 170, "completion": 16}, "hit_rate": 0.425,
             "unattributed": {"requests": 2, "reasons": {"unattributed": 2}, "tokens": {}},
             "balance": {"requests_max_over_mean": 1.5, "prompt_tokens_max_over_mean": 1.5},
             "attribution": "per_request", "note": None, **fleet_extra}
    return {"name": "a", "replicas": reps, "fleet": fleet}


def test_one_row_per_replica_and_the_fleet_sums():
    run = RunData(path=Path("."), plan=None, summary={"phases": [_phase()]}, records=[], record_list=[])
    section = replica_section(run)
    assert section is not None
    (table,), notes = section
    assert [h for h, _ in table.rows] == [A, B, "unattributed", "fleet (all)"]
    assert table.columns[-1] == "Δ lookups (own counters)"  # the only request counter replica A's backend read
    assert [c.markdown() for c in table.rows[0][1]] == ["3", "3", "300", "170", "56.7%", "2", "absent: not measured",
                                                        "3"]
    assert [c.markdown() for c in table.rows[1][1]][-1] == "absent: no counters read"
    # 2 sent records name no replica (no tokens kept for them, no phase-level ok here): beside the attributed 4
    assert [c.markdown() for c in table.rows[2][1]][:2] == ["2", "absent: not measured"]
    assert [c.markdown() for c in table.rows[3][1]][:2] == ["6", "absent: not measured"]
    assert [c.markdown() for c in table.rows[3][1]][-1] == "absent: not read on every replica"
    assert notes == ["a: attribution per_request; load balance max/mean requests 1.5, prompt tokens 1.5; "
                     "anomaly: unattributed 2 sent records name no replica"]


def test_a_run_without_replicas_has_no_section():
    run = RunData(path=Path("."), plan=None, summary={"phases": [{"name": "a"}]}, records=[], record_list=[])
    assert replica_section(run) is None


def test_above_c1_the_replicas_are_not_attributed_and_the_fleet_row_holds_the_totals():
    # C4 without a replica header: no record names its replica (phase_only); 8 sent, 7 ok, 800 prompt
    # tokens of which 300 cached, all unattributed; vLLM-style counters: hit_tokens, no lookups
    reps = [{"url": A, "requests": 0, "ok": 0, "tokens": {"prompt": 0, "cached": 0, "completion": 0},
             "hit_rate": None, "ttft_ms": {}, "itl_ms": {}, "counter_delta": {"hit_tokens": 176, "query_tokens": 500}},
            {"url": B, "requests": 0, "ok": 0, "tokens": {"prompt": 0, "cached": 0, "completion": 0},
             "hit_rate": None, "ttft_ms": {}, "itl_ms": {}, "counter_delta": {"hit_tokens": 128, "query_tokens": 300}}]
    fleet = {"requests": 0, "ok": 0, "tokens": {"prompt": 0, "cached": 0, "completion": 0}, "hit_rate": None,
             "unattributed": {"requests": 8, "reasons": {"phase_only": 8},
                              "tokens": {"prompt": 800, "cached": 300, "completion": 40}},
             "balance": {}, "attribution": "phase_only", "note": "no record names its replica"}
    ph = {"name": "c4", "sent": 8, "ok": 7, "replicas": reps, "fleet": fleet}
    run = RunData(path=Path("."), plan=None, summary={"phases": [ph]}, records=[], record_list=[])
    (table,), _notes = replica_section(run)
    assert table.columns[-1] == "Δ hit_tokens (own counters)"
    assert [h for h, _ in table.rows] == [A, B, "unattributed", "fleet (all)"]
    na = "absent: not attributed: no record names its replica (above C1 without a replica header)"
    assert [c.markdown() for c in table.rows[0][1]] == [na] * 7 + ["176"]  # never a false 0
    assert [c.markdown() for c in table.rows[1][1]][-1] == "128"
    assert [c.markdown() for c in table.rows[2][1]][:5] == ["8", "7", "800", "300", "37.5%"]
    # 300 / 800 = 37.5%; the counters summed over the replicas: 176 + 128 = 304
    assert [c.markdown() for c in table.rows[3][1]] == ["8", "7", "800", "300", "37.5%", "absent: not measured",
                                                        "absent: not measured", "304"]
