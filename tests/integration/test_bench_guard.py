"""The performance guard's own pieces (bench/guard.py, bench/_read_floor.py; issue 43 item 4).

The guard is not run here (it times things); what it judges by is: the read floor must
complete exactly the requests it is given (its end-of-answer test reads only the last five
bytes of a read, so a wrong test would hang or count answers twice), and a figure past its
baseline by more than its tolerance must be named as regressed, one within it not.
"""

from __future__ import annotations

import asyncio
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture()
def guard(monkeypatch):
    """bench/guard.py imported with the PYTHONPATH and sys.path it changes restored afterwards."""
    monkeypatch.setenv("PYTHONPATH", "")
    monkeypatch.setattr(sys, "path", [str(BENCH), *sys.path])
    for name in ("guard", "bench_client", "bench_record", "bench_scale", "_read_floor"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    return importlib.import_module("guard")


def _server(tokens: int) -> tuple[subprocess.Popen, int]:
    p = subprocess.Popen([sys.executable, str(BENCH / "_fastserver.py"), "--tokens", str(tokens)],
                         stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.startswith("PORT "), line
    return p, int(line.split()[1])


@pytest.mark.parametrize("tokens", [1, 3, 128])
def test_the_read_floor_completes_exactly_the_requests_it_is_given(guard, tokens, monkeypatch):
    floor = importlib.import_module("_read_floor")
    fast = importlib.import_module("_fastserver")
    answer = len(fast.HEAD + b"".join(fast.build_events(tokens, 1024)))  # the server's default prompt size
    seen: dict[int, int] = {}  # bytes read so far, by connection
    ends: list[int] = []  # the bytes a connection had read when the floor counted an answer done
    plain = floor._FloorConn.data_received

    def counted(self, data):
        seen[id(self)] = seen.get(id(self), 0) + len(data)
        done = self.run.done
        plain(self, data)
        if self.run.done > done:
            ends.append(seen[id(self)])

    monkeypatch.setattr(floor._FloorConn, "data_received", counted)
    srv, port = _server(tokens)
    try:
        bodies = [b'{"model":"m","stream":true,"max_tokens":%d,"messages":[{"role":"user","content":"x%d"}]}'
                  % (tokens, i) for i in range(3)]
        got = asyncio.run(asyncio.wait_for(floor.run_floor(port, bodies, [0, 1, 2, 0, 1, 2, 2], 2), 60))
    finally:
        srv.terminate()
        srv.wait(10)
        srv.stdout.close()
    assert got["requests"] == 7
    assert got["ttft_p50_us"] > 0
    # Each answer counted at its very end, never at an event's or the head's: every end a whole
    # number of answers into its connection, and the 7 answers read in full, no more.
    assert [e % answer for e in ends] == [0] * 7
    assert sum(seen.values()) == 7 * answer


def test_the_request_bytes_carry_the_body_and_its_length(guard):
    floor = importlib.import_module("_read_floor")
    assert floor.request_bytes("127.0.0.1", 8000, b'{"a":1}') == (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nContent-Type: application/json\r\n"
        b"Accept: text/event-stream\r\nContent-Length: 7\r\n\r\n{\"a\":1}")


def test_a_figure_past_its_tolerance_is_regressed_and_one_within_it_is_not(guard):
    tol = guard.Tolerances(ratio=0.25, noisy=0.4, floor=0.15, rss_mb=10.0)
    base = {"read_over_floor": 1.10, "request_ratio": 0.50, "token_ratio": 0.80, "rss_mb": 96.0}
    # limits: 1.10 x 1.15 = 1.265; 0.50 x 1.25 = 0.625; 0.80 x 1.4 = 1.12; 96 + 10 = 106
    within = {"read_over_floor": 1.26, "request_ratio": 0.62, "token_ratio": 1.11, "rss_mb": 105.9}
    past = {"read_over_floor": 1.27, "request_ratio": 0.63, "token_ratio": 1.13, "rss_mb": 106.1}
    assert dict(guard.verdicts(within, base, tol)) == dict.fromkeys(within, "ok")
    assert dict(guard.verdicts(past, base, tol)) == dict.fromkeys(past, "REGRESSED")
    assert dict(guard.verdicts({"whole_over_floor": 3.0}, base, tol)) == {"whole_over_floor": "no baseline"}
    # exactly at the limit still passes (the guard flags a figure over it, not at it): binary fractions,
    # so the limit is exact (0.5 x 1.25 = 0.625; 0.75 x 1.5 = 1.125; 96 + 8 = 104)
    exact = guard.Tolerances(ratio=0.25, noisy=0.5, floor=0.25, rss_mb=8.0)
    at = {"request_ratio": 0.625, "token_ratio": 1.125, "read_over_floor": 1.25, "rss_mb": 104.0}
    assert dict(guard.verdicts(at, {"request_ratio": 0.5, "token_ratio": 0.75, "read_over_floor": 1.0,
                                    "rss_mb": 96.0}, exact)) == dict.fromkeys(at, "ok")


def test_the_table_shows_the_floor_beside_the_target_it_is_over(guard):
    tol = guard.Tolerances()
    got = {"token_ratio": 0.8, "token_ratio_reps": [0.8], "token_ratio_floor": 0.7,
           "request_ratio": 0.5, "request_ratio_reps": [0.5], "request_ratio_floor": 0.2,
           "read_over_floor": 1.14, "read_over_floor_reps": [1.14]}
    lines = guard.report(got, {"token_ratio": 0.87}, "default", tol)
    rows = {ln.split(" | ")[0][2:]: ln for ln in lines[3:]}
    assert rows["CPU per streamed token, C64, kvreplay / plain"] == (
        "| CPU per streamed token, C64, kvreplay / plain | 0.800x | 0.800 | <= 0.120x (not met) "
        "| 0.700x (over the target) | 0.870x | +40% | ok |")
    assert rows["CPU per request, one-token answers, C64, kvreplay / plain"] == (
        "| CPU per request, one-token answers, C64, kvreplay / plain | 0.500x | 0.500 | <= 0.250x (not met) "
        "| 0.200x | - | +25% | no baseline |")
    assert rows["CPU per socket read, C64 128-token answers, kvreplay / read floor"] == (
        "| CPU per socket read, C64 128-token answers, kvreplay / read floor | 1.140x | 1.140 | - | - | - | +15% "
        "| no baseline |")


def test_the_over_floor_figures_are_kvreplay_over_the_floor_per_read_and_per_request(guard):
    # us: CPU µs per token (or request) by arm and repetition; *_read: per socket read
    us = {"kvreplay": [4.4, 4.8], "plain": [5.5, 6.0], "floor": [4.0, 4.0],
          "kvreplay_read": [4.6, 5.0], "floor_read": [4.0, 4.0]}
    ratios = {"kvreplay": [0.8, 0.8], "floor": [4.0 / 5.5, 4.0 / 6.0]}
    tok = guard._group("token_ratio", "token", us, ratios)
    assert tok["read_over_floor_reps"] == pytest.approx([1.15, 1.25])
    assert tok["read_over_floor"] == pytest.approx(1.2)
    assert tok["token_ratio_floor"] == pytest.approx((4.0 / 5.5 + 4.0 / 6.0) / 2)
    assert "request_over_floor" not in tok
    req = guard._group("request_ratio", "request", us, ratios)
    assert req["request_over_floor_reps"] == pytest.approx([1.1, 1.2])
    assert "read_over_floor" not in req


def test_a_figure_that_could_not_be_measured_is_not_passed(guard):
    # bench_client._reads() reads 0 where /proc/self/io is missing: the per-read figure is NaN,
    # and NaN > limit is False, so it would read "ok" against any baseline.
    nan = float("nan")
    got = {"read_over_floor": nan, "token_ratio": 0.8}
    base = {"read_over_floor": 1.1, "token_ratio": 0.8}
    assert dict(guard.verdicts(got, base, guard.Tolerances())) == {"read_over_floor": "not measured",
                                                                    "token_ratio": "ok"}


def test_a_process_cpu_is_the_sum_of_its_threads_schedstat_in_ns(guard, tmp_path):
    """The proxy's CPU in ns (``bench_record.task_cpu_ns``): every live thread's ``sum_exec_runtime``."""
    rec = importlib.import_module("bench_record")
    proc = tmp_path / "proc"
    for tid, line in (("10", "123456789 2000 31\n"), ("11", "1000 7 2\n"), ("12", None), ("13", "garbage\n")):
        (proc / "task" / tid).mkdir(parents=True)
        if line is not None:  # 12: a thread gone between the listing and the read; 13: unreadable
            (proc / "task" / tid / "schedstat").write_text(line)
    assert rec.task_cpu_ns(proc) == 123_457_789
    assert rec.task_cpu_ns(tmp_path / "no-such-process") is None
    (tmp_path / "bare" / "task" / "1").mkdir(parents=True)  # a kernel without schedstat
    assert rec.task_cpu_ns(tmp_path / "bare") is None
