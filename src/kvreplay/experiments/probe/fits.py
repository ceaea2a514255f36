"""The probe's prefill fit: least squares over the fastest cold leg of each size, with its 95 % interval.

Split out of ``kvreplay.experiments.probe.legs``. A fit is ``prefill_s = a + tokens / rate``
over the uncached tokens of each leg (``prompt_tokens - cached_tokens``), one point per size
(the fastest of its cold repeats), for each series the legs measured (``ttft``, ``stream``,
``server``); the interval is ``experiments.stats.line_ci95`` (Student t).
"""

from __future__ import annotations

from typing import Any

from kvreplay.experiments.stats import LineFit, fit_line, line_ci95

__all__ = ["ci_json", "fit_json", "fits_of"]


def ci_json(fit: LineFit, xs: list[int]) -> dict[str, Any] | None:
    """95 % interval of ``a`` (s) and the rate (tokens/s), and their relative half-widths."""
    ci = line_ci95(fit, xs)
    if ci is None or fit.slope <= 0:
        return None
    ha, hb = ci
    lo_b, hi_b = fit.slope - hb, fit.slope + hb
    return {
        "a_s": [round(fit.intercept - ha, 6), round(fit.intercept + ha, 6)],
        "rate_tokens_per_s": [round(1.0 / hi_b, 3), round(1.0 / lo_b, 3) if lo_b > 0 else None],
        "a_rel": round(ha / abs(fit.intercept), 6) if fit.intercept else None,
        "rate_rel": round(hb / fit.slope, 6),
    }


def fit_json(fit: LineFit, source: str, xs: list[int], ys: list[float]) -> dict[str, Any]:
    """One fit as the verdict keeps it: ``a_s`` (s), ``rate_tokens_per_s``, ``r2``, its points and residuals (s)."""
    rate = 1.0 / fit.slope if fit.slope > 0 else None
    return {
        "ci95": ci_json(fit, xs),
        "source": source,
        "a_s": round(fit.intercept, 6),
        "rate_tokens_per_s": round(rate, 3) if rate else None,
        "r2": round(fit.r2, 6) if fit.r2 == fit.r2 else None,
        "n": fit.n,
        "points": [[x, round(y, 6)] for x, y in zip(xs, ys, strict=False)],
        "residuals_s": [round(r, 6) for r in fit.residuals],
    }


def fits_of(cold: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Fit every available series over the fastest cold leg of each size."""
    fits: dict[str, dict[str, Any]] = {}
    key_of = {"ttft": "ttft_s", "stream": "stream_s", "server": "server_prefill_s"}
    for source, key in key_of.items():
        best: dict[int, tuple[int, float]] = {}
        for rec in cold:
            y = rec.get(key)
            if rec["status"] != "ok" or y is None or rec["prompt_tokens"] is None:
                continue
            x = rec["prompt_tokens"] - (rec["cached_tokens"] or 0)
            size = rec["size_tokens"]
            if size not in best or y < best[size][1]:
                best[size] = (x, y)
        pts = sorted(best.values())
        xs = [p[0] for p in pts]
        ys = [p[1] for p in pts]
        if len(set(xs)) >= 2:
            fits[source] = fit_json(fit_line(xs, ys), source, xs, ys)
    return fits
