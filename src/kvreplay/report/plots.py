"""Figures for the HTML report, drawn with matplotlib's Agg canvas into PNG bytes.

No pyplot and no global state: each function builds a ``matplotlib.figure.Figure``
on a ``FigureCanvasAgg`` and returns the encoded PNG, so rendering works headless
and in threads. Callers only pass measured data (invalid phases are filtered
before this module sees them).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter

__all__ = ["cdf_png", "curve_png", "prefill_fit_png", "bisection_png", "ttft_position_png"]

_DPI = 96
_SIZE = (6.4, 3.4)


def _png(fig: Figure) -> bytes:
    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI, bbox_inches="tight")
    return buf.getvalue()


def cdf_png(metric: str, curves: Sequence[tuple[str, Sequence[float], Sequence[float]]]) -> bytes:
    """Cumulative distributions of one latency metric, one line per phase.

    Args:
        metric: Label, e.g. ``TTFT``.
        curves: ``(legend label, values_ms ascending, cumulative fraction)`` per phase.

    Returns:
        PNG bytes.
    """
    fig = Figure(figsize=_SIZE)
    ax = fig.add_subplot()
    for name, xs, ys in curves:
        # A step plot starting at 0: the fraction jumps at each recorded value.
        ax.step([xs[0], *xs], [0.0, *ys], where="post", label=name)
    lo = min(xs[0] for _, xs, _ in curves)
    hi = max(xs[-1] for _, xs, _ in curves)
    if hi > 20 * lo:  # a log axis only when the values span more than ~1.3 decades
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel(f"{metric} (ms, log scale)")
    else:
        ax.set_xlabel(f"{metric} (ms)")
    ax.set_ylabel("fraction of requests ≤ x")
    ax.set_ylim(0, 1.02)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize="small")
    ax.set_title(f"{metric} distribution per phase (from the HdrHistogram logs)")
    return _png(fig)


def ttft_position_png(
    phase: str,
    positions: Sequence[int],
    ttft_ms: Sequence[float],
    cached: Sequence[float | None],
    failed_positions: Sequence[int],
    restores: tuple[str, Sequence[int], Sequence[float]] | None = None,
) -> bytes:
    """TTFT against position in the phase's frozen sequence, cached tokens overlaid.

    Args:
        phase: Phase name.
        positions: Positions of ok requests.
        ttft_ms: Their TTFT (ms).
        cached: Their usage cached_tokens (None where unreported).
        failed_positions: Positions whose request failed (drawn as marks on the axis).
        restores: Optional ``(counter name, positions, per-request delta)`` from C1 counters.

    Returns:
        PNG bytes.
    """
    fig = Figure(figsize=(7.2, 3.6))
    ax = fig.add_subplot()
    ax.plot(
        positions, ttft_ms, "o-", color="tab:blue", markersize=3, linewidth=1, label="TTFT (ms)"
    )
    if failed_positions:
        ax.plot(failed_positions, [0] * len(failed_positions), "x", color="tab:red", label="failed")
    ax.set_xlabel("position in the phase's frozen sequence")
    ax.set_ylabel("TTFT (ms)", color="tab:blue")
    ax.set_ylim(0, max(ttft_ms) * 1.12 if ttft_ms else 1.0)
    ax.grid(True, alpha=0.3)
    ax2 = ax.twinx()
    cp = [(p, c) for p, c in zip(positions, cached, strict=True) if c is not None]
    if cp:
        ax2.bar(
            [p for p, _ in cp],
            [c for _, c in cp],
            color="tab:orange",
            alpha=0.35,
            width=0.8,
            label="usage cached_tokens",
        )
    if restores is not None:
        name, rpos, rval = restores
        ax2.plot(rpos, rval, "s", color="tab:green", markersize=3, label=f"Δ {name} (counters)")
    # TTFT drawn above the bars of the twin axis.
    ax.set_zorder(ax2.get_zorder() + 1)
    ax.patch.set_visible(False)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax2.set_ylabel("tokens", color="tab:orange")
    tops = [c for _, c in cp] + (list(restores[2]) if restores is not None else [])
    ax2.set_ylim(0, max(1.0, *tops) * 1.12 if tops else 1.0)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(
        h1 + h2,
        l1 + l2,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.16),
        ncol=4,
        fontsize="small",
        frameon=False,
    )
    ax.set_title(f"phase {phase}: TTFT vs position, cached tokens overlaid")
    return _png(fig)


def prefill_fit_png(
    points: Sequence[tuple[float, float, str]], a_s: float | None, rate_tokens_per_s: float | None
) -> bytes:
    """Probe legs (prompt tokens, prefill s, leg label) with the fit ``a + tokens / rate``.

    Returns:
        PNG bytes.
    """
    fig = Figure(figsize=_SIZE)
    ax = fig.add_subplot()
    labels = sorted({p[2] for p in points})
    for lab in labels:
        pts = [p for p in points if p[2] == lab]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o", label=lab or "leg")
    if a_s is not None and rate_tokens_per_s:
        xs = [0.0, max((p[0] for p in points), default=1.0)]
        ax.plot(
            xs,
            [a_s + x / rate_tokens_per_s for x in xs],
            "-",
            color="black",
            label=f"fit {a_s:.3g} s + tokens / {rate_tokens_per_s:.4g}",
        )
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel("prefill (s)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    ax.set_title("probe: prefill cost")
    return _png(fig)


def bisection_png(points: Sequence[tuple[float, bool | None]]) -> bytes:
    """Eviction bisection: foreign prompts k against whether the prefix was flushed.

    Returns:
        PNG bytes.
    """
    fig = Figure(figsize=_SIZE)
    ax = fig.add_subplot()
    ks = [p[0] for p in points]
    ax.plot(range(len(ks)), ks, "-", color="grey", linewidth=0.8)
    colour = {True: "tab:red", False: "tab:green", None: "tab:grey"}
    for i, (k, fl) in enumerate(points):
        ax.plot([i], [k], "o", color=colour[fl])
    for fl, lab in ((True, "flushed"), (False, "kept"), (None, "could not tell")):
        if any(p[1] is fl for p in points):
            ax.plot([], [], "o", color=colour[fl], label=lab)
    ax.set_xlabel("eviction leg, in the order run")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("foreign prompts k")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    ax.set_title("probe: eviction bisection")
    return _png(fig)


def curve_png(curve: Sequence[dict[str, Any]], recommended: float | None) -> bytes:
    """Miss-ratio curve: hit ratio (requests, tokens) against capacity, recommended capacity marked.

    Returns:
        PNG bytes.
    """
    fig = Figure(figsize=_SIZE)
    ax = fig.add_subplot()
    xs = [float(p["capacity"]) for p in curve]
    for key, lab in (
        ("hit_ratio_requests", "hit ratio (requests)"),
        ("hit_ratio_tokens", "hit ratio (tokens)"),
    ):
        ys = [p.get(key) for p in curve]
        if any(y is not None for y in ys):
            ax.plot(xs, [float("nan") if y is None else y for y in ys], "-", label=lab)
    if recommended is not None:
        ax.axvline(recommended, color="black", linestyle="--", label=f"recommended {recommended:g}")
    ax.set_xlabel("capacity")
    ax.set_ylabel("hit ratio")
    ax.set_ylim(0, 1.02)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    ax.set_title("simulate: miss-ratio curve")
    return _png(fig)
