"""Histogram logs appended while a phase runs (metrics.hlog, issue 21 item 1): exact intervals."""

import errno
import os
from pathlib import Path

import numpy as np
import pytest
from hdrh.histogram import HdrHistogram

from kvreplay.metrics.histograms import LatencySet, PhaseHistograms
from kvreplay.metrics.hlog import IntervalLogs
from kvreplay.rundir import read_hlog

DATA = Path(__file__).parent.parent / "report" / "data"
S = 1_000_000_000  # 1 s in ns
ORIGIN = 10 * S


def intervals(path: Path) -> list[tuple[str, str, str, HdrHistogram]]:
    """(start, length, max column, histogram) of each interval line, as written."""
    out = []
    for line in path.read_text().splitlines():
        if line.startswith(("#", '"')):
            continue
        start, length, mx, enc = line.split(",")
        out.append((start, length, mx, HdrHistogram.decode(enc)))
    return out


def counts(h: HdrHistogram) -> np.ndarray:
    return np.ctypeslib.as_array(h.counts)[: h.counts_len].astype(np.int64)


def logs(tmp_path: Path, ph: PhaseHistograms, lag: LatencySet | None = None, **kw) -> IntervalLogs:
    sets = {**ph.sets, **({"loop_lag": lag} if lag is not None else {})}
    return IntervalLogs(tmp_path / "histograms", "p", sets, ORIGIN, ORIGIN + S // 2, **kw)


def test_three_intervals_hold_only_their_own_values_and_add_up_to_the_phase(tmp_path):
    ph, lag = PhaseHistograms(), LatencySet()
    hl = logs(tmp_path, ph, lag)
    ttft, itl = ph.sets["ttft"], ph.sets["itl"]
    for v in (1_000_000, 1_000_000, 3_000_000):
        ttft.record_ns(v)
    hl.cut(ORIGIN + 1 * S)  # interval 1 of ttft: 0.5 .. 1.0 s
    for _ in range(4):
        ttft.record_ns(7_000_000)
    itl.record_many_ns([2_000_000, 2_000_000, 5_000_000])  # buffered: the cut records them first
    lag.record_ns(12_000_000)
    hl.cut(ORIGIN + 2_250_000_000)  # ttft interval 2; itl and loop_lag interval 1 (from the phase start)
    hl.cut(ORIGIN + 3 * S)  # nothing new: no line anywhere
    ttft.record_ns(9_000_000)
    files = hl.close(ORIGIN + 4 * S)
    assert files == {"ttft": "p.ttft.hlog", "itl": "p.itl.hlog", "loop_lag": "p.loop_lag.hlog"}
    assert sorted(os.listdir(tmp_path / "histograms")) == ["p.itl.hlog", "p.loop_lag.hlog", "p.ttft.hlog"]

    hd = tmp_path / "histograms"
    assert (hd / "p.ttft.hlog").read_text().splitlines()[:3] == [
        "#kvreplay phase=p metric=ttft unit=us",
        "#[Histogram log format version 1.2]",
        '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"',
    ]
    iv = intervals(hd / "p.ttft.hlog")
    # The third interval starts where the second ended (the empty cut at 3.0 s wrote nothing).
    # Max column: the bucket's highest equivalent value in ms, floored (3000 µs -> 3001 µs -> 3).
    assert [(s, n, m) for s, n, m, _ in iv] == [
        ("0.500000", "0.500000", "3.000000"),
        ("1.000000", "1.250000", "7.000000"),
        ("2.250000", "1.750000", "9.000000"),
    ]
    assert [h.get_total_count() for *_, h in iv] == [3, 4, 1]
    assert (iv[0][3].get_count_at_value(1000), iv[0][3].get_count_at_value(3000)) == (2, 1)
    assert (iv[1][3].get_count_at_value(7000), iv[1][3].get_count_at_value(1000)) == (4, 0)
    assert iv[2][3].get_count_at_value(9000) == 1
    itl_iv = intervals(hd / "p.itl.hlog")
    assert [(s, n) for s, n, _, _ in itl_iv] == [("0.500000", "1.750000")]
    assert (itl_iv[0][3].get_count_at_value(2000), itl_iv[0][3].get_count_at_value(5000)) == (2, 1)
    lag_iv = intervals(hd / "p.loop_lag.hlog")
    assert len(lag_iv) == 1 and lag_iv[0][3].get_count_at_value(12000) == 1
    # The sum of the intervals is the phase's histogram, count for count.
    for m in ("ttft", "itl"):
        assert np.array_equal(counts(read_hlog(hd / f"p.{m}.hlog")), counts(ph.sets[m].hist))
    assert read_hlog(hd / "p.ttft.hlog").get_total_count() == 8


def test_each_interval_is_one_flushed_line_as_soon_as_it_is_cut(tmp_path):
    ph = PhaseHistograms()
    hl = logs(tmp_path, ph)
    ph.sets["e2e"].record_ns(4_000_000)
    hl.cut(ORIGIN + S)
    # Readable before close: the line is on disk (unbuffered write), not in a buffer.
    assert read_hlog(tmp_path / "histograms" / "p.e2e.hlog").get_count_at_value(4000) == 1
    ph.sets["e2e"].record_ns(6_000_000)
    hl.cut(ORIGIN + 2 * S)
    h = read_hlog(tmp_path / "histograms" / "p.e2e.hlog")
    assert (h.get_total_count(), h.get_count_at_value(6000)) == (2, 1)
    hl.close(ORIGIN + 2 * S)


def test_timer_cuts_on_the_loop_and_close_cuts_the_rest(tmp_path):
    import asyncio

    ph = PhaseHistograms()

    async def go() -> dict[str, str]:
        hl = IntervalLogs(tmp_path / "h", "p", ph.sets, 0, 0)
        hl.start(0.01)
        ph.sets["ttft"].record_ns(1_000_000)
        await asyncio.sleep(0.1)  # several ticks; only the first has a value to write
        ph.sets["ttft"].record_ns(2_000_000)
        return hl.close()

    files = asyncio.run(go())
    assert files == {"ttft": "p.ttft.hlog"}
    iv = intervals(tmp_path / "h" / "p.ttft.hlog")
    assert [h.get_total_count() for *_, h in iv] == [1, 1]
    assert iv[0][3].get_count_at_value(1000) == 1 and iv[1][3].get_count_at_value(2000) == 1


def test_a_write_error_removes_the_phase_logs_and_reports_once(tmp_path, monkeypatch):
    from kvreplay.metrics import histograms as hist_mod  # new_log opens the files

    real_open = hist_mod.open_new
    opened = []

    class FullDisk:
        def __init__(self, f):
            self.f, self.name, self.writes = f, f.name, 0

        def write(self, data):
            self.writes += 1
            if self.writes > 2:  # header, first interval, then the disk is full
                raise OSError(errno.ENOSPC, "No space left on device")
            return self.f.write(data)

        def close(self):
            self.f.close()

    def fake_open(path, **kw):
        f = FullDisk(real_open(path, **kw))
        opened.append(f)
        return f

    monkeypatch.setattr(hist_mod, "open_new", fake_open)
    errors = []
    ph = PhaseHistograms()
    hl = logs(tmp_path, ph, on_error=errors.append)
    ph.sets["ttft"].record_ns(1_000_000)
    hl.cut(ORIGIN + S)
    assert (tmp_path / "histograms" / "p.ttft.hlog").exists()
    ph.sets["ttft"].record_ns(1_000_000)
    hl.cut(ORIGIN + 2 * S)
    assert [e.errno for e in errors] == [errno.ENOSPC]
    assert hl.failed is errors[0]
    # A log missing intervals would not add up to the phase: none is left.
    assert os.listdir(tmp_path / "histograms") == []
    ph.sets["ttft"].record_ns(1_000_000)
    assert hl.close(ORIGIN + 3 * S) == {}
    assert len(errors) == 1 and len(opened) == 1


def test_a_symlink_at_the_log_name_is_replaced_not_followed(tmp_path):
    (tmp_path / "histograms").mkdir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    (tmp_path / "histograms" / "p.ttft.hlog").symlink_to(victim)
    ph = PhaseHistograms()
    hl = logs(tmp_path, ph)
    ph.sets["ttft"].record_ns(1_000_000)
    hl.close(ORIGIN + S)
    assert victim.read_text() == "keep me\n"
    log = tmp_path / "histograms" / "p.ttft.hlog"
    assert not log.is_symlink() and read_hlog(log).get_count_at_value(1000) == 1


def test_old_single_interval_log_still_reads(tmp_path):
    # Written by kvreplay before intervals were appended while a phase ran (one interval per phase):
    # ttft 1 ms x3, 2.5 ms x2, 40 ms x1 over 1.25 .. 3.5 s.
    h = read_hlog(DATA / "old.ttft.hlog")
    assert h.get_total_count() == 6
    assert [h.get_count_at_value(v) for v in (1000, 2500, 40000)] == [3, 2, 1]
    assert intervals(DATA / "old.ttft.hlog")[0][:3] == ("1.250000", "2.250000", "40.000000")


def test_torn_last_line_of_a_killed_run_is_left_out_and_a_bad_middle_line_is_named(tmp_path):
    ph = PhaseHistograms()
    hl = logs(tmp_path, ph)
    ph.sets["ttft"].record_ns(1_000_000)
    hl.cut(ORIGIN + S)
    ph.sets["ttft"].record_ns(2_000_000)
    hl.close(ORIGIN + 2 * S)
    log = tmp_path / "histograms" / "p.ttft.hlog"
    whole = log.read_text()
    last = whole.splitlines()[-1]
    log.write_text(whole + last[: len(last) // 2])  # a third interval cut mid-write
    h = read_hlog(log)
    assert (h.get_total_count(), h.get_count_at_value(1000), h.get_count_at_value(2000)) == (2, 1, 1)
    lines = whole.splitlines()
    lines[3] = lines[3][:-8] + "AAAAAAAA"  # interval 1's payload damaged
    log.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"p\.ttft\.hlog:4: interval histogram cannot be decoded"):
        read_hlog(log)
