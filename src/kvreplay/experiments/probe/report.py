"""The probe's words: the verdict line (``plain_line``), ``report.md`` (``render_report``), the intercept warning.

Split out of ``kvreplay.experiments.probe.legs`` (which re-exports ``intercept_warning``,
``plain_line`` and ``render_report``); the verdict dict these read is the one
``run_probe`` returns (keys as in ``verdict.json``).
"""

from __future__ import annotations

from typing import Any

from kvreplay.clock import model_time_scale
from kvreplay.experiments.probe.sizing import CAP_RATIO

__all__ = ["FIT_ACCURACY", "accuracy_warning", "evidence_sentences", "intercept_warning", "plain_line", "render_report"]


def intercept_warning(fit: dict[str, Any] | None) -> str | None:
    """Why the fitted intercept ``a`` of ``prefill_s = a + tokens / rate`` cannot be read as a cost, or None.

    Negative: no prefill takes less than no time, so ``a < 0`` says the cold
    legs are too few or too noisy for a fixed cost (the rate may still hold).
    Implausible: ``a`` at or above the fastest cold leg's own time leaves
    nothing for the tokens of that leg.

    Args:
        fit: A ``prefill_fits`` entry (``a_s`` s, ``points`` ``[tokens, s]``), or None.
    """
    if not fit or fit.get("a_s") is None:
        return None
    a = float(fit["a_s"])
    if a < 0:
        return (f"negative intercept a = {a:.4f} s: a prefill cannot take less than no time; "
                f"the {fit.get('n')} cold sizes do not pin a fixed cost (read a as about 0; "
                "the rate still holds if R^2 is high)")
    ys = [p[1] for p in fit.get("points") or [] if isinstance(p, (list, tuple)) and len(p) == 2]
    if ys and a >= min(ys):
        return (f"implausible intercept a = {a:.4f} s: at or above the fastest cold leg "
                f"({min(ys):.4f} s), it leaves no time for that leg's tokens")
    return None


FIT_ACCURACY = 0.05
"""The accuracy README promises for the fitted ``a`` and rate (relative 95 % half-width)."""


def accuracy_warning(fit: dict[str, Any] | None, sizes: tuple[int, ...]) -> str | None:
    """Why the fit's accuracy is not shown to be within ``FIT_ACCURACY``, or None.

    With two sizes a line goes through both points exactly: there is no spread to state
    an interval from, however good the fit looks. With three or more, the 95 % interval
    of ``a`` and of the rate (``ci95``, from the residuals) must be within 5 %.

    Args:
        fit: A ``prefill_fits`` entry (``n``, ``ci95``), or None.
        sizes: The probe's sizes (tokens), for the suggestion.
    """
    if not fit:
        return None
    lo, hi = min(sizes), max(sizes)
    m = max(4, 2 * len(set(sizes)) - 1)  # geometric between the smallest and largest size
    more = sorted({max(16, round(lo * (hi / lo) ** (i / (m - 1)) / 1024) * 1024) for i in range(m)})
    suggest = ",".join(f"{x // 1024}k" if x % 1024 == 0 else str(x) for x in more)
    if fit.get("n", 0) < 3 or not fit.get("ci95"):
        return (f"{fit.get('n')} sizes fit a line exactly, so the accuracy of a and the rate cannot be"
                f" stated (nothing shows them within {FIT_ACCURACY:.0%}); fit on 3 or more sizes, e.g."
                f" --sizes {suggest}")
    ci = fit["ci95"]
    wide = [f"{name} +-{100 * rel:.1f}%" for name, rel in (("a", ci.get("a_rel")), ("rate", ci.get("rate_rel")))
            if rel is None or rel > FIT_ACCURACY]
    if not wide:
        return None
    return (f"95% interval wider than {FIT_ACCURACY:.0%}: {', '.join(wide)} over {fit['n']} sizes; add"
            f" sizes (e.g. --sizes {suggest}) or --cold-repeats 3, on a quieter machine")


def _model(v: dict[str, Any], seconds: float) -> str:
    """``" (= X model s at simulator time scale S)"`` for a probe of ``--target sim``, else ``""``."""
    if (scale := model_time_scale(v.get("sim_time_scale"))) is not None:
        return f" (= {sig3(seconds / scale)} model s at simulator time scale {scale:g})"
    return ""


def sig3(x: float) -> str:
    """``x`` to 3 significant figures, trailing zeros kept (0.152 -> ``0.152``, 1 -> ``1.00``).

    Values of 1000 and above print as whole numbers (``1234``), never in exponent form.
    """
    if abs(float(f"{x:.3g}")) >= 1000:
        return f"{x:.0f}"
    text = f"{x:#.3g}"
    return text[:-1] if text.endswith(".") else text


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.3f}"


def _ktok(tokens: float) -> str:
    """998 -> "1k", 24576 -> "24k", 1536 -> "1.5k", 600 -> "600" (k = 1024 tokens)."""
    if tokens < 1000:
        return f"{tokens:.0f}"
    text = f"{tokens / 1024:.1f}"
    return (text[:-2] if text.endswith(".0") else text) + "k"


def plain_line(v: dict[str, Any]) -> str:
    """The one sentence a person acts on (see ``report.md``)."""
    k = v.get("min_flush_k")
    prefix = v.get("flush_prefix_tokens")
    if k is None or prefix is None:
        return f"No flushing count found: {v.get('eviction_note') or 'eviction legs not run'}."
    ents = v.get("implied_entries")
    head = ""
    if ents:
        head = f"{ents[0]} entries: " if ents[0] == ents[1] else f"{ents[0]}-{ents[1]} entries: "
    line = f"{head}about {k} foreign requests evict a {_ktok(prefix)} prefix"
    if v.get("flush_prefix_capped"):
        line += f" (over the entry cap: {v['flush_prefix_effective_tokens']} tokens kept, one entry)"
    if v.get("eviction_cost_s") is not None:
        line += (f"; each eviction costs {sig3(v['eviction_cost_s'])} s of prefill"
                 + _model(v, v["eviction_cost_s"]))
    return line + "."


def render_report(v: dict[str, Any]) -> str:
    """``report.md``: fit, Cmax, minimum flushing k, implied entries, bytes per token."""
    lines = [
        "# kvreplay probe",
        "",
        f"**{v['plain']}**",
        "",
        f"Target: `{v['target']}`, model `{v['model']}`.",
        "",
    ]
    if cut := v.get("stopped"):
        lines += [f"**Cut short at stop_new_after** (no new request after it): {cut['requests']} requests sent; "
                  f"cold legs {cut['cold'][0]} of {cut['cold'][1]}, warm legs {cut['warm'][0]} of {cut['warm'][1]}, "
                  f"eviction points {cut['eviction_points'][0]} of up to {cut['eviction_points'][1]}. "
                  "A cut probe is no evidence: its figures are partial.", ""]
    lines += ["## Prefill cost", ""]
    f = v["prefill_fit"]
    if f and f["rate_tokens_per_s"]:
        lines.append(
            f"prefill_s = {f['a_s']:.4f} + tokens / {f['rate_tokens_per_s']:.1f} "
            f"(R^2 {f['r2']}, fitted on `{f['source']}`)"
        )
    elif f:
        lines.append(
            f"no positive slope on `{f['source']}` (a = {f['a_s']:.4f} s): prefill time does not "
            "grow with tokens here"
        )
    else:
        lines.append("no fit (fewer than two cold sizes answered)")
    if f and f.get("rate_tokens_per_s") and _model(v, 1.0):
        scale = float(v["sim_time_scale"])
        lines += ["", f"In model seconds (simulator time scale {scale:g}: measured = model x {scale:g}): "
                      f"prefill_s = {f['a_s'] / scale:.4f} + tokens / {f['rate_tokens_per_s'] * scale:.1f}"]
    chosen = (v.get("prefill_fits") or {}).get(f["source"]) if f else None
    if chosen and chosen.get("ci95"):
        ci = chosen["ci95"]
        lines += ["", f"95% interval over {chosen['n']} sizes: a {ci['a_s'][0]:.4f} .. {ci['a_s'][1]:.4f} s,"
                      f" rate {ci['rate_tokens_per_s'][0]} .. {ci['rate_tokens_per_s'][1]} tokens/s"]
    if v.get("prefill_fit_warning"):
        lines += ["", f"**Warning:** {v['prefill_fit_warning']}"]
    if v.get("prefill_fit_accuracy_warning"):
        lines += ["", f"**Accuracy:** {v['prefill_fit_accuracy_warning']}"]
    lines += [
        "",
        "| series | a (s) | rate (tokens/s) | R^2 | residuals (s) |",
        "|---|---|---|---|---|",
    ]
    for name, f in v["prefill_fits"].items():
        lines.append(
            f"| {name} | {f['a_s']:.4f} | {f['rate_tokens_per_s']} | {f['r2']} | "
            f"{', '.join(f'{r:+.4f}' for r in f['residuals_s'])} |"
        )
    lines += [
        "",
        "| size | prompt tokens | cached (warm) | cold TTFT (s) | warm TTFT (s) | saving per reuse (s) |",
        "|---|---|---|---|---|---|",
    ]
    for w in v["warm"]:
        lines.append(
            f"| {w['size_tokens']} | {w['prompt_tokens']} | {w['cached_tokens']} | "
            f"{_fmt(w['cold_ttft_s'])} | {_fmt(w['warm_ttft_s'])} | {_fmt(w['saving_per_reuse_s'])} |"
        )
    lines += [
        "",
        "## Cache",
        "",
        f"- Cmax (largest cached_tokens seen): {v['cmax_tokens']}"
        + (" (cap-bound: the entry cap limited it)" if v.get("cmax_cap_bound") else ""),
        f"- minimum flushing k: {v['min_flush_k'] if v['min_flush_k'] is not None else 'not found'} "
        f"(bracket {v['flush_bracket']}, floor {v['flush_floor_tokens']} cached tokens)",
    ]
    if v["eviction_note"]:
        lines.append(f"- note: {v['eviction_note']}")
    epr = v.get("entries_per_request_evidence") or {}
    lines.append(
        f"- entries stored per request: {v['entries_per_request'] if v['entries_per_request'] else 'unknown'}"
        + (f" ({epr['evidence']})" if epr.get("evidence") else "")
    )
    lines.append(
        f"- implied cache entries: {v['implied_entries'] if v['implied_entries'] else 'unknown'}"
    )
    s = v["entries_per_request"]
    if s:
        lines.append(
            f"- to keep a prefix through N foreign requests the cache needs at least {s} x (N + 1) "
            f"entries (e.g. {s * 11} for N = 10)"
            + (f"; a prefix over the entry cap is one entry (its snapshots, cut to the cap, coincide):"
               f" {s} x N + 1 (e.g. {s * 10 + 1})" if v.get("entry_cap_bytes") and s > 1 else "")
        )
    if v["bytes_per_token"]:
        lines.append(
            f"- bytes per token: {v['bytes_per_token']:.1f} ({v['bytes_per_token_method']})"
        )
        if v["prefix_bytes"] and v.get("flush_prefix_capped"):
            lines.append(
                f"- the {v['flush_prefix_tokens']}-token eviction prefix is over the entry cap: the cache"
                f" kept its first {v['flush_prefix_effective_tokens']} tokens"
                f" ({v['prefix_bytes'] / 2**20:.1f} MiB) in one entry"
            )
        elif v["prefix_bytes"]:
            lines.append(
                f"- the {v['flush_prefix_tokens']}-token prefix needs {v['prefix_bytes'] / 2**20:.1f} MiB "
                f"per entry"
            )
        if v.get("max_entry_bytes_seen"):
            lines.append(
                f"- bytes per entry: largest seen {v['max_entry_bytes_seen']}"
                + (f", entry cap {v['entry_cap_bytes']}" if v.get("entry_cap_bytes") else "")
            )
    else:
        lines.append("- bytes per token: not reported by this server")
    lines.append(
        f"- refused stores: {v.get('refused_stores') if v.get('refused_stores') is not None else 'not reported'}"
    )
    if v.get("target_prefix"):
        lines.append(f"- target prefix: {v['target_prefix']['sentence']}")
    lines += [
        "",
        "## Eviction points",
        "",
        "| k | repeat | prefix tokens | cached (first) | cached (second) | flushed |",
        "|---|---|---|---|---|---|",
    ]
    for pt in v["points"]:
        lines.append(
            f"| {pt['k']} | {pt['repeat']} | {pt['prefix_tokens']} | {pt['cached_first']} | "
            f"{pt['cached_second']} | {pt['flushed']} |"
        )
    lines += [
        "",
        f"Requests: {v['requests']} measured, {len(v['unplanned_requests'])} unplanned (calibration).",
        f"Identity drift: {v['identity']['drift']}.",
        "",
    ]
    return "\n".join(lines)


def evidence_sentences(
    cfg: Any,
    chosen: dict[str, Any] | None,
    legs: list[dict[str, Any]],
    points: list[dict[str, Any]],
    floor: int,
    min_k: int | None,
    evict_note: str | None,
    ebf: dict[str, Any],
    epr: dict[str, Any],
    implied: list[int] | None,
    flush_capped: bool,
) -> dict[str, str | None]:
    """What each derived figure of the verdict rests on, one sentence per figure (issue 29).

    Returns:
        ``{"prefill_fit", "cmax_tokens", "min_flush_k", "bytes_per_token", "entry_cap_bytes",
        "entries_per_request", "implied_entries"}``: a sentence each, None where the figure is absent.
    """
    n_pts = len({pt["k"] for pt in points})
    return {
        "prefill_fit": None
        if not chosen
        else f"least squares over the fastest cold leg of each of {chosen['n']} sizes,"
        f" series {cfg.fit_on}",
        "cmax_tokens": f"largest cached_tokens over {len(legs)} leg requests",
        "min_flush_k": (
            f"eviction bisection over {n_pts} points of {cfg.flush_repeats} repeats (a point"
            f" flushes when every repeat's second send cached <= {floor} tokens)"
            if min_k is not None
            else evict_note or "no eviction legs"
        ),
        "bytes_per_token": ebf["method"],
        "entry_cap_bytes": None
        if not ebf["cap_bytes"]
        else f"largest entry on the {ebf['capped_legs']} legs on the cap (their entry bytes per"
        f" token under {CAP_RATIO} of the others')",
        "entries_per_request": epr["evidence"],
        "implied_entries": (
            "s x (min_flush_k - 1) + 1 .. s x min_flush_k (s entries per request; the eviction"
            " prefix is over the entry cap, so it is one entry)"
            if flush_capped
            else "s x min_flush_k .. s x min_flush_k + s - 1 (s entries per request)"
        )
        if implied
        else "needs entries per request and min_flush_k",
    }
