"""A fleet behind a real router: ``sglang-router`` 0.3.2 in front of two ``kvreplay serve-sim`` replicas.

Each replica is its own process on a free port, fresh for each test; the router
(``kvreplay.testing.start_sglang_router``, installed by
``scripts/setup_real_servers.sh sglang-router``) runs with ``round_robin`` or
``cache_aware``. A C1 prime + reverse replay of the bundled workload's first 12
bodies with ``--replica U1 --replica U2`` must name the replica of every record,
and each replica's deltas (per phase, and summed over the records naming it) must
equal its own counters read directly before and after the run. Under
``round_robin`` the assignment alternates. The router sets no replica header, so
the attribution is the counters' alone.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest
from integration.real.conftest import require

from kvreplay import testing as kt
from kvreplay.backends import make_backend
from kvreplay.cli import main

pytestmark = [pytest.mark.real_server, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[3]
MTBENCH = ROOT / "fixtures" / "workloads" / "mtbench-52"
KEYS = ("lookups", "hits", "misses", "hit_tokens", "stores")


@contextlib.contextmanager
def _fresh_replicas():
    """Two fresh simulator replicas, stopped by their process at the end."""
    procs = []
    try:
        for _ in range(2):
            p = subprocess.Popen([sys.executable, "-m", "kvreplay", "serve-sim", "--port", "0", "--time-scale", "0",
                                  "--output-tokens", "4"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            procs.append(p)
            line = p.stdout.readline()  # type: ignore[union-attr]
            assert "listening on" in line, line
            p.url = line.split("listening on ", 1)[1].split()[0]  # type: ignore[attr-defined]
        yield [p.url for p in procs]  # type: ignore[attr-defined]
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=10)
            p.stdout.close()  # type: ignore[union-attr]


@pytest.fixture
def replicas():
    with _fresh_replicas() as urls:
        yield urls


def _counters(urls: list[str]) -> dict[str, dict[str, float]]:
    async def read() -> dict[str, dict[str, float]]:
        async with aiohttp.ClientSession() as s:
            return {u: dict((await make_backend("halogen", u, s).snapshot()).common) for u in urls}

    return asyncio.run(read())


def _replay(tmp_path: Path, urls: list[str], policy: str) -> tuple[list[dict], dict, dict]:
    require(kt.sglang_router_python(), "sglang-router")
    out = tmp_path / policy
    with kt.start_sglang_router(urls, policy=policy, log_path=tmp_path / f"router-{policy}.log") as router:
        before = _counters(urls)
        rc = main(["run", str(MTBENCH), "--target", router.url, "--replica", urls[0], "--replica", urls[1],
                   "--phase", "prime:forward:c1:first12", "--phase", "replay:reverse:c1:first12",
                   "--out", str(out), "--quiet", "--report", "md"])
        after = _counters(urls)
    assert rc == 0
    own = {u: {k: after[u][k] - before[u][k] for k in KEYS} for u in urls}
    recs = [json.loads(ln) for ln in (out / "records.jsonl").read_text().splitlines()]
    return recs, json.loads((out / "summary.json").read_text()), own


def _check_attribution(recs: list[dict], summary: dict, own: dict, urls: list[str]) -> None:
    assert len(recs) == 24 and all(r["status"] == "ok" for r in recs)
    # every record names its replica, from the counters (sglang-router sets no replica header)
    assert all(r["replica"] in urls and r["replica_source"] == "counters" for r in recs), \
        [(r["position"], r["replica"], r["replica_reason"]) for r in recs]
    for u in urls:
        summed = collections.Counter()
        for r in recs:
            if r["replica"] == u:
                summed.update({k: r["replica_deltas"][u][k] for k in KEYS})
        assert {k: summed[k] for k in KEYS} == own[u]
        per_phase = collections.Counter()
        for ph in summary["phases"]:
            e = next(e for e in ph["replicas"] if e["url"] == u)
            per_phase.update({k: e["counter_delta"][k] for k in KEYS})
        assert {k: per_phase[k] for k in KEYS} == own[u]
        assert own[u]["lookups"] == sum(r["replica"] == u for r in recs)  # one lookup per request it served
    for ph in summary["phases"]:
        assert ph["fleet"]["requests"] == sum(e["requests"] for e in ph["replicas"]) == 12


def test_round_robin_alternates_and_matches_each_replicas_counters(tmp_path, replicas):
    recs, summary, own = _replay(tmp_path, replicas, "round_robin")
    _check_attribution(recs, summary, own, replicas)
    names = [r["replica"] for r in recs]
    assert all(a != b for a, b in zip(names, names[1:], strict=False)), names  # alternates
    assert collections.Counter(names) == {replicas[0]: 12, replicas[1]: 12}


def test_cache_aware_matches_each_replicas_counters_and_keeps_more_reuse(tmp_path):
    cached = {}
    for policy in ("round_robin", "cache_aware"):
        with _fresh_replicas() as urls:  # each policy starts from empty caches
            recs, summary, own = _replay(tmp_path, urls, policy)
            _check_attribution(recs, summary, own, urls)
        cached[policy] = sum(ph["fleet"]["tokens"]["cached"] for ph in summary["phases"])
        for ph in summary["phases"]:  # the figures for the closing note (printed with -s)
            print(policy, ph["name"], [(e["requests"], e["tokens"]["cached"]) for e in ph["replicas"]],
                  ph["fleet"]["tokens"], ph["fleet"]["balance"])
    # the 12 bodies share one system block: cache_aware keeps them on one replica, round robin splits them
    assert cached["cache_aware"] > cached["round_robin"], cached


LLAMA_KEYS = ("computed_tokens", "hit_tokens")


@pytest.mark.parametrize("policy", ["round_robin", "cache_aware"])
def test_two_llama_servers_behind_sglang_router(tmp_path, tiny_gguf_model, tiny_workload, policy):
    """Two llama-server replicas (one slot each: ``-np 1``) behind the router, C1 prime + reverse of 12 bodies."""
    require(kt.llama_server_binary(), "llama-server")
    require(kt.sglang_router_python(), "sglang-router")
    servers = []
    try:
        for i in range(2):
            servers.append(kt.start_llama_server(tiny_gguf_model, log_path=tmp_path / f"llama-{i}.log", slots=1,
                                                 ctx_per_slot=4096))
        urls = [s.url for s in servers]

        async def read() -> dict[str, dict[str, float]]:
            async with aiohttp.ClientSession() as s:
                return {u: dict((await make_backend("llamacpp", u, s).snapshot()).common) for u in urls}

        out = tmp_path / policy
        with kt.start_sglang_router(urls, policy=policy, log_path=tmp_path / "router.log") as router:
            before = asyncio.run(read())
            rc = main(["run", str(tiny_workload), "--target", router.url, "--replica", urls[0],
                       "--replica", f"{urls[1]},backend=llamacpp", "--phase", "prime:forward:c1",
                       "--phase", "replay:reverse:c1", "--out", str(out), "--quiet", "--report", "md"])
            after = asyncio.run(read())
    finally:
        for s in servers:
            s.stop()
    assert rc == 0
    recs = [json.loads(ln) for ln in (out / "records.jsonl").read_text().splitlines()]
    summary = json.loads((out / "summary.json").read_text())
    assert len(recs) == 24 and all(r["status"] == "ok" for r in recs)
    assert all(r["replica"] in urls and r["replica_source"] == "counters" for r in recs), \
        [(r["position"], r["replica"], r["replica_reason"]) for r in recs]
    for u in urls:
        own = {k: after[u][k] - before[u][k] for k in LLAMA_KEYS}
        summed = collections.Counter()
        for r in recs:
            if r["replica"] == u:
                summed.update({k: r["replica_deltas"][u][k] for k in LLAMA_KEYS})
        assert {k: summed[k] for k in LLAMA_KEYS} == own
        # the cached tokens each response reports are the replica's own cached-token counter
        assert sum(r["usage"]["cached_tokens"] for r in recs if r["replica"] == u) == own["hit_tokens"]
    names = [r["replica"] for r in recs]
    if policy == "round_robin":
        assert all(a != b for a, b in zip(names, names[1:], strict=False)), names
    for ph in summary["phases"]:  # the figures for the closing note (printed with -s)
        print(policy, ph["name"], [(e["requests"], e["tokens"]["cached"]) for e in ph["replicas"]],
              ph["fleet"]["tokens"])
