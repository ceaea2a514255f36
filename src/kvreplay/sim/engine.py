"""The simulator's state machine, without HTTP: cache model, counters, event log.

``SimEngine`` owns one cache model (``EntriesCache`` or ``RadixCache``), the
vLLM-style counters that ``/metrics`` prints, the load gauges, and the event log
that ``/events`` pages. The server calls ``admit`` when a request gets a slot,
``prefilled`` when its first token is due, and ``finish`` before it writes the
response's last bytes, so at concurrency 1 a
client that reads ``/cache`` or ``/metrics`` after a response sees that
request's whole effect.

**Output.** The generated text is a deterministic function of the body bytes:
``random.Random(sha256(body))`` picks words of at most 6 letters from a fixed
list (each word is one token of the tokenizer approximation). The natural length
is ``output_tokens`` when configured, else ``32 + sha256[0:4] % 225`` tokens;
``max_completion_tokens`` / ``max_tokens`` (else ``max_output_tokens``) caps it
with ``finish_reason = "length"``; otherwise ``"stop"``.

**Time model** (model seconds, multiplied by ``time_scale`` when slept):
``prefill_s = base + (n - cached) / prefill_tokens_per_s`` where ``base`` is
``prefill_base_s`` (the cold fit's ``a``) for a request with no cached tokens
and ``hit_prefill_base_s`` (default 0) for one with cached tokens: a resume
does not redo the per-request set-up the cold fit's intercept measures (issue
18; docs/simulator.md, "Warm TTFT"); a restore
(entries hit, host-tier fetch) adds ``restore_s`` to the wait before the first
token; each further token follows after ``itl_s``; stores happen after the
response, holding the ``retiring`` gauge for ``store_s``.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kvreplay.sim.cache_entries import EntriesCache, EntriesOutcome
from kvreplay.sim.cache_host import HostTier
from kvreplay.sim.cache_radix import Admission, RadixCache, RadixOutcome
from kvreplay.sim.config import SimConfig
from kvreplay.sim.faults import Faults
from kvreplay.sim.tokenizer import Prompt, tokenize_text

__all__ = ["OUTPUT_WORDS", "Generation", "SimEngine", "Ticket", "generate_output", "make_cache"]

OUTPUT_WORDS = [
    "the", "of", "and", "to", "in", "is", "it", "that", "for", "on", "with", "as", "was", "at", "by", "be", "this",
    "are", "or", "from", "cache", "block", "token", "prefix", "host", "row", "page", "slot", "hit", "miss", "store",
    "evict", "warm", "cold", "fast", "slow", "queue", "batch", "model", "layer", "value", "key", "state", "reuse",
    "fetch", "copy", "keep", "drop", "alpha", "beta", "gamma", "delta", "river", "stone", "cloud", "light", "north",
    "south", "quiet", "bright",
]
"""Words of generated output: lowercase, at most 6 letters, one token each."""


@dataclass(frozen=True, slots=True)
class Generation:
    """A deterministic output.

    Attributes:
        pieces: One string per token (the first without a leading space).
        token_ids: Their token ids.
        finish_reason: ``"stop"`` or ``"length"``.
    """

    pieces: tuple[str, ...]
    token_ids: tuple[int, ...]
    finish_reason: str

    @property
    def text(self) -> str:
        """The whole output text."""
        return "".join(self.pieces)


def generate_output(body_raw: bytes, body: Mapping[str, Any], cfg: SimConfig) -> Generation:
    """The output a body gets (see module docstring).

    Args:
        body_raw: The exact request bytes (the seed).
        body: The decoded body (for ``max_tokens``).
        cfg: The simulator config.

    Returns:
        The generation.
    """
    digest = hashlib.sha256(body_raw).digest()
    natural = cfg.output_tokens if cfg.output_tokens is not None else 32 + int.from_bytes(digest[:4], "big") % 225
    cap = body.get("max_completion_tokens", body.get("max_tokens"))
    if not isinstance(cap, int) or isinstance(cap, bool) or cap < 0:
        cap = cfg.max_output_tokens
    count = min(natural, cap)
    reason = "length" if natural > cap else "stop"
    rng = random.Random(digest)
    words = [rng.choice(OUTPUT_WORDS) for _ in range(count)]
    pieces = tuple(w if i == 0 else " " + w for i, w in enumerate(words))
    ids = tuple(tokenize_text(p)[0] for p in pieces)
    return Generation(pieces, ids, reason)


def make_cache(cfg: SimConfig) -> EntriesCache | RadixCache:
    """A fresh, empty cache model as ``cfg`` describes it (the one place that builds one).

    ``cfg.cache == "entries"`` gives an ``EntriesCache`` (``cache_entries``,
    ``max_bytes``, ``max_entry_bytes``, ``bytes_per_token``, recency, costs);
    otherwise a ``RadixCache`` of ``device_blocks`` blocks of ``block_size``
    tokens, with a ``HostTier`` behind it when ``host_rows > 0``. The server's
    engine and the offline routing simulation (``kvreplay.offline.routing``)
    both build their caches here.
    """
    if cfg.cache == "entries":
        return EntriesCache(
            max_entries=cfg.cache_entries,
            bytes_per_token=cfg.bytes_per_token,
            max_entry_bytes=cfg.max_entry_bytes,
            max_bytes=cfg.max_bytes,
            restore_s_per_token=cfg.restore_s_per_token,
            store_s_per_token=cfg.store_s_per_token,
            recency=cfg.entries_recency,
            refuse_over_bytes=cfg.refuse_over_bytes,
        )
    host = None
    if cfg.host_rows > 0:
        host = HostTier(
            rows=cfg.host_rows,
            pages=cfg.host_pages,
            page_tokens=cfg.page_tokens,
            bytes_per_token=cfg.bytes_per_token,
            evict=cfg.host_evict,
            restore_s_per_token=cfg.restore_s_per_token,
            store_s_per_token=cfg.store_s_per_token,
        )
    return RadixCache(
        capacity_blocks=cfg.device_blocks,
        block_size=cfg.block_size,
        bytes_per_token=cfg.bytes_per_token,
        host=host,
    )


@dataclass(slots=True, kw_only=True)
class Ticket:
    """One admitted request, from ``admit`` to ``finish``.

    Attributes:
        seq: Request number (1-based, across restarts).
        prompt: The rendered prompt.
        cached_tokens: Cached tokens credited (tokens).
        device_hit_tokens: Local (device / snapshot) hit (tokens).
        external_tokens: Tokens supplied by the host tier beyond the device hit.
        prefill_s: Model prefill time (s, unscaled).
        restore_s: Model restore time (s, unscaled).
        epoch: Restart epoch at admission (a finish after a restart is dropped).
    """

    seq: int
    prompt: Prompt
    cached_tokens: int
    device_hit_tokens: int
    external_tokens: int
    prefill_s: float
    restore_s: float
    epoch: int
    lookup: EntriesOutcome | None = None
    admission: Admission | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class _Counters:
    prompt_tokens: int = 0
    generation_tokens: int = 0
    query_tokens: int = 0
    hit_tokens: int = 0
    local_compute: int = 0
    local_cache_hit: int = 0
    external_kv_transfer: int = 0
    external_query_tokens: int = 0
    external_hit_tokens: int = 0
    hit_requests: int = 0
    lookups: int = 0
    cached_tokens: int = 0
    success: dict[str, int] = field(default_factory=lambda: {"stop": 0, "length": 0, "abort": 0, "error": 0})


class SimEngine:
    """Cache model, counters, gauges and event log of one simulated server.

    Args:
        cfg: The configuration.
    """

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.faults = Faults(cfg.faults)
        self.model = cfg.model
        self.build = cfg.build
        self.identity_changes = 0
        self.requests_seen = 0
        self.epoch = 0
        self.events: deque[dict] = deque(maxlen=cfg.events_max or None)
        self._next_event = 1
        self.running = 0
        self.waiting = 0
        self.retiring = 0
        self.transfers_in_flight = 0
        self.transfers_waiting = 0
        self.phantom_busy = 0
        self.start_time_s = 0.0
        self._fresh_state()

    # ---- lifecycle ---------------------------------------------------------------
    def _fresh_state(self) -> None:
        cfg = self.cfg
        self.entries: EntriesCache | None = None
        self.radix: RadixCache | None = None
        cache = make_cache(cfg)
        if isinstance(cache, EntriesCache):
            self.entries = cache
        else:
            self.radix = cache
        self.counters = _Counters()
        self.last_entry_bytes = 0
        # Wall-clock start marker (Unix s): what process_start_time_seconds and
        # every _created gauge print; strictly increases across restarts.
        self.start_time_s = max(time.time(), self.start_time_s + 0.001)

    def restart(self) -> None:
        """Simulate a server restart: counters to zero, cache emptied, new start time."""
        self.epoch += 1
        self._fresh_state()
        self.log("restart", epoch=self.epoch, start_time_s=self.start_time_s)

    def change_identity(self, what: str = "build") -> None:
        """Change the build string (default) or the model id."""
        self.identity_changes += 1
        if what == "model":
            self.model = f"{self.cfg.model}-{self.identity_changes + 1}"
        else:
            self.build = f"{self.cfg.build}+{self.identity_changes}"
        self.log("identity", what=what, model=self.model, build=self.build)

    def reset_prefix_cache(self) -> int:
        """Empty the cache; counters are not zeroed (as vLLM's reset).

        Returns:
            Entries (or device blocks) dropped.
        """
        dropped = self.entries.clear() if self.entries is not None else self.radix.clear()  # type: ignore[union-attr]
        self.log("reset_prefix_cache", dropped=dropped)
        return dropped

    def next_request(self) -> int:
        """Number the next generation request (1-based)."""
        self.requests_seen += 1
        return self.requests_seen

    # ---- events -------------------------------------------------------------------
    def log(self, kind: str, **data: Any) -> dict:
        """Append one event; returns it (with its ``id``)."""
        ev = {"id": self._next_event, "kind": kind, **data}
        self._next_event += 1
        self.events.append(ev)
        return ev

    def events_since(self, since: int, limit: int) -> dict:
        """Events with ``id > since``, at most ``limit``.

        Returns:
            ``{"events": [...], "next": last id returned (or since), "first_id":
            oldest id kept, "last_id": newest id}``.
        """
        out = [e for e in self.events if e["id"] > since][:limit]
        return {
            "events": out,
            "next": out[-1]["id"] if out else since,
            "first_id": self.events[0]["id"] if self.events else self._next_event,
            "last_id": self._next_event - 1,
        }

    # ---- requests --------------------------------------------------------------------
    def admit(self, seq: int, prompt: Prompt) -> Ticket:
        """Look the prompt up in the cache (at slot grant) and price its prefill."""
        cfg = self.cfg
        n = len(prompt)
        c = self.counters
        lookup = adm = None
        if self.entries is not None:
            lookup = self.entries.lookup(prompt.tokens)
            local = lookup.hit_tokens
            external = 0
            restore_s = lookup.restore_s
        else:
            assert self.radix is not None
            adm = self.radix.admit(prompt.tokens, messages_end=prompt.messages_end)
            local = adm.device_hit_tokens
            external = adm.cached_tokens - local
            restore_s = adm.host.restore_s
            if self.radix.host is not None:
                c.external_query_tokens += n - local
                c.external_hit_tokens += external
        cached = local + external
        c.lookups += 1
        c.query_tokens += n
        c.hit_tokens += local
        if cached:
            c.hit_requests += 1
        base_s = cfg.hit_prefill_base_s if cached else cfg.prefill_base_s
        prefill_s = base_s + (n - cached) / cfg.prefill_tokens_per_s
        return Ticket(
            seq=seq,
            prompt=prompt,
            cached_tokens=cached,
            device_hit_tokens=local,
            external_tokens=external,
            prefill_s=prefill_s,
            restore_s=restore_s,
            epoch=self.epoch,
            lookup=lookup,
            admission=adm,
        )

    def prefilled(self, t: Ticket) -> None:
        """End of the request's prefill: radix prompt blocks become shareable."""
        if self.radix is not None and t.admission is not None and t.epoch == self.epoch:
            self.radix.prefilled(t.admission)

    def finish(self, t: Ticket, output_ids: tuple[int, ...], finish_reason: str) -> tuple[float, dict]:
        """Store the request's snapshots / blocks / checkpoints and count it.

        Args:
            t: The ticket from ``admit``.
            output_ids: The output tokens actually produced.
            finish_reason: ``stop``, ``length``, ``abort`` or ``error``.

        Returns:
            ``(store_s, cache_json)``: model store time (s, unscaled) and the
            cache part of the request's event.
        """
        n = len(t.prompt)
        c = self.counters
        if t.epoch != self.epoch:  # the server restarted under this request
            return 0.0, {"dropped_by_restart": True}
        c.prompt_tokens += n
        c.cached_tokens += t.cached_tokens
        c.local_cache_hit += t.device_hit_tokens
        c.external_kv_transfer += t.external_tokens
        c.local_compute += n - t.cached_tokens
        c.generation_tokens += len(output_ids)
        c.success[finish_reason] = c.success.get(finish_reason, 0) + 1
        if self.entries is not None:
            assert t.lookup is not None
            offsets = [self._point(t.prompt, p) for p in self.cfg.snapshot_points]
            stored, held, refused, evicted, store_s = self.entries.store(t.prompt.tokens, offsets)
            outcome = EntriesOutcome(
                prompt_tokens=n,
                hit=t.lookup.hit,
                matched_tokens=t.lookup.matched_tokens,
                hit_tokens=t.lookup.hit_tokens,
                stored=stored,
                already_held=held,
                refused=refused,
                evicted=evicted,
                truncated=self.entries.last_truncated,
                restore_s=t.lookup.restore_s,
                store_s=store_s,
            )
            return store_s, {"model": "entries", **outcome.to_json()}
        assert self.radix is not None and t.admission is not None
        out: RadixOutcome = self.radix.finish(t.admission, output_ids)
        return out.host_store.store_s, {"model": "radix", **out.to_json()}

    @staticmethod
    def _point(prompt: Prompt, point: str) -> int:
        if point == "system":
            return prompt.system_end
        if point == "messages":
            return prompt.messages_end
        return prompt.prompt_end

    # ---- views -----------------------------------------------------------------------
    def cache_json(self) -> dict:
        """The halogen-style ``/cache`` object (exactly the 14 keys of issue 5).

        For the radix model the keys describe the device tier in blocks
        (``entries`` = blocks held, ``max_entries`` = capacity, ``stores`` /
        ``evicted`` = blocks) and the host tier's transfers (``store_ms_total``,
        ``restore_ms_total``, ``refused``; ``rows_copied`` = host tokens fetched
        plus stored); ``hits`` / ``misses`` count requests with / without cached
        tokens and ``prompt_tokens_saved`` sums their cached tokens.
        """
        if self.entries is not None:
            return self.entries.cache_json()
        r = self.radix
        assert r is not None
        c = self.counters
        host = r.host
        hs = host.stats if host is not None else None
        looked = c.lookups
        return {
            "entries": r.blocks,
            "bytes": r.bytes,
            "last_entry_bytes": r.block_size * r.bytes_per_token if r.stats.stored_blocks else 0,
            "max_entries": r.capacity_blocks,
            "hits": c.hit_requests,
            "misses": looked - c.hit_requests,
            "stores": r.stats.stored_blocks,
            "evicted": r.stats.evicted_blocks,
            "prompt_tokens_saved": c.hit_tokens + c.external_hit_tokens,
            "store_ms_total": round(hs.store_ms_total, 3) if hs else 0.0,
            "restore_ms_total": round(hs.restore_ms_total, 3) if hs else 0.0,
            "refused": hs.refused if hs else 0,
            "rows_copied": hs.fetched_tokens + hs.stored_tokens if hs else 0,
            "hit_rate": round(c.hit_requests / looked, 6) if looked else 0.0,
        }
