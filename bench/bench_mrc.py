"""Benchmark: the whole Mooncake conversation trace's miss-ratio curve, every capacity, one pass.

Target (issue 7): under 5 s on the project machine, load included.

    .venv/bin/python bench/bench_mrc.py            # prints load / curve / total seconds
    .venv/bin/pytest bench/bench_mrc.py --benchmark-only
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kvreplay.offline.sources import block_requests_from_trace
from kvreplay.offline.traces import load_block_trace

TRACE = (
    Path(__file__).resolve().parent.parent
    / "fixtures"
    / "traces"
    / "mooncake_fast25_conversation_trace.jsonl"
)


def whole_curve(path=TRACE):
    trace = load_block_trace(path)
    br = block_requests_from_trace(trace)
    curve = br.curve()
    return trace, curve


@pytest.mark.benchmark(group="mrc")
def test_mooncake_conversation_whole_curve(benchmark):
    trace, curve = benchmark.pedantic(whole_curve, rounds=5, warmup_rounds=1)
    benchmark.extra_info["requests"] = len(trace)
    benchmark.extra_info["block_refs"] = int(len(trace.blocks))
    benchmark.extra_info["capacities"] = curve.max_capacity
    assert len(trace) == 12031


def main() -> None:
    runs = []
    for _ in range(5):
        t0 = time.perf_counter()
        trace = load_block_trace(TRACE)
        t1 = time.perf_counter()
        br = block_requests_from_trace(trace)
        curve = br.curve()
        t2 = time.perf_counter()
        runs.append((t1 - t0, t2 - t1, t2 - t0))
    best = min(runs, key=lambda r: r[2])
    worst = max(runs, key=lambda r: r[2])
    print(
        f"{len(trace)} requests, {len(trace.blocks)} block references, "
        f"curve over capacities 0..{curve.max_capacity} blocks"
    )
    print(
        f"best of 5: load {best[0]:.3f} s + curve {best[1]:.3f} s = {best[2]:.3f} s;"
        f" worst {worst[2]:.3f} s"
    )
    print(f"hit ratio (tokens) at max capacity: {curve.hit_tokens[-1] / curve.prompt_tokens:.4f}")


if __name__ == "__main__":
    main()
