"""Probe verdict sizing: bytes per token below the entry cap, cap-bound Cmax, a target prefix.

**Bytes per token with an entry cap.** A prompt cache that truncates an
over-cap snapshot (halogen: 116,389,652 bytes hold 43,526 tokens at 2,674 B per
token) stores a capped entry for every leg longer than the cap, so entry bytes
stop growing with prompt tokens and a slope over all legs is wrong (1,612
instead of 2,674 on issue 18's 16k/32k/64k legs). The legs on the cap are found
from the data only: sorted by prompt tokens, the longest legs are dropped while
their entry bytes per prompt token is under ``CAP_RATIO`` (0.9) of the median
of the remaining legs'; the slope is fitted on what remains (the cap is the
largest entry seen on a dropped leg). At least two distinct prompt sizes must
remain below the cap.

**The cap from cached tokens** (issue 29). A reuse with nothing in between (a
warm leg, or the second send of an eviction point with ``k = 0``) caches the
first send's prompt less its tail (the user turn and template after the system
block, the same few tokens on every leg). One that falls short of that by more
than ``2 x tail + CUT_SLACK_TOKENS`` found its entry cut: what it cached is the
cap in tokens (``reuse_cap``). Every leg whose prompt is longer than the cap
plus the tail is then on the cap, whatever its entry bytes say (a 43k flush
prefix, just over a 43,526-token cap, stores entries only 1 % short of the line
and would pass the ratio test), so it is left out of the slope; the same holds
for an eviction prefix over the cap, whose capped length is then what the cache
keeps (``flush_prefix_effective_tokens``). This needs no bytes counter.

**Cap-bound Cmax.** Cmax (the most cached tokens any leg got) is *cap-bound*
when a cap was found and Cmax is within 1 % of ``cap_bytes / bytes_per_token``:
the entry size, not the cache's contents, limited it.

**Entries per request** (issue 29). A cold leg stores the request's snapshots,
``s`` of them; but a leg longer than the entry cap stores one (a truncating
cache cuts both snapshots to the same length, so they coincide). So ``s`` is
counted only on cold legs below the cap, a leg being *on the cap* when its
size is at or past the smallest leg ``entry_bytes_fit`` found on the cap, or
when its warm leg cached under ``CAP_RATIO`` of the share of its prompt that
the smaller sizes' warm legs cached (the cap shows in cached tokens too; this
needs no bytes counter). It is cross-checked against the eviction points: the
foreign block of a point with ``k`` foreign requests stored ``s * k`` entries
(foreign prompts are below the cap). When both are known and differ, the
verdict says so and gives no ``s`` rather than pick one.

**Target prefix** (``probe --target-prefix 24k``). The seed's rule: when Cmax
is past the prefix, one entry holds the whole prefix and the entry size is not
the wall; what keeps the prefix is the entry count (``s * (k + 1)`` entries for
``k`` foreign requests between uses). When Cmax is short of it and cap-bound,
the entry cap is the wall: an entry needs ``prefix * bytes_per_token`` bytes;
what the cache keeps is the prefix's first Cmax tokens in one entry (its
snapshots, both cut to the cap, coincide), which survives ``k`` foreign
requests with ``s * k + 1`` entries, not ``s * (k + 1)``.
"""

from __future__ import annotations

from typing import Any

from kvreplay.experiments.stats import fit_line, median

__all__ = [
    "CAP_RATIO",
    "capped_sizes",
    "entries_per_request",
    "entry_bytes_fit",
    "refused_stores",
    "target_prefix_statement",
]

CAP_RATIO = 0.9
"""A leg whose entry bytes per prompt token is under this share of the others' is on the cap."""

CUT_SLACK_TOKENS = 256
"""Shortfall (tokens) beyond twice the tail that marks a reuse as cut: above one radix block
(vLLM 16, SGLang pages up to 256 tokens), so block rounding is never taken for a cap."""


def _points(legs: list[dict[str, Any]]) -> list[tuple[int, int]]:
    pts = []
    for rec in legs:
        d = rec.get("counter_delta") or {}
        if (
            rec.get("status") == "ok"
            and rec.get("last_entry_bytes")
            and (d.get("stores") or 0) >= 1
            and rec.get("prompt_tokens")
        ):
            pts.append((int(rec["prompt_tokens"]), int(rec["last_entry_bytes"])))
    return pts


def reuse_cap(
    cold: list[dict[str, Any]], warm: list[dict[str, Any]], points: list[dict[str, Any]]
) -> dict[str, Any]:
    """The entry cap in tokens, from reuses that cached less than their prefix (module docstring).

    Args:
        cold: Cold (A) legs (``size_tokens``, ``prompt_tokens``).
        warm: Warm (B) legs (``size_tokens``, ``cached_tokens``); each reuses the last cold
            leg of its size.
        points: Eviction points (``k``, ``prefix_tokens``, ``cached_second``, ``flushed``);
            only ``k = 0`` (nothing sent in between) counts.

    Returns:
        ``{"cap_tokens": int | None, "tail_tokens": int | None, "reuses": int,
        "cut_reuses": int, "evidence": str}``: the largest cached count of a cut reuse
        (tokens), the tail (the smallest shortfall, tokens), how many reuses were seen and
        cut.
    """
    reuses: list[tuple[int, int]] = []
    for w in warm:
        a = [r for r in cold if r.get("size_tokens") == w.get("size_tokens") and r.get("prompt_tokens")]
        if a and w.get("cached_tokens"):
            reuses.append((int(a[-1]["prompt_tokens"]), int(w["cached_tokens"])))
    for pt in points:
        if pt.get("k") == 0 and pt.get("flushed") is False and pt.get("prefix_tokens") and pt.get("cached_second"):
            reuses.append((int(pt["prefix_tokens"]), int(pt["cached_second"])))
    out: dict[str, Any] = {"cap_tokens": None, "tail_tokens": None, "reuses": len(reuses), "cut_reuses": 0}
    if not reuses:
        out["evidence"] = "no reuse with cached tokens"
        return out
    plateau = _plateau(reuses)
    if plateau is not None:
        # Every reuse that cached the plateau's count was cut there; the tail is measured
        # only on the others (none left: unknown, and the cap is taken as it is).
        rest = [(p, c) for p, c in reuses if c != plateau]
        tail = max(0, min(p - c for p, c in rest)) if rest else None
        cut = [(p, c) for p, c in reuses
               if c == plateau or (tail is not None and p - c > 2 * tail + CUT_SLACK_TOKENS)]
        out["tail_tokens"] = tail
        out["cut_reuses"] = len(cut)
        out["cap_tokens"] = max(c for _, c in cut)
        out["evidence"] = (
            f"{len(cut)} of {len(reuses)} reuses cached at most {out['cap_tokens']} tokens of longer"
            f" prefixes ({len({p for p, c in reuses if c == plateau})} prefix lengths cached the same"
            f" {plateau} tokens"
            + (f"; the others fell short only by the {tail}-token tail)" if rest
               else "; every reuse was cut, so the tail is not known)")
        )
        return out
    tail = max(0, min(p - c for p, c in reuses))
    cut = [(p, c) for p, c in reuses if p - c > 2 * tail + CUT_SLACK_TOKENS]
    out["tail_tokens"] = tail
    out["cut_reuses"] = len(cut)
    if cut:
        out["cap_tokens"] = max(c for _, c in cut)
        out["evidence"] = (
            f"{len(cut)} of {len(reuses)} reuses cached at most {out['cap_tokens']} tokens of longer"
            f" prefixes (the others fell short only by the {tail}-token tail)"
        )
    else:
        out["evidence"] = f"every one of {len(reuses)} reuses cached its prefix less the {tail}-token tail"
    return out


def _plateau(reuses: list[tuple[int, int]]) -> int | None:
    """The cached count that reuses of prefixes differing by over ``CUT_SLACK_TOKENS`` share, or None.

    Two reuses of prefix lengths ``p1 < p2`` (tokens) that cached the same ``c`` tokens
    were both cut at ``c``: a reuse below the cap caches its prefix less the same tail, so
    its count grows with the prefix. Block rounding is not taken for a cap: the prefixes
    must differ by more than ``CUT_SLACK_TOKENS``. The largest such count is returned.
    """
    by_cached: dict[int, list[int]] = {}
    for p, c in reuses:
        if c > 0:
            by_cached.setdefault(c, []).append(p)
    shared = [c for c, ps in by_cached.items() if max(ps) - min(ps) > CUT_SLACK_TOKENS]
    return max(shared) if shared else None


def entry_bytes_fit(legs: list[dict[str, Any]], *, over_tokens: int | None = None,
                    cap_tokens: int | None = None) -> dict[str, Any]:
    """Bytes per token from legs below the entry cap (see module docstring).

    Args:
        legs: The probe's leg records (``prompt_tokens``, ``last_entry_bytes``,
            ``counter_delta`` with ``stores``).
        over_tokens: Legs with more prompt tokens than this are on the cap (the cap
            from cached tokens plus the tail, ``reuse_cap``); None = found from the
            entry bytes alone.
        cap_tokens: The cap in tokens (``reuse_cap``'s ``cap_tokens``). When every leg is
            on the cap, bytes per token is the cap's figure, ``cap_bytes / cap_tokens``
            (no slope exists); without it, None with the reason in ``method``.

    Returns:
        ``{"bytes_per_token": float | None, "method": str | None,
        "cap_bytes": int | None, "capped_legs": int, "max_entry_bytes": int | None}``;
        ``max_entry_bytes`` is the largest entry any leg stored (bytes);
        ``capped_from_tokens`` the prompt tokens of the smallest leg on the cap
        (None when no cap was found).
    """
    pts = _points(legs)
    out: dict[str, Any] = {
        "bytes_per_token": None,
        "method": None,
        "cap_bytes": None,
        "capped_legs": 0,
        "max_entry_bytes": max((y for _, y in pts), default=None),
        "capped_from_tokens": None,
    }
    if not pts:
        return out
    keep = sorted(pts)
    capped: list[tuple[int, int]] = []
    if over_tokens is not None:
        capped = [p for p in keep if p[0] > over_tokens]
        keep = [p for p in keep if p[0] <= over_tokens]
        if not keep:
            return _all_on_cap(out, capped, cap_tokens)
    while len({x for x, _ in keep}) > 2:
        top_x = keep[-1][0]
        top = [p for p in keep if p[0] == top_x]
        rest = [p for p in keep if p[0] != top_x]
        ref = median([y / x for x, y in rest])
        if max(y / x for x, y in top) < CAP_RATIO * ref:
            capped += top
            keep = rest
        else:
            break
    if capped:
        out["cap_bytes"] = max(y for _, y in capped)
        out["capped_legs"] = len(capped)
        out["capped_from_tokens"] = min(x for x, _ in capped)
    below = " below the entry cap" if capped else ""
    xs = sorted({x for x, _ in keep})
    if len(xs) >= 2:
        fit = fit_line([p[0] for p in keep], [p[1] for p in keep])
        out["bytes_per_token"] = round(fit.slope, 1)
        out["method"] = (
            f"slope of last_entry_bytes over {len(keep)} legs{below} (R^2 {fit.r2:.6f})"
            + (f"; {len(capped)} legs on the cap left out" if capped else "")
        )
    else:
        x, y = keep[0]
        out["bytes_per_token"] = round(y / x, 1)
        out["method"] = f"last_entry_bytes / prompt_tokens of one leg{below}"
    return out


def _all_on_cap(out: dict[str, Any], capped: list[tuple[int, int]], cap_tokens: int | None) -> dict[str, Any]:
    """``entry_bytes_fit``'s answer when every leg (prompt tokens, entry bytes) is on the cap."""
    cap_bytes = max(y for _, y in capped)
    out["cap_bytes"] = cap_bytes
    out["capped_legs"] = len(capped)
    out["capped_from_tokens"] = min(x for x, _ in capped)
    if cap_tokens:
        out["bytes_per_token"] = round(cap_bytes / cap_tokens, 1)
        out["method"] = (f"the entry cap's figure: every one of {len(capped)} legs is on the cap, whose"
                         f" {cap_bytes} bytes hold {cap_tokens} tokens (cached by the cut reuses)")
    else:
        out["method"] = (f"not measured: every one of {len(capped)} legs is on the entry cap and the cap"
                         " in tokens is not known (no slope below it)")
    return out


def capped_sizes(
    cold: list[dict[str, Any]], warm: list[dict[str, Any]], capped_from_tokens: int | None
) -> set[int]:
    """Leg sizes (``size_tokens``) whose cold legs lie on the entry cap.

    Args:
        cold: Cold (A) leg records (``size_tokens``, ``prompt_tokens``).
        warm: Warm (B) leg records (``size_tokens``, ``prompt_tokens``, ``cached_tokens``).
        capped_from_tokens: ``entry_bytes_fit``'s smallest leg on the cap (tokens), or None.

    Returns:
        Sizes on the cap: at or past ``capped_from_tokens``, or (the largest sizes first)
        whose warm leg cached under ``CAP_RATIO`` of the median cached share of the
        smaller sizes' warm legs.
    """
    out = {
        int(r["size_tokens"])
        for r in cold
        if capped_from_tokens is not None
        and r.get("prompt_tokens")
        and int(r["prompt_tokens"]) >= capped_from_tokens
    }
    share = {
        int(w["size_tokens"]): w["cached_tokens"] / w["prompt_tokens"]
        for w in warm
        if w.get("cached_tokens") is not None and w.get("prompt_tokens")
    }
    sizes = sorted(share)
    while len(sizes) >= 2:
        top, rest = sizes[-1], sizes[:-1]
        if share[top] < CAP_RATIO * median([share[x] for x in rest]):
            out.add(top)
            sizes = rest
        else:
            break
    return out


def _num_text(v: float) -> str:
    return f"{v:g}"


def entries_per_request(
    cold: list[dict[str, Any]],
    points: list[dict[str, Any]],
    on_cap: set[int],
) -> dict[str, Any]:
    """Entries stored per request, from cold legs below the cap and from eviction points.

    Args:
        cold: Cold (A) leg records (``size_tokens``, ``counter_delta`` with ``stores``).
        points: Eviction points (``k``, ``foreign_counter_delta`` with ``stores``).
        on_cap: Sizes on the entry cap (``capped_sizes``); their legs are not counted.

    Returns:
        ``{"value": int | None, "from_cold_legs": float | None, "cold_legs": int,
        "cold_legs_on_cap": int, "from_eviction_points": float | None,
        "eviction_points": int, "agree": bool | None, "evidence": str}``: each
        source's median (entries per request), how many legs/points it used, and the
        sentence naming the evidence. ``value`` is None when the two disagree or
        neither is known, or when the agreed figure is not a whole number.
    """
    below, capped = [], 0
    for r in cold:
        d = r.get("counter_delta") or {}
        if d.get("stores") is None:
            continue
        if int(r["size_tokens"]) in on_cap:
            capped += 1
            continue
        below.append(float(d["stores"]))
    per_point = []
    for pt in points:
        d = pt.get("foreign_counter_delta") or {}
        if pt.get("k") and d.get("stores") is not None:
            per_point.append(float(d["stores"]) / int(pt["k"]))
    legs = median(below) if below else None
    evict = round(median(per_point), 3) if per_point else None
    parts = []
    if legs is not None:
        parts.append(
            f"{_num_text(legs)} stores per cold leg (median of {len(below)} below the entry cap"
            + (f"; {capped} on the cap, which store one, left out)" if capped else ")")
        )
    elif capped:
        parts.append(f"no cold leg below the entry cap ({capped} on the cap, which store one)")
    if evict is not None:
        parts.append(
            f"{_num_text(evict)} stores per foreign request (median over {len(per_point)}"
            " eviction points' foreign blocks)"
        )
    known = [x for x in (legs, evict) if x is not None]
    agree = None if len(known) < 2 else legs == evict
    value = None
    if agree is False:
        evidence = "the evidence disagrees: " + " vs ".join(parts) + "; not picking one"
    elif known:
        value = int(known[0]) if known[0] == int(known[0]) else None
        evidence = " and ".join(parts) + (" agree" if agree else "")
    else:
        evidence = "no store counts reported"
    return {
        "value": value,
        "from_cold_legs": legs,
        "cold_legs": len(below),
        "cold_legs_on_cap": capped,
        "from_eviction_points": evict,
        "eviction_points": len(per_point),
        "agree": agree,
        "evidence": evidence,
    }


def refused_stores(legs: list[dict[str, Any]]) -> int | None:
    """Stores the server refused over all legs (sum of ``refused`` deltas); None = not reported."""
    vals = [v for rec in legs if (v := (rec.get("counter_delta") or {}).get("refused")) is not None]
    return int(sum(vals)) if vals else None


def cap_bound(cmax: int | None, bpt: float | None, cap_bytes: int | None) -> bool:
    """Cmax within 1 % of what a capped entry holds (``cap_bytes / bpt`` tokens)."""
    if cmax is None or not bpt or not cap_bytes:
        return False
    cap_tokens = cap_bytes / bpt
    return abs(cmax - cap_tokens) <= 0.01 * cap_tokens


def target_prefix_statement(v: dict[str, Any], prefix_tokens: int) -> dict[str, Any]:
    """Whether the probe's Cmax covers a prefix of ``prefix_tokens`` (see module docstring).

    Args:
        v: The verdict (``cmax_tokens``, ``cmax_cap_bound``, ``bytes_per_token``,
            ``entries_per_request``, ``min_flush_k``, ``implied_entries``).
        prefix_tokens: The prefix to keep (tokens).

    Returns:
        ``{"prefix_tokens", "covered" (bool | None), "entry_bytes_needed",
        "sentence"}``.
    """
    cmax = v.get("cmax_tokens")
    bpt = v.get("bytes_per_token")
    need = round(prefix_tokens * bpt) if bpt else None
    s = v.get("entries_per_request")
    if cmax is None:
        covered, sentence = None, f"no cached tokens seen: cannot tell whether a {prefix_tokens}-token prefix fits"
    elif cmax >= prefix_tokens:
        covered = True
        sentence = (
            f"Cmax {cmax} tokens covers the {prefix_tokens}-token prefix: one entry holds it,"
            " so the entry size is not the wall; the entry count is"
        )
        if s:
            sentence += f" ({s} x (k + 1) entries keep it through k foreign requests)"
    else:
        covered = False
        wall = "the entry cap is the wall" if v.get("cmax_cap_bound") else "Cmax is short of it"
        sentence = f"Cmax {cmax} tokens does not cover the {prefix_tokens}-token prefix: {wall}"
        if need:
            sentence += f"; an entry would need {need} bytes ({need / 2**20:.1f} MiB)"
        if v.get("cmax_cap_bound") and s:
            sentence += (
                f"; the cache keeps its first {cmax} tokens in one entry (both snapshots cut to"
                f" the cap coincide): {s} x k + 1 entries keep that through k foreign requests"
            )
    return {
        "prefix_tokens": prefix_tokens,
        "covered": covered,
        "entry_bytes_needed": need,
        "sentence": sentence + ".",
    }
