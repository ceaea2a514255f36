"""Issue 21 item 2: the cheaper response path reads the same values as before.

- every chunk of one socket read reaches the accountant in one ``feed`` call,
  joined in order, stamped with that read's time (llhttp's body callback is the
  read's list ``append``);
- the chunk-framing run is the bytes read since the last read with body bytes;
- a record's ITL summary and the phase's ITL histogram come from the same token times.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from kvreplay.accounting.events import itl_gaps_ns
from kvreplay.accounting.sse import SSEAccountant
from kvreplay.metrics.histograms import LatencySet
from kvreplay.metrics.summary import PhaseStats
from kvreplay.runner import h1
from kvreplay.runner._runner import _Run
from kvreplay.runner.h1 import _Exchange
from kvreplay.runner.http import RequestOutcome

HEAD_SSE = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


def _frame(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(i: int) -> bytes:
    return b'data: {"choices":[{"index":0,"delta":{"content":"w%d "}}]}\n\n' % i


class _SpyAcc:
    def __init__(self) -> None:
        self.calls: list[tuple[bytes, int]] = []

    def feed(self, data: bytes, now: int) -> int:
        self.calls.append((data, now))
        return 0


def test_three_chunks_of_one_read_are_one_feed_at_that_reads_time(monkeypatch):
    clock = iter([1_000, 2_000, 3_000])
    # the exchange's clock, in the module of the class in use (the compiled twin has its own globals)
    monkeypatch.setattr(sys.modules[_Exchange.__module__], "now_ns", lambda: next(clock))
    x = _Exchange(None, None, 0)
    x.on_data(HEAD_SSE)
    spy = _SpyAcc()
    x.acc = spy  # type: ignore[assignment]
    x.on_data(_frame(_event(0)) + _frame(_event(1)) + _frame(_event(2)))
    x.on_data(_frame(_event(3)))
    assert spy.calls == [(_event(0) + _event(1) + _event(2), 2_000), (_event(3), 3_000)]
    assert x.pieces == [] and x.framing_run == 0 and x.exc_status is None


def test_the_real_accountant_sees_one_chunk_per_read_and_every_token():
    x = _Exchange(None, None, 64)
    x.on_data(HEAD_SSE)
    x.on_data(_frame(_event(0)) + _frame(_event(1)))
    x.on_data(_frame(_event(2)) + _frame(b"data: [DONE]\n\n") + b"0\r\n\r\n")
    assert x.complete and x.exc_status is None
    res = x.acc.close()
    assert (res.content_deltas, len(res.token_ns), res.text_head, res.done_marker) == (3, 3, "w0 w1 w2 ", True)


def test_framing_run_counts_bytes_since_the_last_read_with_body_bytes():
    x = _Exchange(None, None, 0)
    x.on_data(HEAD_SSE + _frame(_event(0)))
    assert x.framing_run == 0
    x.on_data(b"5;ext=")  # a size line in progress: framing only
    assert x.framing_run == 6
    x.on_data(b"abcd\r\n")  # the extension goes on, the size line ends: still no body byte
    assert x.framing_run == 12
    x.on_data(b"data:")  # body bytes: the run starts again
    assert x.framing_run == 0 and x.exc_status is None


def test_framing_run_over_the_limit_without_a_body_byte_is_malformed():
    x = _Exchange(None, None, 0)
    x.on_data(HEAD_SSE + _frame(_event(0)) + b"5;e=")
    x.on_data(b"a" * h1.MAX_FRAMING_BYTES)
    assert x.framing_run == h1.MAX_FRAMING_BYTES and x.exc_status is None
    x.on_data(b"a")
    assert (x.exc_status, x.error) == ("malformed",
                                       "malformed_http: chunk framing over 65536 bytes between two chunks")


MS = 1_000_000
T0 = 5_000 * MS


def test_record_itl_summary_and_the_phase_histogram_come_from_the_token_times():
    acc = SSEAccountant()
    for i, t in enumerate((50, 60, 80, 110, 150, 250)):  # gaps 10, 20, 30, 40, 100 ms
        acc.feed(_event(i), T0 + t * MS)
    acc.feed(b"data: [DONE]\n\n", T0 + 255 * MS)
    out = RequestOutcome("ok", 200, T0, T0 + 30 * MS, T0 + 260 * MS, acc.close(), streamed=True)
    run = SimpleNamespace(workload=SimpleNamespace(bodies=[SimpleNamespace(sha256="ab" * 32, body_bytes=4)]),
                          clock=SimpleNamespace(origin_ns=0), abort=None)
    run.rel = lambda t: _Run.rel(run, t)
    rec = _Run.record(run, SimpleNamespace(name="p", spec=SimpleNamespace(concurrency=1)), 0, 0, 0, out,
                      None, "none")
    # mean 200 / 5 = 40 ms; upper median of 10 20 30 40 100 = 30 ms
    assert rec["itl"] == {"n": 5, "mean_ms": 40.0, "p50_ms": 30.0, "max_ms": 100.0}
    from_times = PhaseStats("p", 1, 1, 1)
    from_times.add(rec, out.stream.token_ns)
    from_gaps = LatencySet()
    from_gaps.record_many_ns(itl_gaps_ns(out.stream.token_ns))
    a, b = from_times.to_json()["itl_ms"], from_gaps.summary_ms()
    assert a == b
    assert a["n"] == 5 and a["mean"] == 40.0 and a["max"] == pytest.approx(100.0, rel=1e-3)
