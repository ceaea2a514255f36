"""What one position claim costs with ``--ray``: the coordinator round trip between a slot's requests.

Starts a local Ray instance (``ray.init``; needs ``pip install 'kvreplay[ray]'``), the
run's coordinator actor (``kvreplay.runner.rayrun.Coordinator``) and N actors that each
claim positions of one shared phase as fast as they can, then prints the claim latency
per actor (median and p99 of one ``await coord.claim.remote()``, ms) and checks that
every position was handed out once. Also prints how long Ray took to start.

    .venv/bin/python bench/bench_ray_claims.py [--actors 2] [--claims 2000]
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--actors", type=int, default=2)
    ap.add_argument("--claims", type=int, default=2000, help="positions in the phase")
    args = ap.parse_args()

    import ray

    from kvreplay.runner.rayrun import Coordinator

    t0 = time.perf_counter()
    ray.init(num_cpus=max(2, args.actors), include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    started_s = time.perf_counter() - t0

    @ray.remote(num_cpus=0)
    class Claimer:
        async def go(self, coord):
            got, lat = [], []
            while True:
                t = time.perf_counter_ns()
                a, b, _ = await coord.claim.remote(0)
                lat.append(time.perf_counter_ns() - t)
                if a >= b:
                    return got, lat
                got.extend(range(a, b))

    try:
        coord = ray.remote(num_cpus=0)(Coordinator).remote([args.claims], args.actors)
        claimers = [Claimer.remote() for _ in range(args.actors)]
        results = ray.get([c.go.remote(coord) for c in claimers])
    finally:
        ray.shutdown()
    positions = sorted(p for got, _ in results for p in got)
    assert positions == list(range(args.claims)), "a position was lost or handed out twice"
    print(f"ray.init: {started_s:.2f} s; {args.claims} positions over {args.actors} actors, each handed out once")
    for i, (got, lat) in enumerate(results):
        lat.sort()
        p50, p99 = lat[len(lat) // 2] / 1e6, lat[min(len(lat) - 1, int(len(lat) * 0.99))] / 1e6
        print(f"actor {i}: {len(got)} claims, claim latency p50 {p50:.2f} ms, p99 {p99:.2f} ms")


if __name__ == "__main__":
    main()
