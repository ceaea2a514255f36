"""Prefix-chain throughput of the two twins (``kvreplay.workload._chain`` / ``_hash_c``).

    .venv/bin/python -m pytest bench/bench_hash.py --benchmark-only --benchmark-columns=median,ops
    .venv/bin/python bench/bench_hash.py         # quick MB/s table, no pytest

Bodies: the bundled mtbench-52 workload (52 chat bodies, ~13 KB each), one
synthetic ~256 KB chat body of 64 messages (a 64k-token conversation), and one
~256 KB completions prompt (1 KiB blocks).
"""

from __future__ import annotations

import importlib
import json
import os
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MTBENCH = ROOT / "fixtures" / "workloads" / "mtbench-52"
IMPLS = ["native", "pure"]


def twin(name: str):
    return importlib.import_module("kvreplay.workload._chain" if name == "pure" else "kvreplay.workload._hash_c")


def _bodies() -> dict[str, list[bytes]]:
    line = "    1| Shall I compare thee to a summer's day? \\\"quoted\\\" {braces} [brackets]\n"
    msgs = [{"role": "system", "content": "You are a coding assistant.\n" + line * 50}]
    for i in range(63):
        msgs.append({"role": "user" if i % 2 == 0 else "assistant", "content": line * 52})
    big_chat = json.dumps({"model": "m", "messages": msgs, "stream": True}).encode()
    big_prompt = json.dumps({"model": "m", "prompt": line * 3300, "max_tokens": 16}).encode()
    out = {"chat-64k": [big_chat], "completions-256k": [big_prompt]}
    if MTBENCH.is_dir():
        out["mtbench-52"] = [p.read_bytes() for p in sorted(MTBENCH.glob("*.json"))]
    return out


BODIES = _bodies()


@pytest.fixture(params=IMPLS)
def impl(request):
    if request.param == "native" and os.environ.get("KVREPLAY_NO_EXTENSIONS") == "1":
        pytest.skip("native disabled")
    return twin(request.param)


def chain_all(mod, bodies: list[bytes]) -> int:
    n = 0
    for b in bodies:
        n += len(mod.prefix_chain(b).links)
    return n


@pytest.mark.benchmark(group="prefix-chain")
@pytest.mark.parametrize("set_name", list(BODIES))
def test_prefix_chain(benchmark, impl, set_name):
    bodies = BODIES[set_name]
    size = sum(map(len, bodies))
    benchmark.extra_info["bytes"] = size
    benchmark.extra_info["links"] = chain_all(impl, bodies)
    benchmark.pedantic(chain_all, args=(impl, bodies), rounds=30, warmup_rounds=3)
    benchmark.extra_info["mb_per_s"] = round(size / benchmark.stats.stats.median / 1e6, 1)


def main() -> None:
    """Print MB/s for both twins (best of 20 rounds) and the ratio."""
    print(f"{'bodies':<18} {'bytes':>9} {'pure MB/s':>10} {'native MB/s':>12} {'ratio':>6}")
    for name, bodies in BODIES.items():
        size = sum(map(len, bodies))
        best = {}
        for impl in IMPLS:
            mod = twin(impl)
            t = float("inf")
            for _ in range(20):
                t0 = time.perf_counter()
                chain_all(mod, bodies)
                t = min(t, time.perf_counter() - t0)
            best[impl] = t
        print(f"{name:<18} {size:>9,} {size / best['pure'] / 1e6:>10.1f} {size / best['native'] / 1e6:>12.1f} "
              f"{best['pure'] / best['native']:>6.1f}")


if __name__ == "__main__":
    main()
