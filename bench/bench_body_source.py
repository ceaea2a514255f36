"""Per-request cost of the streamed body source: ``bodies[i]`` and the runner's readahead hint.

Issue 43 item 1. A ``bench_client`` workload (500 chat bodies of ~1k tokens, ~5.5 KB) is
indexed as ``kvreplay run`` indexes it; each request reads its body (``os.pread`` plus the
SHA-256 check against the index) and hints the kernel as the runner does (once per 8
positions for the next 8 bodies; ``--per-request-hint``: one hint per request, the old
way, for an older tree). Prints the best of 5 passes of ``--n`` requests, CPU µs per
request (``time.process_time``).

    PYTHONPATH=src .venv/bin/python bench/bench_body_source.py
    PYTHONPATH=/path/to/old/src .venv/bin/python bench/bench_body_source.py --per-request-hint
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_client import make_workload  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--per-request-hint", action="store_true", help="one readahead per request (older trees)")
    a = ap.parse_args()
    from kvreplay.workload import load_workload

    with tempfile.TemporaryDirectory() as td:
        path = Path(td) / "w.jsonl"
        make_workload(path, 500, max_tokens=128)
        wl = load_workload(path)
        bodies, n = wl.bodies, len(wl.bodies)

        def one_pass() -> float:
            t0 = time.process_time()
            for k in range(a.n):
                bodies[k % n]
                if a.per_request_hint:
                    wl.readahead((k + 8) % n)
                elif not k % 8:
                    wl.readahead([(k + 8 + j) % n for j in range(8)])
            return (time.process_time() - t0) / a.n * 1e6

        best = min(one_pass() for _ in range(5))
    print(f"{best:.2f} us per request (bodies[i] + readahead; best of 5 x {a.n})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
