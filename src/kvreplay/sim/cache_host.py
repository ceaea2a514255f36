"""The host tier of the radix model: checkpoint rows over fixed row and page pools.

A host tier keeps KV *checkpoints* (continuation rows) in host memory behind the
device prefix cache. Two pools are fixed at start: ``rows`` (checkpoint records)
and ``pages`` (``page_tokens`` tokens of KV each). A checkpoint needs one row
*and* enough pages, so free bytes are not free rows: a tier can be nearly empty
in bytes and still evict on every store because its rows ran out.

**Rows form a tree.** A row at ``L`` tokens hangs under the longest held row
whose tokens are a prefix of it (its parent) and holds pages only for its own
tokens past the parent: ``ceil((L - parent_L) / page_tokens)`` pages.

**Checkpoints per request** (offered by ``RadixCache.finish``): the rendered
messages, the full prompt (messages + generation prompt) and the terminal
(prompt + output). A checkpoint already held is not stored again. A terminal is
longer than its own prompt, so it can never satisfy that prompt again.

**Lookup.** The longest held row whose tokens are a prefix of the prompt and
whose credited length ``min(L, n - 1)`` exceeds the device hit ``d`` is a *hit*.
It refreshes the row and its ancestors. Counted: ``fetched_tokens += credit - d``
(copied host -> device), ``reused_tokens += credit`` (prompt tokens the
checkpoint covers, device-resident part included).

**Eviction** ``leaf-lru``: when a store needs a row or pages, evict the least
recently used row with no resident descendant (never the new row's parent).
A request that hit the host tier stores nothing new.

**Eviction** ``ancestor-compact``: as ``leaf-lru``, and in addition, when a
request's terminal row is stored, its ancestor rows that are checkpoints of the
same request and have no other child are folded into it: the terminal takes
their pages, their rows are freed, and the shorter checkpoints are gone. A
request whose terminal is already held stores nothing (its checkpoints would be
folded into that terminal at once). Folding happens at every terminal store,
not only when rows run out: issue 5's scenario 3c ("rows to spare ... exactly 52
records") needs it eagerly, and an eager fold is what makes the cache look
healthy (few rows, bytes far under capacity) while never helping a replay.
"""

from __future__ import annotations

import builtins
import heapq
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from kvreplay.sim.cache_entries import DEFAULT_BYTES_PER_TOKEN, EntryRef
from kvreplay.sim.prefix import PrefixKeys

__all__ = ["HOST_EVICT_POLICIES", "HostLookup", "HostStats", "HostStoreOutcome", "HostTier"]

HOST_EVICT_POLICIES = ("leaf-lru", "ancestor-compact")


@dataclass(frozen=True, slots=True, kw_only=True)
class HostLookup:
    """Result of one host-tier lookup.

    Attributes:
        hit: A checkpoint beyond the device hit was found.
        row_tokens: Length of the row used (tokens; 0 on a miss).
        reused_tokens: Prompt tokens credited from it, ``min(row_tokens, n - 1)``.
        fetched_tokens: Tokens copied host -> device, ``reused_tokens - device_hit``.
        rows_used: Rows refreshed (the row and its ancestors).
        restore_s: Model restore time of the fetched tokens (s, unscaled).
    """

    hit: bool
    row_tokens: int = 0
    reused_tokens: int = 0
    fetched_tokens: int = 0
    rows_used: int = 0
    restore_s: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class HostStoreOutcome:
    """What storing one request's checkpoints did.

    Attributes:
        stored: Rows stored, in offset order.
        already_held: Offsets offered but already held.
        refused: Offsets that could not get a row or pages.
        evicted: Rows evicted, in eviction order.
        compacted: Rows folded into the terminal (``ancestor-compact``).
        store_s: Model time to copy the stored tokens (s, unscaled).
    """

    stored: tuple[EntryRef, ...] = ()
    already_held: tuple[int, ...] = ()
    refused: tuple[int, ...] = ()
    evicted: tuple[EntryRef, ...] = ()
    compacted: tuple[EntryRef, ...] = ()
    store_s: float = 0.0

    def to_json(self) -> dict:
        """JSON form for the event log."""
        return {
            "stored": [e.to_json() for e in self.stored],
            "already_held": list(self.already_held),
            "refused": list(self.refused),
            "evicted": [e.to_json() for e in self.evicted],
            "compacted": [e.to_json() for e in self.compacted],
            "store_s": self.store_s,
        }


@dataclass(slots=True)
class HostStats:
    """Cumulative host-tier counters (kept across ``clear``).

    Attributes:
        lookups: Lookups made.
        hits: Lookups that found a checkpoint.
        fetched_tokens: Tokens copied host -> device (tokens).
        reused_tokens: Prompt tokens covered by used checkpoints (tokens).
        stores: Rows stored.
        evictions: Rows evicted.
        refused: Checkpoints that found no room.
        compactions: Rows folded into a terminal.
        stored_tokens: Tokens copied into stored rows (each row's own part; tokens).
        restore_ms_total: Model restore time (ms, unscaled).
        store_ms_total: Model store time (ms, unscaled).
    """

    lookups: int = 0
    hits: int = 0
    fetched_tokens: int = 0
    reused_tokens: int = 0
    stores: int = 0
    evictions: int = 0
    refused: int = 0
    compactions: int = 0
    stored_tokens: int = 0
    restore_ms_total: float = 0.0
    store_ms_total: float = 0.0


@dataclass(slots=True)
class _Row:
    key: bytes
    tokens: int
    parent: bytes | None
    pages: int
    last_used: int
    seq: int
    children: int = 0


class HostTier:
    """Host checkpoint rows over fixed row and page pools (see module docstring).

    Args:
        rows: Row pool size (checkpoints, >= 1).
        pages: Page pool size (>= 1).
        page_tokens: Tokens per page (>= 1).
        bytes_per_token: KV bytes per token (bytes), for the byte gauges.
        evict: ``"leaf-lru"`` or ``"ancestor-compact"``.
        restore_s_per_token: Model cost of fetching one token (s).
        store_s_per_token: Model cost of storing one token (s).

    Raises:
        ValueError: A pool size or the policy is invalid.
    """

    def __init__(
        self,
        *,
        rows: int,
        pages: int = 4096,
        page_tokens: int = 256,
        bytes_per_token: int = DEFAULT_BYTES_PER_TOKEN,
        evict: str = "leaf-lru",
        restore_s_per_token: float = 2.0e-5,
        store_s_per_token: float = 5.0e-6,
    ) -> None:
        if rows < 1 or pages < 1 or page_tokens < 1:
            raise ValueError("host rows, pages and page_tokens must be >= 1")
        if evict not in HOST_EVICT_POLICIES:
            raise ValueError(f"host evict policy must be one of {HOST_EVICT_POLICIES}, not {evict!r}")
        self.rows_total = rows
        self.pages_total = pages
        self.page_tokens = page_tokens
        self.bytes_per_token = bytes_per_token
        self.evict = evict
        self.restore_s_per_token = restore_s_per_token
        self.store_s_per_token = store_s_per_token
        self.stats = HostStats()
        self._rows: dict[bytes, _Row] = {}
        self._lengths: Counter[int] = Counter()
        self._heap: list[tuple[int, int, bytes]] = []
        self._pages_used = 0
        self._tick = 0
        self._seq = 0

    # ---- state -----------------------------------------------------------------
    @property
    def rows_used(self) -> int:
        """Rows held."""
        return len(self._rows)

    @property
    def pages_used(self) -> int:
        """Pages held."""
        return self._pages_used

    @property
    def bytes(self) -> int:
        """Bytes held: pages x page_tokens x bytes_per_token (bytes)."""
        return self._pages_used * self.page_tokens * self.bytes_per_token

    @property
    def bytes_total(self) -> int:
        """Capacity in bytes (bytes)."""
        return self.pages_total * self.page_tokens * self.bytes_per_token

    def held_rows(self) -> list[tuple[int, int]]:
        """``(tokens, pages)`` of every held row, in insertion order."""
        return [(r.tokens, r.pages) for r in self._rows.values()]

    def clear(self) -> int:
        """Drop every row; counters are kept.

        Returns:
            Rows dropped.
        """
        n = len(self._rows)
        self._rows.clear()
        self._lengths.clear()
        self._heap.clear()
        self._pages_used = 0
        return n

    # ---- operations --------------------------------------------------------------
    def lookup(self, keys: PrefixKeys, *, device_hit_tokens: int = 0) -> HostLookup:
        """Find the longest held checkpoint that is a prefix of the prompt.

        Args:
            keys: The prompt's prefix keys.
            device_hit_tokens: Tokens already served by the device tier.

        Returns:
            The lookup result (counted in ``stats``).
        """
        s = self.stats
        s.lookups += 1
        n = keys.n
        cands = [
            length
            for length in self._lengths
            if length <= n and min(length, n - 1) > device_hit_tokens
        ]
        if cands:
            at = keys.keys_at(cands)
            for length in sorted(cands, reverse=True):
                row = self._rows.get(at[length])
                if row is None:
                    continue
                used = self._refresh_chain(row)
                credit = min(length, n - 1)
                fetched = credit - device_hit_tokens
                restore_s = fetched * self.restore_s_per_token
                s.hits += 1
                s.reused_tokens += credit
                s.fetched_tokens += fetched
                s.restore_ms_total += restore_s * 1e3
                return HostLookup(
                    hit=True,
                    row_tokens=length,
                    reused_tokens=credit,
                    fetched_tokens=fetched,
                    rows_used=used,
                    restore_s=restore_s,
                )
        return HostLookup(hit=False)

    def store(self, keys: PrefixKeys, offsets: Sequence[int], *, terminal: int | None = None) -> HostStoreOutcome:
        """Store checkpoints of one request.

        Args:
            keys: Prefix keys of the request's prompt + output.
            offsets: Checkpoint lengths (tokens); 0 skipped, duplicates collapse.
            terminal: Which offset is the terminal (for ``ancestor-compact``);
                default the largest.

        Returns:
            What was stored, refused, evicted and folded.

        Raises:
            ValueError: An offset is negative or beyond the sequence.
        """
        wanted = sorted({o for o in offsets if o != 0})
        if not wanted:
            return HostStoreOutcome()
        if terminal is None:
            terminal = wanted[-1]
        s = self.stats
        at = keys.keys_at(set(wanted) | {length for length in self._lengths if length < wanted[-1]})
        if self.evict == "ancestor-compact" and at[terminal] in self._rows:
            return HostStoreOutcome(already_held=tuple(wanted))
        stored: list[EntryRef] = []
        held: list[int] = []
        refused: list[int] = []
        evicted: list[EntryRef] = []
        mine: set[bytes] = set()
        store_s = 0.0
        for length in wanted:
            k = at[length]
            if k in self._rows:
                held.append(length)
                mine.add(k)
                continue
            parent = self._parent_of(length, at)
            base = parent.tokens if parent is not None else 0
            need = -(-(length - base) // self.page_tokens)
            if need > self.pages_total or not self._make_room(need, parent, evicted):
                s.refused += 1
                refused.append(length)
                continue
            self._tick += 1
            self._seq += 1
            row = _Row(k, length, parent.key if parent else None, need, self._tick, self._seq)
            self._rows[k] = row
            self._lengths[length] += 1
            self._pages_used += need
            if parent is not None:
                parent.children += 1
            heapq.heappush(self._heap, (row.last_used, row.seq, k))
            mine.add(k)
            cost = (length - base) * self.store_s_per_token
            store_s += cost
            s.stores += 1
            s.stored_tokens += length - base
            s.store_ms_total += cost * 1e3
            stored.append(EntryRef(k[:8].hex(), length))
        compacted: list[EntryRef] = []
        tk = at[terminal]
        if self.evict == "ancestor-compact" and tk in self._rows and any(e.tokens == terminal for e in stored):
            term = self._rows[tk]
            while term.parent is not None and term.parent in mine:
                anc = self._rows[term.parent]
                if anc.children != 1:
                    break
                term.pages += anc.pages
                term.parent = anc.parent
                del self._rows[anc.key]
                self._forget_length(anc.tokens)
                s.compactions += 1
                compacted.append(EntryRef(anc.key[:8].hex(), anc.tokens))
        return HostStoreOutcome(
            stored=tuple(stored),
            already_held=tuple(held),
            refused=tuple(refused),
            evicted=tuple(evicted),
            compacted=tuple(compacted),
            store_s=store_s,
        )

    # ---- internals -----------------------------------------------------------------
    def _parent_of(self, length: int, at: dict[int, builtins.bytes]) -> _Row | None:
        for cand in sorted((c for c in self._lengths if c < length), reverse=True):
            row = self._rows.get(at[cand])
            if row is not None:
                return row
        return None

    def _refresh_chain(self, row: _Row) -> int:
        self._tick += 1
        used = 0
        cur: _Row | None = row
        while cur is not None:
            cur.last_used = self._tick
            if cur.children == 0:
                heapq.heappush(self._heap, (cur.last_used, cur.seq, cur.key))
            used += 1
            cur = self._rows.get(cur.parent) if cur.parent is not None else None
        return used

    def _make_room(self, need_pages: int, protect: _Row | None, evicted: list[EntryRef]) -> bool:
        """Evict LRU leaves until one row and ``need_pages`` pages are free."""
        skipped: list[tuple[int, int, bytes]] = []
        ok = True
        while len(self._rows) + 1 > self.rows_total or self._pages_used + need_pages > self.pages_total:
            victim = None
            while self._heap:
                item = heapq.heappop(self._heap)
                row = self._rows.get(item[2])
                if row is None or row.children or row.last_used != item[0]:
                    continue  # stale heap entry
                if protect is not None and row.key == protect.key:
                    skipped.append(item)
                    continue
                victim = row
                break
            if victim is None:
                ok = False
                break
            self._evict(victim, evicted)
        for item in skipped:
            heapq.heappush(self._heap, item)
        return ok

    def _evict(self, row: _Row, evicted: list[EntryRef]) -> None:
        del self._rows[row.key]
        self._forget_length(row.tokens)
        self._pages_used -= row.pages
        self.stats.evictions += 1
        evicted.append(EntryRef(row.key[:8].hex(), row.tokens))
        if row.parent is not None:
            parent = self._rows.get(row.parent)
            if parent is not None:
                parent.children -= 1
                if parent.children == 0:
                    heapq.heappush(self._heap, (parent.last_used, parent.seq, parent.key))

    def _forget_length(self, length: int) -> None:
        self._lengths[length] -= 1
        if not self._lengths[length]:
            del self._lengths[length]
