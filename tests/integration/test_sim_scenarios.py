"""Issue 5 "Done when" scenarios 1-3, through HTTP, with counts derived by hand.

The rules used (module docstrings of kvreplay.sim.cache_entries / cache_radix /
cache_host) and the derivations are written beside each assertion. Token counts
per body (n = prompt tokens, me = end of messages, se = end of the system block)
are inputs read from ``/tokenize``; the cache behaviour is what is derived. The
miniature of scenario 3 (4 bodies, 6 rows) is derived step by step in
tests/unit/sim/test_sim_cache_radix.py; the 52-body counts below follow the same
steps.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
from pathlib import Path

import aiohttp
import orjson
import pytest

from kvreplay.sim import SimConfig, SimServer

ROOT = Path(__file__).resolve().parents[2]
MTBENCH = ROOT / "fixtures" / "workloads" / "mtbench-52"
CHAT = "/v1/chat/completions"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 55))


@contextlib.asynccontextmanager
async def sim(**kw):
    srv = SimServer(SimConfig(time_scale=0.0, **kw))
    await srv.start(host="127.0.0.1", port=0)
    try:
        async with aiohttp.ClientSession() as s:
            yield srv.base_url, s
    finally:
        await srv.stop()


async def send(s, url, raw: bytes) -> dict:
    """One request; returns its usage (stream or not)."""
    async with s.post(url + CHAT, data=raw, headers={"Content-Type": "application/json"}) as r:
        assert r.status == 200
        data = await r.read()
    if data.startswith(b"data: "):
        for block in data.split(b"\n\n"):
            if block.startswith(b"data: {") and b'"usage"' in block:
                ev = orjson.loads(block[6:])
                if ev.get("choices") == []:
                    return ev["usage"]
        raise AssertionError("no usage chunk")
    return orjson.loads(data)["usage"]


async def replay(s, url, bodies, order) -> list[int]:
    """cached_tokens per request, in order."""
    return [(await send(s, url, bodies[i]))["prompt_tokens_details"]["cached_tokens"] for i in order]


async def host_counters(s, url) -> dict[str, float]:
    async with s.get(url + "/metrics") as r:
        text = await r.text()
    out = {}
    for line in text.splitlines():
        m = re.match(r"^kvreplay_sim:(host_\w+?)(?:_total)?(?:\{[^}]*\})? (\S+)$", line)
        if m and not m.group(1).endswith("_created"):
            out[m.group(1)] = float(m.group(2))
    return out


def delta(a: dict, b: dict, *names: str) -> tuple:
    return tuple(int(b[n] - a[n]) for n in names)


def chat(system: str, user: str) -> bytes:
    return orjson.dumps({
        "model": "m", "max_tokens": 16, "stream": True, "stream_options": {"include_usage": True},
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
    })


# ---- scenario 1 -----------------------------------------------------------------------------

def test_scenario1_stores_minus_evicted_is_max_entries():
    # 30 prompts with distinct system blocks: 30 misses x 2 new snapshots = 60 stores;
    # the cache ends full (8), so 60 - 8 = 52 were evicted.
    async def go():
        async with sim(cache_entries=8, snapshots=2) as (url, s):
            for i in range(30):
                await send(s, url, chat(f"You are assistant number {i}.", f"Question {i}?"))
            async with s.get(url + "/cache") as r:
                return await r.json()

    c = run(go())
    assert (c["misses"], c["hits"], c["stores"], c["evicted"], c["entries"]) == (30, 0, 60, 52, 8)
    assert c["stores"] - c["evicted"] == c["max_entries"] == 8


# ---- scenario 2 -----------------------------------------------------------------------------

@pytest.mark.parametrize(("snapshots", "threshold"), [(2, 4), (1, 8)])
def test_scenario2_eviction_probe_threshold(snapshots, threshold):
    # P stores `snapshots` snapshots; each foreign prompt (own system block) misses and
    # stores as many; strict LRU keeps the 8 newest, P's are the oldest. P survives k
    # foreign prompts iff snapshots * (1 + k) <= 8: k <= 3 with 2 snapshots (hit at the
    # end of P's messages, me), k <= 7 with 1 (hit at the end of P's system block, se).
    p_raw = sorted(MTBENCH.glob("*.json"))[0].read_bytes()

    async def go():
        results = {}
        for k in range(0, 10):
            async with sim(cache_entries=8, snapshots=snapshots) as (url, s):
                async with s.post(url + "/tokenize", data=p_raw) as r:
                    tok = await r.json()
                await send(s, url, p_raw)
                for j in range(k):
                    await send(s, url, chat(f"Foreign system block {j}: " + "filler " * 50, "hello"))
                results[k] = ((await send(s, url, p_raw))["prompt_tokens_details"]["cached_tokens"], tok)
        return results

    res = run(go())
    tok = res[0][1]
    hit_at = tok["messages_end"] if snapshots == 2 else tok["system_end"]
    assert (tok["system_end"], tok["messages_end"]) == (3448, 3481)
    assert {k: v[0] for k, v in res.items()} == {k: (hit_at if k < threshold else 0) for k in range(10)}


# ---- scenario 3 -----------------------------------------------------------------------------

BODIES = [p.read_bytes() for p in sorted(MTBENCH.glob("*.json"))]
FWD = list(range(len(BODIES)))
REV = FWD[::-1]
LAST12 = FWD[-12:]


async def shape(s, url):
    n, me, se = [], [], set()
    for raw in BODIES:
        async with s.post(url + "/tokenize", data=raw) as r:
            t = await r.json()
        n.append(t["count"])
        me.append(t["messages_end"])
        se.add(t["system_end"])
    assert len(se) == 1  # one shared system block
    return n, me, se.pop()


def radix(**kw) -> dict:
    # The device holds exactly the shared system block: se // 16 full blocks (215);
    # every body's own blocks are evicted at its finish (deepest first).
    return {"cache": "radix", "block_size": 16, "device_blocks": 3448 // 16, **kw}


def test_workload_shape():
    async def go():
        async with sim() as (url, s):
            return await shape(s, url)

    n, me, se = run(go())
    assert len(n) == 52 and se == 3448 and all(x - y == 4 for x, y in zip(n, me, strict=True))
    assert min(me) > se + 16  # every body's own part reaches past the last system block


def test_scenario3a_leaf_lru_40_rows_forward_restores_nothing():
    async def go():
        async with sim(**radix(host_rows=40)) as (url, s):
            n, me, se = await shape(s, url)
            h0 = await host_counters(s, url)
            prime = await replay(s, url, BODIES, FWD)
            h1 = await host_counters(s, url)
            fwd = await replay(s, url, BODIES, FWD)
            h2 = await host_counters(s, url)
            return n, se, prime, fwd, h0, h1, h2

    n, se, prime, fwd, h0, h1, h2 = run(go())
    d = (se // 16) * 16  # 3440: the device hit of every request once the system block is in
    names = ("host_lookups", "host_hits", "host_stores", "host_evictions", "host_reused_tokens")
    # Prime: 52 misses x 3 checkpoints (messages, prompt, terminal) = 156 stores into 40
    # rows: 116 evictions (whole bodies, oldest first: t, then p, then m).
    assert prime == [0] + [d] * 51
    assert delta(h0, h1, *names) == (52, 0, 156, 116, 0)
    assert h1["host_rows_used"] == 40
    # Forward: body i's rows were evicted while bodies i+13.. were primed or replayed:
    # zero host hits, 3 stores and 3 evictions per body; only the device system block hits.
    assert fwd == [d] * 52
    assert delta(h1, h2, *names) == (52, 0, 156, 156, 0)


def test_scenario3a_leaf_lru_40_rows_reverse_then_last12_twice():
    async def go():
        async with sim(**radix(host_rows=40)) as (url, s):
            n, me, se = await shape(s, url)
            await replay(s, url, BODIES, FWD)
            h1 = await host_counters(s, url)
            rev = await replay(s, url, BODIES, REV)
            h2 = await host_counters(s, url)
            c1 = await replay(s, url, BODIES, LAST12)
            h3 = await host_counters(s, url)
            c2 = await replay(s, url, BODIES, LAST12)
            h4 = await host_counters(s, url)
            return n, me, se, rev, c1, c2, h1, h2, h3, h4

    n, me, se, rev, c1, c2, h1, h2, h3, h4 = run(go())
    d = (se // 16) * 16
    names = ("host_hits", "host_stores", "host_evictions", "host_reused_tokens", "host_fetched_tokens")
    # After the prime the 40 rows hold bodies 39..51 whole (39 rows) plus body 38's
    # messages row m (its t and p went first). Reverse: bodies 51..39 hit their prompt
    # row p (credit n - 1), body 38 hits m (credit me); a hit stores nothing. Bodies
    # 37..0 miss (their rows went in the prime) and store 3 each: 114 stores, 114 evictions.
    expected_rev = {i: n[i] - 1 for i in range(39, 52)} | {38: me[38]}
    assert rev == [expected_rev.get(i, d) for i in REV]
    reused = sum(expected_rev.values())
    assert delta(h1, h2, *names) == (14, 114, 114, reused, reused - 14 * d)
    # After the reverse replay the rows hold bodies 12..0 and one row of body 13: the last
    # 12 bodies miss on the first pass (36 stores), and hit on the second (12 x n - 1).
    assert c1 == [d] * 12
    assert delta(h2, h3, *names)[:3] == (0, 36, 36)
    assert c2 == [n[i] - 1 for i in LAST12]
    assert delta(h3, h4, *names) == (12, 0, 0, sum(n[i] - 1 for i in LAST12), sum(n[i] - 1 - d for i in LAST12))


@pytest.mark.parametrize("rows", [156, 154, 153])
def test_scenario3b_leaf_lru_enough_rows(rows):
    # 156 = 52 x 3 rows: nothing is evicted, every body hits its prompt row (n - 1).
    # 154: the prime evicts body 0's t and p only; body 0 hits its m row (me), the rest p.
    # 153: the prime also evicts body 0's m; body 0 misses and its 3 stores evict body 1's
    # rows, and so on down the line: a one-row cliff from 52 host hits to none.
    async def go():
        async with sim(**radix(host_rows=rows)) as (url, s):
            n, me, se = await shape(s, url)
            await replay(s, url, BODIES, FWD)
            h1 = await host_counters(s, url)
            fwd = await replay(s, url, BODIES, FWD)
            h2 = await host_counters(s, url)
            return n, me, se, fwd, h1, h2

    n, me, se, fwd, h1, h2 = run(go())
    d = (se // 16) * 16
    if rows == 156:
        expected = [n[i] - 1 for i in FWD]
    elif rows == 154:
        expected = [me[0]] + [n[i] - 1 for i in FWD[1:]]
    else:
        expected = [d] * 52
    assert fwd == expected
    hits = 0 if rows == 153 else 52
    assert delta(h1, h2, "host_hits", "host_stores") == (hits, 0 if hits else 156)
    assert h1["host_evictions"] == 156 - rows


def test_scenario3c_ancestor_compact_looks_healthy_never_helps():
    async def go():
        async with sim(**radix(host_rows=200, host_pages=8192, host_evict="ancestor-compact")) as (url, s):
            n, me, se = await shape(s, url)
            prime_usage = [await send(s, url, BODIES[i]) for i in FWD]
            h1 = await host_counters(s, url)
            fwd = await replay(s, url, BODIES, FWD)
            rev = await replay(s, url, BODIES, REV)
            h2 = await host_counters(s, url)
            return n, me, se, prime_usage, fwd, rev, h1, h2

    n, me, se, prime_usage, fwd, rev, h1, h2 = run(go())
    d = (se // 16) * 16
    out = [u["completion_tokens"] for u in prime_usage]
    # Each body stores m, p, t (156 stores), then folds m and p into t (104 compactions):
    # exactly 52 rows, one terminal per body, each holding ceil(me / 256) pages for m,
    # 1 page for p's 4 tokens and 1 page for the <= 128 output tokens.
    assert (h1["host_stores"], h1["host_compactions"], h1["host_rows_used"], h1["host_evictions"]) == (156, 104, 52, 0)
    pages = sum(math.ceil(me[i] / 256) + 1 + 1 for i in FWD)
    assert all(0 < o <= 128 for o in out)
    assert h1["host_pages_used"] == pages
    assert h1["host_bytes"] == pages * 256 * SimConfig().bytes_per_token
    assert h1["host_bytes"] < h1["host_bytes_capacity"] / 8  # far under capacity
    # A terminal (prompt + output) is longer than its own prompt: it never serves a replay.
    assert fwd == rev == [d] * 52
    assert delta(h1, h2, "host_hits", "host_stores", "host_evictions", "host_fetched_tokens") == (0, 0, 0, 0)
