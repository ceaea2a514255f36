"""The embedded fleet (kvreplay.sim.fleet) against its ground truth, and the offline routing loss.

A six-body workload with two long system prompts P and Q in the order P P Q Q P Q is
replayed at C1 through the fleet's router (2 radix replicas) under each policy. For every
policy: the router's ``x-kvreplay-replica`` header names the replica of every request; the
offline routing loss of the observed assignment equals, per position (``usage``) and per
replica (each replica's own ``/metrics`` counter), what the replicas counted; and the sim
router chose what the offline simulation of the same policy chooses. Round-robin sends the
second P and the first Q to cold replicas, prefix affinity keeps both pairs together.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import json
import re
from pathlib import Path

import aiohttp
import orjson
import pytest

from kvreplay.cli import build_parser, main
from kvreplay.commands import serve_sim
from kvreplay.offline.routing import assignment, routing_loss
from kvreplay.offline.sources import model_requests
from kvreplay.sim.config import SimConfig
from kvreplay.sim.fleet import start_fleet
from kvreplay.sim.routing import REPLICA_HEADER, ROUTER_POLICIES
from kvreplay.workload import load_workload

CFG = SimConfig(cache="radix", device_blocks=512, time_scale=0, output_tokens=6)
WORDS = ["alpha", "beta", "gamma", "delta", "river", "stone", "cloud", "light", "north", "south", "quiet", "bright"]


def system(seed: int) -> str:
    return " ".join(WORDS[(seed * 5 + i * 7) % len(WORDS)] + str(i % 9) for i in range(120))


@pytest.fixture
def workload(tmp_path):
    folder = tmp_path / "wl"
    folder.mkdir()
    for i, who in enumerate("PPQQPQ"):
        body = {"model": "m", "stream": i % 2 == 0, "stream_options": {"include_usage": True},
                "messages": [{"role": "system", "content": system(ord(who))},
                             {"role": "user", "content": f"question number {i}: what about {WORDS[i]}?"}]}
        (folder / f"{i:03d}.json").write_text(json.dumps(body))
    return load_workload(folder)


def counter(text: str, name: str) -> int:
    m = re.search(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M)
    assert m, name
    return int(float(m.group(1)))


def usage_of(raw: bytes) -> dict:
    if raw.startswith(b"{"):
        return orjson.loads(raw)["usage"]
    lines = [ln[6:] for ln in raw.split(b"\n") if ln.startswith(b"data: {")]
    return [orjson.loads(x) for x in lines if b'"usage"' in x and b'"choices":[]' in x][-1]["usage"]


async def replay(policy: str, wl) -> dict:
    async with await start_fleet(2, policy, config=CFG) as fleet, aiohttp.ClientSession() as s:
        picks, cached = [], []
        for body in wl.bodies:
            async with s.post(fleet.router_url + "/v1/chat/completions", data=body.raw,
                              headers={"Content-Type": "application/json"}) as r:
                assert r.status == 200
                raw = await r.read()
                picks.append(fleet.replica_urls.index(r.headers[REPLICA_HEADER]))
            cached.append(usage_of(raw)["prompt_tokens_details"]["cached_tokens"])
        assert all(not r.pre_rendered for r in fleet.replicas)  # each rendering handed over was used or dropped
        counters, shas = [], []
        for url in fleet.replica_urls:
            async with s.get(url + "/metrics") as r:
                counters.append(counter(await r.text(), "vllm:prompt_tokens_cached_total"))
            async with s.get(url + "/events") as r:
                shas += [e["body_sha256"] for e in (await r.json())["events"] if e["kind"] == "request"]
        return {"picks": picks, "cached": cached, "counters": counters, "log": list(fleet.router.log),
                "shas": sorted(shas)}


@pytest.mark.parametrize("policy", ROUTER_POLICIES)
def test_routing_loss_is_exact_against_the_replicas(policy, workload):
    got = asyncio.run(asyncio.wait_for(replay(policy, workload), 60))
    assert got["picks"] == got["log"]
    assert got["shas"] == sorted(hashlib.sha256(b.raw).hexdigest() for b in workload.bodies)  # bytes unchanged
    reqs = model_requests(workload, output_tokens=CFG.output_tokens)
    cfgs = [CFG, CFG]
    loss = routing_loss(reqs, cfgs, observed=got["picks"], measured_cached_tokens=sum(got["counters"]))
    obs = loss["policies"]["observed"]
    assert loss["observed"]["cached_tokens"] == got["cached"]  # per request
    assert obs["per_replica_cached_tokens"] == got["counters"]  # per replica: its own counter
    assert obs["cached_tokens"] == sum(got["counters"]) and loss["observed_vs_measured_pct"] == 100.0
    picks, cached = assignment(reqs, cfgs, policy)
    assert (picks, cached) == (got["picks"], got["cached"])  # the sim router chose as the offline policy


def test_round_robin_loses_what_prefix_affinity_keeps(workload):
    rr = asyncio.run(asyncio.wait_for(replay("round_robin", workload), 60))
    pa = asyncio.run(asyncio.wait_for(replay("prefix_affinity", workload), 60))
    assert rr["picks"] == [0, 1, 0, 1, 0, 1] and pa["picks"] == [0, 0, 1, 1, 0, 1]
    # round-robin: bodies 1 (P on r1) and 2 (Q on r0) are cold; prefix affinity: only 0 and 2 are
    assert [c > 0 for c in rr["cached"]] == [False, False, False, False, True, True]
    assert [c > 0 for c in pa["cached"]] == [False, True, False, True, True, True]
    assert sum(pa["counters"]) > sum(rr["counters"])


async def relay_checks() -> None:
    body = {"messages": [{"role": "user", "content": "tell me"}], "max_tokens": 4, "stream": True}
    raw = orjson.dumps(body)
    mask = re.compile(rb'"created":\d+')
    async with aiohttp.ClientSession() as s:
        async with await start_fleet(2, "round_robin", config=CFG) as fleet:
            async with s.post(fleet.router_url + "/v1/chat/completions", data=raw) as r:
                via_router = await r.read()
                assert r.headers["Content-Type"].startswith("text/event-stream")
            async with s.post(fleet.router_url + "/v1/completions",
                              data=orjson.dumps({"prompt": "hi", "max_tokens": 2})) as r:
                plain_router = await r.read()
                assert r.headers[REPLICA_HEADER] == fleet.replica_urls[1]
            async with s.get(fleet.router_url + "/metrics") as r:
                assert r.status == 404 and fleet.replica_urls[0] in (await r.json())["error"]["message"]
            async with s.get(fleet.router_url + "/v1/models") as r:
                assert r.status == 200 and (await r.json())["data"][0]["id"] == CFG.model
            async with s.post(fleet.router_url + "/reset_prefix_cache") as r:
                assert (await r.json())["status"] == "ok"
            async with s.get(fleet.router_url + "/fleet") as r:
                doc = await r.json()
                assert doc["policy"] == "round_robin" and doc["assigned"] == [1, 1]
                assert doc["replicas"] == list(fleet.replica_urls)
            await fleet.replicas[0].stop()  # a replica that does not answer: 502 naming it
            async with s.post(fleet.router_url + "/v1/completions", data=raw) as r:
                assert r.status == 502 and r.headers[REPLICA_HEADER] == fleet.replica_urls[0]
        # the same bodies straight to fresh replicas (each the first request of its server)
        async with (await start_fleet(1, "round_robin", config=CFG) as one,
                    s.post(one.replica_urls[0] + "/v1/chat/completions", data=raw) as r):
            direct = await r.read()
        async with (await start_fleet(1, "round_robin", config=CFG) as one,
                    s.post(one.replica_urls[0] + "/v1/completions",
                           data=orjson.dumps({"prompt": "hi", "max_tokens": 2})) as r):
            plain_direct = await r.read()
    assert mask.sub(b"", via_router) == mask.sub(b"", direct) and via_router.endswith(b"data: [DONE]\n\n")
    assert mask.sub(b"", plain_router) == mask.sub(b"", plain_direct)


def test_router_relays_unchanged_and_names_the_replica():
    asyncio.run(asyncio.wait_for(relay_checks(), 60))


def test_serve_sim_fleet_prints_router_and_replicas():
    args = build_parser().parse_args(["serve-sim", "--replicas", "2", "--router", "prefix_affinity",
                                      "--time-scale", "0"])

    async def go():
        ready = asyncio.Event()
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            task = asyncio.ensure_future(serve_sim.serve(args, ready=ready))
            await asyncio.wait_for(ready.wait(), 10)
        text = out.getvalue()
        try:
            router = text.split("listening on ")[1].split()[0]
            async with aiohttp.ClientSession() as s, s.get(router + "/fleet") as r:
                doc = await r.json()
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        return text, router, doc

    text, router, doc = asyncio.run(asyncio.wait_for(go(), 30))
    assert "(router=prefix_affinity, replicas=2," in text
    assert doc["policy"] == "prefix_affinity" and len(doc["replicas"]) == 2
    for i, url in enumerate(doc["replicas"]):
        assert f"kvreplay-sim replica {i} listening on {url}\n" in text
    assert f"run flags: --target {router} --replica {doc['replicas'][0]} --replica {doc['replicas'][1]}\n" in text


def test_simulate_replicas_cli(workload, capsys):
    folder = str(workload.path)
    assert main(["simulate", folder, "--replicas", "2", "--router", "round_robin", "--model", "radix",
                 "--capacities", "512", "--output-tokens", "6", "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    reqs = model_requests(workload, output_tokens=6)
    want = routing_loss(reqs, [CFG, CFG], observed=assignment(reqs, [CFG, CFG], "round_robin")[0])
    assert {k: v["cached_tokens"] for k, v in rep["policies"].items()} == {
        k: v["cached_tokens"] for k, v in want["policies"].items()}
    assert rep["router"] == "round_robin" and rep["cache"]["per_replica"] == [512, 512]
    assert main(["simulate", folder, "--replicas", "2", "--router", "prefix_affinity", "--model", "radix",
                 "--capacities", "512", "--output-tokens", "6"]) == 0
    table = capsys.readouterr().out
    assert "observed (prefix_affinity)" in table and "the routing kept 100.0% of the reuse available" in table
    assert main(["simulate", folder, "--router", "random"]) == 2
    assert "--router needs --replicas" in capsys.readouterr().err


def test_fleet_demo_script(tmp_path, capsys):
    import runpy

    demo = runpy.run_path(str(Path(__file__).resolve().parents[2] / "scripts" / "fleet_demo.py"))
    assert demo["main"](["--out", str(tmp_path), "--time-scale", "0"]) == 0  # 0: every figure exact
    out = capsys.readouterr().out
    assert out.count("(exact)") == 2
    assert "--router round_robin" in out and "the routing kept 17.7% of the reuse available" in out
    assert "the routing kept 100.0% of the reuse available (merged-cache bound 42,336, greedy affinity 42,336)" in out


def test_kvreplay_run_through_the_router_matches_the_replicas(workload, tmp_path, capsys):
    """``kvreplay run --target ROUTER --backend none`` (the runner's own client) at C1 through the sim router."""
    import threading

    from kvreplay.rundir import read_records

    loop = asyncio.new_event_loop()
    started = threading.Event()
    box: dict = {}

    async def hold():
        box["fleet"] = await start_fleet(2, "round_robin", config=CFG)
        box["stop"] = asyncio.Event()
        started.set()
        await box["stop"].wait()
        await box["fleet"].stop()

    thread = threading.Thread(target=lambda: loop.run_until_complete(hold()), daemon=True)
    thread.start()
    assert started.wait(30)
    fleet = box["fleet"]
    try:
        out = tmp_path / "run"
        rc = main(["run", str(workload.path), "--target", fleet.router_url, "--backend", "none",
                   "--phase", "prime:forward:c1", "--phase", "replay:reverse:c1", "--out", str(out), "--quiet"])
        capsys.readouterr()
        assert rc == 0
        recs = read_records(out / "records.jsonl")
        assert len(recs) == 12 and all(r["status"] == "ok" for r in recs)
        counters = [r.engine.counters.cached_tokens for r in fleet.replicas]
        picks = list(fleet.router.log)
    finally:
        loop.call_soon_threadsafe(box["stop"].set)
        thread.join(30)
        loop.close()
    order = [r["body_index"] for r in recs]
    assert order == [0, 1, 2, 3, 4, 5, 5, 4, 3, 2, 1, 0]
    reqs = model_requests(workload, order, output_tokens=CFG.output_tokens)
    loss = routing_loss(reqs, [CFG, CFG], observed=picks)
    assert loss["observed"]["cached_tokens"] == [r["usage"]["cached_tokens"] for r in recs]
    assert loss["policies"]["observed"]["per_replica_cached_tokens"] == counters
    assert picks == [i % 2 for i in range(12)]


async def cut_checks() -> None:
    from kvreplay.sim.faults import parse_fault

    cfg = SimConfig(time_scale=0, output_tokens=6, faults=(parse_fault("cut@1:chunks=2"), parse_fault("die@2")))
    body = orjson.dumps({"messages": [{"role": "user", "content": "tell me"}], "stream": True})
    async with await start_fleet(1, "round_robin", config=cfg) as fleet, aiohttp.ClientSession() as s:
        with pytest.raises(aiohttp.ClientPayloadError):  # cut mid-stream: the client's stream is cut
            async with s.post(fleet.router_url + "/v1/chat/completions", data=body) as r:
                await r.read()
        with pytest.raises(aiohttp.ServerDisconnectedError):  # dropped before answering: dropped
            async with s.post(fleet.router_url + "/v1/chat/completions", data=body) as r:
                await r.read()


def test_router_relays_cuts_and_drops():
    asyncio.run(asyncio.wait_for(cut_checks(), 30))
