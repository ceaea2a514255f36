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

**Cap-bound Cmax.** Cmax (the most cached tokens any leg got) is *cap-bound*
when a cap was found and Cmax is within 1 % of ``cap_bytes / bytes_per_token``:
the entry size, not the cache's contents, limited it.

**Target prefix** (``probe --target-prefix 24k``). The seed's rule: when Cmax
is past the prefix, one entry holds the whole prefix and the entry size is not
the wall; what keeps the prefix is the entry count (``s * (k + 1)`` entries for
``k`` foreign requests between uses). When Cmax is short of it and cap-bound,
the entry cap is the wall: an entry needs ``prefix * bytes_per_token`` bytes.
"""

from __future__ import annotations

from typing import Any

from kvreplay.experiments.stats import fit_line, median

__all__ = ["CAP_RATIO", "entry_bytes_fit", "refused_stores", "target_prefix_statement"]

CAP_RATIO = 0.9
"""A leg whose entry bytes per prompt token is under this share of the others' is on the cap."""


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


def entry_bytes_fit(legs: list[dict[str, Any]]) -> dict[str, Any]:
    """Bytes per token from legs below the entry cap (see module docstring).

    Args:
        legs: The probe's leg records (``prompt_tokens``, ``last_entry_bytes``,
            ``counter_delta`` with ``stores``).

    Returns:
        ``{"bytes_per_token": float | None, "method": str | None,
        "cap_bytes": int | None, "capped_legs": int, "max_entry_bytes": int | None}``;
        ``max_entry_bytes`` is the largest entry any leg stored (bytes).
    """
    pts = _points(legs)
    out: dict[str, Any] = {
        "bytes_per_token": None,
        "method": None,
        "cap_bytes": None,
        "capped_legs": 0,
        "max_entry_bytes": max((y for _, y in pts), default=None),
    }
    if not pts:
        return out
    keep = sorted(pts)
    capped: list[tuple[int, int]] = []
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
    return {
        "prefix_tokens": prefix_tokens,
        "covered": covered,
        "entry_bytes_needed": need,
        "sentence": sentence + ".",
    }
