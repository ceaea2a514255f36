"""What appending histogram intervals during a phase costs the runner's event loop (issue 21 item 1).

Runs one closed-loop phase against ``bench/_fastserver.py`` (its own process) and
times every ``IntervalLogs._cut_metric`` call of the run (the timer's per-metric
cuts and the phase end's), then prints the number of cuts, their total, median,
p99 and maximum (ms) beside the phase's wall time and the client's CPU seconds.
The ITL gaps ``record_many_ns`` buffered are recorded first and timed apart: the
cut only moves that work (the buffer is recorded every ``FLUSH_AT`` values anyway)::

    python bench/bench_hlog_cuts.py --requests 20000 --concurrency 64 --tokens 128

Nothing is cut per request: the cost is the cuts' sum over the phase.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_client import _start_server, make_workload  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """Run the phase and print the cut figures; returns 0."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--bodies", type=int, default=200)
    a = ap.parse_args(argv)

    import kvreplay.metrics.hlog as hlog
    from kvreplay.plan import build_plan, parse_phase
    from kvreplay.runner import RunOptions, execute_plan
    from kvreplay.workload import load_workload

    took: list[float] = []
    cpu: list[float] = []
    flushed: list[float] = []
    real = hlog.IntervalLogs._cut_metric

    def timed(self: hlog.IntervalLogs, m: hlog._Metric, end_s: float) -> bool:
        # Recording the ITL gaps record_many_ns buffered: work moved to the cut, not added
        # (the buffer is recorded every FLUSH_AT values anyway); timed apart.
        t = time.perf_counter()
        m.set.flush()
        t1, c1 = time.perf_counter(), time.thread_time()
        try:
            return real(self, m, end_s)
        finally:
            took.append(time.perf_counter() - t1)
            cpu.append(time.thread_time() - c1)
            flushed.append(t1 - t)

    hlog.IntervalLogs._cut_metric = timed  # type: ignore[method-assign]
    srv, port = _start_server(None, a.tokens)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            wl_path = Path(tmp) / "workload.jsonl"
            make_workload(wl_path, a.bodies, max_tokens=a.tokens)
            wl = load_workload(wl_path)
            reps = max(1, a.requests // a.bodies)
            plan = build_plan(wl, [parse_phase(f"load:forward:c{a.concurrency}:x{reps}")])
            opts = RunOptions(target_url=f"http://127.0.0.1:{port}", out_dir=Path(tmp) / "run", quiet=True)
            summary = asyncio.run(execute_plan(plan, wl, opts))
    finally:
        srv.terminate()
        srv.wait(10)
    ph = summary["phases"][0]
    took.sort()
    ms = [t * 1e3 for t in took]
    print(f"requests {ph['ok']}  wall {ph['wall_s']:.2f} s  client CPU {ph['client']['cpu_s']:.2f} s  "
          f"ITL samples {ph['itl_ms']['n']}")
    print(f"cuts {len(ms)}  total {sum(ms):.1f} ms ({sum(ms) / 1e3 / ph['wall_s']:.2%} of the wall time)  "
          f"median {ms[len(ms) // 2]:.3f} ms  p99 {ms[int(len(ms) * 0.99)]:.3f} ms  max {ms[-1]:.3f} ms")
    cpu.sort()
    print(f"their thread CPU time (leaves out preemption): total {sum(cpu) * 1e3:.1f} ms  "
          f"p99 {cpu[int(len(cpu) * 0.99)] * 1e3:.3f} ms  max {cpu[-1] * 1e3:.3f} ms")
    print(f"buffered ITL gaps recorded at the cuts (moved, not added): {sum(flushed) * 1e3:.1f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
