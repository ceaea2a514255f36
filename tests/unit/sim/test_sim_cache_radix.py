"""RadixCache + HostTier: a small case derived by hand (issue 5 scenario 3, in miniature).

Shape: block size 4; a shared system block of 8 tokens (2 blocks); body i adds 6
user tokens (messages_end = 14) and a 2-token generation prompt (n = 16); every
output is 3 tokens (terminal = 19). The device holds 2 blocks: exactly the
system block. Host pages are plentiful (page = 4 tokens), so only rows bind.

Device, per request: KV exists for n + m - 1 = 18 tokens = 4 full blocks; after
the finish the two body blocks (deepest, same timestamp) are evicted, so every
request after the first hits d = 8 tokens (limit (16 - 1) // 4 = 3 blocks).

Host rows per body: m (14 tokens, 4 pages), p (16, its own 2 tokens: 1 page),
t (19, 3 tokens: 1 page); m <- p <- t form a chain, so a body is evicted t, p, m.
"""

from __future__ import annotations

import pytest

from kvreplay.sim.cache_host import HostTier
from kvreplay.sim.cache_radix import RadixCache

B, SYS_T, MSG_END, N, OUT = 4, 8, 14, 16, 3
SYSTEM = list(range(100, 100 + SYS_T))


def body(i: int) -> list[int]:
    return SYSTEM + [1000 * (i + 1) + j for j in range(6)] + [7, 8]


def out(i: int) -> list[int]:
    return [50_000 + 10 * i + j for j in range(OUT)]


def make(rows: int, evict: str = "leaf-lru") -> RadixCache:
    return RadixCache(capacity_blocks=2, block_size=B, host=HostTier(rows=rows, pages=1000, page_tokens=4, evict=evict))


def phase(c: RadixCache, order) -> dict:
    hs = c.host.stats
    before = (hs.hits, hs.stores, hs.evictions, hs.reused_tokens, hs.fetched_tokens)
    hit_bodies = []
    for i in order:
        o = c.request(body(i), out(i), messages_end=MSG_END)
        if o.host.hit:
            hit_bodies.append(i)
    after = (hs.hits, hs.stores, hs.evictions, hs.reused_tokens, hs.fetched_tokens)
    d = [a - b for a, b in zip(after, before, strict=True)]
    return dict(zip(("hits", "stores", "evictions", "reused", "fetched"), d, strict=True)) | {"bodies": hit_bodies}


FWD = [0, 1, 2, 3]


def test_device_hit_block_aligned_and_capped():
    c = RadixCache(capacity_blocks=100, block_size=16)
    p33, p32 = list(range(33)), list(range(1000, 1032))
    assert c.request(p33).device_hit_tokens == 0
    assert c.request(p33).device_hit_tokens == 32  # floor((33 - 1) / 16) * 16
    c.request(p32)
    assert c.request(p32).device_hit_tokens == 16  # floor((32 - 1) / 16) * 16
    assert c.stats.query_tokens == 33 * 2 + 32 * 2 and c.stats.hit_tokens == 48


def test_device_keeps_system_block_only():
    c = make(rows=6)
    first = c.request(body(0), out(0), messages_end=MSG_END)
    assert (first.device_hit_tokens, first.stored_blocks, first.evicted_blocks) == (0, 4, 2)
    second = c.request(body(1), out(1), messages_end=MSG_END)
    assert (second.device_hit_tokens, second.stored_blocks, second.evicted_blocks) == (8, 2, 2)
    assert c.blocks == 2


def test_leaf_lru_prime_then_forward_restores_nothing():
    c = make(rows=6)
    # Prime: B1, B2 fill 6 rows; B3 evicts t1, p1, m1; B4 evicts t2, p2, m2.
    assert phase(c, FWD) == {"hits": 0, "stores": 12, "evictions": 6, "reused": 0, "fetched": 0, "bodies": []}
    assert c.host.rows_used == 6 and c.host.pages_used == 2 * (4 + 1 + 1)
    # Forward: each body's rows went two bodies ago; every body misses, stores 3, evicts 3.
    assert phase(c, FWD) == {"hits": 0, "stores": 12, "evictions": 12, "reused": 0, "fetched": 0, "bodies": []}


def test_leaf_lru_prime_then_reverse_restores_last_primed():
    c = make(rows=6)
    phase(c, FWD)
    # B4, B3 hit their prompt rows p (16 tokens, credit n - 1 = 15, fetched 15 - 8 = 7),
    # store nothing; B2, B1 miss and store 3 each, evicting 6 rows.
    assert phase(c, reversed(FWD)) == {
        "hits": 2, "stores": 6, "evictions": 6, "reused": 30, "fetched": 14, "bodies": [3, 2],
    }


def test_leaf_lru_row_cliff():
    # 3N - 2 = 10 rows: the prime evicts only t1, p1; B1 then hits m1 (credit 14,
    # fetched 6) and B2..B4 their p rows (15, fetched 7): 4 hits, nothing stored.
    c = make(rows=10)
    phase(c, FWD)
    assert phase(c, FWD) == {"hits": 4, "stores": 0, "evictions": 0, "reused": 14 + 45, "fetched": 6 + 21,
                             "bodies": [0, 1, 2, 3]}
    # 9 rows: the prime evicts all of B1; B1 misses and its 3 stores evict B2, and so on.
    c = make(rows=9)
    phase(c, FWD)
    assert phase(c, FWD) == {"hits": 0, "stores": 12, "evictions": 12, "reused": 0, "fetched": 0, "bodies": []}


def test_ancestor_compact_looks_healthy_never_helps():
    c = make(rows=10, evict="ancestor-compact")
    assert phase(c, FWD)["stores"] == 12
    h = c.host
    # One terminal row per body holding m's, p's and t's pages: 4 + 1 + 1 = 6.
    assert (h.rows_used, h.pages_used, h.stats.compactions) == (4, 24, 8)
    assert sorted(t for t, _ in h.held_rows()) == [19, 19, 19, 19]
    for order in (FWD, list(reversed(FWD))):
        assert phase(c, order) == {"hits": 0, "stores": 0, "evictions": 0, "reused": 0, "fetched": 0, "bodies": []}


def test_pages_bind_before_rows():
    # 100 rows but 6 pages: a body needs 4 + 1 + 1 pages, so each body evicts the previous.
    c = RadixCache(capacity_blocks=2, block_size=B, host=HostTier(rows=100, pages=6, page_tokens=4))
    phase(c, FWD)
    assert (c.host.rows_used, c.host.pages_used) == (3, 6)
    assert c.host.stats.evictions == 9


def test_refused_when_larger_than_pool():
    c = RadixCache(capacity_blocks=2, block_size=B, host=HostTier(rows=10, pages=3, page_tokens=4))
    o = c.request(body(0), out(0), messages_end=MSG_END)
    # m needs 4 pages > 3: refused; p then has no parent and needs 4 pages: refused;
    # t likewise needs 5 pages: refused.
    assert o.host_store.refused == (14, 16, 19) and c.host.stats.refused == 3


def test_clear_keeps_counters_and_pins():
    c = make(rows=6)
    adm = c.admit(body(0), messages_end=MSG_END)
    c.finish(adm, out(0))
    adm2 = c.admit(body(1), messages_end=MSG_END)  # pins the 2 system blocks
    assert c.kv_usage == 1.0  # 2 pinned + 2 blocks in flight over 2
    assert c.clear() == 0 and c.blocks == 2 and c.host.rows_used == 0
    c.finish(adm2, out(1))
    assert c.stats.lookups == 2 and c.kv_usage == 0.0
    with pytest.raises(ValueError, match="already finished"):
        c.finish(adm2, out(1))


def test_block_hasher_equals_prefix_keys():
    from kvreplay.sim.prefix import BlockHasher, PrefixKeys

    seq = list(range(5000, 5037))
    h = BlockHasher(4)
    h.feed(seq[:10])
    h.feed(seq[10:11])
    keys = h.feed(seq[11:])
    assert keys == PrefixKeys(seq).block_keys(4) == [PrefixKeys(seq).key(4 * i) for i in range(1, 10)]


def test_prompt_blocks_shared_once_prefilled():
    # Two requests with the same 16-token prompt (4 blocks of 4) at once: B admitted
    # before A's prefill ends misses; C admitted after it hits (16 - 1) // 4 = 3 blocks.
    c = RadixCache(capacity_blocks=100, block_size=4)
    p = list(range(200, 216))
    a = c.admit(p)
    b = c.admit(p)
    assert (a.device_hit_tokens, b.device_hit_tokens) == (0, 0)
    assert c.prefilled(a) == 4 and c.prefilled(a) == 0
    assert c.kv_usage == (4 + 4) / 100  # A's 4 pinned blocks + B's 4 blocks being computed
    cc = c.admit(p)
    assert cc.device_hit_tokens == 12
    assert c.finish(b).stored_blocks == 0  # B computed the same blocks: nothing new
    ra = c.finish(a, [1, 2, 3, 4, 5])  # + output blocks of the first 16 + 5 - 1 = 20 tokens: 1 more
    assert (ra.stored_blocks, c.blocks) == (5, 5)
    c.finish(cc)
    assert c.kv_usage == 0.0 and c.stats.stored_blocks == 5
