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
    "CHUNK",
    "COLD",
    "count_below_in_prefix",
    "lru_query_distances",
    "lru_stack_distances",
    "narrow_ids",
    "previous_positions",
    "stack_distances_compact",
]

COLD = 0
"""Distance given to a first reference (a miss at every capacity)."""


CHUNK = 1 << 20
"""Positions sorted at once per level in ``count_below_in_prefix`` (bounds its temporaries)."""


def _index_dtype(n: int) -> type[np.signedinteger]:
    """int32 when positions ``-1 .. n`` fit in it, else int64."""
    return np.int32 if n < (1 << 31) - 1 else np.int64


def narrow_ids(items: np.ndarray) -> np.ndarray:
    """``items`` as int32 when every id fits (a copy), else unchanged: for ids compared only for equality."""
    items = np.asarray(items)
    if (
        items.dtype.kind in "iu"
        and items.dtype.itemsize > 4
        and len(items)
        and int(items.min()) >= -(1 << 31)
        and int(items.max()) < (1 << 31)
    ):
        return items.astype(np.int32)
    return items


def previous_positions(items: np.ndarray) -> np.ndarray:
    """Position of the previous reference to the same item.

    Args:
        items: Item ids, shape ``(n,)``, any integer dtype.

    Returns:
        ``prev``, shape ``(n,)``: ``prev[t]`` is the largest ``j < t`` with
        ``items[j] == items[t]``, or -1; int32 when ``n < 2**31 - 1``, else
        int64 (memory: one stable argsort, then chunked compares).
    """
    items = np.asarray(items)
    n = len(items)
    dt = _index_dtype(n)
    prev = np.full(n, -1, dtype=dt)
    if n < 2:
        return prev
    order = np.argsort(items, kind="stable").astype(dt, copy=False)
    for a in range(0, n - 1, CHUNK):
        b = min(a + CHUNK, n - 1)
        lo = order[a:b]
        hi = order[a + 1 : b + 1]
        same = items[hi] == items[lo]
        prev[hi[same]] = lo[same]
    return prev


def count_below_in_prefix(
    values: np.ndarray, ends: np.ndarray, thresholds: np.ndarray, *, chunk: int = CHUNK
) -> np.ndarray:
    """``out[k] = #{j < ends[k] : values[j] < thresholds[k]}`` for every query at once.

    Args:
        values: Integers ``>= -1``, shape ``(n,)``.
        ends: Prefix lengths, ``0 <= ends[k] <= n``, shape ``(m,)``.
        thresholds: Integers ``>= -1``, shape ``(m,)``.
        chunk: Positions sorted at once (a power of two; memory bound of
            the per-level temporaries, not of the result).

    Returns:
        Counts, shape ``(m,)`` int64.

    Raises:
        ValueError: ``chunk`` is not a power of two.

    Source: merge-sort tree (see the module docstring), one sort and one
    ``np.searchsorted`` per level and chunk of positions: at level ``l`` only
    the even blocks of ``2**l`` positions are ever asked about, so a chunk
    of ``max(chunk, 2**(l+1))`` aligned positions is sorted on its own and
    answers exactly the queries whose ``ends`` fall inside it (queries are
    taken in ascending ``ends``).
    """
    return _count_below(values, ends, thresholds, chunk, np.int64)


def _count_below(
    values: np.ndarray, ends: np.ndarray, thresholds: np.ndarray, chunk: int, out_dtype: type
) -> np.ndarray:
    """``count_below_in_prefix`` with the result in ``out_dtype`` (int32 when counts fit)."""
    if chunk < 1 or chunk & (chunk - 1):
        raise ValueError("chunk must be a power of two")
    values = np.asarray(values)
    ends = np.asarray(ends)
    thresholds = np.asarray(thresholds)
    n = len(values)
    m = len(ends)
    out: np.ndarray = np.zeros(m, dtype=out_dtype)
    if n == 0 or m == 0:
        return out
    top = max(int(values.max()), int(thresholds.max()), 0) + 2
    dt = _index_dtype(max(n, top))
    shift = int(top).bit_length()
    if np.any(ends[1:] < ends[:-1]):
        perm: np.ndarray | None = np.argsort(ends, kind="stable")
        ends = ends[perm]
        thresholds = thresholds[perm]
    else:
        perm = None
    ends = ends.astype(dt, copy=False)
    level = 0
    while (1 << level) <= n:
        span = max(chunk, 2 << level)  # aligned positions sorted together
        several = span == chunk and (1 << level) < chunk
        for a in range(0, n, span):
            bounds = np.array([a, min(a + span, n + 1)], dtype=ends.dtype)
            first, past = (int(x) for x in np.searchsorted(ends, bounds, side="left"))
            if first == past:
                continue
            if several:
                # Several blocks: sort (block, value) keys, 2**level positions a block.
                keys = np.arange(min(span, n - a), dtype=np.int64)
                keys >>= level
                keys <<= shift
                keys |= values[a : a + span].astype(np.int64) + 1
                keys.sort()
            else:
                # One block (the even one) of 2**level positions: its values alone.
                keys = np.sort(values[a : a + (1 << level)])
                if thresholds.dtype.itemsize > keys.dtype.itemsize:
                    keys = keys.astype(thresholds.dtype)
            for lo in range(first, past, chunk):  # at most ``chunk`` queries at once
                hi = min(lo + chunk, past)
                e = ends[lo:hi]
                has = (e >> level) & 1 == 1
                if not has.any():
                    continue
                t = thresholds[lo:hi][has]
                if several:
                    start = ((e[has] >> (level + 1)) << (level + 1)).astype(np.int64) - a
                    qkeys = ((start >> level) << shift) | (t.astype(np.int64) + 1)
                    got = np.searchsorted(keys, qkeys, side="left") - start
                    del start, qkeys
                else:
                    got = np.searchsorted(keys, t.astype(keys.dtype, copy=False), side="left")
                out[lo:hi][has] += got.astype(out.dtype, copy=False)
            del keys
        level += 1
    if perm is not None:
        res = np.empty_like(out)
        res[perm] = out
        return res
    return out


def stack_distances_compact(
    items: np.ndarray,
    query_at: np.ndarray | None = None,
    *,
    request_starts: np.ndarray | None = None,
) -> np.ndarray:
    """``lru_stack_distances`` in the narrowest index dtype, for long reference strings.

    Same result values and errors as ``lru_stack_distances``; the result is
    int32 when ``n < 2**31 - 1`` (distances are at most ``n``), else int64.
    Item ids that fit are compared as int32 (only equality matters), and
    temporaries are freed as soon as they are used: about 21 bytes per
    reference at the peak plus ``CHUNK``-bounded work arrays
    (``mrc.block_distances`` at a million requests holds ~24 million).

    Args:
        items: Item ids in reference order, shape ``(n,)``.
        query_at: As in ``lru_stack_distances``; or None.
        request_starts: Instead of ``query_at``: offsets of each request in
            ``items`` plus a final ``n``, shape ``(R + 1,)``; every reference
            is looked up against the state at its request's first position
            (built only when needed).

    Raises:
        ValueError: an item is referenced twice within one request, or both
            ``query_at`` and ``request_starts`` are given.
    """
    if query_at is not None and request_starts is not None:
        raise ValueError("give query_at or request_starts, not both")
    items = np.asarray(items)
    n = len(items)
    dt = _index_dtype(n)
    items = narrow_ids(items)
    prev = previous_positions(items)
    del items
    seen = prev >= 0
    p = prev[seen]
    if request_starts is not None:
        rs = np.asarray(request_starts, dtype=np.int64)
        qs = np.repeat(rs[:-1].astype(dt), np.diff(rs))[seen]
    elif query_at is None:
        qs = np.flatnonzero(seen).astype(dt)
    else:
        qs = np.asarray(query_at)[seen].astype(dt, copy=False)
    if np.any(qs <= p):
        raise ValueError("an item is referenced twice within one request")
    got = _count_below(prev, qs, p, CHUNK, dt)
    del prev, qs
    got -= p
    del p
    dist = np.zeros(n, dtype=dt)
    dist[seen] = got
    return dist


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
    return stack_distances_compact(items, query_at).astype(np.int64, copy=False)


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
