"""Measured values checked exactly against hand-derived figures (no sleeps, no equal samples).

Each test here exists to fail on a specific wrong value that looks plausible:
TPOT divided by n instead of n - 1, a record's ITL p50 read from the largest
gap, a summary percentile read from the wrong quantile, a records file that
holds lines in a user-space buffer.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from kvreplay.accounting.sse import SSEAccountant
from kvreplay.metrics.summary import PhaseStats
from kvreplay.rundir import RecordWriter
from kvreplay.runner._runner import _Run
from kvreplay.runner.http import RequestOutcome

MS = 1_000_000
T0 = 5_000 * MS  # the send, absolute ns
ORIGIN = 4_000 * MS  # the run clock's origin
TOKENS_AT_MS = (50, 60, 80, 110, 150, 250)
"""Token arrivals after the send (ms): TTFT 50, gaps 10, 20, 30, 40, 100."""
DONE_AT_MS = 260


def _chunk(obj) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def _timeline_outcome() -> RequestOutcome:
    """A streamed answer fed to the real accountant at chosen arrival times."""
    acc = SSEAccountant()
    acc.feed(_chunk({"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
             T0 + 40 * MS)
    for i, t in enumerate(TOKENS_AT_MS):
        fin = "stop" if i == len(TOKENS_AT_MS) - 1 else None
        acc.feed(_chunk({"choices": [{"index": 0, "delta": {"content": f"w{i} "},
                                      "finish_reason": fin}]}), T0 + t * MS)
    usage = {"prompt_tokens": 100, "completion_tokens": len(TOKENS_AT_MS), "total_tokens": 106,
             "prompt_tokens_details": {"cached_tokens": 64}}
    acc.feed(_chunk({"choices": [], "usage": usage}) + b"data: [DONE]\n\n", T0 + 255 * MS)
    res = acc.close()
    return RequestOutcome("ok", 200, T0, T0 + 30 * MS, T0 + DONE_AT_MS * MS, res, streamed=True)


def _record(out: RequestOutcome) -> dict:
    run = SimpleNamespace(
        workload=SimpleNamespace(bodies=[SimpleNamespace(sha256="ab" * 32, body_bytes=400)]),
        clock=SimpleNamespace(origin_ns=ORIGIN),
        abort=None,
    )
    run.rel = lambda t: _Run.rel(run, t)
    phase = SimpleNamespace(name="p", spec=SimpleNamespace(concurrency=1))
    return _Run.record(run, phase, 0, 0, 0, out, None, "none")


def test_synthetic_token_timeline_gives_exact_ttft_itl_tpot_e2e():
    out = _timeline_outcome()
    rec = _record(out)
    assert rec["status"] == "ok" and rec["terminal"] == "finished"
    assert rec["ttft_ns"] == 50 * MS
    # TPOT: (last token - first token) / (n - 1) = (250 - 50) / 5 = 40 ms (not 200 / 6).
    assert rec["tpot_ns"] == 40 * MS
    assert rec["e2e_ns"] == 260 * MS
    # ITL gaps 10, 20, 30, 40, 100 ms: median 30, max 100, mean 40.
    assert rec["itl"] == {"n": 5, "mean_ms": 40.0, "p50_ms": 30.0, "max_ms": 100.0}
    assert rec["t_sent_ns"] == T0 - ORIGIN and rec["t_first_token_ns"] == T0 - ORIGIN + 50 * MS
    assert rec["usage"]["cached_tokens"] == 64

    st = PhaseStats("p", 1, 1, 1)
    st.add(rec, out.stream.token_ns)
    s = st.to_json()
    assert s["ttft_ms"]["n"] == 1 and s["ttft_ms"]["mean"] == 50.0
    assert s["tpot_ms"]["mean"] == 40.0 and s["e2e_ms"]["mean"] == 260.0
    itl = s["itl_ms"]
    assert itl["n"] == 5 and itl["mean"] == 40.0
    # HdrHistogram buckets (3 significant digits): within 0.1 % of 30 / 100 ms.
    assert itl["p50"] == pytest.approx(30.0, rel=1e-3)
    assert itl["max"] == pytest.approx(100.0, rel=1e-3)
    assert itl["p90"] == pytest.approx(100.0, rel=1e-3)


def _rec_e2e(ms: int, pos: int) -> dict:
    return {"status": "ok", "sent": True, "position": pos, "body_index": pos,
            "usage": {"prompt_tokens": 10, "completion_tokens": 1, "cached_tokens": 0},
            "ttft_ns": ms * MS, "e2e_ns": ms * MS, "tpot_ns": None}


def test_summary_percentiles_on_1_to_100_ms():
    st = PhaseStats("p", 1, 1, 100)
    for i, ms in enumerate([*range(100, 50, -1), *range(1, 51)]):  # not in order
        st.add(_rec_e2e(ms, i))
    for key in ("ttft_ms", "e2e_ms"):
        h = st.to_json()[key]
        assert h["n"] == 100 and h["mean"] == 50.5
        assert h["p50"] == pytest.approx(50.0, rel=1e-3)
        assert h["p90"] == pytest.approx(90.0, rel=1e-3)
        assert h["p99"] == pytest.approx(99.0, rel=1e-3)
        assert h["max"] == pytest.approx(100.0, rel=1e-3)


def test_a_record_is_readable_through_a_second_handle_right_after_it_is_written(tmp_path):
    path = tmp_path / "records.jsonl"
    w = RecordWriter(path)
    try:
        with open(path, "rb") as reader:  # a second file handle, as a tail -f would
            w.write({"position": 0, "status": "ok"})
            assert reader.read() == b'{"position":0,"status":"ok"}\n'
            w.write({"position": 1, "status": "cut"})
            assert reader.read() == b'{"position":1,"status":"cut"}\n'
    finally:
        w.close()
