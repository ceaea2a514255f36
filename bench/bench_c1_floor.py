"""C1 TTFT against the host's loopback round trip, measured in the same run (issue 43 item 2).

Each pair, alternating which goes first: ``bench_loopback_rtt.round_trips_us`` (a 1-byte
round trip between two processes pinned to CPU 0 and CPU 1, blocking sockets) and one
``bench_client`` kvreplay child at C1 against ``bench/_fastserver.py`` (per-event server on
CPU 1, client on CPU 0; the head, role event and first token leave in one write from the
server's read callback). Printed per pair: the round trip's p50, kvreplay's TTFT p50 (the
run's summary, ``ttft_ms.p50``) and their difference; then the medians over the pairs and
the load average. The target: TTFT p50 ≤ round trip p50 + 25 µs, on a quiet machine (load < 1).

    PYTHONPATH=src .venv/bin/python bench/bench_c1_floor.py --pairs 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_client  # noqa: E402 - the benchmark's own helpers (server, child runs, workload)
from bench_loopback_rtt import round_trips_us  # noqa: E402


def main() -> int:
    """Run the pairs and print the figures; exit 0."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--requests", type=int, default=1500, help="C1 requests per kvreplay run (after 100 unmeasured)")
    ap.add_argument("--trips", type=int, default=5000, help="round trips per loopback measurement")
    ap.add_argument("--tokens", type=int, default=128)
    a = ap.parse_args()
    load0 = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory(prefix="kvr-c1-floor-") as tmp:
        t = Path(tmp)
        wl = t / "w.jsonl"
        bench_client.make_workload(wl, 500, max_tokens=a.tokens)
        srv, port = bench_client._start_server(1, a.tokens, 1)
        try:
            for i in range(a.pairs):
                def rtt() -> float:
                    xs = round_trips_us(a.trips)
                    return xs[len(xs) // 2]

                def ttft() -> float:
                    r = bench_client._run_child("kvreplay", port, 1, a.requests, 100, wl, t, 0)
                    return float(r["ttft_p50_us"])

                if i % 2 == 0:
                    r_us, k_us = rtt(), ttft()
                else:
                    k_us, r_us = ttft(), rtt()
                rows.append((r_us, k_us))
                print(f"pair {i}: loopback RTT p50 {r_us:.1f} us  kvreplay C1 TTFT p50 {k_us:.1f} us  "
                      f"difference {k_us - r_us:+.1f} us", flush=True)
        finally:
            bench_client._stop_server(srv)
    load1 = os.getloadavg()
    r_med = statistics.median(r for r, _ in rows)
    k_med = statistics.median(k for _, k in rows)
    d_med = statistics.median(k - r for r, k in rows)
    print(f"medians over {len(rows)} pairs: RTT {r_med:.1f} us, TTFT {k_med:.1f} us, difference {d_med:+.1f} us "
          f"(target <= +25); load average {load0[0]:.2f} -> {load1[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
