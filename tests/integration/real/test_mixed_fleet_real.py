"""A mixed fleet: one vLLM CPU server and one llama-server behind ``sglang-router`` (issue 45 item 5).

vLLM (the tiny HF model, prefix caching on, 128-token blocks) and a one-slot
llama-server (the tiny GGUF model, ``-np 1``, ``--cache-ram 0``) run on free
ports, started once for the module, behind ``sglang-router`` 0.3.2 with
``round_robin``. A C1 prime forward + replay reverse of the 12-body scaled-down
workload runs with ``--replica VLLM,backend=vllm,verdict=V1 --replica
LLAMA,backend=llamacpp,verdict=V2``: each replica gets its own cache model (from
its own hand-written verdict) and its own token ratio. Checked per replica:
every record's cached tokens are the server's own (vLLM: whole blocks of the
longest prefix it holds; llama-server: the common prefix with the previous prompt
it served), the replica's measured cached tokens in the routing-loss table equal
its own counters, and the table's modelled figure in that server's tokens is
within 5% of them (docs/fleets.md has the figures).
"""

from __future__ import annotations

import asyncio
import json
from fractions import Fraction

import aiohttp
import pytest
from integration.real.conftest import require
from integration.real.realsrv_helpers import lcp, post_json, scrape
from integration.real.test_fleet_router_real import LLAMA_VERDICT
from integration.real.test_fleet_router_real import prompt_tokens as llama_tokens
from integration.real.test_vllm_real import block_size

from kvreplay import testing as kt
from kvreplay.backends import make_backend
from kvreplay.cli import main

pytestmark = [pytest.mark.real_server, pytest.mark.timeout(600)]

BLOCK = 128  # vLLM's default block size (the test checks vllm:cache_config_info's block_size label)

# A probe verdict of the vLLM replica, written by hand (a probe costs minutes): warm legs
# whose cached tokens are whole 128-token blocks (as vLLM reports them), so
# ``sim.calibrate`` reads a radix model of 128-token blocks (the gcd), and no flushing k
# (1 GiB of KV cache holds the whole workload many times over), so unbounded capacity.
VLLM_VERDICT = {"format": "kvreplay-probe/1", "backend": "vllm",
                "prefill_fit": {"a_s": 0.01, "rate_tokens_per_s": 10000.0, "source": "hand-written"},
                "warm": [{"prompt_tokens": 1200, "cached_tokens": 1152, "warm_ttft_s": 0.05},
                         {"prompt_tokens": 2100, "cached_tokens": 2048, "warm_ttft_s": 0.05}],
                "points": [], "min_flush_k": None, "config": {"foreign_tokens": 256}}


@pytest.fixture(scope="module")
def mixed_pair(tiny_hf_model, tiny_gguf_model, realsrv_tmp):
    """One vLLM server and one one-slot llama-server, started once for the module, stopped by their process."""
    require(kt.vllm_python(), "the vLLM CPU environment")
    require(kt.llama_server_binary(), "llama-server")
    servers = []
    try:
        servers.append(kt.start_vllm(tiny_hf_model, log_path=realsrv_tmp / "mixed-vllm.log", ready_timeout_s=600,
                                     extra_env={"VLLM_SERVER_DEV_MODE": "1"}))
        (realsrv_tmp / "mixed-slots").mkdir(exist_ok=True)
        servers.append(kt.start_llama_server(
            tiny_gguf_model, log_path=realsrv_tmp / "mixed-llama.log", slots=1, ctx_per_slot=4096,
            extra_args=("--cache-ram", "0", "--slot-save-path", str(realsrv_tmp / "mixed-slots"))))
        yield servers
    finally:
        for s in servers:
            s.stop()


def _counters(backends: dict[str, str]) -> dict[str, dict[str, float]]:
    async def read() -> dict[str, dict[str, float]]:
        async with aiohttp.ClientSession() as s:
            return {u: dict((await make_backend(b, u, s).snapshot()).common) for u, b in backends.items()}

    return asyncio.run(read())


def test_vllm_and_llama_server_behind_sglang_router(tmp_path, mixed_pair, tiny_workload):
    require(kt.sglang_router_python(), "sglang-router")
    vllm, llama = (s.url for s in mixed_pair)
    backends = {vllm: "vllm", llama: "llamacpp"}
    assert block_size(scrape(vllm)) == BLOCK
    post_json(vllm, "/reset_prefix_cache", {})
    post_json(llama, "/slots/0?action=erase", {})
    v1, v2 = tmp_path / "vllm-verdict.json", tmp_path / "llama-verdict.json"
    v1.write_text(json.dumps(VLLM_VERDICT))
    v2.write_text(json.dumps(LLAMA_VERDICT))
    out = tmp_path / "run"
    with kt.start_sglang_router([vllm, llama], policy="round_robin", log_path=tmp_path / "router.log") as router:
        before = _counters(backends)
        rc = main(["run", str(tiny_workload), "--target", router.url,
                   "--replica", f"{vllm},backend=vllm,verdict={v1}",
                   "--replica", f"{llama},backend=llamacpp,verdict={v2}",
                   "--phase", "prime:forward:c1", "--phase", "replay:reverse:c1",
                   "--out", str(out), "--quiet", "--report", "md"])
        after = _counters(backends)
    assert rc == 0
    recs = [json.loads(ln) for ln in (out / "records.jsonl").read_text().splitlines()]
    summary = json.loads((out / "summary.json").read_text())
    assert len(recs) == 24 and all(r["status"] == "ok" for r in recs)
    assert all(r["replica"] in backends and r["replica_source"] == "counters" for r in recs), \
        [(r["position"], r["replica"], r["replica_reason"]) for r in recs]
    phase_order = [p["name"] for p in summary["phases"]]
    sent = sorted(recs, key=lambda r: (phase_order.index(r["phase"]), r["position"]))
    names = [r["replica"] for r in sent]
    assert all(a != b for a, b in zip(names, names[1:], strict=False)), names  # round robin alternates

    # every record's cached tokens, from each server's own tokens
    bodies = [json.loads(p.read_bytes()) for p in sorted(tiny_workload.glob("*.json"))]
    toks = {vllm: [post_json(vllm, "/tokenize", {"model": "tiny", "messages": b["messages"]})["tokens"]
                   for b in bodies],
            llama: [llama_tokens(llama, b) for b in bodies]}
    seen: dict[str, list[list[int]]] = {vllm: [], llama: []}
    for r in sent:
        u, t = r["replica"], toks[r["replica"]][r["body_index"]]
        assert r["usage"]["prompt_tokens"] == len(t)
        if u == vllm:  # whole blocks of the longest prefix any prompt it served shares, capped at prompt - 1
            best = max((lcp(p, t) for p in seen[u]), default=0)
            want = min(best, len(t) - 1) // BLOCK * BLOCK
        else:  # one slot: the common prefix with the previous prompt, capped at prompt - 1
            want = min(lcp(seen[u][-1], t), len(t) - 1) if seen[u] else 0
        assert r["usage"]["cached_tokens"] == want, (r["phase"], r["position"], u)
        seen[u].append(t)

    own = {u: after[u]["hit_tokens"] - before[u]["hit_tokens"] for u in backends}
    for u in backends:  # the cached tokens each response reports are the replica's own cached-token counter
        assert sum(r["usage"]["cached_tokens"] for r in recs if r["replica"] == u) == own[u]
    # vLLM: after its first request every hit is the shared system block's whole blocks (the bodies it
    # served share no further whole block), so its figure per phase is that many times ``full``
    shared = min(lcp(toks[vllm][0], t) for t in toks[vllm][1:])
    full = shared // BLOCK * BLOCK
    assert full >= 2 * BLOCK
    first_vllm = next(r for r in sent if r["replica"] == vllm)
    # the model's vLLM block: the verdict's 128 (vLLM's tokens) over vLLM's tokens per simulator token
    # in the whole run, in simulator tokens (offline.runloss.server_blocks); each phase's ratio is its
    # records' prompt tokens over their simulated prompt tokens, so those are given back exactly
    srv_sim = [(sum(r["usage"]["prompt_tokens"] for r in sent if r["phase"] == ph["name"] and r["replica"] == vllm),
                ph["routing_loss"]["server_tokens_per_sim_token_per_replica"][0]) for ph in summary["phases"]]
    run_ratio = Fraction(sum(a for a, _ in srv_sim), sum(round(a / x) for a, x in srv_sim))
    sim_block = round(BLOCK / run_ratio)
    assert f"the verdict's {BLOCK}-token block (the server's tokens) modelled as {sim_block} simulator tokens" \
        in summary["phases"][0]["routing_loss"]["note"]
    figures = {}
    for ph in summary["phases"]:
        loss = ph["routing_loss"]
        mine = [r for r in sent if r["phase"] == ph["name"]]
        assert loss["measured_cached_tokens"] == sum(r["usage"]["cached_tokens"] for r in mine)
        ratios = loss["server_tokens_per_sim_token_per_replica"]
        urls = [e["url"] for e in loss["per_replica_vs_measured"]]
        assert urls == [vllm, llama]  # the --replica order
        # each replica's figure converted with its own ratio, and the sentence says so
        assert loss["sentence"].endswith("(in each replica's server's tokens: simulator tokens "
                                         f"× {ratios[0]:.4g}, × {ratios[1]:.4g})"), loss["sentence"]
        assert 1.0 < ratios[0] < ratios[1]  # vLLM's BPE splits the text coarser than the tiny GGUF vocabulary
        # the model's per-request figures: whole blocks of sim_block simulator tokens on vLLM, of 16 on
        # llama-server; cold where the server was
        assert loss["cache"]["models"] == [f"radix (blocks, block {sim_block})", "radix (blocks, block 16)"]
        obs = loss["observed"]
        assert obs["replica"] == [urls.index(r["replica"]) for r in mine]
        assert all(c % (sim_block, 16)[k] == 0 and (c == 0) == (r["usage"]["cached_tokens"] == 0)
                   for k, c, r in zip(obs["replica"], obs["cached_tokens"], mine, strict=True))
        print(ph["name"], "modelled per request (simulator tokens):", obs["cached_tokens"])
        for k, u in enumerate(urls):
            row = loss["per_replica_vs_measured"][k]
            served = [r for r in mine if r["replica"] == u]
            on_counter = next(e for e in ph["replicas"] if e["url"] == u)["tokens"]["cached"]
            assert row["measured_cached_tokens"] == sum(r["usage"]["cached_tokens"] for r in served) == on_counter
            if u == vllm:
                assert row["measured_cached_tokens"] == full * sum(r is not first_vllm for r in served)
            # the claim: the modelled figure, in this replica's own tokens, within 5% of its measured one
            assert abs(row["observed_cached_tokens_server"] - row["measured_cached_tokens"]) \
                <= 0.05 * row["measured_cached_tokens"], (ph["name"], backends[u], row)
            figures[ph["name"], backends[u]] = (len(served), row["observed_cached_tokens_server"],
                                                row["measured_cached_tokens"], round(row["pct"], 2), ratios[k])
    print("mixed fleet (requests, modelled, measured, pct, ratio):", figures)  # docs/fleets.md (with -s)
