"""Radix block model: the one-pass curve equals the simulator's RadixCache at every capacity."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvreplay.offline.mrc import block_curve, block_distances, default_capacities
from kvreplay.offline.reference import brute_radix
from kvreplay.offline.sources import ModelRequest, block_requests_from_models
from kvreplay.sim.cache_radix import RadixCache


def flatten(chains):
    blocks = [b for c in chains for b in c]
    starts = np.cumsum([0] + [len(c) for c in chains])
    return np.array(blocks, dtype=np.int64), starts


def test_distances_by_hand():
    # touch order deepest first: after r0 the stack is 0,1,2; r1 looks up 0 (1), 1 (2), 3 cold,
    # then stack 0,1,3,2; r2: 0 (1), 4 cold -> 0,4,1,3,2; r3: 0 (1), 1 (3), 2 (5)
    chains = [[0, 1, 2], [0, 1, 3], [0, 4], [0, 1, 2]]
    blocks, starts = flatten(chains)
    assert block_distances(blocks, starts).tolist() == [0, 0, 0, 1, 2, 0, 1, 0, 1, 3, 5]


def test_curve_by_hand():
    chains = [[0, 1, 2], [0, 1, 3], [0, 4], [0, 1, 2]]
    blocks, starts = flatten(chains)
    # every request looks up all but its last block (n - 1 // B with a partial tail)
    look = np.array([2, 2, 1, 2])
    c = block_curve(blocks, starts, look, block_tokens=16, prompt_tokens=np.array([40, 40, 20, 40]))
    assert c.requests == 4 and c.prompt_tokens == 140 and c.max_capacity == 3
    # C=1: roots of r1, r2, r3 -> 3 requests, 3 blocks
    assert c.at(1) == (3, 48)
    # C=2: r1 also block 1 (distance 2) -> 4 blocks
    assert c.at(2) == (3, 64)
    # C=3: r3 block 1 (distance 3) -> 5 blocks; block 2 of r3 is never looked up
    assert c.at(3) == (3, 80) and c.at(10**6) == (3, 80)
    assert c.smallest_capacity(1.0) == 3 and c.smallest_capacity(0.75) == 2
    assert c.smallest_capacity(0.6) == 1


def test_uncounted_requests_still_take_space():
    chains = [[0, 1], [9], [0, 1]]
    blocks, starts = flatten(chains)
    c = block_curve(
        blocks,
        starts,
        np.array([2, 1, 2]),
        block_tokens=1,
        prompt_tokens=np.array([3, 2, 3]),
        counted=np.array([True, False, True]),
    )
    assert c.requests == 2 and c.prompt_tokens == 6
    # foreign block 9 pushes 0 to distance 2
    assert c.at(1) == (0, 0) and c.at(2) == (1, 1) and c.at(3) == (1, 2)


@st.composite
def tree_prompts(draw):
    """Prompts built from shared segments, so that they share block prefixes."""
    n_req = draw(st.integers(1, 16))
    paths, out = [[]], []
    for _ in range(n_req):
        base = draw(st.sampled_from(paths))
        cut = draw(st.integers(0, len(base)))
        extra = draw(st.lists(st.integers(1000, 1010), min_size=0 if cut else 1, max_size=9))
        toks = tuple(base[:cut] + extra)
        paths.append(list(toks))
        out_len = draw(st.integers(0, 4))
        out.append(ModelRequest(toks, tuple(range(5000, 5000 + out_len)), 0, len(toks)))
    return out


@settings(max_examples=60, deadline=None)
@given(tree_prompts(), st.integers(1, 3))
def test_equals_radixcache_at_every_capacity(reqs, block_size):
    br = block_requests_from_models(reqs, block_size)
    c = block_curve(
        br.blocks,
        br.starts,
        br.lookup_blocks,
        block_tokens=block_size,
        prompt_tokens=br.prompt_tokens,
    )
    caps = list(range(1, c.max_capacity + 3))
    for p in brute_radix(reqs, caps, block_size=block_size):
        assert c.at(p.capacity) == (p.hit_requests, p.hit_tokens), p


def test_epoch_clears_like_reset():
    a = ModelRequest((1, 2, 3, 4, 5), (), 0, 5)
    reqs = [a, a, ModelRequest(a.tokens, (), 0, 5, True, 1)]
    br = block_requests_from_models(reqs, 2)
    c = block_curve(
        br.blocks, br.starts, br.lookup_blocks, block_tokens=2, prompt_tokens=br.prompt_tokens
    )
    # only the second request hits (2 blocks = 4 tokens); the third is after a reset
    assert c.at(2) == (1, 4)
    assert [(p.hit_requests, p.hit_tokens) for p in brute_radix(reqs, [2], block_size=2)] == [
        (1, 4)
    ]


def test_full_prompt_repeat_hits_n_minus_one_rounded_down():
    cache = RadixCache(capacity_blocks=8, block_size=4)
    toks = tuple(range(100, 108))  # 8 tokens, 2 blocks; lookup limit (8 - 1) // 4 = 1
    cache.request(toks)
    assert cache.request(toks).cached_tokens == 4
    br = block_requests_from_models([ModelRequest(toks, (), 0, 8)] * 2, 4)
    c = block_curve(
        br.blocks, br.starts, br.lookup_blocks, block_tokens=4, prompt_tokens=br.prompt_tokens
    )
    assert c.at(8) == (1, 4)


def test_default_capacities():
    assert default_capacities(0) == []
    caps = default_capacities(1000, points=10)
    assert caps[0] == 1 and caps[-1] == 1000 and caps == sorted(set(caps))
