"""The ``radix`` cache model: a block-granular device prefix cache (vLLM-like).

An optional host tier (``cache_host.HostTier``) sits behind it.

**Blocks.** A prompt of ``n`` tokens has ``n // B`` full blocks (``B`` =
``block_size``, 16 by default as in vLLM). A block is identified by the content
key of the whole prefix it ends (``prefix.PrefixKeys.block_keys``), so a block
hit implies all its ancestors hit, as with vLLM's chained block hashes.

**Admission** (``admit``): the hit is the longest run of leading full blocks
held, capped so that at least one prompt token is computed:
``hit_blocks <= (n - 1) // B``; a fully repeated prompt hits
``floor((n - 1) / B) * B`` tokens (SERVERS.md section 1). Counted as vLLM does:
``queries += n``, ``hits += hit tokens``. The hit blocks are pinned (referenced)
until the request finishes. Then the host tier, if any, is asked for a
checkpoint beyond the device hit (``HostTier.lookup``); the request's cached
tokens are ``max(device hit, host credit)``; vLLM's connector counters become
``external_queries += n - device hit`` and ``external_hits += host credit -
device hit``.

**Prefill end** (``prefilled``): the prompt's full blocks are inserted (those not
already held count as *stored*) and stay pinned by the request, so a request
admitted later shares them, as vLLM caches blocks once computed.

**Finish** (``finish``): the KV of prompt + output exists for every token but the
last sampled one, so the full blocks of the first ``n + m - 1`` tokens
(``m`` = output tokens) are inserted (new ones count as *stored*), every block
of the request is touched, the pins are released, and
unreferenced leaves are evicted, least recently used first (among blocks
touched at the same moment, deepest first, as vLLM frees a request's blocks
tail first), until at most ``capacity_blocks`` are held. Pinned blocks are
never evicted; when pins alone exceed the capacity the cache runs over it (no
preemption is modelled). Then, unless the request hit the host tier, its three
checkpoints are offered to the host tier: the rendered messages, the full
prompt and the terminal (prompt + output).

**KV usage** (``kv_usage``): blocks referenced by running requests (hit blocks
plus blocks being computed) over capacity, so a warm idle cache reads 0, as
vLLM's ``kv_cache_usage_perc`` does (evictable blocks count as free).

Example::

    cache = RadixCache(capacity_blocks=215, host=HostTier(rows=40))
    out = cache.request(prompt.tokens, output_ids, messages_end=prompt.messages_end)
    out.cached_tokens, out.device_hit_tokens, out.host.fetched_tokens
"""

from __future__ import annotations

import builtins
import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

from kvreplay.sim.cache_entries import DEFAULT_BYTES_PER_TOKEN
from kvreplay.sim.cache_host import HostLookup, HostStoreOutcome, HostTier
from kvreplay.sim.prefix import BlockHasher, PrefixKeys

__all__ = ["Admission", "RadixCache", "RadixOutcome", "RadixStats"]


@dataclass(slots=True)
class RadixStats:
    """Cumulative device-tier counters (kept across ``clear``).

    Attributes:
        lookups: Requests admitted.
        hit_requests: Requests with a device hit > 0.
        query_tokens: Prompt tokens looked up (vLLM ``prefix_cache_queries``).
        hit_tokens: Device-hit tokens (vLLM ``prefix_cache_hits``).
        external_query_tokens: ``n - device hit`` when a host tier exists.
        external_hit_tokens: Tokens the host tier supplied beyond the device hit.
        stored_blocks: Blocks inserted.
        evicted_blocks: Blocks evicted.
    """

    lookups: int = 0
    hit_requests: int = 0
    query_tokens: int = 0
    hit_tokens: int = 0
    external_query_tokens: int = 0
    external_hit_tokens: int = 0
    stored_blocks: int = 0
    evicted_blocks: int = 0


@dataclass(slots=True)
class _Block:
    parent: bytes | None
    depth: int
    last_used: int
    children: int = 0
    refs: int = 0


@dataclass(slots=True, kw_only=True)
class Admission:
    """An admitted request, to be passed to ``RadixCache.finish``.

    Attributes:
        tokens: The prompt's token ids.
        messages_end: Offset of the end of the rendered messages (tokens).
        device_hit_tokens: Tokens served by the device tier.
        host: The host lookup (``hit=False`` when there is no host tier).
        cached_tokens: ``max(device hit, host credit)`` (tokens).
        pinned: Keys of the pinned hit blocks.
        inflight_blocks: Blocks this request is computing (for ``kv_usage``).
        finished: ``finish`` was called.
        chain: Block hasher positioned after the prompt (continued at finish).
        block_keys: Keys of the prompt's full blocks.
        prefilled_done: ``prefilled`` was called.
        stored_blocks: Blocks this request inserted so far.
        evicted_blocks: Blocks evicted while inserting them.
    """

    tokens: Sequence[int]
    messages_end: int
    device_hit_tokens: int
    host: HostLookup
    cached_tokens: int
    pinned: list[bytes] = field(default_factory=list)
    inflight_blocks: int = 0
    finished: bool = False
    chain: BlockHasher | None = None
    block_keys: list[bytes] = field(default_factory=list)
    prefilled_done: bool = False
    stored_blocks: int = 0
    evicted_blocks: int = 0

    @property
    def prompt_tokens(self) -> int:
        """Prompt length ``n`` (tokens)."""
        return len(self.tokens)


@dataclass(frozen=True, slots=True, kw_only=True)
class RadixOutcome:
    """What one request did to a ``RadixCache`` (admission and finish).

    Attributes:
        prompt_tokens: ``n`` (tokens).
        output_tokens: ``m`` (tokens).
        device_hit_tokens: Device hit (tokens, block aligned).
        cached_tokens: Total cached tokens credited (tokens).
        host: The host lookup.
        stored_blocks: Device blocks inserted.
        evicted_blocks: Device blocks evicted.
        host_store: Host checkpoints stored/evicted/folded (empty on a host hit).
    """

    prompt_tokens: int
    output_tokens: int
    device_hit_tokens: int
    cached_tokens: int
    host: HostLookup
    stored_blocks: int
    evicted_blocks: int
    host_store: HostStoreOutcome

    @property
    def restore_s(self) -> float:
        """Model time to fetch host tokens (s, unscaled)."""
        return self.host.restore_s

    def to_json(self) -> dict:
        """JSON form for the event log."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
            "device_hit_tokens": self.device_hit_tokens,
            "cached_tokens": self.cached_tokens,
            "host_hit": self.host.hit,
            "host_row_tokens": self.host.row_tokens,
            "host_reused_tokens": self.host.reused_tokens,
            "host_fetched_tokens": self.host.fetched_tokens,
            "host_rows_refreshed": self.host.rows_used,
            "restore_s": self.host.restore_s,
            "stored_blocks": self.stored_blocks,
            "evicted_blocks": self.evicted_blocks,
            "host_store": self.host_store.to_json(),
        }


class RadixCache:
    """Block-granular device prefix cache with an optional host tier.

    Args:
        capacity_blocks: Device capacity (blocks, >= 1).
        block_size: Tokens per block (>= 1).
        bytes_per_token: KV bytes per token (bytes).
        host: The host tier behind the device, or None.

    Raises:
        ValueError: A size is out of range.
    """

    def __init__(
        self,
        *,
        capacity_blocks: int = 4096,
        block_size: int = 16,
        bytes_per_token: int = DEFAULT_BYTES_PER_TOKEN,
        host: HostTier | None = None,
    ) -> None:
        if capacity_blocks < 1 or block_size < 1:
            raise ValueError("capacity_blocks and block_size must be >= 1")
        self.capacity_blocks = capacity_blocks
        self.block_size = block_size
        self.bytes_per_token = bytes_per_token
        self.host = host
        self.stats = RadixStats()
        self._blocks: dict[bytes, _Block] = {}
        self._heap: list[tuple[int, int, bytes]] = []  # (last_used, -depth, key)
        self._tick = 0
        self._pinned = 0
        self._inflight = 0

    # ---- state -----------------------------------------------------------------
    @property
    def blocks(self) -> int:
        """Blocks held."""
        return len(self._blocks)

    @property
    def bytes(self) -> int:
        """Device bytes held (bytes)."""
        return len(self._blocks) * self.block_size * self.bytes_per_token

    @property
    def kv_usage(self) -> float:
        """Referenced blocks over capacity, 0..1 (idle cache reads 0)."""
        return min(1.0, (self._pinned + self._inflight) / self.capacity_blocks)

    def clear(self) -> int:
        """Drop every unreferenced block and the host rows; counters are kept.

        Returns:
            Device blocks dropped.
        """
        keep = {k: b for k, b in self._blocks.items() if b.refs}
        dropped = len(self._blocks) - len(keep)
        self._blocks = keep
        for b in keep.values():
            b.children = 0
        for b in keep.values():
            if b.parent in keep:
                keep[b.parent].children += 1
        self._heap = []
        if self.host is not None:
            self.host.clear()
        return dropped

    # ---- operations --------------------------------------------------------------
    def admit(self, tokens: Sequence[int], *, messages_end: int | None = None) -> Admission:
        """Look a prompt up in the device tier, then the host tier; pin its hit.

        Args:
            tokens: The prompt's token ids.
            messages_end: End of the rendered messages (tokens); default ``n``.

        Returns:
            The admission, to pass to ``finish``.
        """
        n = len(tokens)
        chain = BlockHasher(self.block_size)
        bkeys = list(chain.feed(tokens))
        limit = (n - 1) // self.block_size if n else 0
        self._tick += 1
        hit_blocks = 0
        pinned: list[bytes] = []
        for k in bkeys[:limit]:
            b = self._blocks.get(k)
            if b is None:
                break
            hit_blocks += 1
            b.last_used = self._tick
            if b.refs == 0:
                self._pinned += 1
            b.refs += 1
            pinned.append(k)
        d = hit_blocks * self.block_size
        s = self.stats
        s.lookups += 1
        s.query_tokens += n
        s.hit_tokens += d
        if d:
            s.hit_requests += 1
        host = HostLookup(hit=False)
        if self.host is not None:
            host = self.host.lookup(PrefixKeys(tokens), device_hit_tokens=d)
            s.external_query_tokens += n - d
            if host.hit:
                s.external_hit_tokens += host.reused_tokens - d
        cached = max(d, host.reused_tokens)
        inflight = max(0, -(-n // self.block_size) - hit_blocks)
        self._inflight += inflight
        return Admission(
            tokens=tokens,
            messages_end=n if messages_end is None else messages_end,
            device_hit_tokens=d,
            host=host,
            cached_tokens=cached,
            pinned=pinned,
            inflight_blocks=inflight,
            chain=chain,
            block_keys=bkeys,
        )

    def peek(self, tokens: Sequence[int]) -> int:
        """Device-tier cached tokens an ``admit`` of ``tokens`` would credit now, changing nothing.

        The leading full blocks held, capped at ``(n - 1) // block_size``
        blocks, times ``block_size``; the host tier is not consulted, no
        counter moves and no block is touched (a router asks every replica
        this before it picks one: ``kvreplay.sim.routing``).

        Args:
            tokens: The prompt's token ids.

        Returns:
            Cached tokens (a multiple of ``block_size``).
        """
        n = len(tokens)
        limit = (n - 1) // self.block_size if n else 0
        if not limit or not self._blocks:
            return 0
        hit = 0
        for k in PrefixKeys(tokens).block_keys(self.block_size, limit * self.block_size):
            if k not in self._blocks:
                break
            hit += 1
        return hit * self.block_size

    def prefilled(self, adm: Admission) -> int:
        """End of prefill: the prompt's full blocks become visible to other requests.

        They stay pinned by this request until ``finish``. Called by ``finish``
        when it was not called before, so C1 callers may skip it.

        Args:
            adm: The request's admission.

        Returns:
            Blocks newly inserted.
        """
        if adm.prefilled_done or adm.finished:
            return 0
        adm.prefilled_done = True
        self._inflight -= adm.inflight_blocks
        adm.inflight_blocks = 0
        self._tick += 1
        stored = self._insert(adm, adm.block_keys, pin=True)
        adm.stored_blocks += stored
        adm.evicted_blocks += self._evict_to_capacity()
        return stored

    def finish(self, adm: Admission, output_tokens: Sequence[int] = ()) -> RadixOutcome:
        """Insert a finished request's blocks, release its pins, evict, store host rows.

        Args:
            adm: The request's admission (each admission finishes once).
            output_tokens: The generated token ids.

        Returns:
            The request's full outcome (blocks counted over prefill and finish).

        Raises:
            ValueError: ``adm`` was already finished.
        """
        if adm.finished:
            raise ValueError("admission already finished")
        self.prefilled(adm)
        adm.finished = True
        n = len(adm.tokens)
        m = len(output_tokens)
        # KV exists for prompt + output but the last sampled token: n + m - 1 tokens.
        if adm.chain is None:
            adm.chain = BlockHasher(self.block_size)
            adm.chain.feed(adm.tokens)
        bkeys = adm.chain.feed(tuple(output_tokens)[: max(0, m - 1)])
        self._tick += 1
        adm.stored_blocks += self._insert(adm, bkeys, pin=False)
        for k in adm.pinned:
            b = self._blocks.get(k)
            if b is not None:
                b.refs -= 1
                if b.refs == 0:
                    self._pinned -= 1
        adm.pinned = []
        for depth, k in enumerate(bkeys, start=1):
            b = self._blocks[k]
            if b.children == 0 and b.refs == 0:
                heapq.heappush(self._heap, (b.last_used, -depth, k))
        adm.evicted_blocks += self._evict_to_capacity()
        host_store = HostStoreOutcome()
        if self.host is not None and not adm.host.hit:
            keys = PrefixKeys(tuple(adm.tokens) + tuple(output_tokens))
            host_store = self.host.store(keys, (adm.messages_end, n, n + m), terminal=n + m)
        return RadixOutcome(
            prompt_tokens=n,
            output_tokens=m,
            device_hit_tokens=adm.device_hit_tokens,
            cached_tokens=adm.cached_tokens,
            host=adm.host,
            stored_blocks=adm.stored_blocks,
            evicted_blocks=adm.evicted_blocks,
            host_store=host_store,
        )

    def _insert(self, adm: Admission, bkeys: Sequence[builtins.bytes], *, pin: bool) -> int:
        """Insert (or touch) a chain of block keys at the current tick; optionally pin."""
        stored = 0
        parent: bytes | None = None
        pinned = set(adm.pinned) if pin else set()
        for depth, k in enumerate(bkeys, start=1):
            b = self._blocks.get(k)
            if b is None:
                b = _Block(parent, depth, self._tick)
                self._blocks[k] = b
                if parent is not None:
                    self._blocks[parent].children += 1
                stored += 1
            else:
                b.last_used = self._tick
            if pin and k not in pinned:
                if b.refs == 0:
                    self._pinned += 1
                b.refs += 1
                adm.pinned.append(k)
                pinned.add(k)
            parent = k
        self.stats.stored_blocks += stored
        return stored

    def request(
        self, tokens: Sequence[int], output_tokens: Sequence[int] = (), *, messages_end: int | None = None
    ) -> RadixOutcome:
        """One request at concurrency 1: ``admit`` then ``finish``.

        Args:
            tokens: The prompt's token ids.
            output_tokens: The generated token ids.
            messages_end: End of the rendered messages (tokens); default ``n``.

        Returns:
            The request's outcome.
        """
        return self.finish(self.admit(tokens, messages_end=messages_end), output_tokens)

    # ---- internals -----------------------------------------------------------------
    def _evict_to_capacity(self) -> int:
        evicted = 0
        while len(self._blocks) > self.capacity_blocks and self._heap:
            last_used, _neg_depth, k = heapq.heappop(self._heap)
            b = self._blocks.get(k)
            if b is None or b.children or b.refs or b.last_used != last_used:
                continue
            del self._blocks[k]
            evicted += 1
            if b.parent is not None:
                p = self._blocks.get(b.parent)
                if p is not None:
                    p.children -= 1
                    if p.children == 0 and p.refs == 0:
                        heapq.heappush(self._heap, (p.last_used, -p.depth, b.parent))
        self.stats.evicted_blocks += evicted
        return evicted
