"""Goodput and SLO attainment from hand-made records (kvreplay.sweeps.goodput)."""

import pytest

from kvreplay.sweeps import goodput, parse_slo


def rec(phase="c4", status="ok", ttft_ms=None, tpot_ms=None, out=8):
    return {"phase": phase, "status": status, "ttft_ns": None if ttft_ms is None else int(ttft_ms * 1e6),
            "tpot_ns": None if tpot_ms is None else int(tpot_ms * 1e6), "usage": {"completion_tokens": out}}


RECORDS = [
    rec(ttft_ms=100, tpot_ms=10),   # meets both
    rec(ttft_ms=500, tpot_ms=50),   # meets both (limits are inclusive)
    rec(ttft_ms=501, tpot_ms=10),   # TTFT too slow
    rec(ttft_ms=200, tpot_ms=51),   # TPOT too slow
    rec(ttft_ms=200, tpot_ms=None, out=1),  # one output token: no TPOT, counted as met (vLLM)
    rec(ttft_ms=200, tpot_ms=None, out=5),  # TPOT missing otherwise: not met
    rec(status="http_error"),        # a failure: in the denominator only
    rec(phase="warmup", ttft_ms=1, tpot_ms=1),  # another phase: ignored
]


def test_goodput_counts_ok_requests_meeting_every_slo_over_wall_time():
    g = goodput(RECORDS, "c4", 2.0, [parse_slo("ttft_ms<=500"), parse_slo("tpot_ms<=50")])
    assert (g.records, g.ok, g.met) == (7, 6, 3)
    assert g.goodput_rps == pytest.approx(1.5)
    assert g.slo_attainment == pytest.approx(3 / 7)


def test_without_slo_every_ok_request_counts_and_strict_limits_exclude_the_bound():
    g = goodput(RECORDS, "c4", 3.0, [])
    assert (g.met, g.goodput_rps, g.slo_attainment) == (6, 2.0, 6 / 7)
    g = goodput(RECORDS, "c4", 3.0, [parse_slo("ttft_ms<500")])
    assert g.met == 4  # 100, 200, 200, 200


def test_no_wall_time_no_goodput_and_no_records_no_attainment():
    g = goodput(RECORDS, "other", 0.0, [])
    assert (g.records, g.goodput_rps, g.slo_attainment) == (0, None, None)
