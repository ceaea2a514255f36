"""Fleet demo: round-robin loses prefix reuse that prefix affinity keeps (docs/fleets.md).

Run from a checkout (well under a minute, no GPU, nothing but 127.0.0.1)::

    python scripts/fleet_demo.py [--out DIR] [--time-scale 0.01]

It writes a small workload (three tenants, each with its own long system prompt,
eight questions each, the tenants taking turns), then for each router policy
starts the embedded fleet (two simulated radix replicas whose caches hold two
tenants' prefixes but not three, behind the router), replays the workload at
concurrency 1 through the router, reads each replica's own counters, and prints
them beside the offline routing loss of the assignment the router made (equal:
the simulator is its own ground truth), the merged-cache bound and the greedy
prefix-affinity figure. Round-robin sends every tenant to both replicas, so each
replica cycles through three prefixes it cannot hold; prefix affinity keeps each
tenant on one replica.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from kvreplay.offline.routing import routing_loss
from kvreplay.offline.sources import model_requests
from kvreplay.sim.config import SimConfig
from kvreplay.sim.fleet import start_fleet
from kvreplay.sim.routing import REPLICA_HEADER
from kvreplay.workload import load_workload

TENANTS = 3
QUESTIONS = 8
REPLICAS = 2
BLOCKS_PER_REPLICA = 280  # two tenants' prefixes (about 125 blocks each) and their tails, not three
WORDS = ["cache", "block", "token", "prefix", "host", "row", "page", "slot", "river", "stone", "cloud", "light",
         "north", "south", "quiet", "bright", "alpha", "beta", "gamma", "delta"]


def write_workload(folder: Path) -> Path:
    """Write the demo bodies (``000.json`` ...) into ``folder``; returns it."""
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(TENANTS * QUESTIONS):
        tenant, q = i % TENANTS, i // TENANTS
        manual = " ".join(f"{WORDS[(tenant * 7 + k * 3) % len(WORDS)]}{k % 10}" for k in range(1000))
        body = {
            "model": "demo",
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": 8,
            "messages": [
                {"role": "system", "content": f"You support tenant {tenant}. Its manual:\n{manual}"},
                {"role": "user", "content": f"Question {q} from tenant {tenant}: what does section {q} say?"},
            ],
        }
        (folder / f"{i:03d}.json").write_text(json.dumps(body))
    return folder


async def replay(policy: str, workload, cfg: SimConfig) -> dict:
    """Replay the workload at C1 through a fresh fleet under ``policy``; the replicas' own counters."""
    async with await start_fleet(REPLICAS, policy, config=cfg) as fleet, aiohttp.ClientSession() as s:
        picks, ttft_ms = [], []
        for body in workload.bodies:
            t0 = time.perf_counter()
            async with s.post(fleet.router_url + "/v1/chat/completions", data=body.raw,
                              headers={"Content-Type": "application/json"}) as r:
                r.raise_for_status()
                first = True
                async for chunk in r.content.iter_any():
                    if first and b'"content":"' in chunk.replace(b'"content":""', b""):
                        ttft_ms.append((time.perf_counter() - t0) * 1e3)
                        first = False
                picks.append(fleet.replica_urls.index(r.headers[REPLICA_HEADER]))
        counters = []
        for url in fleet.replica_urls:
            async with s.get(url + "/metrics") as r:
                text = await r.text()
            m = re.search(r"^vllm:prompt_tokens_cached_total(?:\{[^}]*\})? (\S+)$", text, re.M)
            counters.append(int(float(m.group(1))) if m else 0)
        return {"picks": picks, "counters": counters, "ttft_ms": ttft_ms, "urls": fleet.replica_urls,
                "router": fleet.router_url}


def main(argv: list[str] | None = None) -> int:
    """Run the demo; returns 0, or 1 when a figure is not exact against the replicas' counters."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", help="keep the workload in this folder (default: a temporary one)")
    ap.add_argument("--time-scale", type=float, default=0.01, help="simulated delays x this (default 0.01)")
    args = ap.parse_args(argv)
    folder = write_workload(Path(args.out or tempfile.mkdtemp(prefix="kvreplay-fleet-")) / "fleet-demo")
    workload = load_workload(folder)
    cfg = SimConfig(cache="radix", device_blocks=BLOCKS_PER_REPLICA, time_scale=args.time_scale)
    reqs = model_requests(workload)
    print(f"workload {folder}: {len(workload)} bodies, {TENANTS} tenants taking turns;"
          f" {REPLICAS} radix replicas of {BLOCKS_PER_REPLICA} blocks each")
    ok = True
    for policy in ("round_robin", "prefix_affinity"):
        got = asyncio.run(replay(policy, workload, cfg))
        loss = routing_loss(reqs, [cfg] * REPLICAS, observed=got["picks"], observed_label=f"the {policy} router",
                            measured_cached_tokens=sum(got["counters"]))
        obs = loss["policies"]["observed"]
        exact = obs["per_replica_cached_tokens"] == got["counters"]
        ok &= exact
        print(f"\n--router {policy}: replicas' own counters (cached tokens) {got['counters']},"
              f" sum {sum(got['counters']):,}; offline, same assignment: {obs['per_replica_cached_tokens']}"
              f" ({'exact' if exact else 'NOT EXACT'})")
        print(f"  hit rate {100 * obs['hit_rate']:.1f}% of {obs['prompt_tokens']:,} prompt tokens;"
              f" median TTFT {statistics.median(got['ttft_ms']):.1f} ms (time scale {args.time_scale})")
        print(f"  {loss['sentence']}")
    print("\nthe same offline, without a server:\n"
          f"  kvreplay simulate {folder} --replicas {REPLICAS} --router round_robin --model radix"
          f" --capacities {BLOCKS_PER_REPLICA}\n"
          f"and live, with the fleet target of issue 33:\n"
          f"  kvreplay serve-sim --replicas {REPLICAS} --router round_robin --cache radix"
          f" --device-blocks {BLOCKS_PER_REPLICA}   # prints the run flags --target ROUTER --replica URL ...")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
