"""The cache state a sweep point declared, and whether its own run directory proves it.

Three states (``--cache``):

- ``cold``: the measured phase asked the server to empty its prefix cache first (the
  phase's ``reset``: vLLM ``/reset_prefix_cache``, SGLang ``/flush_cache``, the
  simulator's and halogen's ``/reset_prefix_cache``; ``runner`` calls the backend's
  ``reset_cache``). Verified when the reset was accepted, every cache-occupancy gauge
  the server reports (``entries``, ``bytes``, ... of a halogen-style ``/cache``) read 0
  at the phase's opening counter read, and the first measured request (position 0)
  restored 0 cached tokens (its usage's ``cached_tokens``).
- ``warm``: a C1 priming phase sent the point's own bodies before the measured phase.
  Verified when the first measured request's (position 0) cached tokens reach its block-rounded
  prompt, ``floor((prompt_tokens - 1) / B) * B`` with ``B`` the block size the server's
  identity names (a server recomputes at least the last prompt token), or, with
  ``--warm-min F``, ``ceil(F * prompt_tokens)``.
- ``as-is``: nothing done to the cache; never verified, the counters are recorded.

A state that cannot be proved (no reset endpoint, no ``cached_tokens`` in the usage, no
block size) is published with ``verified: false`` and the reason, never as verified.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kvreplay.backends import OCCUPANCY_GAUGES
from kvreplay.options.sweep import CACHE_STATES
from kvreplay.rundir import COUNTERS, read_counter_log
from kvreplay.rundir.counterlog import request_boundaries

__all__ = ["CACHE_STATES", "NO_RESET", "block_size_of", "cache_evidence"]

NO_RESET = "reset requested but the server has no cache reset"
"""The runner's ``invalid_reasons`` entry for a refused reset (``runner._runner``)."""
_COUNTERS = ("lookups", "hits", "misses", "hit_tokens", "stores", "evictions", "entries", "bytes")


def block_size_of(identity: Any) -> int | None:
    """The first whole ``block_size`` > 0 found in a server identity (summary.json ``identity.before``), or None.

    A digit string counts too: vLLM's identity carries ``vllm:cache_config_info``'s labels
    (``cache_config.block_size = "16"``).
    """
    if isinstance(identity, dict):
        v = identity.get("block_size")
        if isinstance(v, str) and v.isdigit():
            v = int(v)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
        for x in identity.values():
            if (found := block_size_of(x)) is not None:
                return found
    return None


def _first_request(records: Iterable[dict[str, Any]], phase: str, wave: int, cold: bool) -> dict[str, Any] | None:
    """The phase's first measured request (module docstring): position 0, or the first wave's least cached."""
    first = None
    for rec in records:
        pos = rec.get("position")
        if rec.get("phase") != phase or not rec.get("sent") or not isinstance(pos, int):
            continue
        if not cold or wave <= 1:
            if pos == 0:
                return rec
            continue
        if pos < wave and (first is None or _cached(rec) < _cached(first)
                           or (_cached(rec) == _cached(first) and pos < first["position"])):
            first = rec
    return first


def _request_delta(rec: dict[str, Any]) -> dict[str, Any] | None:
    """The cache counters' delta across one request (C1 with per-request counters), else None."""
    d = rec.get("counter_delta")
    if not isinstance(d, dict):
        return None
    return {k: d[k] for k in ("lookups", "hits", "hit_tokens") if k in d} or None


def _cached(rec: dict[str, Any]) -> float:
    c = (rec.get("usage") or {}).get("cached_tokens")
    return c if isinstance(c, int) else float("inf")


def cache_evidence(run_dir: Path, summary: dict[str, Any], records: Iterable[dict[str, Any]], phase: str,
                   declared: str, *, wave: int = 1, warm_min: float | None = None) -> dict[str, Any]:
    """``{"declared", "verified", "reason", "evidence"}`` of one point (module docstring).

    Args:
        run_dir: The point's run directory (its counters.jsonl is read).
        summary: Its summary.json.
        records: Its records (any phases).
        phase: The measured phase's name.
        declared: ``cold``, ``warm`` or ``as-is``.
        wave: Requests the phase sends at once at its start (its concurrency; 1 for an open loop).
        warm_min: ``--warm-min``: the fraction of the prompt the first request must
            find cached (None: the block-rounded prompt).

    Returns:
        ``evidence`` holds ``first_request`` (``position``, ``prompt_tokens``,
        ``cached_tokens``, ``counter_delta``: ``lookups``/``hits``/``hit_tokens`` across
        it at C1), ``counters_before`` (occupancy gauges at the phase's opening read),
        ``counter_delta`` (the phase's cache counter deltas), ``cached_share`` (cached /
        prompt tokens of the phase), ``reset`` (``accepted`` / ``refused`` / ``not sent``
        without a counter backend; cold only) and ``required_cached_tokens`` (warm only).
    """
    ph: dict[str, Any] = next((p for p in summary.get("phases") or [] if p.get("name") == phase), {})
    first = _first_request(records, phase, wave, declared == "cold")
    usage = (first or {}).get("usage") or {}
    prompt, cached = usage.get("prompt_tokens"), usage.get("cached_tokens")
    before = next((s for p, at, s in request_boundaries(read_counter_log(run_dir / COUNTERS))
                   if p == phase and at == "before"), None)
    occupancy = {g: before[g] for g in OCCUPANCY_GAUGES if before and isinstance(before.get(g), (int, float))}
    delta = ph.get("counter_delta") or {}
    tokens = ph.get("tokens") or {}
    evidence: dict[str, Any] = {
        "first_request": None if first is None else {
            "position": first.get("position"), "prompt_tokens": prompt, "cached_tokens": cached,
            "counter_delta": _request_delta(first)},
        "counters_before": occupancy or None,
        "counter_delta": {k: delta[k] for k in _COUNTERS if k in delta} or None,
        "cached_share": (tokens["cached"] / tokens["prompt"] if tokens.get("prompt") else None),
    }
    reason: str | None = None
    verified = False
    if declared == "as-is":
        reason = "as-is: the cache was neither emptied nor primed before the point"
    elif first is None:
        reason = "no request of the measured phase was sent"
    elif not isinstance(cached, int):
        reason = "the server's usage reports no cached_tokens for the first measured request"
    elif declared == "cold":
        refused = NO_RESET in (ph.get("invalid_reasons") or [])
        unsent = ph.get("attribution") == "none"  # no counter backend: the runner sent no reset
        evidence["reset"] = "not sent" if unsent else "refused" if refused else "accepted"
        full = {g: v for g, v in occupancy.items() if v != 0}
        if unsent:
            reason = "no counter backend (--backend none): no reset was sent"
        elif refused:
            reason = "the server has no cache reset (or refused it)"
        elif full:
            reason = "cache not empty at the phase's start: " + ", ".join(f"{g}={v:g}" for g, v in full.items())
        elif cached != 0:
            reason = f"the first measured request restored {cached} cached tokens (want 0)"
        elif (hits := (evidence["first_request"]["counter_delta"] or {}).get("hit_tokens")):
            reason = f"the server's counters show {hits:g} hit tokens across the first measured request (want 0)"
        else:
            verified = True
    else:  # warm
        block = block_size_of((summary.get("identity") or {}).get("before"))
        if warm_min is not None and isinstance(prompt, int):
            need: int | None = math.ceil(warm_min * prompt)
        elif block is not None and isinstance(prompt, int):
            need = (prompt - 1) // block * block
        else:
            need = None
        evidence["required_cached_tokens"] = need
        if need is None:
            reason = "the server names no block size and no --warm-min was given: the warm state cannot be checked"
        elif cached < need:
            reason = f"the first measured request restored {cached} cached tokens (want >= {need})"
        else:
            verified = True
    return {"declared": declared, "verified": verified, "reason": reason, "evidence": evidence}
