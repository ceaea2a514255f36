"""The per-request work issue 43 keeps, timed alone: the body's ``pread``, its SHA-256 check, the record's ``write``.

docs/performance.md ("The read floor") sets these beside the read floor's CPU per one-token
request: an edited body is refused (the SHA-256 of the bytes read just before sending) and
each record is flushed as it completes (one ``write`` a record), so no change can take a
request below floor + these. Bodies are ``bench_client``'s (1k-token chat prompts, ~5.5 KB),
read from a workload file as the runner reads them (``os.pread`` at their offset); the record
is a 600-byte line appended to a file opened ``O_APPEND``. Best of 5 runs of N each.

    PYTHONPATH=src .venv/bin/python bench/bench_kept_work.py            # N = 200,000
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_client import make_workload  # noqa: E402


def best_us(fn: Callable[[int], None], n: int, reps: int = 5) -> float:
    """The best of ``reps`` runs of ``fn(n)``, in µs per call."""
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter_ns()
        fn(n)
        best = min(best, (time.perf_counter_ns() - t0) / n)
    return best / 1e3


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=200_000)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kvreplay-kept-") as td:
        wl = Path(td) / "w.jsonl"
        make_workload(wl, 500, max_tokens=1)
        lines = [ln for ln in wl.read_bytes().split(b"\n") if ln]
        spans, off = [], 0
        for ln in lines:
            spans.append((off, len(ln)))
            off += len(ln) + 1
        fd = os.open(wl, os.O_RDONLY)
        out = os.open(Path(td) / "records.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        record = b'{"r":"' + b"x" * 592 + b'"}\n'

        def pread(n: int) -> None:
            for i in range(n):
                o, k = spans[i % 500]
                os.pread(fd, k, o)

        def sha(n: int) -> None:
            for i in range(n):
                hashlib.sha256(lines[i % 500]).digest()

        def write(n: int) -> None:
            for _ in range(n):
                os.write(out, record)

        def empty(n: int) -> None:
            for _ in range(n):
                pass

        got = {"loop alone": best_us(empty, a.n), "pread of the body": best_us(pread, a.n),
               "SHA-256 of the body": best_us(sha, a.n), "write of the record": best_us(write, a.n)}
        os.close(fd)
        os.close(out)
    print(f"kept per-request work (body {len(lines[0]):,} bytes, record {len(record)} bytes, best of 5 x {a.n:,}; "
          f"load {os.getloadavg()[0]:.2f}):")
    for k, v in got.items():
        print(f"  {k:22s} {v:6.2f} us")
    print(f"  {'kept, all told':22s} {sum(v for k, v in got.items() if k != 'loop alone'):6.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
