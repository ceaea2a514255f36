"""counters.jsonl bytes per request on real vLLM, at 12 requests a phase (issue 42 item 8).

Starts vLLM's CPU build with the tiny generated model (``kvreplay.testing``:
``make_tiny_hf``, ``start_vllm``; ``scripts/setup_real_servers.sh vllm`` once) and runs
``kvreplay run --backend vllm`` (counters read before and after every request at C1)
in three shapes, each once per tree given:

- ``one-phase``: the bundled workload cut to 12 bodies (``scale_down``, as the
  real-server tests' ``tiny_workload``), ``--phase prime:forward:c1``;
- ``two-phases``: the same 12 bodies, ``prime:forward:c1`` + ``replay:reverse:c1`` (24 requests);
- ``conversation``: the bundled ``conversations`` workload (4 sessions of 3 turns, 12
  requests, each turn with the previous answer), one phase at C1.

Printed per run: requests, counters.jsonl bytes, ``counters-raw.jsonl.gz`` bytes (0 when the
tree does not write it), and both per request; the target is <= 2,048 B a request for
counters.jsonl, and the side file's bytes are printed beside it so that nothing is hidden.

    .venv/bin/python bench/bench_counter_log_size.py                       # this tree only
    .venv/bin/python bench/bench_counter_log_size.py --src /tmp/main-ref/src # another tree first
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from kvreplay.testing import make_tiny_hf, scale_down, start_vllm

ROOT = Path(__file__).resolve().parents[1]
SHAPES = {
    "one-phase": ("tiny", ["--phase", "prime:forward:c1"]),
    "two-phases": ("tiny", ["--phase", "prime:forward:c1", "--phase", "replay:reverse:c1"]),
    "conversation": ("conv", ["--phase", "turns:forward:c1"]),
}


def one_run(src: Path, workload: Path, url: str, phases: list[str], out: Path) -> tuple[int, int, int]:
    """``(requests, counters.jsonl bytes, counters-raw.jsonl.gz bytes)`` of one ``kvreplay run`` of ``src``."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    subprocess.run([sys.executable, "-m", "kvreplay", "run", str(workload), "--target", url, "--backend", "vllm",
                    *phases, "--out", str(out), "--quiet"], check=True, timeout=600, env=env,
                   stdout=subprocess.DEVNULL)
    n_req = sum(1 for _ in (out / "records.jsonl").open())
    side = out / "counters-raw.jsonl.gz"
    return n_req, (out / "counters.jsonl").stat().st_size, side.stat().st_size if side.exists() else 0


def main() -> int:
    """Run every shape against each tree and print the figures; exit 0."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", action="append", type=Path, default=[],
                    help="another tree's src/ to measure first (repeatable); this tree is always measured")
    args = ap.parse_args()
    trees = [*args.src, ROOT / "src"]
    with tempfile.TemporaryDirectory(prefix="kvr-counter-log-") as tmp:
        t = Path(tmp)
        model = make_tiny_hf(t / "tiny-hf")
        wl = {"tiny": t / "tiny", "conv": ROOT / "fixtures" / "workloads" / "conversations"}
        scale_down(ROOT / "fixtures" / "workloads" / "mtbench-52", wl["tiny"], n_bodies=12, system_chars=2400,
                   message_chars=400, max_tokens=8)
        with start_vllm(model, log_path=t / "vllm.log") as srv:
            one_run(trees[-1], wl["tiny"], srv.url, ["--phase", "warm:forward:c4"], t / "warm")
            print("| tree | shape | requests | counters.jsonl B | per request | counters-raw.jsonl.gz B "
                  "| both per request |")
            print("|---|---|---:|---:|---:|---:|---:|")
            for i, src in enumerate(trees):
                for shape, (w, phases) in SHAPES.items():
                    n, main_b, side_b = one_run(src, wl[w], srv.url, phases, t / f"{i}-{shape}")
                    print(f"| {src} | {shape} | {n} | {main_b:,} | {main_b / n:,.0f} | {side_b:,} | "
                          f"{(main_b + side_b) / n:,.0f} |", flush=True)
    load = os.getloadavg()
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
