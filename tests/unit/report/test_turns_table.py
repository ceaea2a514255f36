"""The reuse-by-turn table: a turn whose answers did not all report cached tokens has no hit rate (issue 42 item 10)."""

from __future__ import annotations

from pathlib import Path

from kvreplay.report.turns import by_turn_table
from kvreplay.rundir import RunData


def _row(turn, requests, cached, prompt, hit, unknown=0):
    r = {"turn": turn, "requests": requests, "ttft_ms": {"p50": 5.0, "p99": 7.0}, "cached_tokens": cached,
         "prompt_tokens": prompt, "hit_rate": hit}
    return {**r, "cached_unknown": unknown} if unknown else r


def test_by_turn_cached_unknown_cells_are_absent_or_noted():
    # turn 0: every answer reported: 40 / 200 = 0.200. turn 1: 1 of 2 answers without cached tokens:
    # the 60 cached are a floor (noted), the hit rate absent. turn 2: none reported: both absent.
    ph = {"name": "conv", "sent": 6, "ok": 6, "valid": True,
          "by_turn": [_row(0, 2, 40, 200, 0.2), _row(1, 2, 60, 200, None, 1), _row(2, 2, 0, 200, None, 2)]}
    run = RunData(path=Path("."), plan=None, summary={"phases": [ph]}, records=[], record_list=[])
    t = by_turn_table(run)
    assert t is not None
    got = {head: [(c.status, c.text, c.reason, c.note) for c in cells[3:]] for head, cells in t.rows}
    assert got["conv · 0"] == [("measured", "40", None, None), ("measured", "200", None, None),
                               ("measured", "0.200", None, None)]
    assert got["conv · 1"] == [("measured", "60", None, "1 answers without cached_tokens"),
                               ("measured", "200", None, None),
                               ("absent", "absent", "1 of 2 answers without cached_tokens", None)]
    assert got["conv · 2"] == [
        ("absent", "absent", "the server reported no usage.prompt_tokens_details.cached_tokens", None),
        ("measured", "200", None, None), ("absent", "absent", "2 of 2 answers without cached_tokens", None)]
