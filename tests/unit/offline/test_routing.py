"""Routing loss offline (kvreplay.offline.routing): exact cached tokens derived by hand.

Token sequences are made by hand: S = 1..8 and T = 101..108 are two shared
prefixes; a, b, c, d are four distinct 4-token tails; every prompt is 12 tokens
with ``system_end = 8`` (the shared prefix) and ``messages_end = 12``; no output.

Radix, block size 4: a 12-token prompt stores 3 blocks; a later prompt sharing
its 8-token prefix hits ``min(2 held blocks, (12 - 1) // 4 = 2) * 4 = 8`` tokens.
Entries, one snapshot per request (``snapshots=1``: the system point, 8 tokens):
a prompt whose 8-token prefix is held hits ``min(8, 12 - 1) = 8``.

``random.Random(0).randrange(2)`` gives 1, 1, 0, 1 for the first four draws
(Python's Mersenne Twister, stable since 3.2).
"""

from __future__ import annotations

import pytest

from kvreplay.errors import ConfigError
from kvreplay.offline.routing import assignment, merged_config, replay_assignment, routing_loss
from kvreplay.offline.sources import ModelRequest
from kvreplay.sim.config import SimConfig

S = tuple(range(1, 9))
T = tuple(range(101, 109))
TAIL = {name: tuple(range(base, base + 4)) for name, base in (("a", 201), ("b", 301), ("c", 401), ("d", 501))}


def req(prefix, tail, *, epoch=0, counted=True):
    return ModelRequest(prefix + TAIL[tail], (), 8, 12, counted, epoch)


RADIX = SimConfig(cache="radix", block_size=4, device_blocks=100, time_scale=0)
ENTRY1 = SimConfig(cache="entries", cache_entries=1, snapshots=1, time_scale=0)
# the bytes model: 8 entries allowed, but 8 bytes at 1 byte per token hold one 8-token snapshot
BYTES8 = SimConfig(cache="entries", cache_entries=8, max_bytes=8, bytes_per_token=1, snapshots=1, time_scale=0)

# S+a, S+c, T+b, T+d: pairs adjacent, so round-robin over 2 splits every pair.
PAIRS = [req(S, "a"), req(S, "c"), req(T, "b"), req(T, "d")]
# S+a, T+b, S+c, T+d: pairs interleaved.
MIXED = [req(S, "a"), req(T, "b"), req(S, "c"), req(T, "d")]


def figures(loss):
    return {name: fig["cached_tokens"] for name, fig in loss["policies"].items()}


def test_round_robin_loses_what_prefix_affinity_keeps_radix():
    # RR [0,1,0,1]: S+c lands on r1 (cold), T+b on r0 (holds S), T+d on r1 (holds S): 0 cached.
    # affinity: S+a -> r0 (tie, lowest index); S+c -> r0 (peek 8), cached 8;
    #   T+b -> r1 (tie at 0; r1 has fewer requests); T+d -> r1 (peek 8), cached 8: 16.
    # merged (200 blocks): 0 + 8 + 0 + 8 = 16. random [1,1,0,1]: 0 + 8 + 0 + 0 (r1 holds S only) = 8.
    loss = routing_loss(PAIRS, [RADIX, RADIX], observed=[0, 1, 0, 1])
    assert figures(loss) == {"observed": 0, "merged": 16, "prefix_affinity": 16, "round_robin": 0, "random": 8}
    pol = loss["policies"]
    assert [pol[n]["kept_pct"] for n in ("observed", "merged", "prefix_affinity", "round_robin", "random")] == [
        0.0, 100.0, 100.0, 0.0, 50.0]
    assert pol["prefix_affinity"]["hit_rate"] == 16 / 48
    assert pol["prefix_affinity"]["per_replica_cached_tokens"] == [8, 8]
    assert pol["prefix_affinity"]["per_replica_requests"] == [2, 2]
    assert pol["merged"]["prompt_tokens"] == 48 and loss["prompt_tokens"] == 48 and loss["requests"] == 4
    assert loss["cache"] == {"model": "radix", "unit": "blocks", "per_replica": [100, 100], "merged": 200}
    assert loss["observed"] == {"replica": [0, 1, 0, 1], "cached_tokens": [0, 0, 0, 0]}
    assert loss["kept_pct"] == 0.0
    assert loss["sentence"] == (
        "the routing kept 0.0% of the reuse available (merged-cache bound 16, greedy affinity 16)"
    )
    assert all(fig["method"] for fig in pol.values())
    assert assignment(PAIRS, [RADIX, RADIX], "prefix_affinity") == ([0, 0, 1, 1], [0, 8, 0, 8])


@pytest.mark.parametrize(("cfg", "cache"), [
    (ENTRY1, {"model": "entries", "unit": "entries", "per_replica": [1, 1], "merged": 2}),
    (BYTES8, {"model": "entries", "unit": "bytes", "per_replica": [8, 8], "merged": 16}),
], ids=["entries", "bytes"])
def test_capacity_per_replica_is_respected_entries(cfg, cache):
    # One snapshot per replica (one entry, or 8 bytes). RR [0,1,0,1] keeps each prefix on its own replica: 0+0+8+8.
    # Observed all on r0: S, then T evicts S, then S evicts T: nothing hits (0).
    # Merged (2 snapshots): 16. Affinity: [0,1,0,1] as RR: 16.
    # Random [1,1,0,1]: r1 S, r1 T (evicts S), r0 S (cold), r1 T+d hits T: 8.
    loss = routing_loss(MIXED, [cfg, cfg], observed=[0, 0, 0, 0])
    assert figures(loss) == {"observed": 0, "merged": 16, "prefix_affinity": 16, "round_robin": 16, "random": 8}
    assert loss["cache"] == cache
    assert loss["policies"]["random"]["per_replica_cached_tokens"] == [0, 8]
    assert loss["policies"]["round_robin"]["kept_pct"] == 100.0


def test_epochs_and_uncounted():
    # a reset between the two requests empties every cache; an uncounted request takes space, its hit is not counted
    fresh = [req(S, "a"), req(S, "c", epoch=1)]
    assert figures(routing_loss(fresh, [RADIX]))["merged"] == 0
    mixed = [req(S, "a", counted=False), req(S, "c")]
    loss = routing_loss(mixed, [RADIX])
    assert figures(loss)["merged"] == 8 and loss["prompt_tokens"] == 12 and loss["requests"] == 1
    assert replay_assignment(PAIRS, [RADIX, RADIX], [0, 0, 0, 0]) == [0, 8, 0, 8]


def test_no_observed_and_a_zero_bound():
    cold = [req(S, "a"), req(T, "b")]
    loss = routing_loss(cold, [RADIX, RADIX])
    assert "observed" not in loss["policies"] and loss["kept_pct"] is None
    assert loss["policies"]["merged"]["kept_pct"] is None
    assert loss["sentence"] == "no observed assignment (merged-cache bound 0, greedy affinity 0)"


def test_merged_config_sums_capacities():
    assert merged_config([RADIX, RADIX, RADIX]).device_blocks == 300
    two = merged_config([SimConfig(cache_entries=3, max_bytes=10), SimConfig(cache_entries=5, max_bytes=20)])
    assert (two.cache_entries, two.max_bytes) == (8, 30)
    assert merged_config([SimConfig(max_bytes=10), SimConfig()]).max_bytes is None
    with pytest.raises(ConfigError):
        merged_config([RADIX, ENTRY1])
    with pytest.raises(ConfigError):
        merged_config([])


def test_bad_assignments():
    with pytest.raises(ConfigError):
        routing_loss(PAIRS, [RADIX, RADIX], observed=[0, 1])
    with pytest.raises(ConfigError):
        routing_loss(PAIRS, [RADIX, RADIX], observed=[0, 1, 2, 0])
    with pytest.raises(ConfigError):
        assignment(PAIRS, [RADIX], "least_loaded")
