"""Block radix model: one-pass curve equals a naive leaf-LRU radix tree at every capacity."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvreplay.offline.mrc import block_curve, block_distances, default_capacities


class NaiveRadix:
    """Page-granular radix tree: lookup longest cached prefix, insert, touch, evict LRU leaves.

    Written independently of the stack code: explicit tree, eviction scans leaves for the
    oldest touch (ties: deepest first, i.e. the leaf of the path the request touched).
    """

    def __init__(self, capacity):
        self.capacity = capacity
        self.parent, self.touch, self.depth, self.children = {}, {}, {}, {}

    def request(self, chain, now):
        hit = 0
        for b in chain:
            if b in self.parent:
                hit += 1
            else:
                break
        for i, b in enumerate(chain):
            if b not in self.parent:
                p = chain[i - 1] if i else None
                self.parent[b], self.depth[b], self.children[b] = p, i, 0
                if p is not None:
                    self.children[p] += 1
            self.touch[b] = now
        while len(self.parent) > self.capacity:
            leaf = min((b for b in self.parent if self.children[b] == 0),
                       key=lambda b: (self.touch[b], -self.depth[b]))
            p = self.parent.pop(leaf)
            del self.touch[leaf], self.depth[leaf], self.children[leaf]
            if p is not None:
                self.children[p] -= 1
        return hit


def flatten(chains):
    blocks = [b for c in chains for b in c]
    starts = np.cumsum([0] + [len(c) for c in chains])
    return np.array(blocks, dtype=np.int64), starts


def test_hand_computed():
    chains = [[0, 1, 2], [0, 1, 3], [0, 4], [0, 1, 2]]
    blocks, starts = flatten(chains)
    assert block_distances(blocks, starts).tolist() == [0, 0, 0, 1, 2, 0, 1, 0, 1, 3, 5]
    tok = np.array([512, 512, 100, 512, 512, 7, 512, 9, 512, 512, 100])
    c = block_curve(blocks, tok, starts, prompt_tokens=np.array([1124, 1031, 521, 1124]))
    assert c.max_capacity == 5 and c.requests == 4 and c.prompt_tokens == 3800
    # C=1: roots of r1..r3 hit -> 3 requests, 3 * 512 tokens
    assert c.at(1) == (3, 1536)
    # C=3: r1 hits 0,1; r2 hits 0; r3 hits 0,1 -> 5 blocks
    assert c.at(3) == (3, 2560) and int(c.hit_units[3]) == 5
    # C=5 and beyond: r3 also hits its 100-token block 2
    assert c.at(5) == (3, 2660) and c.at(10**6) == (3, 2660)
    # C=2: 1024 + 512 + 512 = 2048 tokens
    assert c.at(2) == (3, 2048)
    assert c.smallest_capacity(1.0) == 5 and c.smallest_capacity(0.6) == 2 and c.smallest_capacity(0.5) == 1


def test_interleaved_requests_not_counted():
    chains = [[0, 1], [9], [0, 1]]
    blocks, starts = flatten(chains)
    c = block_curve(blocks, np.ones(5, dtype=np.int64), starts, prompt_tokens=np.array([2, 1, 2]),
                    counted=np.array([True, False, True]))
    assert c.requests == 2 and c.prompt_tokens == 4
    # the foreign block 9 pushes 0 to distance 2: nothing hits at C=1
    assert c.at(1) == (0, 0) and c.at(2) == (1, 1) and c.at(3) == (1, 2)


@st.composite
def tree_chains(draw):
    n_req = draw(st.integers(1, 30))
    chains, paths, next_id = [], [[]], 0
    for _ in range(n_req):
        base = draw(st.sampled_from(paths))
        cut = draw(st.integers(0, len(base)))
        extra = draw(st.integers(0 if cut else 1, 4))
        chain = base[:cut] + list(range(next_id, next_id + extra))
        next_id += extra
        chains.append(chain)
        paths.append(chain)
    return chains


@settings(max_examples=120, deadline=None)
@given(tree_chains())
def test_equals_naive_radix_at_every_capacity(chains):
    blocks, starts = flatten(chains)
    tok = np.ones(len(blocks), dtype=np.int64)
    c = block_curve(blocks, tok, starts, prompt_tokens=np.array([len(x) for x in chains]))
    for cap in range(1, c.max_capacity + 3):
        sim = NaiveRadix(cap)
        hits = [sim.request(ch, t) for t, ch in enumerate(chains)]
        assert int(c.hit_units[min(cap, c.max_capacity)]) == sum(hits), cap
        assert c.at(cap)[0] == sum(h > 0 for h in hits), cap


def test_default_capacities():
    assert default_capacities(0) == []
    caps = default_capacities(1000, points=10)
    assert caps[0] == 1 and caps[-1] == 1000 and caps == sorted(set(caps))
