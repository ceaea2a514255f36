"""Feed throughput of the SSE accountant twins on the corpus streams (issue 3).

Target: the native twin at least 5x the pure twin (MB/s).

    .venv/bin/python -m pytest bench/bench_sse.py --benchmark-only --benchmark-columns=median,ops
    .venv/bin/python bench/bench_sse.py          # quick MB/s and events/s table, no pytest

``extra_info`` carries ``bytes`` and ``events`` per round plus ``mb_per_s`` and
``events_per_s`` computed from the median.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import BENCH_CAPTURES, load_capture, split_reads  # noqa: E402

IMPLS = ["native", "pure"]
READS = ["whole", "event", "4096"]


def accountant(name: str):
    mod = "kvreplay.accounting._sse_py" if name == "pure" else "kvreplay.accounting._sse_c"
    return importlib.import_module(mod).SSEAccountant


@pytest.fixture(params=IMPLS)
def impl(request):
    if request.param == "native" and os.environ.get("KVREPLAY_NO_EXTENSIONS") == "1":
        pytest.skip("native disabled")
    return accountant(request.param)


def feed_all(cls, chunks: list[bytes]) -> int:
    acc = cls()
    feed = acc.feed
    t = 0
    for c in chunks:
        feed(c, t)
        t += 1000
    return acc.close().events


@pytest.mark.benchmark(group="sse-feed")
@pytest.mark.parametrize("reads", READS)
def test_feed(benchmark, impl, capture_bytes, reads):
    chunks = split_reads(capture_bytes, reads)
    events = feed_all(impl, chunks)
    benchmark.extra_info["bytes"] = len(capture_bytes)
    benchmark.extra_info["events"] = events
    benchmark.pedantic(feed_all, args=(impl, chunks), rounds=50, warmup_rounds=5)
    median = benchmark.stats.stats.median
    benchmark.extra_info["mb_per_s"] = round(len(capture_bytes) / median / 1e6, 1)
    benchmark.extra_info["events_per_s"] = round(events / median)


def _best(cls, chunks, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        feed_all(cls, chunks)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    """Print MB/s and events/s for both twins (best of 30 rounds) and the ratio."""
    print(f"{'capture':<12} {'reads':<6} {'pure MB/s':>10} {'native MB/s':>12} {'ratio':>6} {'native ev/s':>12}")
    for name in BENCH_CAPTURES:
        data = load_capture(name)
        for reads in READS:
            chunks = split_reads(data, reads)
            events = feed_all(accountant("pure"), chunks)
            tp = _best(accountant("pure"), chunks, 30)
            tn = _best(accountant("native"), chunks, 30)
            print(f"{name.split('_')[0]:<12} {reads:<6} {len(data) / tp / 1e6:>10.1f} {len(data) / tn / 1e6:>12.1f} "
                  f"{tp / tn:>6.1f} {events / tn:>12,.0f}")


if __name__ == "__main__":
    main()
