"""The ``entries`` model's curve: N whole prompt snapshots under LRU, every N at once.

The simulator's entries cache (``kvreplay.sim.cache_entries``) looks up the
longest held snapshot that is a prefix of the prompt, then stores the request's
snapshot offsets (``system_end`` and ``messages_end``, or just one). Which
events refresh a snapshot's recency decides whether the model is an LRU *stack
algorithm* (Mattson et al. 1970), i.e. whether a cache of ``N`` entries always
holds a subset of what a cache of ``N + 1`` holds:

- **refresh on offer** (``EntriesCache(recency="offer")``): storing a snapshot, or offering
  one already held, makes it most recent; the lookup refreshes nothing. Every
  request then references the same snapshots at every capacity, so the state at
  capacity ``N`` is the top ``N`` of one LRU stack. A request's hit at ``N`` is
  the longest snapshot that is a prefix of its prompt and whose stack distance
  before the request is ``<= N``: this module computes it for every ``N`` in
  one pass, exactly.
- **refresh on use** (``recency="use"``, the simulator's default: the lookup
  refreshes the snapshot it used, offers refresh nothing): the snapshot used
  depends on the capacity (a large cache uses a longer one), so different
  capacities see different reference strings and the curve can even fall as
  ``N`` grows (the 4-request example in ``tests/unit/offline/test_entries.py``
  credits 5 tokens at 3 entries and 3 at 4). No one-pass curve can equal it;
  ``simulate`` runs the simulator's class once per capacity for it.

The two policies part only on snapshots that a request uses without offering
them again; in multi-turn traffic that is the previous turn's history, which
the request supersedes with the longer snapshot it stores.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kvreplay.offline.mrc import Curve
from kvreplay.offline.stack import lru_query_distances
from kvreplay.sim.prefix import PrefixKeys

__all__ = ["SnapshotRequest", "entries_curve"]


@dataclass(frozen=True, slots=True)
class SnapshotRequest:
    """One request as the entries model sees it.

    Attributes:
        tokens: Prompt token ids (what prefill processes).
        offsets: Snapshot offsets it offers (tokens), e.g. ``(system_end, messages_end)``.
        counted: Whether its hits count (False for interleaved foreign traffic).
        epoch: Cache epoch; a reset between plan phases starts a new one, and
            nothing stored in an earlier epoch can hit.
    """

    tokens: Sequence[int]
    offsets: tuple[int, ...]
    counted: bool = True
    epoch: int = 0


def entries_curve(
    requests: Sequence[SnapshotRequest],
    *,
    max_entry_tokens: int | None = None,
    truncate: bool = True,
) -> Curve:
    """Hits of the entries model (refresh on offer) at every capacity ``0 .. max``.

    Args:
        requests: The requests in order.
        max_entry_tokens: The per-snapshot cap (tokens; the simulator's
            ``max_entry_bytes // bytes_per_token``): longer snapshots are cut to
            their first ``max_entry_tokens`` tokens (``truncate``, halogen's
            behaviour) or refused (never stored); None = no cap.
        truncate: Truncate over-cap snapshots (True) or refuse them.

    Returns:
        The curve in entries: ``hit_requests[N]`` requests used a snapshot and
        ``hit_tokens[N]`` tokens were credited, ``min(L, n - 1)`` each (the last
        prompt token is always computed), at capacity ``N``.

    Raises:
        ValueError: an offset outside ``0..len(tokens)``.
    """
    ids: dict[tuple[int, bytes], int] = {}
    id_len: list[int] = []
    first_req: list[int] = []
    lengths_seen: set[int] = set()
    refs: list[int] = []
    req_start: list[int] = []
    q_items: list[int] = []
    q_at: list[int] = []
    q_req: list[int] = []
    prompt = np.zeros(len(requests), dtype=np.int64)
    counted = np.zeros(len(requests), dtype=bool)
    for r, req in enumerate(requests):
        keys = PrefixKeys(req.tokens)
        n = keys.n
        prompt[r], counted[r] = n, req.counted
        offs = sorted({o for o in req.offsets if o != 0})
        for o in offs:
            if o < 0 or o > n:
                raise ValueError(f"snapshot offset {o} outside 0..{n}")
        if max_entry_tokens is not None:
            if truncate:
                offs = sorted({min(o, max_entry_tokens) for o in offs} - {0})
            else:
                offs = [o for o in offs if o <= max_entry_tokens]
        cand_lengths = [length for length in lengths_seen if length <= n]
        at = keys.keys_at(cand_lengths + offs)
        req_start.append(len(refs))
        for L in cand_lengths:
            i = ids.get((req.epoch, at[L]))
            if i is not None and first_req[i] < r:
                q_items.append(i)
                q_at.append(len(refs))
                q_req.append(r)
        for o in offs:
            k = (req.epoch, at[o])
            i = ids.get(k)
            if i is None:
                i = ids[k] = len(id_len)
                id_len.append(o)
                first_req.append(r)
                lengths_seen.add(o)
            refs.append(i)
    dist = lru_query_distances(
        np.asarray(refs, dtype=np.int64), np.asarray(q_items), np.asarray(q_at)
    )
    top = int(dist.max(initial=0))
    tok_hist = np.zeros(top + 2, dtype=np.int64)
    req_hist = np.zeros(top + 2, dtype=np.int64)
    # per request: walk its candidates by distance; the credited hit grows with the running max
    order = np.lexsort((dist, np.asarray(q_req, dtype=np.int64)))
    cur_req, best = -1, 0
    for k in order.tolist():
        r, d = q_req[k], int(dist[k])
        if d == 0 or not counted[r]:
            continue
        if r != cur_req:
            cur_req, best = r, 0
            req_hist[d] += 1
        credit = min(id_len[q_items[k]], int(prompt[r]) - 1)
        if credit > best:
            tok_hist[d] += credit - best
            best = credit
    return Curve(
        unit="entry",
        unit_tokens=None,
        requests=int(counted.sum()),
        prompt_tokens=int(prompt[counted].sum()),
        hit_requests=np.cumsum(req_hist[: top + 1]),
        hit_tokens=np.cumsum(tok_hist[: top + 1]),
        hit_units=np.cumsum(req_hist[: top + 1]),
    )
