"""Miss-ratio (hit-ratio) curves of prefix caches, every capacity in one pass.

**Block radix model.** A request is a chain of blocks from the root of a block
tree (Mooncake ``hash_ids``, or token blocks of a rendered prompt). A radix
cache of ``C`` blocks looks the chain up (its hit is the longest cached prefix),
then inserts the missing blocks and touches the whole chain; to make room it
evicts the least recently touched *leaf*. Plain per-block LRU is not that in
general: a chain's blocks are touched at the same moment, and per-block LRU
may evict an inner block and leave its children stranded. The two agree
exactly for this order of references:

    within a request, touch the blocks deepest first, root last.

Then every block is more recent than all its descendants (each request that
touches a child touches its parent after it), so (a) the ``C`` most recent
blocks are closed under prefixes: an LRU cache of ``C`` blocks is always a
radix tree; (b) its least recent block has no cached child, so the block LRU
evicts is a leaf, and it is the least recently touched leaf (ties between
leaves of one request cannot occur: a request touches one path, whose deepest
block is its only possible leaf). Hence per-block LRU on that reference string
*is* leaf-LRU radix eviction with lookups before inserts, a request's hit is
the set of its blocks whose stack distance (looked up against the state before
the request, see ``stack``) is ``<= C``, and that set is a prefix because
distances rise with depth. A request longer than ``C`` keeps its first ``C``
blocks. Exactness holds for page-granular trees (one node per block, as
vLLM's and SGLang's paged prefix caches); engines that evict whole
variable-length radix segments at once can evict more than LRU does.

The simulator's ``RadixCache`` evicts unreferenced leaves by
``(last_used, -depth)``: least recent first, deepest first within one touch,
which is this order exactly (its pins are released before it evicts, so at
concurrency 1 they change nothing). It also inserts the full blocks of the
output, which this module takes as part of the chain, and looks up only the
first ``(n - 1) // block_size`` blocks, which ``block_curve`` takes as
``lookup_blocks``.

**Host tier.** The simulator's host tier (``cache_host.HostTier``) is a pool
of checkpoint rows and pages with its own eviction and folding, and whether a
request uses it depends on the device hit; it is not an LRU stack over blocks,
so ``simulate`` runs it once per capacity with the simulator's class. The
device tier does not depend on it (a host hit inserts the same device blocks),
so the device curve stays one pass.

**Entries model.** See ``entries``; a request's snapshots are items of the
same one-pass algorithm.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kvreplay.offline.stack import narrow_ids, stack_distances_compact

__all__ = [
    "Curve",
    "block_curve",
    "block_distances",
    "curve_from_distances",
    "default_capacities",
]


@dataclass(frozen=True, slots=True)
class Curve:
    """Hits against capacity, for every capacity ``0 .. max_capacity``.

    Attributes:
        unit: The capacity unit, ``"block"`` or ``"entry"``.
        unit_tokens: Tokens per unit where fixed (blocks), else None.
        requests: Requests counted.
        prompt_tokens: Their prompt tokens in total (tokens).
        hit_requests: ``hit_requests[C]`` = requests with a cache hit at
            capacity ``C``; shape ``(max_capacity + 1,)`` int64.
        hit_tokens: ``hit_tokens[C]`` = cached prompt tokens at capacity ``C``
            (tokens); same shape.
        hit_units: ``hit_units[C]`` = references that hit (blocks or entries).
    """

    unit: str
    unit_tokens: int | None
    requests: int
    prompt_tokens: int
    hit_requests: np.ndarray
    hit_tokens: np.ndarray
    hit_units: np.ndarray

    @property
    def max_capacity(self) -> int:
        """The capacity past which nothing more hits (units)."""
        return len(self.hit_tokens) - 1

    def at(self, capacity: int) -> tuple[int, int]:
        """``(hit_requests, hit_tokens)`` at one capacity (units; any size >= 0)."""
        c = min(int(capacity), self.max_capacity)
        return int(self.hit_requests[c]), int(self.hit_tokens[c])

    def smallest_capacity(self, share: float, *, metric: str = "tokens") -> int:
        """Smallest capacity whose hit ratio reaches ``share`` of the best one.

        Args:
            share: Fraction of the best achievable hits, in (0, 1].
            metric: ``"tokens"`` or ``"requests"``.

        Returns:
            The capacity (units); 0 when nothing ever hits.
        """
        arr = self.hit_tokens if metric == "tokens" else self.hit_requests
        best = int(arr[-1])
        if best == 0:
            return 0
        goal = share * best
        return int(np.searchsorted(arr, goal - 1e-9 * best, side="left"))


def curve_from_distances(
    dist: np.ndarray,
    weight_tokens: np.ndarray | int,
    request_of: np.ndarray,
    request_dist: np.ndarray,
    *,
    counted: np.ndarray,
    prompt_tokens: np.ndarray,
    unit: str,
    unit_tokens: int | None,
) -> Curve:
    """Turn per-reference distances into cumulative hit curves.

    Args:
        dist: Stack distance of each reference (0 = cold), shape ``(n,)``.
        weight_tokens: Tokens each reference contributes on a hit, ``(n,)``;
            or one int for every reference (no per-reference array).
        request_of: Request index of each reference, ``(n,)``.
        request_dist: Per request, the smallest capacity at which it has any
            hit (0 = never), shape ``(R,)``.
        counted: Per request, whether it counts (foreign interleaved requests
            do not), bool ``(R,)``.
        prompt_tokens: Prompt length per request (tokens), ``(R,)``.
        unit: ``"block"`` or ``"entry"``.
        unit_tokens: Tokens per unit where fixed.

    Returns:
        The curve up to the largest distance seen.
    """
    keep = counted[request_of] & (dist > 0)
    rq = counted & (request_dist > 0)
    top = int(max(dist.max(initial=0), request_dist.max(initial=0)))
    size = top + 1
    hit = dist[keep]
    del keep
    units = np.bincount(hit, minlength=size)
    tok: np.ndarray
    if isinstance(weight_tokens, (int, np.integer)):
        # The same float64 sums as bincount's weights (exact integers below 2**53).
        tok = units.astype(np.float64) * float(weight_tokens)
    else:
        tok = np.bincount(hit, weights=weight_tokens[counted[request_of] & (dist > 0)], minlength=size)
    del hit
    reqs = np.bincount(request_dist[rq], minlength=size)
    return Curve(
        unit=unit,
        unit_tokens=unit_tokens,
        requests=int(counted.sum()),
        prompt_tokens=int(prompt_tokens[counted].sum()),
        hit_requests=np.cumsum(reqs).astype(np.int64),
        hit_tokens=np.rint(np.cumsum(tok)).astype(np.int64),
        hit_units=np.cumsum(units).astype(np.int64),
    )


def block_distances(blocks: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Radix-LRU stack distance of every block reference.

    Args:
        blocks: Block ids, request after request, root first; ``(n,)``.
        starts: Offsets of each request in ``blocks`` plus a final ``n``;
            ``(R + 1,)``.

    Returns:
        Distances in the same (root-first) order, ``(n,)``, int32 below
        ``2**31 - 1`` references, else int64: block ``i``
        of a request is cached before it at capacity ``C`` iff ``0 < d <= C``
        (see the module docstring for the deepest-first touch order).

    Raises:
        ValueError: a block id repeats within one request.
    """
    blocks = np.asarray(blocks)
    starts = np.asarray(starts, dtype=np.int64)
    n = len(blocks)
    dt = np.int32 if n < (1 << 31) - 1 else np.int64
    lengths = np.diff(starts)
    # Each request reversed in place: position i <-> first + last - i (an involution).
    rev = np.repeat((starts[:-1] + starts[1:] - 1).astype(dt), lengths)
    rev -= np.arange(n, dtype=dt)
    items = narrow_ids(blocks[rev])  # only equality matters
    del rev
    dist_rev = stack_distances_compact(items, request_starts=starts)
    del items
    rev = np.repeat((starts[:-1] + starts[1:] - 1).astype(dt), lengths)
    rev -= np.arange(n, dtype=dt)
    return dist_rev[rev]


def block_curve(
    blocks: np.ndarray,
    starts: np.ndarray,
    lookup_blocks: np.ndarray,
    *,
    block_tokens: int,
    prompt_tokens: np.ndarray,
    counted: np.ndarray | None = None,
) -> Curve:
    """The radix block model's curve for capacities ``0 .. max`` blocks.

    Matches ``kvreplay.sim.cache_radix.RadixCache`` at concurrency 1: a request
    looks up its first ``lookup_blocks`` blocks (``(n - 1) // block_size``
    there, so one prompt token is always computed), then inserts and touches
    its whole chain (the full blocks of prompt and output).

    Args:
        blocks: Block ids of each request's chain, request after request,
            root first; ``(n,)``.
        starts: Request offsets plus a final ``n``; ``(R + 1,)``.
        lookup_blocks: Leading chain blocks each request looks up, ``(R,)``;
            at most the chain length.
        block_tokens: Tokens per block; a hit block credits this many tokens.
        prompt_tokens: Prompt length per request (tokens), ``(R,)``.
        counted: Requests that count (default all), bool ``(R,)``.

    Returns:
        The curve: hits are block aligned; a request hits when its first
        block is cached.

    Raises:
        ValueError: a block repeats within a chain, or ``lookup_blocks``
            exceeds a chain.
    """
    starts = np.asarray(starts, dtype=np.int64)
    lookup_blocks = np.asarray(lookup_blocks, dtype=np.int64)
    R = len(starts) - 1
    lengths = np.diff(starts)
    if np.any(lookup_blocks > lengths) or np.any(lookup_blocks < 0):
        raise ValueError("lookup_blocks must lie within each chain")
    dist = block_distances(blocks, starts)
    dt = dist.dtype
    req = np.repeat(np.arange(R, dtype=dt), lengths)
    depth = np.arange(len(dist), dtype=dt)
    depth -= np.repeat(starts[:-1].astype(dt), lengths)
    dist[depth >= np.repeat(lookup_blocks.astype(dt), lengths)] = 0  # not looked up
    del depth
    root = np.zeros(R, dtype=np.int64)
    has = lookup_blocks > 0
    root[has] = dist[starts[:-1][has]]
    if counted is None:
        counted = np.ones(R, dtype=bool)
    return curve_from_distances(
        dist,
        int(block_tokens),
        req,
        root,
        counted=np.asarray(counted, dtype=bool),
        prompt_tokens=np.asarray(prompt_tokens),
        unit="block",
        unit_tokens=block_tokens,
    )


def default_capacities(max_capacity: int, *, points: int = 40) -> list[int]:
    """Roughly geometric capacities ``1 .. max_capacity`` (units), ascending, distinct.

    Args:
        max_capacity: The largest capacity of interest (units).
        points: About how many to return.

    Returns:
        Capacities, always including 1 and ``max_capacity`` (empty when 0).
    """
    if max_capacity <= 0:
        return []
    caps = np.unique(np.rint(np.geomspace(1, max_capacity, num=max(points, 2))).astype(np.int64))
    return [int(c) for c in caps]
