"""Figures for the HTML report, drawn with matplotlib's Agg canvas into PNG bytes.

No pyplot and no global state: each function builds a ``matplotlib.figure.Figure``
on a ``FigureCanvasAgg`` and returns the encoded PNG, so rendering works headless
and in threads. Callers only pass measured data (invalid phases are filtered
before this module sees them). matplotlib is imported by the first drawing call,
not with this module.

Drawing cost does not grow with the run: a per-position chart with more than
``MAX_POINTS`` requests is binned into ``BINS`` bins of consecutive positions
and draws, per bin, the median as a line and the min-max range as a band (the
chart says so); cached tokens are a step line, not one bar per request.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MAX_POINTS = 2000
"""Largest number of requests a per-position chart draws one by one."""
BINS = 500
"""Bins of a per-position chart above ``MAX_POINTS`` requests."""


def _new_figure(size: tuple[float, float]) -> Figure:
    from matplotlib.figure import Figure

    return Figure(figsize=size)


def _ticker() -> Any:
    from matplotlib import ticker

    return ticker

__all__ = ["cdf_png", "curve_png", "prefill_fit_png", "bisection_png", "series_png", "ttft_position_png"]

_DPI = 96
_SIZE = (6.4, 3.4)


def _png(fig: Figure) -> bytes:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI, bbox_inches="tight")
    return buf.getvalue()


def cdf_png(
    metric: str, curves: Sequence[tuple[str, Sequence[float], Sequence[float]]], unit: str = "ms"
) -> bytes:
    """Cumulative distributions of one latency metric, one line per phase.

    Args:
        metric: Label, e.g. ``TTFT``.
        curves: ``(legend label, values ascending, cumulative fraction)`` per phase.
        unit: The values' unit (``ms``, or ``model ms`` against a time-scaled simulator).

    Returns:
        PNG bytes.
    """
    fig = _new_figure(_SIZE)
    ax = fig.add_subplot()
    for name, xs, ys in curves:
        # A step plot starting at 0: the fraction jumps at each recorded value.
        ax.step([xs[0], *xs], [0.0, *ys], where="post", label=name)
    lo = min(xs[0] for _, xs, _ in curves)
    hi = max(xs[-1] for _, xs, _ in curves)
    if hi > 20 * lo:  # a log axis only when the values span more than ~1.3 decades
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(_ticker().FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(_ticker().NullFormatter())
        ax.set_xlabel(f"{metric} ({unit}, log scale)")
    else:
        ax.set_xlabel(f"{metric} ({unit})")
    ax.set_ylabel("fraction of requests ≤ x")
    ax.set_ylim(0, 1.02)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="lower right", fontsize="small")
    ax.set_title(f"{metric} distribution per phase (from the HdrHistogram logs)")
    return _png(fig)


def bin_series(
    pos: np.ndarray, values: Sequence[np.ndarray], bins: int = BINS
) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray, np.ndarray]], float]:
    """Per-bin min, median and max of series over consecutive positions.

    Memory is a few bytes a position beyond the inputs (issue 32): the bin of each
    position is kept in the narrowest integer type that holds ``bins``, and the bins
    are summarised a group of ``BIN_GROUP`` bins at a time, gathering only that
    group's values (no sorted copy of a whole series). Each bin's values are the same
    multiset as in one sort by bin, so the results are those of sorting.

    Args:
        pos: Positions (any order; float).
        values: Series aligned with ``pos``; NaN values are left out of their bin.
        bins: Number of equal-width position bins over ``[min(pos), max(pos)]``.

    Returns:
        ``(bin centres, [(min, median, max) per series], bin width)``; bins that
        hold no position are dropped; a series with no value in a bin gets NaN
        there.
    """
    lo, hi = float(pos.min()), float(pos.max())
    width = max((hi - lo + 1) / bins, 1.0)
    idx = np.empty(len(pos), dtype=np.min_scalar_type(-max(bins, 1)))
    for s in range(0, len(pos), _SPAN):  # a span at a time: no float temporaries of every position
        idx[s:s + _SPAN] = np.minimum(((pos[s:s + _SPAN] - lo) / width).astype(np.int64), bins - 1)
    centres = []
    stats: list[list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = [[] for _ in values]
    for b0 in range(int(idx.min()) if len(idx) else 0, bins, BIN_GROUP):
        sel = np.flatnonzero((idx >= b0) & (idx < b0 + BIN_GROUP))
        if not len(sel):
            continue
        gi = idx[sel]
        order = np.argsort(gi, kind="stable")
        present, starts = np.unique(gi[order], return_index=True)
        centres.append(lo + (present.astype(np.int64) + 0.5) * width)
        for k, v in enumerate(values):
            sv = v[sel][order]
            mins = np.full(len(present), np.nan)
            meds = np.full(len(present), np.nan)
            maxs = np.full(len(present), np.nan)
            for j, chunk in enumerate(np.split(sv, starts[1:])):
                chunk = chunk[~np.isnan(chunk)]
                if len(chunk):
                    mins[j], meds[j], maxs[j] = chunk.min(), np.median(chunk), chunk.max()
            stats[k].append((mins, meds, maxs))
    out = [tuple(np.concatenate([g[m] for g in st]) if st else np.empty(0) for m in range(3)) for st in stats]
    return (np.concatenate(centres) if centres else np.empty(0)), out, width  # type: ignore[return-value]


BIN_GROUP = 32
"""Bins summarised at a time by ``bin_series`` (its values gathered per group)."""
_SPAN = 1 << 16
"""Positions binned at a time by ``bin_series``."""


def ttft_position_png(
    phase: str,
    positions: Sequence[float] | np.ndarray,
    ttft_ms: Sequence[float] | np.ndarray,
    cached: Sequence[float | None] | np.ndarray,
    failed_positions: Sequence[float] | np.ndarray,
    restores: tuple[str, Sequence[float] | np.ndarray] | None = None,
    *,
    scale: float | None = None,
) -> tuple[bytes, str | None]:
    """TTFT against position in the phase's frozen sequence, cached tokens overlaid.

    Above ``MAX_POINTS`` requests the series are binned (``bin_series``): per
    bin the median is a line and the min-max range a band, and the chart's
    subtitle states the bin count and width.

    Args:
        phase: Phase name.
        positions: Positions of ok requests.
        ttft_ms: Their TTFT (ms).
        cached: Their usage cached_tokens (None or NaN where unreported).
        failed_positions: Positions whose request failed (drawn as marks on the axis).
        restores: Optional ``(counter name, per-request delta aligned with positions)``
            from C1 counters (NaN where absent).
        scale: The simulator's time scale (``report.units.sim_time_scale``): TTFT
            is drawn in model ms (measured / scale). None for real time.

    Returns:
        ``(PNG bytes, the binning sentence or None when every request is drawn)``.
    """
    pos = np.asarray(positions, dtype=np.float64)
    ttft = np.asarray(ttft_ms, dtype=np.float64)
    if scale:
        ttft = ttft / scale
    cach = np.asarray([np.nan if c is None else c for c in cached], dtype=np.float64) if not isinstance(
        cached, np.ndarray) else np.asarray(cached, dtype=np.float64)
    fpos = np.asarray(failed_positions, dtype=np.float64)
    rname, rval = (restores[0], np.asarray(restores[1], dtype=np.float64)) if restores else (None, None)
    if len(pos) <= MAX_POINTS:  # drawn one by one, in position order; bins need no order (bin_series)
        order = np.argsort(pos, kind="stable")
        pos, ttft, cach = pos[order], ttft[order], cach[order]
        if rval is not None:
            rval = rval[order]
    unit = "model ms" if scale else "ms"
    fig = _new_figure((7.2, 3.6))
    ax = fig.add_subplot()
    ax2 = ax.twinx()
    binned = None
    if len(pos) > MAX_POINTS:
        series = [ttft, cach] + ([rval] if rval is not None else [])
        xs, stats, width = bin_series(pos, series)
        binned = (
            f"{len(pos)} requests binned into {len(xs)} bins of {width:.3g} positions: "
            "line = median per bin, band = min to max"
        )
        tmin, tmed, tmax = stats[0]
        ax.fill_between(xs, tmin, tmax, color="tab:blue", alpha=0.25, linewidth=0,
                        label=f"TTFT min-max per bin ({unit})")
        ax.plot(xs, tmed, "-", color="tab:blue", linewidth=1, label=f"TTFT median per bin ({unit})")
        top = float(np.nanmax(tmax))
        cx, cy = xs, stats[1][1]
        rx, ry = (xs, stats[2][1]) if rval is not None else (None, None)
        if len(fpos) > MAX_POINTS:
            fpos = np.unique(np.floor(fpos / width) * width + width / 2)
    else:
        ax.plot(pos, ttft, "o-", color="tab:blue", markersize=3, linewidth=1, label=f"TTFT ({unit})")
        top = float(np.nanmax(ttft)) if len(ttft) else 1.0
        cx, cy = pos, cach
        rx, ry = (pos, rval) if rval is not None else (None, None)
    if len(fpos):
        ax.plot(fpos, np.zeros(len(fpos)), "x", color="tab:red", label="failed")
    ax.set_xlabel("position in the phase's frozen sequence (requests)")
    ax.set_ylabel(f"TTFT ({unit})", color="tab:blue")
    ax.set_ylim(0, top * 1.12 if top > 0 else 1.0)
    ax.grid(True, alpha=0.3)
    tops = []
    keep = ~np.isnan(cy)
    if keep.any():
        # One step line for the whole phase: drawing cost does not grow with requests.
        ax2.fill_between(cx[keep], 0, cy[keep], step="mid", color="tab:orange", alpha=0.35,
                         linewidth=0, label="usage cached_tokens" + (" (median per bin)" if binned else ""))
        tops.append(float(cy[keep].max()))
    if rx is not None and ry is not None:
        rk = ~np.isnan(ry)
        if rk.any():
            ax2.plot(rx[rk], ry[rk], "s", color="tab:green", markersize=2 if binned else 3,
                     label=f"Δ {rname} (counters)" + (" (median per bin)" if binned else ""))
            tops.append(float(ry[rk].max()))
    # TTFT drawn above the twin axis.
    ax.set_zorder(ax2.get_zorder() + 1)
    ax.patch.set_visible(False)
    ax.xaxis.set_major_locator(_ticker().MaxNLocator(integer=True))
    ax2.set_ylabel("tokens", color="tab:orange")
    ax2.set_ylim(0, max(1.0, *tops) * 1.12 if tops else 1.0)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3,
              fontsize="small", frameon=False)
    title = f"phase {phase}: TTFT vs position, cached tokens overlaid"
    if scale:
        title += f"\nsimulator time scale {scale:g}: TTFT in model ms (measured / {scale:g})"
    if binned:
        title += f"\n{binned}"
    ax.set_title(title, fontsize="small" if (binned or scale) else None)
    return _png(fig), binned


def prefill_fit_png(
    points: Sequence[tuple[float, float, str]], a_s: float | None, rate_tokens_per_s: float | None
) -> bytes:
    """Probe legs (prompt tokens, prefill s, leg label) with the fit ``a + tokens / rate``.

    Returns:
        PNG bytes.
    """
    fig = _new_figure(_SIZE)
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
    fig = _new_figure(_SIZE)
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
    ax.xaxis.set_major_locator(_ticker().MaxNLocator(integer=True))
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
    fig = _new_figure(_SIZE)
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


def by_turn_png(phase: str, rows: Sequence[dict[str, Any]], *, scale: float | None = None) -> bytes:
    """Reuse by turn: hit rate (left axis) and TTFT p50 (right axis) against the turn index.

    Args:
        phase: The phase's name (title).
        rows: ``summary.json`` ``by_turn`` rows (``turn``, ``hit_rate``, ``ttft_ms.p50``).
        scale: The simulator's time scale (TTFT shown in model ms, measured / scale), or None.

    Returns:
        PNG bytes.
    """
    fig = _new_figure(_SIZE)
    ax = fig.add_subplot()
    turns = [int(r["turn"]) for r in rows]
    hits = [float("nan") if r.get("hit_rate") is None else float(r["hit_rate"]) for r in rows]
    ax.plot(turns, hits, "o-", label="hit rate (cached / prompt tokens)")
    ax.set_xlabel("turn")
    ax.set_ylabel("hit rate")
    ax.set_ylim(0, 1.02)
    ax.set_xticks(turns)
    ax.grid(True, alpha=0.3)
    ax2 = ax.twinx()
    p50 = [(r.get("ttft_ms") or {}).get("p50") for r in rows]
    ys = [float("nan") if v is None else (v / scale if scale else v) for v in p50]
    ax2.plot(turns, ys, "s--", color="tab:orange", label="TTFT p50")
    ax2.set_ylabel("TTFT p50 (model ms)" if scale else "TTFT p50 (ms)")
    lines = ax.get_legend_handles_labels()
    lines2 = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], fontsize="small", loc="lower right")
    ax.set_title(f"phase {phase}: reuse by turn")
    return _png(fig)


def replica_positions_png(phase: str, replica: Sequence[int], cached: Sequence[int]) -> bytes:
    """Cached tokens per position, one marker series per replica (``phases[].routing_loss.observed``).

    Args:
        phase: The phase's name (title).
        replica: Replica index per position (send order).
        cached: Cached tokens per position (the observed assignment, simulated).

    Returns:
        PNG bytes.
    """
    fig = _new_figure(_SIZE)
    ax = fig.add_subplot()
    for k in sorted(set(replica)):
        xs = [i for i, r in enumerate(replica) if r == k]
        ax.plot(xs, [cached[i] for i in xs], "o", markersize=3, label=f"replica {k}")
    ax.set_xlabel("position (send order)")
    ax.set_ylabel("cached tokens")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    ax.set_title(f"phase {phase}: cached tokens per position per replica")
    return _png(fig)


def series_png(title: str, xlabel: str, ylabel: str,
               series: Sequence[tuple[str, Sequence[float], Sequence[float | None]]], *,
               marks: Sequence[tuple[float, str]] = (), hollow: Sequence[tuple[float, float]] = (),
               ylim: tuple[float, float] | None = None) -> bytes:
    """Lines with markers, one per ``(label, xs, ys)`` (a None y is a gap), e.g. a sweep's curves.

    Args:
        title: The chart's title.
        xlabel: The x axis (with its unit).
        ylabel: The y axis (with its unit).
        series: The lines.
        marks: Vertical dashed lines ``(x, label)`` (a sweep's knee).
        hollow: Points ``(x, y)`` circled in red (a sweep's points whose cache state is unverified).
        ylim: The y range; None: matplotlib's.

    Returns:
        PNG bytes.
    """
    fig = _new_figure(_SIZE)
    ax = fig.add_subplot()
    for lab, xs, ys in series:
        ax.plot([float(x) for x in xs], [float("nan") if y is None else float(y) for y in ys], "o-", label=lab)
    for x, lab in marks:
        ax.axvline(x, color="black", linestyle="--", label=lab)
    if hollow:
        ax.plot([p[0] for p in hollow], [p[1] for p in hollow], "o", markersize=12, markerfacecolor="none",
                markeredgecolor="red", label="cache state unverified")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    ax.set_title(title)
    return _png(fig)
