"""LRU stack distances for a whole reference string in one vectorised pass.

LRU is a stack algorithm (Mattson, Gecsei, Slutz and Traiger, "Evaluation
techniques for storage hierarchies", IBM Systems Journal 9(2), 1970): after any
prefix of a reference string, an LRU cache of capacity ``C`` holds exactly the
``C`` most recently referenced distinct items. So an item referenced at
position ``t`` is in every cache of capacity ``>= d`` and in none smaller, where
``d`` (its *stack distance*, 1-based) is one plus the number of distinct items
referenced since its previous reference. One pass that computes ``d`` for every
reference gives the hit count at every capacity: ``hits(C) = #{t : d_t <= C}``.

**Lookups before updates.** A request that references several items looks them
all up against the cache as it was *before* the request, then touches them.
So each reference ``t`` carries a query position ``q_t <= t`` (the position of
its request's first reference) and its distance counts the distinct items
referenced in ``(prev_t, q_t)`` only. This needs ``q_t > prev_t``: an item may
appear at most once per request.

**Counting.** With ``p = prev_t`` (the previous position of the same item), the
distinct items referenced in ``(p, q)`` are the positions ``j`` in that window
whose own previous reference is before ``p`` (their first reference in the
window), so with ``G(q, p) = #{j < q : prev_j < p}`` and because every
``j <= p`` has ``prev_j < p``::

    d_t = 1 + G(q, p) - (p + 1) = G(q, p) - p

``G`` is a 2-D dominance count answered for all references at once with a
merge-sort tree (Bentley 1980, "Multidimensional divide-and-conquer"): for each
level ``l`` the prefix ``[0, q)`` is split into aligned blocks of ``2**l``
positions, one per set bit of ``q``, and each block's count is a binary search
in that level's within-block-sorted ``prev`` array. Cost: ``O(n log^2 n)``
numpy work, no Python loop per reference (the usual Fenwick-tree sweep,
Bennett and Kruskal 1975, is ``O(n log n)`` but needs one Python step per
reference).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "COLD",
    "count_below_in_prefix",
    "lru_query_distances",
    "lru_stack_distances",
    "previous_positions",
]

COLD = 0
"""Distance given to a first reference (a miss at every capacity)."""


def previous_positions(items: np.ndarray) -> np.ndarray:
    """Position of the previous reference to the same item.

    Args:
        items: Item ids, shape ``(n,)``, any integer dtype.

    Returns:
        ``prev``, shape ``(n,)`` int64: ``prev[t]`` is the largest ``j < t``
        with ``items[j] == items[t]``, or -1.
    """
    items = np.asarray(items)
    n = len(items)
    prev = np.full(n, -1, dtype=np.int64)
    if n < 2:
        return prev
    order = np.argsort(items, kind="stable")
    srt = items[order]
    same = srt[1:] == srt[:-1]
    prev[order[1:][same]] = order[:-1][same]
    return prev


def count_below_in_prefix(
    values: np.ndarray, ends: np.ndarray, thresholds: np.ndarray
) -> np.ndarray:
    """``out[k] = #{j < ends[k] : values[j] < thresholds[k]}`` for every query at once.

    Args:
        values: Integers ``>= -1``, shape ``(n,)``.
        ends: Prefix lengths, ``0 <= ends[k] <= n``, shape ``(m,)``.
        thresholds: Integers ``>= -1``, shape ``(m,)``.

    Returns:
        Counts, shape ``(m,)`` int64.

    Source: merge-sort tree (see the module docstring), one ``np.sort`` and
    one ``np.searchsorted`` per level.
    """
    values = np.asarray(values, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    thresholds = np.asarray(thresholds, dtype=np.int64)
    n = len(values)
    out = np.zeros(len(ends), dtype=np.int64)
    if n == 0 or len(ends) == 0:
        return out
    shift = int(max(int(values.max()), int(thresholds.max()), 0) + 2).bit_length()
    pos = np.arange(n, dtype=np.int64)
    v1 = values + 1
    t1 = thresholds + 1
    level = 0
    while (1 << level) <= n:
        has = (ends >> level) & 1 == 1
        if has.any():
            keys = np.sort(((pos >> level) << shift) | v1)
            e = ends[has]
            start = (e >> (level + 1)) << (level + 1)
            qkeys = ((start >> level) << shift) | t1[has]
            out[has] += np.searchsorted(keys, qkeys, side="left") - start
        level += 1
    return out


def lru_stack_distances(items: np.ndarray, query_at: np.ndarray | None = None) -> np.ndarray:
    """LRU stack distance of every reference (1-based; ``COLD`` for first references).

    Args:
        items: Item ids in reference order, shape ``(n,)``.
        query_at: Position whose cache state each reference is looked up
            against, ``query_at[t] <= t``; None means ``t`` itself (plain LRU).

    Returns:
        Distances, shape ``(n,)`` int64: the reference hits in an LRU cache of
        ``C`` items iff ``0 < d <= C``.

    Raises:
        ValueError: an item is referenced twice with the same query position
            (twice in one request).
    """
    items = np.asarray(items)
    n = len(items)
    prev = previous_positions(items)
    q = np.arange(n, dtype=np.int64) if query_at is None else np.asarray(query_at, dtype=np.int64)
    seen = prev >= 0
    if np.any(q[seen] <= prev[seen]):
        raise ValueError("an item is referenced twice within one request")
    dist = np.zeros(n, dtype=np.int64)
    dist[seen] = count_below_in_prefix(prev, q[seen], prev[seen]) - prev[seen]
    return dist


def lru_query_distances(
    items: np.ndarray, query_items: np.ndarray, query_at: np.ndarray
) -> np.ndarray:
    """Stack distances of look-ups that do not touch the cache.

    A query asks: at position ``query_at[k]`` of the reference string (before
    that reference), how deep in the LRU stack is ``query_items[k]``?

    Args:
        items: Item ids in reference order, shape ``(n,)``, integers ``>= 0``.
        query_items: Item ids asked about, shape ``(m,)``.
        query_at: Positions ``0..n``, shape ``(m,)``.

    Returns:
        Distances, shape ``(m,)`` int64, 1-based; ``COLD`` when the item was
        not referenced before the position.
    """
    items = np.asarray(items, dtype=np.int64)
    query_items = np.asarray(query_items, dtype=np.int64)
    query_at = np.asarray(query_at, dtype=np.int64)
    n = len(items)
    out = np.zeros(len(query_items), dtype=np.int64)
    if n == 0 or len(query_items) == 0:
        return out
    span = n + 1
    ref_keys = np.sort(items * span + np.arange(n, dtype=np.int64))
    q_keys = query_items * span + query_at
    idx = np.searchsorted(ref_keys, q_keys, side="left") - 1
    ok = idx >= 0
    ok[ok] = ref_keys[idx[ok]] // span == query_items[ok]
    p = ref_keys[idx[ok]] % span
    prev = previous_positions(items)
    out[ok] = count_below_in_prefix(prev, query_at[ok], p) - p
    return out
