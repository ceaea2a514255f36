"""The KV probe: what does a server's prefix cache hold, and what is it worth?

Legs (every request is streamed with ``max_tokens = 1`` and counters are read
around it through the backend adapter)::

    A  cold   "probe cold <nonce>." + filler, fresh tail      one per size (x cold_repeats)
    B  warm   A's exact system bytes, fresh tail              right after its A
    C  evict  W1 = new prefix P + tail; k foreign prompts, each with its own
              system block; W2 = P + fresh tail                one per (k, repeat)

**Fit.** Ordinary least squares ``prefill_s = a + uncached_tokens / rate`` over
the cold legs (``stats.fit_line``; ``rate = 1 / slope``), on one of three
series (``fit_on``): ``ttft`` (send to first token: what a client waits),
``stream`` (response headers to first token: the server's wait after it accepted
and tokenized the request; meaningful where headers precede prefill, as in vLLM,
SGLang and the simulator) or ``server`` (``timings.prompt_ms`` where the server
reports it, as llama.cpp does). Every available series is fitted and kept; the
chosen one is ``prefill_fit``. Where a size has several cold repeats, the
fastest is fitted (scheduler and network delays only ever add time).

**Eviction bisection.** A point ``k`` is *flushed* when W2's cached tokens are at
or below the floor, the most cached tokens any cold (nonce-first) leg got (0 on
the simulator). ``k = 0`` is measured first (the baseline: the prefix must be
reusable at all), then ``flush_max``; if that flushes, the bracket ``[lo, hi]``
(lo not flushed, hi flushed) is halved until ``hi - lo == 1``. A point flushes
only if every repeat does; each repeat uses fresh system bytes, so no point can
reuse another's prefix. Every point is kept.

**Bytes per token.** Where the server reports the bytes of the last stored entry
(halogen's ``last_entry_bytes``) or of the pool, bytes per token is the slope of
entry bytes against prompt tokens over single-request legs that stored something
and lie below the entry cap (the intercept absorbs the template tokens the
snapshot leaves out); with one such leg, entry bytes / prompt tokens. Legs on
the cap are left out and Cmax is marked cap-bound (``probe_sizing``). A prefix of T tokens then needs
``T * bytes_per_token`` bytes; a request stores ``s`` entries (cold legs below the
cap, cross-checked with the eviction points' foreign blocks; ``probe.sizing``
``entries_per_request``), so a prefix survives ``k`` foreign requests only with
at least ``s * (k + 1)`` entries, and ``min_flush_k`` implies
``s * min_flush_k .. s * min_flush_k + s - 1`` entries.

The probe learns only from responses and counters; it never reads a simulator's
configuration.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from kvreplay.argtypes import format_sizes, parse_sizes
from kvreplay.clock import now_ns
from kvreplay.errors import BackendError
from kvreplay.experiments.probe.cut import StopNew, stopped_json
from kvreplay.experiments.probe.fits import fits_of
from kvreplay.experiments.probe.prompts import TokenCounter
from kvreplay.experiments.probe.report import (
    _fmt,
    accuracy_warning,
    evidence_sentences,
    intercept_warning,
    plain_line,
    render_report,
)
from kvreplay.experiments.probe.sizing import (
    cap_bound,
    capped_sizes,
    entries_per_request,
    entry_bytes_fit,
    refused_stores,
    reuse_cap,
)
from kvreplay.options.probe import FIT_SOURCES
from kvreplay.runner.backend import Backend, Snapshot, counter_delta
from kvreplay.runner.counters import settled_snapshot, wait_drained
from kvreplay.runner.http import send_body

__all__ = ["FIT_SOURCES", "ProbeConfig", "format_sizes", "intercept_warning", "parse_sizes", "plain_line",
           "render_report", "run_probe"]



@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeConfig:
    """What the probe measures.

    Attributes:
        sizes: Cold/warm leg sizes (prompt tokens).
        cold_repeats: Cold legs per size (each with a fresh nonce).
        flush_prefix_tokens: Size of the prefix P of the eviction legs (tokens).
        foreign_tokens: Size of each foreign prompt (tokens).
        flush_max: Upper bound of the bisection (foreign requests); 0 skips eviction legs.
        flush_repeats: Repeats per bisection point.
        fit_on: Series fitted for ``prefill_fit`` (one of ``FIT_SOURCES``).
        model: Model id for bodies; None = the first of ``/v1/models``.
        nonce: Prefix of every nonce; None = random (a rerun never reuses a prefix).
        drain_timeout_s: Bound of the drain check before the first leg (s).
        read_timeout_s: Longest silence between two reads of a leg's response (s): the socket
            read timeout of the probe's session (``probe.step.probe_url``).

    The defaults here are the only ones: ``kvreplay probe``'s options and a probe step's
    TOML keys (``probe.step.probe_settings``) take theirs from ``ProbeConfig()``.
    """

    sizes: tuple[int, ...] = (8192, 16384, 32768, 65536)
    cold_repeats: int = 1
    flush_prefix_tokens: int = 8192
    foreign_tokens: int = 1024
    flush_max: int = 32
    flush_repeats: int = 2
    fit_on: str = "ttft"
    model: str | None = None
    nonce: str | None = None
    drain_timeout_s: float = 10.0
    read_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        if not self.sizes or any(s < 16 for s in self.sizes):
            raise ValueError("sizes must be >= 16 tokens")
        if self.cold_repeats < 1 or self.flush_repeats < 1 or self.flush_max < 0:
            raise ValueError("repeats must be >= 1 and flush_max >= 0")
        if self.fit_on not in FIT_SOURCES:
            raise ValueError(f"fit_on must be one of {FIT_SOURCES}")


@dataclass
class _Probe:
    session: aiohttp.ClientSession
    url: str
    backend: Backend | None
    headers: dict[str, str]
    cfg: ProbeConfig
    counter: TokenCounter
    nonce: str
    log: Callable[[dict[str, Any]], None]
    progress: Callable[[str], None]
    seq: int = 0
    last_snap: Snapshot | None = None
    requests: int = 0
    notes: list[str] = field(default_factory=list)
    stop_new: Callable[[], bool] | None = None

    def gate(self) -> None:
        """Raise ``StopNew`` when no new request may start (``run_probe``'s ``stop_new``)."""
        if self.stop_new is not None and self.stop_new():
            raise StopNew

    def fresh(self, tag: str) -> str:
        self.seq += 1
        return f"{self.nonce}-{tag}{self.seq}"

    async def snap(self) -> Snapshot | None:
        if self.backend is None:
            return None
        try:
            return await settled_snapshot(self.backend)
        except BackendError as exc:
            self.notes.append(f"counter read failed: {exc}")
            return None

    async def send(
        self, leg: str, raw: bytes, extra: dict[str, Any], *, counters: bool = True
    ) -> dict[str, Any]:
        """One request with counters read around it; returns (and logs) its record."""
        self.gate()
        before = self.last_snap if self.last_snap is not None else await self.snap()
        out = await send_body(
            self.session, self.url + "/v1/chat/completions", raw, headers=self.headers, head_chars=0
        )
        self.requests += 1
        r = out.stream
        rec: dict[str, Any] = {
            "leg": leg,
            **extra,
            "body_sha256": hashlib.sha256(raw).hexdigest(),
            "body_bytes": len(raw),
            "status": out.status,
            "http_status": out.http_status,
            "error": out.error,
            "prompt_tokens": r.prompt_tokens,
            "cached_tokens": r.cached_tokens,
            "ttft_s": (r.first_token_ns - out.sent_ns) / 1e9
            if r.first_token_ns is not None
            else None,
            "stream_s": (r.first_token_ns - out.headers_ns) / 1e9
            if r.first_token_ns is not None and out.headers_ns is not None
            else None,
            "server_prefill_s": _server_prefill_s(r.timings),
            "e2e_s": (out.done_ns - out.sent_ns) / 1e9,
        }
        if counters:
            after = await self.snap()
            self.last_snap = after
            rec["counter_delta"] = (
                counter_delta(before, after).to_json() if before and after else None
            )
            rec["last_entry_bytes"] = (
                _num(after.raw.get("last_entry_bytes")) if after is not None else None
            )
            rec["entries_gauge"] = after.common.get("entries") if after is not None else None
        else:
            self.last_snap = None
        self.log(rec)
        return rec

    async def foreign_block(self, k: int, point: str) -> dict[str, Any]:
        """Send k foreign prompts, each with its own system block; counters around the block."""
        before = self.last_snap if self.last_snap is not None else await self.snap()
        cached = []
        for i in range(k):
            self.gate()
            body = await self.counter.build(
                self.cfg.foreign_tokens,
                f"probe foreign {self.fresh('f')}.",
                seed=self.fresh("fs"),
                tail_seed=self.fresh("ft"),
            )
            rec = await self.send(
                "C-foreign",
                body.raw,
                {"point": point, "i": i, "size_tokens": self.cfg.foreign_tokens},
                counters=False,
            )
            self.counter.observe(body, rec["prompt_tokens"])
            cached.append(rec["cached_tokens"])
        after = await self.snap()
        self.last_snap = after
        return {
            "k": k,
            "cached_tokens": cached,
            "counter_delta": counter_delta(before, after).to_json() if before and after else None,
        }


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _server_prefill_s(timings: Any) -> float | None:
    if isinstance(timings, dict) and isinstance(timings.get("prompt_ms"), (int, float)):
        return float(timings["prompt_ms"]) / 1e3
    return None


async def run_probe(
    session: aiohttp.ClientSession,
    url: str,
    backend: Backend | None,
    cfg: ProbeConfig,
    *,
    headers: dict[str, str] | None = None,
    log: Callable[[dict[str, Any]], None] | None = None,
    progress: Callable[[str], None] | None = None,
    stop_new: Callable[[], bool] | None = None,
) -> dict[str, Any]:
    """Run every leg against one target and return the verdict (see module docstring).

    Args:
        session: aiohttp session (timeouts are the caller's).
        url: Target root URL.
        backend: Counter adapter, or None (no counters: no bytes per token, and
            cached tokens must come from usage).
        cfg: What to measure.
        headers: Request headers (Authorization); Content-Type is added.
        log: Called with every leg request's record as it completes.
        progress: Called with one line per step.
        stop_new: Asked before every leg (and before the token-count calibration); once it
            answers True no new request starts, the legs sent are kept and the verdict's
            ``stopped`` says what was cut (``experiments.probe_cut``; None when nothing was).

    Returns:
        The verdict object written to ``verdict.json``.
    """
    hdrs = {"Content-Type": "application/json", **(headers or {})}
    say = progress or (lambda _m: None)
    url = url.rstrip("/")
    t0 = now_ns()
    identity_before = identity_after = None
    if backend is not None:
        try:
            identity_before = await backend.identity()
        except BackendError as exc:
            say(f"identity read failed: {exc}")
    drain = None
    if backend is not None:
        dr = await wait_drained(backend, interval_s=0.05, timeout_s=cfg.drain_timeout_s)
        drain = dr.to_json()
    model = cfg.model or await _first_model(session, url, hdrs) or "default"
    counter = TokenCounter(session, url, model, hdrs)
    nonce = cfg.nonce or os.urandom(6).hex()
    legs: list[dict[str, Any]] = []

    def keep(rec: dict[str, Any]) -> None:
        legs.append(rec)
        if log:
            log(rec)

    p = _Probe(session, url, backend, hdrs, cfg, counter, nonce, keep, say, stop_new=stop_new)
    cold: list[dict[str, Any]] = []
    warm: list[dict[str, Any]] = []
    points_done: list[int] = []
    cut = False
    try:
        p.gate()
        await counter.calibrate(f"probe calibration {nonce}.")
        say(f"token counting: {counter.mode} ({counter.c1:.3f} tokens per filler word)")
        await _cold_warm(p, counter, cfg, cold, warm, say)
    except StopNew:
        cut = True
        say(f"stop_new_after: no new probe request ({len(cold)} cold, {len(warm)} warm legs sent)")
    fits = fits_of(cold)
    chosen = fits.get(cfg.fit_on)
    fit_warning = intercept_warning(chosen)
    if fit_warning:
        say(f"prefill fit: {fit_warning}")
    accuracy_note = accuracy_warning(chosen, cfg.sizes)
    if accuracy_note:
        say(f"prefill fit: {accuracy_note}")
    floor = max((r["cached_tokens"] or 0) for r in cold) if cold else 0

    # C legs: eviction bisection
    points: list[dict[str, Any]] = []

    async def measure(k: int) -> bool | None:
        flushed_all = True
        for rep in range(cfg.flush_repeats):
            p.gate()
            tag = p.fresh("p")
            body = await counter.build(
                cfg.flush_prefix_tokens, f"probe prefix {tag}.", seed=tag, tail_seed=p.fresh("t")
            )
            point = f"k{k}r{rep}"
            first = await p.send(
                "C-first",
                body.raw,
                {"point": point, "k": k, "repeat": rep, "size_tokens": cfg.flush_prefix_tokens},
            )
            counter.observe(body, first["prompt_tokens"])
            block = await p.foreign_block(k, point)
            second = await p.send(
                "C-second",
                counter.body_with_system(body.system, p.fresh("t")),
                {"point": point, "k": k, "repeat": rep, "size_tokens": cfg.flush_prefix_tokens},
            )
            c2 = second["cached_tokens"]
            flushed = None if c2 is None else c2 <= floor
            points.append(
                {
                    "k": k,
                    "repeat": rep,
                    "prefix_tokens": first["prompt_tokens"],
                    "cached_first": first["cached_tokens"],
                    "cached_second": c2,
                    "flushed": flushed,
                    "foreign_cached_tokens": block["cached_tokens"],
                    "foreign_counter_delta": block["counter_delta"],
                    "counter_delta_second": second.get("counter_delta"),
                }
            )
            if flushed is None:
                points_done.append(k)
                return None
            flushed_all = flushed_all and flushed
        points_done.append(k)
        say(f"eviction: k={k} {'flushed' if flushed_all else 'kept'}")
        return flushed_all

    min_k = None
    bracket: list[int | None] = [None, None]
    baseline_cached = None
    evict_note = None
    try:
        if cfg.flush_max > 0 and not cut:
            base = await measure(0)
            baseline_cached = min((pt["cached_second"] or 0) for pt in points if pt["k"] == 0)
            if base is None:
                evict_note = "the server reports no cached tokens; eviction cannot be seen"
            elif base:
                evict_note = "nothing reusable: the prefix was not cached even with no foreign request"
                bracket = [None, 0]
            else:
                top = await measure(cfg.flush_max)
                if top is None:
                    evict_note = "cached tokens missing at flush_max"
                elif not top:
                    bracket = [cfg.flush_max, None]
                    evict_note = (
                        f"{cfg.flush_max} foreign requests did not flush the prefix; raise --flush-max"
                    )
                else:
                    lo, hi = 0, cfg.flush_max
                    while hi - lo > 1:
                        mid = (lo + hi) // 2
                        res = await measure(mid)
                        if res is None:
                            evict_note = f"cached tokens missing at k={mid}"
                            break
                        if res:
                            hi = mid
                        else:
                            lo = mid
                    bracket = [lo, hi]
                    if hi - lo == 1:
                        min_k = hi
    except StopNew:
        cut, min_k = True, None
        evict_note = (f"cut at stop_new_after after {len(points_done)} eviction point(s): "
                      "no minimum flushing k")
        say(f"stop_new_after: no new probe request ({len(points_done)} eviction points measured)")

    if backend is not None:
        try:
            identity_after = await backend.identity()
        except BackendError as exc:
            say(f"identity read failed: {exc}")

    all_cached = [r["cached_tokens"] for r in legs if r.get("cached_tokens") is not None]
    cmax = max(all_cached) if all_cached else None
    rc = reuse_cap(cold, warm, points)
    over = None if rc["cap_tokens"] is None else rc["cap_tokens"] + (rc["tail_tokens"] or 0)
    ebf = entry_bytes_fit(legs, over_tokens=over, cap_tokens=rc["cap_tokens"])
    bpt, bpt_how = ebf["bytes_per_token"], ebf["method"]
    epr = entries_per_request(cold, points, capped_sizes(cold, warm, ebf["capped_from_tokens"]))
    per_request = epr["value"]
    # an eviction prefix over the cap is kept as one entry (its snapshots, cut, coincide):
    # flushed iff 1 + s k > N, so min_flush_k implies N in s (k - 1) + 1 .. s k
    flush_capped = bool(points and over is not None and points[0]["prefix_tokens"] > over)
    if per_request and min_k:
        s_ = per_request
        implied = [s_ * (min_k - 1) + 1, s_ * min_k] if flush_capped else [s_ * min_k, s_ * min_k + s_ - 1]
    else:
        implied = None
    effective = rc["cap_tokens"] if flush_capped else (points[0]["prefix_tokens"] if points else None)
    entries_seen = [r["entries_gauge"] for r in legs if r.get("entries_gauge") is not None]
    warm_rows = []
    for w in warm:
        c = [r for r in cold if r["size_tokens"] == w["size_tokens"] and r["ttft_s"] is not None]
        cold_s = min(r["ttft_s"] for r in c) if c else None
        warm_rows.append(
            {
                "size_tokens": w["size_tokens"],
                "prompt_tokens": w["prompt_tokens"],
                "cached_tokens": w["cached_tokens"],
                "cold_ttft_s": _r(cold_s),
                "warm_ttft_s": _r(w["ttft_s"]),
                "saving_per_reuse_s": _r(cold_s - w["ttft_s"])
                if cold_s is not None and w["ttft_s"] is not None
                else None,
            }
        )
    eviction_cost = None
    if chosen and chosen["rate_tokens_per_s"] and baseline_cached:
        eviction_cost = chosen["a_s"] + baseline_cached / chosen["rate_tokens_per_s"]
    drift = (
        identity_before is not None
        and identity_after is not None
        and identity_before != identity_after
    )
    verdict = {
        "format": "kvreplay-probe/1",
        "target": url,
        "model": model,
        "prefill_fit": {k: chosen[k] for k in ("a_s", "rate_tokens_per_s", "r2")}
        | {"source": cfg.fit_on}
        if chosen
        else None,
        "prefill_fits": fits,
        "cmax_tokens": cmax,
        "min_flush_k": min_k,
        "flush_bracket": bracket,
        "flush_floor_tokens": floor,
        "flush_prefix_tokens": points[0]["prefix_tokens"] if points else None,
        "flush_prefix_cached_tokens": baseline_cached,
        "flush_prefix_capped": flush_capped,
        "flush_prefix_effective_tokens": effective,
        "eviction_note": evict_note,
        "points": points,
        "warm": warm_rows,
        "bytes_per_token": bpt,
        "bytes_per_token_method": bpt_how,
        "bytes_per_token_kind": "prompt_cache_entry" if bpt else None,
        "entry_cap_bytes": ebf["cap_bytes"],
        "max_entry_bytes_seen": ebf["max_entry_bytes"],
        "cmax_cap_bound": cap_bound(cmax, bpt, ebf["cap_bytes"])
        or (cmax is not None and cmax == rc["cap_tokens"]),
        "cap_tokens_from_reuse": rc["cap_tokens"],
        "refused_stores": refused_stores(legs),
        "entries_per_request": per_request,
        "implied_entries": implied,
        "entries_per_request_evidence": epr,
        "evidence": evidence_sentences(cfg, chosen, legs, points, floor, min_k, evict_note, ebf, epr, implied,
                              flush_capped)
        | {"cap_tokens_from_reuse": rc["evidence"]},
        "max_entries_gauge_seen": max(entries_seen) if entries_seen else None,
        "eviction_cost_s": _r(eviction_cost),
        "prefix_bytes": round(effective * bpt) if bpt and effective else None,
        "token_counting": {
            "mode": counter.mode,
            "c0_tokens": counter.c0,
            "tokens_per_word": counter.c1,
        },
        "unplanned_requests": counter.calls,
        "requests": p.requests,
        "identity": {"before": identity_before, "after": identity_after, "drift": drift},
        "drain": drain,
        "notes": p.notes,
        "wall_s": round((now_ns() - t0) / 1e9, 3),
        "config": {
            "sizes": list(cfg.sizes),
            "cold_repeats": cfg.cold_repeats,
            "flush_prefix_tokens": cfg.flush_prefix_tokens,
            "foreign_tokens": cfg.foreign_tokens,
            "flush_max": cfg.flush_max,
            "flush_repeats": cfg.flush_repeats,
            "fit_on": cfg.fit_on,
        },
    }
    verdict["stopped"] = (stopped_json(requests=p.requests, cold=len(cold), warm=len(warm),
                                       points=len(points_done), cfg=cfg) if cut else None)
    verdict["prefill_fit_warning"] = fit_warning
    verdict["prefill_fit_accuracy_warning"] = accuracy_note
    verdict["plain"] = plain_line(verdict)
    return verdict


async def _cold_warm(p: _Probe, counter: TokenCounter, cfg: ProbeConfig, cold: list[dict[str, Any]],
                     warm: list[dict[str, Any]], say: Callable[[str], None]) -> None:
    """A and B legs, appended to ``cold`` and ``warm`` as they complete (``StopNew`` passes through)."""
    for size in cfg.sizes:
        last_system = None
        for rep in range(cfg.cold_repeats):
            p.gate()
            tag = p.fresh("a")
            body = await counter.build(size, f"probe cold {tag}.", seed=tag, tail_seed=p.fresh("t"))
            rec = await p.send(
                "A",
                body.raw,
                {"size_tokens": size, "repeat": rep, "counted_tokens": body.counted_tokens},
            )
            counter.observe(body, rec["prompt_tokens"])
            cold.append(rec)
            last_system = body.system
        assert last_system is not None  # cold_repeats >= 1 (ProbeConfig checks it)
        raw = counter.body_with_system(last_system, p.fresh("t"))
        rec = await p.send("B", raw, {"size_tokens": size, "repeat": 0})
        warm.append(rec)
        # The fastest cold repeat: the figure the fit and the verdict use (``_fits``).
        times = [r["ttft_s"] for r in cold if r["size_tokens"] == size and r["ttft_s"] is not None]
        of = f" (fastest of {cfg.cold_repeats})" if cfg.cold_repeats > 1 else ""
        say(
            f"size {size}: cold ttft {_fmt(min(times) if times else None)} s{of}, "
            f"warm ttft {_fmt(rec['ttft_s'])} s, warm cached {rec['cached_tokens']}"
        )


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 6)


async def _first_model(
    session: aiohttp.ClientSession, url: str, headers: dict[str, str]
) -> str | None:
    try:
        async with session.get(url + "/v1/models", headers=headers) as resp:
            if resp.status != 200:
                return None
            data = await resp.json(content_type=None)
    except (aiohttp.ClientError, ValueError):
        return None
    cards = data.get("data") if isinstance(data, dict) else None
    if isinstance(cards, list) and cards and isinstance(cards[0], dict):
        return cards[0].get("id")
    return None
