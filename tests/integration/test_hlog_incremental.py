"""Histogram logs appended during a phase (issue 21 item 1): a run's intervals, and a kill -9 mid-phase."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
from hdrh.histogram import HdrHistogram
from mockserver import MockServer

import kvreplay.runner._runner as runner_mod
from kvreplay import load_run
from kvreplay.metrics.histograms import LatencySet
from kvreplay.metrics.hlog import IntervalLogs
from kvreplay.plan import build_plan, parse_phase
from kvreplay.rundir import read_hlog
from kvreplay.runner import RunOptions, execute_plan
from kvreplay.runner.observer import NullObserver
from kvreplay.workload import load_workload

TESTS = Path(__file__).resolve().parent.parent


def interval_lines(path: Path) -> list[tuple[float, float, HdrHistogram]]:
    out = []
    for line in path.read_text().splitlines():
        if line and not line.startswith(("#", '"')):
            start, length, _, enc = line.split(",")
            out.append((float(start), float(length), HdrHistogram.decode(enc)))
    return out


def counts(h: HdrHistogram) -> np.ndarray:
    return np.ctypeslib.as_array(h.counts)[: h.counts_len].astype(np.int64)


def hist_of(values_ns) -> HdrHistogram:
    ls = LatencySet()
    for v in values_ns:
        ls.record_ns(v)
    return ls.hist


def test_run_phase_intervals_are_the_records_between_cuts(small_workload, tmp_path, monkeypatch):
    # The timer is set to an hour; the test cuts after the 2nd and the 5th record itself.
    made: list[IntervalLogs] = []

    class Spy(IntervalLogs):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            made.append(self)

    monkeypatch.setattr(runner_mod, "IntervalLogs", Spy)

    class CutAfter(NullObserver):
        n = 0

        def on_record(self, rec):
            self.n += 1
            if self.n in (2, 5):
                made[-1].cut()

    out = tmp_path / "o"

    async def go():
        srv = MockServer(delay_s=0.005, tokens=4, itl_s=0.002)
        await srv.start()
        try:
            wl = load_workload(small_workload)
            plan = build_plan(wl, [parse_phase("a:forward:c1")])
            return await execute_plan(plan, wl, RunOptions(target_url=srv.base_url, out_dir=out, quiet=True,
                                                           hlog_interval_s=3600.0), observer=CutAfter())
        finally:
            await srv.stop()

    summary = asyncio.run(go())
    recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    assert len(recs) == 6 and all(r["status"] == "ok" for r in recs)
    ph = summary["phases"][0]
    assert ph["histograms"] == {m: f"a.{m}.hlog" for m in ("ttft", "itl", "tpot", "e2e")}
    blocks = [recs[0:2], recs[2:5], recs[5:6]]
    for m in ("ttft", "e2e", "tpot"):
        iv = interval_lines(out / "histograms" / f"a.{m}.hlog")
        assert [h.get_total_count() for *_, h in iv] == [2, 3, 1]
        for (_, _, h), block in zip(iv, blocks, strict=True):
            assert np.array_equal(counts(h), counts(hist_of(r[f"{m}_ns"] for r in block)))
        assert np.array_equal(counts(read_hlog(out / "histograms" / f"a.{m}.hlog")),
                              counts(hist_of(r[f"{m}_ns"] for r in recs)))
        assert ph[f"{m}_ms"]["n"] == 6
        # Contiguous intervals covering the phase: start .. start + wall_s.
        for (s0, n0, _), (s1, _, _) in zip(iv, iv[1:], strict=False):
            assert abs(s0 + n0 - s1) < 2e-6
        assert abs(sum(n for _, n, _ in iv) - ph["wall_s"]) < 4e-6
    itl = interval_lines(out / "histograms" / "a.itl.hlog")
    assert [h.get_total_count() for *_, h in itl] == [sum(r["itl"]["n"] for r in b) for b in blocks] == [6, 9, 3]
    assert ph["itl_ms"]["n"] == 18
    lag = ph["client"]["loop_lag_log"]
    assert lag == "a.loop_lag.hlog"
    assert read_hlog(out / "histograms" / lag).get_total_count() == ph["client"]["loop_lag_samples"]


KILLED_RUN = textwrap.dedent("""
    import asyncio, sys
    sys.path.insert(0, sys.argv[3])
    from pathlib import Path
    from mockserver import MockServer
    from kvreplay.plan import build_plan, parse_phase
    from kvreplay.runner import RunOptions, execute_plan
    from kvreplay.workload import load_workload

    async def go():
        srv = MockServer(delay_s=0.03, tokens=3, itl_s=0.002)
        await srv.start()
        wl = load_workload(sys.argv[1])
        plan = build_plan(wl, [parse_phase("a:forward:c1:x40")])
        await execute_plan(plan, wl, RunOptions(target_url=srv.base_url, out_dir=Path(sys.argv[2]), quiet=True,
                                                hlog_interval_s=0.15))

    asyncio.run(go())
""")


def test_kill_9_mid_phase_leaves_logs_of_whole_intervals_and_the_report_loads(small_workload, tmp_path):
    out = tmp_path / "run"
    script = tmp_path / "killed_run.py"
    script.write_text(KILLED_RUN)
    err = tmp_path / "stderr.txt"
    with open(err, "wb") as ef:
        proc = subprocess.Popen([sys.executable, str(script), str(small_workload), str(out), str(TESTS)],
                                stdout=subprocess.DEVNULL, stderr=ef)
    e2e_log = out / "histograms" / "a.e2e.hlog"
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if e2e_log.exists() and len(interval_lines(e2e_log)) >= 3:
                break
            assert proc.poll() is None, err.read_text(errors="replace")[-2000:]
            time.sleep(0.02)
        else:
            raise AssertionError("no third interval in time")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    raw = (out / "records.jsonl").read_bytes()
    recs = [json.loads(x) for x in raw.splitlines()]
    assert 0 < len(recs) < 240 and all(r["status"] == "ok" for r in recs)
    assert not (out / "summary.json").exists()
    iv = interval_lines(e2e_log)
    assert len(iv) >= 3
    # Each interval holds the next block of records (C1: written and counted in order, no await
    # between the two): its cumulative histogram is exactly that of a prefix of records.jsonl.
    cum = np.zeros_like(counts(iv[0][2]))
    taken = 0
    for _, _, h in iv:
        cum = cum + counts(h)
        taken += h.get_total_count()
        assert taken <= len(recs)
        assert np.array_equal(cum, counts(hist_of(r["e2e_ns"] for r in recs[:taken])))
    assert np.array_equal(counts(read_hlog(e2e_log)), cum)
    # The report of the killed directory loads: summary rebuilt from the records, ITL from the
    # intervals written before the kill (exactly the gaps of the records they cover).
    run = load_run(out)
    assert run.summary["rebuilt_from_records"] is True
    phase = run.summary["phases"][0]
    assert phase["e2e_ms"]["n"] == len(recs)
    itl_taken = read_hlog(out / "histograms" / "a.itl.hlog").get_total_count()
    assert phase["itl_ms"]["n"] == itl_taken
    assert itl_taken in {sum(r["itl"]["n"] for r in recs[:k]) for k in range(len(recs) + 1)}
    assert run.histograms["a"]["e2e"].total == taken
    rc = subprocess.run([sys.executable, "-m", "kvreplay", "report", str(out)], capture_output=True, timeout=120)
    assert rc.returncode == 0, rc.stderr.decode(errors="replace")[-2000:]
