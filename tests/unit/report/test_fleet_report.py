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
    assert [h for h, _ in table.rows] == [A, B, "fleet (sum)"]
    assert [c.markdown() for c in table.rows[0][1]] == ["3", "3", "300", "170", "56.7%", "2", "absent: not measured",
                                                        "3"]
    assert [c.markdown() for c in table.rows[1][1]][-1] == "absent: no counters read"
    assert [c.markdown() for c in table.rows[2][1]][:5] == ["4", "4", "400", "170", "42.5%"]
    assert notes == ["a: attribution per_request; load balance max/mean requests 1.5, prompt tokens 1.5; "
                     "anomaly: unattributed 2 sent records name no replica"]


def test_a_run_without_replicas_has_no_section():
    run = RunData(path=Path("."), plan=None, summary={"phases": [{"name": "a"}]}, records=[], record_list=[])
    assert replica_section(run) is None
