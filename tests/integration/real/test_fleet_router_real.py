"""A fleet behind a real router: ``sglang-router`` 0.3.2 in front of two replicas (simulators, llama-servers).

Each replica is its own process on a free port, fresh for each test; the router
(``kvreplay.testing.start_sglang_router``, installed by
``scripts/setup_real_servers.sh sglang-router``) runs with ``round_robin`` or
``cache_aware``. A C1 prime + reverse replay of the bundled workload's first 12
bodies with ``--replica U1 --replica U2`` must name the replica of every record,
and each replica's deltas (per phase, and summed over the records naming it) must
equal its own counters read directly before and after the run. Under
``round_robin`` the assignment alternates. The router sets no replica header, so
the attribution is the counters' alone.

Then two one-slot llama-servers (started once for the module) behind the router replay
all 52 bundled bodies, scaled down to the tiny model's context, under both policies:
every record's cached tokens are checked against the one-slot model in llama's own
tokens, and the routing-loss table (``--replica-cache-from`` a hand-written one-slot
verdict) against the measured cached tokens (docs/fleets.md has the figures).
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
from integration.real.realsrv_helpers import lcp, post_json

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

# A probe verdict of a llama-server replica, written by hand rather than probed (a probe
# costs minutes). A llama-server slot (``-np 1``, ``--cache-ram 0``) holds one prompt (plus
# its output) and reuses, token by token, the longest common prefix of the new prompt with
# it, capped at the prompt minus one token (llama.cpp tools/server/server.cpp,
# ``get_common_prefix``; docs/real-servers.md, "the same conversation"). ``sim.calibrate``
# reads from this verdict a radix cache model (no entries keys) of 16-token blocks (no
# cached-token counts to take a gcd of) and a capacity from the flush bisection: one
# foreign request flushes the prefix (``min_flush_k`` 1, as on a one-slot server), so
# ceil((1,096 + 0.5 x 16) / 16) = 69 blocks, one slot of the longest scaled-down prompt
# (1,096 simulator tokens) and its 8 output tokens. Evicting least recently used, deepest
# first, that cache holds the last prompt and at most the heads of one or two before it.
# The prefill fit only sets the model's timing, which the routing loss does not use.
LLAMA_VERDICT = {"format": "kvreplay-probe/1", "backend": "llamacpp",
                 "prefill_fit": {"a_s": 0.01, "rate_tokens_per_s": 10000.0, "source": "hand-written"},
                 "warm": [], "points": [], "min_flush_k": 1, "flush_prefix_tokens": 1096,
                 "config": {"foreign_tokens": 16}}


@pytest.fixture(scope="module")
def llama_pair(tiny_gguf_model, realsrv_tmp):
    """Two one-slot llama-servers (``-np 1``, no host-RAM prompt cache), started once for the module."""
    require(kt.llama_server_binary(), "llama-server")
    (realsrv_tmp / "fleet-slots").mkdir(exist_ok=True)
    servers = []
    try:
        for i in range(2):  # --slot-save-path enables POST /slots/0?action=erase (each policy starts cold)
            servers.append(kt.start_llama_server(
                tiny_gguf_model, log_path=realsrv_tmp / f"fleet-llama-{i}.log", slots=1, ctx_per_slot=4096,
                extra_args=("--cache-ram", "0", "--slot-save-path", str(realsrv_tmp / "fleet-slots"))))
        yield servers
    finally:
        for s in servers:
            s.stop()


@pytest.fixture(scope="module")
def workload_52(realsrv_tmp) -> Path:
    """All 52 bundled bodies, scaled down to fit the tiny model's 4,096-token context.

    Full bodies are about 8,000 of the tiny vocabulary's tokens (11,963-character system
    block), over the model's context; cut (system 2,400 characters, user 400) they are
    1,658 to 2,390 tokens, sharing a 1,569-token prefix.
    """
    out = realsrv_tmp / "mtbench-52-tiny"
    kt.scale_down(MTBENCH, out, n_bodies=52, system_chars=2400, message_chars=400, max_tokens=8)
    return out


@pytest.mark.parametrize("policy", ["round_robin", "cache_aware"])
def test_two_llama_servers_behind_sglang_router(tmp_path, llama_pair, workload_52, policy):
    """Two llama-server replicas (one slot each) behind the router, C1 prime + reverse of the 52 bodies.

    Every record names its replica; each replica's deltas equal its own counters; each
    record's cached tokens are exactly the one-slot model's (the common prefix with the
    previous prompt that replica served, capped at the prompt minus one, in llama's own
    tokens); the routing-loss table's own observed figure in the server's tokens
    (``cached_tokens_server``: the simulator's, times the ratio of llama's prompt tokens to
    the simulator's, ``server_tokens_per_sim_token``) is within 5% of the measured cached
    tokens (``observed_vs_measured_pct`` within 95..105).
    """
    require(kt.sglang_router_python(), "sglang-router")
    urls = [s.url for s in llama_pair]
    for u in urls:
        post_json(u, "/slots/0?action=erase", {})
    verdict = tmp_path / "llama-verdict.json"
    verdict.write_text(json.dumps(LLAMA_VERDICT))

    async def read() -> dict[str, dict[str, float]]:
        async with aiohttp.ClientSession() as s:
            return {u: dict((await make_backend("llamacpp", u, s).snapshot()).common) for u in urls}

    out = tmp_path / policy
    with kt.start_sglang_router(urls, policy=policy, log_path=tmp_path / "router.log") as router:
        before = asyncio.run(read())
        rc = main(["run", str(workload_52), "--target", router.url, "--replica", urls[0],
                   "--replica", f"{urls[1]},backend=llamacpp", "--phase", "prime:forward:c1",
                   "--phase", "replay:reverse:c1", "--replica-cache-from", str(verdict),
                   "--out", str(out), "--quiet", "--report", "md"])
        after = asyncio.run(read())
    assert rc == 0
    recs = [json.loads(ln) for ln in (out / "records.jsonl").read_text().splitlines()]
    summary = json.loads((out / "summary.json").read_text())
    assert len(recs) == 104 and all(r["status"] == "ok" for r in recs)
    assert all(r["replica"] in urls and r["replica_source"] == "counters" for r in recs), \
        [(r["position"], r["replica"], r["replica_reason"]) for r in recs]
    for u in urls:
        own = {k: after[u][k] - before[u][k] for k in LLAMA_KEYS}
        summed = collections.Counter()
        for r in recs:
            if r["replica"] == u:
                summed.update({k: r["replica_deltas"][u][k] for k in LLAMA_KEYS})
        assert {k: summed[k] for k in LLAMA_KEYS} == own
        per_phase = collections.Counter()
        for ph in summary["phases"]:
            e = next(e for e in ph["replicas"] if e["url"] == u)
            per_phase.update({"hit_tokens": e["tokens"]["cached"]})
        # the cached tokens each response reports are the replica's own cached-token counter
        assert sum(r["usage"]["cached_tokens"] for r in recs if r["replica"] == u) == own["hit_tokens"] \
            == per_phase["hit_tokens"]
    names = [r["replica"] for r in recs]
    if policy == "round_robin":
        assert all(a != b for a, b in zip(names, names[1:], strict=False)), names
    # the one-slot model in llama's own tokens, record by record in send order
    bodies = sorted(workload_52.glob("*.json"))
    sent = sorted(recs, key=lambda r: ([p["name"] for p in summary["phases"]].index(r["phase"]), r["position"]))
    held: dict[str, list[int]] = {}
    for r in sent:
        toks = prompt_tokens(r["replica"], json.loads(bodies[r["body_index"]].read_bytes()))
        assert r["usage"]["prompt_tokens"] == len(toks)
        want = min(lcp(held[r["replica"]], toks), len(toks) - 1) if r["replica"] in held else 0
        assert r["usage"]["cached_tokens"] == want, (r["phase"], r["position"], r["replica"])
        held[r["replica"]] = toks
    for ph in summary["phases"]:
        loss = ph["routing_loss"]
        measured = sum(r["usage"]["cached_tokens"] for r in recs if r["phase"] == ph["name"])
        server_prompt = sum(r["usage"]["prompt_tokens"] for r in recs if r["phase"] == ph["name"])
        assert loss["measured_cached_tokens"] == measured
        sim = loss["policies"]["observed"]
        # the summary's own unit conversion: llama's prompt tokens over the simulator's, of the same requests
        assert loss["server_tokens_per_sim_token"] == server_prompt / sim["prompt_tokens"]
        server = sim["cached_tokens_server"]
        print(policy, ph["name"], [(e["requests"], e["tokens"]["cached"]) for e in ph["replicas"]],
              ph["fleet"]["tokens"], {k: v["cached_tokens"] for k, v in loss["policies"].items()},
              "sim prompt", sim["prompt_tokens"], "server prompt", server_prompt, "measured", measured,
              "ratio", loss["server_tokens_per_sim_token"], "observed (server tokens)", server,
              "vs measured %", loss["observed_vs_measured_pct"],
              "(sim tokens %)", loss["observed_vs_measured_pct_sim_tokens"], "kept", loss["kept_pct"],
              {k: v["cached_tokens_server"] for k, v in loss["policies"].items()}, loss["sentence"])
        assert loss["observed_vs_measured_pct"] == 100.0 * server / measured
        assert abs(server - measured) <= 0.05 * measured, (server, measured)
        assert 95.0 <= loss["observed_vs_measured_pct"] <= 105.0
        assert "(in the server's tokens: simulator tokens ×" in loss["sentence"]


def prompt_tokens(url: str, body: dict) -> list[int]:
    """llama-server's own tokens of a chat body (``/apply-template`` then ``/tokenize``)."""
    prompt = post_json(url, "/apply-template", {"messages": body["messages"]})["prompt"]
    return post_json(url, "/tokenize", {"content": prompt, "add_special": True, "parse_special": True})["tokens"]
