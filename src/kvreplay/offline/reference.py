"""Brute-force simulation with the simulator's own cache classes, one run per capacity.

This is the reference the one-pass curves are tested against, and the path
``simulate`` takes where no one-pass curve exists (the entries model with
``recency="use"``, the radix model with a host tier). It drives
``kvreplay.sim.cache_entries.EntriesCache`` and ``kvreplay.sim.cache_radix.
RadixCache`` exactly as ``SimEngine`` does at concurrency 1: entries look up
the prompt then store the snapshot points; radix admits the prompt then
finishes with the output; a new epoch clears the cache.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kvreplay.offline.sources import ModelRequest
from kvreplay.sim.cache_entries import EntriesCache
from kvreplay.sim.cache_host import HostTier
from kvreplay.sim.cache_radix import RadixCache

__all__ = ["Point", "brute_entries", "brute_radix"]


@dataclass(frozen=True, slots=True)
class Point:
    """Hits at one capacity.

    Attributes:
        capacity: Entries or device blocks.
        hit_requests: Counted requests with cached tokens > 0.
        hit_tokens: Cached tokens credited to counted requests (tokens).
        device_hit_tokens: Of which from the device tier (radix; tokens).
        host_hit_tokens: Of which beyond it, from the host tier (tokens).
    """

    capacity: int
    hit_requests: int
    hit_tokens: int
    device_hit_tokens: int = 0
    host_hit_tokens: int = 0


def brute_entries(
    reqs: Sequence[ModelRequest],
    capacities: Sequence[int],
    *,
    points: Sequence[str],
    recency: str = "use",
    max_entry_bytes: int | None = None,
    bytes_per_token: int | None = None,
    refuse_over_bytes: bool = False,
    per_request: list[list[int]] | None = None,
) -> list[Point]:
    """Run ``EntriesCache`` once per capacity.

    Args:
        reqs: Rendered requests in order.
        capacities: Capacities (entries).
        points: Snapshot points (``system``, ``messages``, ``prompt``).
        recency: ``"use"`` (the simulator's default) or ``"offer"``.
        max_entry_bytes: Per-snapshot cap (bytes), as the simulator's flag.
        bytes_per_token: KV bytes per token (bytes); None = the class default.
        refuse_over_bytes: Refuse over-cap snapshots instead of truncating.
        per_request: When given, one list per capacity is appended to it: every request's
            hit tokens, in order (counted or not).

    Returns:
        One point per capacity.
    """
    out = []
    for cap in capacities:
        each: list[int] = []
        kw: dict = {
            "max_entries": cap,
            "recency": recency,
            "max_entry_bytes": max_entry_bytes,
            "refuse_over_bytes": refuse_over_bytes,
        }
        if bytes_per_token is not None:
            kw["bytes_per_token"] = bytes_per_token
        cache = EntriesCache(**kw)
        hr = ht = 0
        epoch = reqs[0].epoch if reqs else 0
        for r in reqs:
            if r.epoch != epoch:
                cache.clear()
                epoch = r.epoch
            look = cache.lookup(r.tokens)
            offs = [
                r.system_end
                if p == "system"
                else r.messages_end
                if p == "messages"
                else len(r.tokens)
                for p in points
            ]
            cache.store(r.tokens, offs)
            each.append(look.hit_tokens)
            if r.counted:
                hr += look.hit_tokens > 0
                ht += look.hit_tokens
        out.append(Point(cap, hr, ht, ht, 0))
        if per_request is not None:
            per_request.append(each)
    return out


def brute_radix(
    reqs: Sequence[ModelRequest],
    capacities: Sequence[int],
    *,
    block_size: int,
    host: Callable[[], HostTier] | None = None,
    per_request: list[list[int]] | None = None,
) -> list[Point]:
    """Run ``RadixCache`` once per device capacity.

    Args:
        reqs: Rendered requests in order.
        capacities: Device capacities (blocks).
        block_size: Tokens per block.
        host: Makes a fresh host tier for each run, or None for none.
        per_request: As ``brute_entries``'s (cached tokens of each request).

    Returns:
        One point per capacity.
    """
    out = []
    for cap in capacities:
        cache = RadixCache(
            capacity_blocks=cap, block_size=block_size, host=host() if host else None
        )
        hr = ht = hd = 0
        each: list[int] = []
        epoch = reqs[0].epoch if reqs else 0
        for r in reqs:
            if r.epoch != epoch:
                cache.clear()
                epoch = r.epoch
            o = cache.request(r.tokens, r.output, messages_end=r.messages_end)
            each.append(o.cached_tokens)
            if r.counted:
                hr += o.cached_tokens > 0
                ht += o.cached_tokens
                hd += o.device_hit_tokens
        out.append(Point(cap, hr, ht, hd, ht - hd))
        if per_request is not None:
            per_request.append(each)
    return out
