"""Router policies (kvreplay.sim.routing) and the caches' side-effect-free peek."""

from __future__ import annotations

import pytest

from kvreplay.sim.cache_entries import EntriesCache
from kvreplay.sim.cache_radix import RadixCache
from kvreplay.sim.routing import REPLICA_HEADER, ROUTER_POLICIES, RouterPolicy

S = tuple(range(1, 9))
A = S + (201, 202, 203, 204)
C = S + (401, 402, 403, 404)


class Fixed:
    def __init__(self, value):
        self.value = value

    def peek(self, tokens):
        return self.value


def test_names():
    assert REPLICA_HEADER == "x-kvreplay-replica"
    assert ROUTER_POLICIES == ("round_robin", "random", "prefix_affinity")


def test_round_robin_and_random():
    rr = RouterPolicy(3, "round_robin")
    assert [rr.choose() for _ in range(7)] == [0, 1, 2, 0, 1, 2, 0]
    assert rr.assigned == [3, 2, 2]
    # random.Random(0).randrange(2): 1, 1, 0, 1, 1 (seed 1: 0, 0, 1, 0, 1)
    assert [RouterPolicy(2, "random").choose() for _ in range(1)] == [1]
    r0 = RouterPolicy(2, "random", seed=0)
    assert [r0.choose() for _ in range(5)] == [1, 1, 0, 1, 1]
    r1 = RouterPolicy(2, "random", seed=1)
    assert [r1.choose() for _ in range(5)] == [0, 0, 1, 0, 1]


def test_prefix_affinity_ties():
    pa = RouterPolicy(3, "prefix_affinity")
    # the most cached tokens wins, whatever the load
    assert pa.choose(A, [Fixed(0), Fixed(8), Fixed(4)], [0, 5, 0]) == 1
    # a tie goes to the fewest in flight ...
    assert pa.choose(A, [Fixed(8), Fixed(8), Fixed(0)], [2, 1, 0]) == 1
    # ... then the fewest routed so far (assigned [0, 2, 0]) ...
    assert pa.choose(A, [Fixed(0), Fixed(0), Fixed(0)]) == 0
    # ... then the lowest index (assigned [1, 2, 0] -> 2 has fewest)
    assert pa.choose(A, [Fixed(0), Fixed(0), Fixed(0)]) == 2
    assert pa.choose(None, [Fixed(9), Fixed(0), Fixed(0)]) == 0  # no tokens: every replica scores 0
    with pytest.raises(ValueError):
        pa.choose(A, [Fixed(0)])


def test_bad_policy():
    with pytest.raises(ValueError):
        RouterPolicy(0, "round_robin")
    with pytest.raises(ValueError):
        RouterPolicy(2, "cache_aware")


def test_entries_peek_changes_nothing():
    cache = EntriesCache(max_entries=2)
    cache.request(A, (8, 12))
    before = (cache.cache_json(), cache.held_lengths())
    assert cache.peek(C) == 8  # the 8-token system snapshot
    assert cache.peek(A) == 11  # the 12-token snapshot, capped at n - 1
    assert cache.peek((7,) + S) == 0
    assert (cache.cache_json(), cache.held_lengths()) == before
    assert cache.lookup(C).hit_tokens == 8  # peek said what the lookup credits


def test_radix_peek_changes_nothing():
    cache = RadixCache(capacity_blocks=10, block_size=4)
    cache.request(A)
    stats = (cache.stats.lookups, cache.stats.hit_tokens, cache.blocks)
    assert cache.peek(C) == 8
    assert cache.peek(A) == 8  # (12 - 1) // 4 = 2 blocks at most
    assert cache.peek(S) == 4  # (8 - 1) // 4 = 1
    assert cache.peek(()) == 0
    assert (cache.stats.lookups, cache.stats.hit_tokens, cache.blocks) == stats
    assert cache.admit(C).device_hit_tokens == 8
