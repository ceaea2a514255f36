"""Counter reads on real vLLM at C1: wall clock with reads vs without, counter-log bytes per request (issue 31).

Starts vLLM's CPU build with the tiny generated model (``kvreplay.testing``:
``make_tiny_hf``, ``start_vllm``; ``scripts/setup_real_servers.sh vllm`` once), then
replays the bundled workload scaled down (``scale_down``: 52 bodies, 8 output
tokens) at C1, ``prime:forward:c1`` and ``replay:reverse:c1``, alternately:

- ``none``: ``--backend none`` (no counter reads);
- ``vllm``: ``--backend vllm`` (identity pinned, counters read around every request at C1).

Printed per pair: the wall clock of each run (s, the whole ``kvreplay run``
process), their ratio (target <= 1.2), and for the ``vllm`` runs the size of
``counters.jsonl`` per request (target <= 2 KB) with ``phases[].counter_reads``.
The medians over the pairs are the figures; the load average is printed beside
them (a shared machine slows both ways alike, the ratio is what counts).

    .venv/bin/python bench/bench_real_vllm_counters.py --pairs 3     # ~3 min with the server's start
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kvreplay.testing import make_tiny_hf, scale_down, start_vllm

ROOT = Path(__file__).resolve().parents[1]


def one_run(workload: Path, url: str, backend: str, out: Path) -> float:
    """Seconds of wall clock of one ``kvreplay run`` process (prime forward, replay reverse, C1)."""
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-m", "kvreplay", "run", str(workload), "--target", url, "--backend", backend,
                    "--phase", "prime:forward:c1", "--phase", "replay:reverse:c1", "--out", str(out), "--quiet"],
                   check=True, timeout=600, stdout=subprocess.DEVNULL)
    return time.monotonic() - t0


def main() -> int:
    """Run the pairs and print the figures; exit 0."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--bodies", type=int, default=52)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kvr-vllm-counters-") as tmp:
        t = Path(tmp)
        model = make_tiny_hf(t / "tiny-hf")
        wl = t / "wl"
        scale_down(ROOT / "fixtures" / "workloads" / "mtbench-52", wl, n_bodies=args.bodies)
        rows = []
        with start_vllm(model, log_path=t / "vllm.log") as srv:
            one_run(wl, srv.url, "none", t / "warm")  # warm the server's first-request paths
            for i in range(args.pairs):
                order = ("none", "vllm") if i % 2 == 0 else ("vllm", "none")
                got = {b: one_run(wl, srv.url, b, t / f"{b}-{i}") for b in order}
                run = t / f"vllm-{i}"
                n_req = sum(1 for _ in (run / "records.jsonl").open())
                log_bytes = (run / "counters.jsonl").stat().st_size
                summary = json.loads((run / "summary.json").read_text())
                reads = [p.get("counter_reads") for p in summary["phases"]]
                rows.append((got["none"], got["vllm"], log_bytes / max(1, n_req)))
                print(f"pair {i}: none {got['none']:.2f} s  vllm {got['vllm']:.2f} s  ratio "
                      f"{got['vllm'] / got['none']:.3f}  counters.jsonl {log_bytes} B / {n_req} requests = "
                      f"{log_bytes / max(1, n_req):.0f} B/request  counter_reads {reads}")
    load = os.getloadavg()
    ratio = statistics.median(v / n for n, v, _ in rows)
    per_req = statistics.median(b for _, _, b in rows)
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"median wall-clock ratio with/without counter reads: {ratio:.3f} (target <= 1.2)")
    print(f"median counters.jsonl per request: {per_req:.0f} B (target <= 2048)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
