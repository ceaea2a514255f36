"""Think-time accuracy of the conversation runner: p50 of actual - planned delay between turns.

Builds a conversation workload (``--sessions`` sessions of ``--turns`` turns, each turn
after ``--think`` s), replays it at ``--concurrency`` against the embedded simulator
(``--target sim``, time scale 0: the server answers at once) and reads the records'
``think_time_actual_s`` - ``think_time_planned_s`` of every turn after the first.
Target: p50 <= 1 ms. The load average is printed beside it (a busy machine delays
timers). Everything stays on 127.0.0.1.

    PYTHONPATH=src python bench/bench_think_time.py [--sessions 8 --turns 6 --think 0.05 --concurrency 4]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

from kvreplay.cli import main
from kvreplay.workload.sessions import Turn, write_sessions


def workload(folder: Path, sessions: int, turns: int, think: float) -> Path:
    folder.mkdir(parents=True)
    side, i = [], 0
    for s in range(sessions):
        msgs: list[dict] = [{"role": "system", "content": f"session {s}"}]
        for k in range(turns):
            msgs = [*msgs, {"role": "user", "content": f"question {k}"}]
            body = {"model": "m", "messages": msgs, "max_tokens": 4, "stream": True,
                    "stream_options": {"include_usage": True}}
            (folder / f"{i:05d}.json").write_text(json.dumps(body))
            side.append(Turn(i, f"s{s}", k, think if k else 0.0))
            msgs = [*msgs, {"role": "assistant", "content": f"answer {k}"}]
            i += 1
    write_sessions(folder, side)
    return folder


def run(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        wl = workload(Path(tmp) / "wl", args.sessions, args.turns, args.think)
        out = Path(tmp) / "out"
        rc = main(["run", str(wl), "--target", "sim", "--sim-time-scale", "0", "--out", str(out), "--quiet",
                   "--report", "none", "--phase", f"conv:forward:c{args.concurrency}"])
        if rc != 0:
            raise SystemExit(f"run failed with exit code {rc}")
        recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    lag_ms = [(r["think_time_actual_s"] - r["think_time_planned_s"]) * 1e3 for r in recs
              if r.get("sent") and r.get("think_time_actual_s") is not None]
    lag_ms.sort()
    return {"turns_measured": len(lag_ms), "p50_ms": statistics.median(lag_ms),
            "p90_ms": lag_ms[int(0.9 * (len(lag_ms) - 1))], "max_ms": lag_ms[-1], "min_ms": lag_ms[0],
            "loadavg": os.getloadavg(), "cpus": os.cpu_count()}


def main_() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sessions", type=int, default=8)
    p.add_argument("--turns", type=int, default=6)
    p.add_argument("--think", type=float, default=0.05, help="think time per turn after the first (s)")
    p.add_argument("--concurrency", type=int, default=4)
    args = p.parse_args()
    r = run(args)
    la = ", ".join(f"{x:.2f}" for x in r["loadavg"])
    print(f"think time: actual - planned over {r['turns_measured']} turns: p50 {r['p50_ms']:.3f} ms, "
          f"p90 {r['p90_ms']:.3f} ms, max {r['max_ms']:.3f} ms, min {r['min_ms']:.3f} ms "
          f"(target p50 <= 1 ms: {'met' if r['p50_ms'] <= 1.0 else 'NOT met'})")
    print(f"load average {la} on {r['cpus']} CPUs")
    return 0


if __name__ == "__main__":
    sys.exit(main_())
