"""The ``entries`` cache model: N whole prompt snapshots, strict LRU (halogen-style).

This models a prompt cache that keeps whole KV snapshots of prompt prefixes, as
llama.cpp-derived servers with a prompt cache do (halogen's ``/cache`` counters
are its native view).

**Store.** Each request offers one or two snapshot offsets (tokens), by default
the end of its system block and the end of its rendered messages. A snapshot is
the KV state after the first ``L`` tokens; its key is the content key of that
prefix (``prefix.PrefixKeys``). Offsets of 0 are skipped. A snapshot already
held is not stored again (and is not refreshed by being offered). A new snapshot
costs ``L * bytes_per_token`` bytes. One larger than ``max_entry_bytes`` is
*truncated* to the cap, as halogen does (issue 18: its entry cap of 116,389,652
bytes at 2,674 B/token holds 43,526 tokens, and a 64k warm leg got 43,519 cached
tokens with ``refused`` 0): it holds the first ``max_entry_bytes //
bytes_per_token`` tokens, keyed as that shorter prefix (counted in
``truncated``). ``refuse_over_bytes=True`` keeps the older behaviour of servers
that refuse instead: such a snapshot is *refused* (counted, not stored). A
snapshot is refused in either mode when it cannot fit at all (larger than
``max_bytes``, or a cap under one token). Storing into a full cache
(``max_entries``, or ``max_bytes`` when set) evicts least recently used
snapshots first.

**Lookup.** The longest held snapshot whose tokens are a prefix of the new
prompt is used: a *hit*, which refreshes that snapshot's recency. The request is
credited ``min(L, n - 1)`` cached tokens (``n`` = prompt length): a server must
compute at least the last prompt token to produce logits. No usable snapshot is
a *miss*.

So a miss with two fresh offsets stores two snapshots and a hit on the system
snapshot stores one (the new history), which is the 2 x misses + 1 x hits shape
of halogen's counters. ``stores - evicted == entries`` always holds.

**Costs** (model seconds, unscaled): restoring a hit copies ``hit_tokens`` rows
(``restore_s_per_token`` each), storing copies ``L`` rows (``store_s_per_token``
each). ``rows_copied`` counts both.

Example::

    cache = EntriesCache(max_entries=8)
    out = cache.request(tokens, (system_end, messages_end))
    out.hit_tokens, out.stored, out.evicted

The same class backs the simulator server and the offline simulations.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from kvreplay.sim.prefix import PrefixKeys

__all__ = ["DEFAULT_BYTES_PER_TOKEN", "EntriesCache", "check_entry_cap", "EntriesOutcome", "EntriesStats", "EntryRef"]

DEFAULT_BYTES_PER_TOKEN = 147456
"""KV bytes per token of the default model shape: 2 (K,V) x 36 layers x 8 KV heads
x 128 dims x 2 bytes (a Qwen3-8B-like GQA model in fp16)."""


def check_entry_cap(max_entry_bytes: int | None, bytes_per_token: int | None, *, field: str) -> None:
    """Refuse an entry cap that holds no token: a figure in MB typed as bytes (issue 29, 42).

    Args:
        max_entry_bytes: The per-entry cap (bytes), or None for none.
        bytes_per_token: KV bytes per token (bytes); None or 0 means ``DEFAULT_BYTES_PER_TOKEN``.
        field: The option to name (``max-entry-bytes`` for ``simulate``,
            ``sim-max-entry-bytes`` for ``probe``).

    Raises:
        ConfigError: the cap is under one token's bytes, naming ``field`` and the MB reading.
    """
    from kvreplay.errors import ConfigError

    bpt = bytes_per_token or DEFAULT_BYTES_PER_TOKEN
    if max_entry_bytes is not None and max_entry_bytes < bpt:
        raise ConfigError(
            f"an entry cap of {max_entry_bytes} bytes holds no token at {bpt} bytes per token:"
            f" in MB? ({max_entry_bytes} MB = {max_entry_bytes * 10**6} bytes)",
            field=field,
        )


@dataclass(frozen=True, slots=True)
class EntryRef:
    """One snapshot named in an outcome.

    Attributes:
        key: First 8 bytes of the content key, hex (16 characters).
        tokens: Snapshot length (tokens).
    """

    key: str
    tokens: int

    def to_json(self) -> dict:
        """JSON form for the event log."""
        return {"key": self.key, "tokens": self.tokens}


@dataclass(frozen=True, slots=True, kw_only=True)
class EntriesOutcome:
    """What one request did to an ``EntriesCache``.

    Attributes:
        prompt_tokens: Prompt length ``n`` (tokens).
        hit: A stored snapshot was used.
        matched_tokens: Length of the snapshot used (tokens; 0 on a miss).
        hit_tokens: Cached tokens credited, ``min(matched_tokens, n - 1)``.
        stored: Snapshots stored by this request, in offset order.
        already_held: Offsets offered but already held (not stored again).
        refused: Snapshots refused (not stored): over the cap with
            ``refuse_over_bytes``, or too large for ``max_bytes``.
        truncated: Offsets whose snapshot was cut to the per-entry cap
            (tokens offered; what was kept is in ``stored``/``already_held``).
        evicted: Snapshots evicted to make room, oldest first.
        restore_s: Model time to restore the hit (s, unscaled).
        store_s: Model time to store the new snapshots (s, unscaled).
    """

    prompt_tokens: int
    hit: bool
    matched_tokens: int
    hit_tokens: int
    stored: tuple[EntryRef, ...] = ()
    already_held: tuple[int, ...] = ()
    refused: tuple[int, ...] = ()
    evicted: tuple[EntryRef, ...] = ()
    truncated: tuple[int, ...] = ()
    restore_s: float = 0.0
    store_s: float = 0.0

    def to_json(self) -> dict:
        """JSON form for the event log."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "hit": self.hit,
            "matched_tokens": self.matched_tokens,
            "hit_tokens": self.hit_tokens,
            "stored": [e.to_json() for e in self.stored],
            "already_held": list(self.already_held),
            "refused": list(self.refused),
            "truncated": list(self.truncated),
            "evicted": [e.to_json() for e in self.evicted],
            "restore_s": self.restore_s,
            "store_s": self.store_s,
        }


@dataclass(slots=True)
class EntriesStats:
    """Cumulative counters (never reset by ``clear``; a restart makes a new cache).

    Attributes:
        hits: Lookups that used a snapshot.
        misses: Lookups that found none.
        stores: Snapshots stored.
        evicted: Snapshots evicted.
        refused: Snapshots refused (see ``EntriesOutcome.refused``).
        truncated: Snapshots cut to the per-entry cap (not in ``/cache``,
            whose 14 keys are halogen's).
        prompt_tokens_saved: Sum of ``hit_tokens`` (tokens).
        rows_copied: Token rows copied by stores and restores.
        store_ms_total: Model store time (ms, unscaled).
        restore_ms_total: Model restore time (ms, unscaled).
        last_entry_bytes: Size of the last snapshot stored (bytes).
    """

    hits: int = 0
    misses: int = 0
    stores: int = 0
    evicted: int = 0
    refused: int = 0
    truncated: int = 0
    prompt_tokens_saved: int = 0
    rows_copied: int = 0
    store_ms_total: float = 0.0
    restore_ms_total: float = 0.0
    last_entry_bytes: int = 0


@dataclass(slots=True)
class _Entry:
    tokens: int
    nbytes: int


class EntriesCache:
    """A prompt cache of whole snapshots with strict LRU (see module docstring).

    Args:
        max_entries: Capacity in snapshots (>= 1).
        bytes_per_token: KV bytes per token (bytes).
        max_entry_bytes: Per-snapshot cap (bytes): larger snapshots are cut to
            it (or refused with ``refuse_over_bytes``); None = no cap.
        max_bytes: Total byte budget (bytes), evicting LRU to fit; None = none.
        restore_s_per_token: Model restore cost (s per token).
        store_s_per_token: Model store cost (s per token).
        recency: What refreshes a snapshot: ``"use"`` (the lookup that uses it;
            offering a held one does not) or ``"offer"`` (storing or offering
            it; the lookup does not). Only ``"offer"`` is an LRU stack
            algorithm, whose curve ``kvreplay.offline.entries`` computes for
            every capacity in one pass.
        refuse_over_bytes: Refuse over-cap snapshots instead of truncating.

    Raises:
        ValueError: A capacity or cost is out of range.
    """

    def __init__(
        self,
        *,
        max_entries: int = 8,
        bytes_per_token: int = DEFAULT_BYTES_PER_TOKEN,
        max_entry_bytes: int | None = None,
        max_bytes: int | None = None,
        restore_s_per_token: float = 2.0e-5,
        store_s_per_token: float = 5.0e-6,
        recency: str = "use",
        refuse_over_bytes: bool = False,
    ) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be >= 1")
        if bytes_per_token < 0 or restore_s_per_token < 0 or store_s_per_token < 0:
            raise ValueError("bytes_per_token and costs must be >= 0")
        self.max_entries = max_entries
        self.bytes_per_token = bytes_per_token
        self.max_entry_bytes = max_entry_bytes
        self.max_bytes = max_bytes
        self.restore_s_per_token = restore_s_per_token
        self.store_s_per_token = store_s_per_token
        if recency not in ("use", "offer"):
            raise ValueError("recency must be 'use' or 'offer'")
        self.recency = recency
        self.refuse_over_bytes = refuse_over_bytes
        self.stats = EntriesStats()
        self._entries: OrderedDict[bytes, _Entry] = OrderedDict()  # LRU first
        self._lengths: Counter[int] = Counter()
        self._bytes = 0
        self.last_truncated: tuple[int, ...] = ()

    # ---- state -----------------------------------------------------------------
    @property
    def entries(self) -> int:
        """Snapshots held."""
        return len(self._entries)

    @property
    def bytes(self) -> int:
        """Bytes held (bytes)."""
        return self._bytes

    def held_lengths(self) -> list[int]:
        """Lengths of the held snapshots, least recently used first (tokens)."""
        return [e.tokens for e in self._entries.values()]

    def clear(self) -> int:
        """Drop every snapshot; counters are kept (as vLLM's reset keeps them).

        Returns:
            Snapshots dropped.
        """
        n = len(self._entries)
        self._entries.clear()
        self._lengths.clear()
        self._bytes = 0
        return n

    def cache_json(self) -> dict:
        """The halogen-style ``GET /cache`` object, with exactly its 14 keys."""
        s = self.stats
        looked = s.hits + s.misses
        return {
            "entries": self.entries,
            "bytes": self._bytes,
            "last_entry_bytes": s.last_entry_bytes,
            "max_entries": self.max_entries,
            "hits": s.hits,
            "misses": s.misses,
            "stores": s.stores,
            "evicted": s.evicted,
            "prompt_tokens_saved": s.prompt_tokens_saved,
            "store_ms_total": round(s.store_ms_total, 3),
            "restore_ms_total": round(s.restore_ms_total, 3),
            "refused": s.refused,
            "rows_copied": s.rows_copied,
            "hit_rate": round(s.hits / looked, 6) if looked else 0.0,
        }

    # ---- operations --------------------------------------------------------------
    def lookup(self, tokens: Sequence[int] | PrefixKeys) -> EntriesOutcome:
        """Find the longest held snapshot that is a prefix of ``tokens``; count it.

        Args:
            tokens: The prompt's token ids (or their ``PrefixKeys``).

        Returns:
            The lookup part of an outcome (nothing stored).
        """
        keys = tokens if isinstance(tokens, PrefixKeys) else PrefixKeys(tokens)
        n = keys.n
        s = self.stats
        if n > 0 and self._lengths:
            cands = [length for length in self._lengths if 0 < length <= n]
            at = keys.keys_at(cands)
            for length in sorted(cands, reverse=True):
                k = at[length]
                if k in self._entries:
                    if self.recency == "use":
                        self._entries.move_to_end(k)
                    hit_tokens = min(length, n - 1)
                    restore_s = hit_tokens * self.restore_s_per_token
                    s.hits += 1
                    s.prompt_tokens_saved += hit_tokens
                    s.rows_copied += hit_tokens
                    s.restore_ms_total += restore_s * 1e3
                    return EntriesOutcome(
                        prompt_tokens=n,
                        hit=True,
                        matched_tokens=length,
                        hit_tokens=hit_tokens,
                        restore_s=restore_s,
                    )
        s.misses += 1
        return EntriesOutcome(prompt_tokens=n, hit=False, matched_tokens=0, hit_tokens=0)

    def peek(self, tokens: Sequence[int] | PrefixKeys) -> int:
        """Cached tokens a ``lookup`` of ``tokens`` would credit now, changing nothing.

        No counter moves and no recency is refreshed (a router asks every
        replica this before it picks one: ``kvreplay.sim.routing``).

        Args:
            tokens: The prompt's token ids (or their ``PrefixKeys``).

        Returns:
            ``min(L, n - 1)`` for the longest held snapshot of ``L`` tokens that
            is a prefix of the prompt (``n`` tokens), else 0 (tokens).
        """
        keys = tokens if isinstance(tokens, PrefixKeys) else PrefixKeys(tokens)
        n = keys.n
        if n <= 0 or not self._lengths:
            return 0
        cands = [length for length in self._lengths if 0 < length <= n]
        at = keys.keys_at(cands)
        for length in sorted(cands, reverse=True):
            if at[length] in self._entries:
                return min(length, n - 1)
        return 0

    @property
    def cap_tokens(self) -> int | None:
        """Tokens a snapshot at the per-entry cap holds; None without a cap.

        ``max_entry_bytes // bytes_per_token`` (None also at 0 bytes per token).
        """
        if self.max_entry_bytes is None or self.bytes_per_token <= 0:
            return None
        return self.max_entry_bytes // self.bytes_per_token

    def store(
        self, tokens: Sequence[int] | PrefixKeys, offsets: Sequence[int]
    ) -> tuple[tuple[EntryRef, ...], tuple[int, ...], tuple[int, ...], tuple[EntryRef, ...], float]:
        """Store snapshots of ``tokens`` at ``offsets`` (see module docstring).

        Over-cap offsets are truncated to ``cap_tokens`` (listed in
        ``last_truncated``) unless ``refuse_over_bytes``; two offsets that
        truncate to the same length collapse into one snapshot.

        Args:
            tokens: The sequence (or its ``PrefixKeys``).
            offsets: Snapshot lengths (tokens); 0 is skipped, duplicates collapse.

        Returns:
            ``(stored, already_held, refused, evicted, store_s)``.

        Raises:
            ValueError: An offset is negative or beyond the sequence.
        """
        keys = tokens if isinstance(tokens, PrefixKeys) else PrefixKeys(tokens)
        offered = sorted({o for o in offsets if o != 0})
        if offered and (offered[0] < 0 or offered[-1] > keys.n):
            keys.keys_at([offered[0], offered[-1]])  # raises the range error
        cap = self.cap_tokens
        truncated: list[int] = []
        refused: list[int] = []
        s = self.stats
        wanted_set: set[int] = set()
        for o in offered:
            if cap is not None and o > cap:
                if self.refuse_over_bytes or cap <= 0:
                    s.refused += 1
                    refused.append(o)
                    continue
                truncated.append(o)
                s.truncated += 1
                wanted_set.add(cap)
            else:
                wanted_set.add(o)
        wanted = sorted(wanted_set)
        self.last_truncated = tuple(truncated)
        at = keys.keys_at(wanted)
        stored: list[EntryRef] = []
        held: list[int] = []
        evicted: list[EntryRef] = []
        store_s = 0.0
        for length in wanted:
            k = at[length]
            if k in self._entries:
                held.append(length)
                if self.recency == "offer":
                    self._entries.move_to_end(k)
                continue
            nbytes = length * self.bytes_per_token
            if self.max_bytes is not None and nbytes > self.max_bytes:
                s.refused += 1
                refused.append(length)
                continue
            while self._entries and (
                len(self._entries) >= self.max_entries
                or (self.max_bytes is not None and self._bytes + nbytes > self.max_bytes)
            ):
                old_k, old = self._entries.popitem(last=False)
                self._forget(old)
                s.evicted += 1
                evicted.append(EntryRef(old_k[:8].hex(), old.tokens))
            self._entries[k] = _Entry(length, nbytes)
            self._lengths[length] += 1
            self._bytes += nbytes
            cost = length * self.store_s_per_token
            store_s += cost
            s.stores += 1
            s.rows_copied += length
            s.store_ms_total += cost * 1e3
            s.last_entry_bytes = nbytes
            stored.append(EntryRef(k[:8].hex(), length))
        return tuple(stored), tuple(held), tuple(refused), tuple(evicted), store_s

    def request(self, tokens: Sequence[int], offsets: Sequence[int]) -> EntriesOutcome:
        """One request: lookup, then store its snapshots.

        Args:
            tokens: The prompt's token ids.
            offsets: Snapshot offsets to store (tokens), e.g. ``(system_end, messages_end)``.

        Returns:
            The full outcome.
        """
        keys = PrefixKeys(tokens)
        look = self.lookup(keys)
        stored, held, refused, evicted, store_s = self.store(keys, offsets)
        return EntriesOutcome(
            truncated=self.last_truncated,
            prompt_tokens=look.prompt_tokens,
            hit=look.hit,
            matched_tokens=look.matched_tokens,
            hit_tokens=look.hit_tokens,
            stored=stored,
            already_held=held,
            refused=refused,
            evicted=evicted,
            restore_s=look.restore_s,
            store_s=store_s,
        )

    def _forget(self, entry: _Entry) -> None:
        self._bytes -= entry.nbytes
        self._lengths[entry.tokens] -= 1
        if not self._lengths[entry.tokens]:
            del self._lengths[entry.tokens]
