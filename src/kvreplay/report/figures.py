"""Which plots a run gets, with their data and status (measured / failed / deferred).

Plot keys (``data-plot`` in HTML): ``cdf-ttft``, ``cdf-itl``, ``cdf-e2e``,
``ttft-position:<phase>`` (one per plan phase), and when their files exist
``probe-prefill-fit``, ``probe-bisection``, ``simulate-mrc``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvreplay.report import plots  # matplotlib loads on the first drawing call
from kvreplay.report.cells import Status, phase_gate, phases_in_order
from kvreplay.report.stream import RunScan, scan
from kvreplay.report.units import sim_time_scale
from kvreplay.rundir import RunData

__all__ = ["CDF_METRICS", "Plot", "probe_plots", "run_plots", "simulate_plots"]

CDF_METRICS = (("ttft", "TTFT"), ("itl", "ITL"), ("e2e", "E2E"))


@dataclass(frozen=True, slots=True)
class Plot:
    """One figure of the report.

    Attributes:
        key: Stable id (see module docstring).
        title: Caption.
        status: ``measured`` when drawn, else ``failed`` / ``deferred``.
        reason: Why it was not drawn, or what it leaves out.
        png: The image (None unless measured).
    """

    key: str
    title: str
    status: Status
    reason: str | None = None
    png: bytes | None = None


def _cdf_plots(run: RunData) -> list[Plot]:
    out = []
    phases = phases_in_order(run.summary, run.plan)
    scale = sim_time_scale(run.plan, run.summary)
    for metric, label in CDF_METRICS:
        curves, left_out = [], []
        for ph in phases:
            name = ph if isinstance(ph, str) else ph["name"]
            gate = phase_gate(ph, run.summary)
            arr = run.histograms.get(name, {}).get(metric)
            if gate is not None:
                left_out.append(f"{name}: {gate.status} ({gate.reason})")
            elif arr is None or arr.total == 0:
                left_out.append(f"{name}: failed (no {label} histogram)")
            else:
                xs, ys = arr.cdf()
                if scale:
                    xs = xs / scale
                curves.append((f"{name} (n={arr.total})", xs.tolist(), ys.tolist()))
        reason = "; ".join(left_out) or None
        if curves:
            out.append(
                Plot(
                    f"cdf-{metric}",
                    f"{label} CDF per phase",
                    "measured",
                    reason,
                    plots.cdf_png(label, curves, unit="model ms" if scale else "ms"),
                )
            )
        else:
            status: Status = (
                "deferred" if left_out and all(": deferred" in x for x in left_out) else "failed"
            )
            out.append(
                Plot(f"cdf-{metric}", f"{label} CDF per phase", status, reason or "no phases")
            )
    return out


def _position_plots(run: RunData, sc: RunScan) -> list[Plot]:
    import numpy as np

    out = []
    for ph in phases_in_order(run.summary, run.plan):
        name = ph if isinstance(ph, str) else ph["name"]
        key, title = (
            f"ttft-position:{name}",
            f"phase {name}: TTFT vs position, cached tokens overlaid",
        )
        gate = phase_gate(ph, run.summary)
        if gate is not None:
            out.append(Plot(key, title, gate.status, gate.reason))
            continue
        ps = sc.phases.get(name)
        if ps is None or len(ps.pos) == 0:
            out.append(Plot(key, title, "failed", "no request with a first token"))
            continue
        pos = np.frombuffer(ps.pos, dtype=np.float64)
        restores = None
        if ps.restore_key is not None and len(ps.restore):
            restores = (ps.restore_key, np.frombuffer(ps.restore, dtype=np.float64))
        png, binned = plots.ttft_position_png(
            name,
            pos,
            np.frombuffer(ps.ttft_ms, dtype=np.float64),
            np.frombuffer(ps.cached, dtype=np.float64),
            np.frombuffer(ps.failed_pos, dtype=np.float64),
            restores,
            scale=sim_time_scale(run.plan, run.summary),
        )
        notes = []
        if binned:
            notes.append(binned)
        if len(ps.failed_pos):
            notes.append(f"{len(ps.failed_pos)} failed requests marked ×")
        out.append(Plot(key, title, "measured", "; ".join(notes) or None, png))
    return out


def run_plots(run: RunData, sc: RunScan | None = None) -> list[Plot]:
    """CDFs and TTFT-vs-position figures of a replay run (empty when it has no phases).

    Args:
        run: The loaded run.
        sc: The pass over the records (``report.stream.scan``); made here when None.
    """
    if not run.summary.get("phases") and not (run.plan or {}).get("phases"):
        return []
    if sc is None:
        sc = scan(run)
    return _cdf_plots(run) + _position_plots(run, sc)


def _num(d: dict[str, Any], *keys: str) -> float | None:
    for k in keys:
        v = d.get(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    return None


def _fit_points(verdict: dict[str, Any]) -> list[tuple[float, float, str]]:
    """Prefill points: the chosen fit's ``[tokens, s]`` (cold legs), warm legs, or loose dicts."""
    fit = verdict.get("prefill_fit") or {}
    fits = verdict.get("prefill_fits") or {}
    src = fit.get("source")
    chosen = (
        fits.get(src)
        if isinstance(fits.get(src), dict)
        else next((f for f in fits.values() if isinstance(f, dict)), None)
    )
    pts: list[tuple[float, float, str]] = []
    for xy in (chosen or {}).get("points") or []:
        if isinstance(xy, (list, tuple)) and len(xy) == 2 and None not in xy:
            pts.append(
                (float(xy[0]), float(xy[1]), f"cold ({(chosen or {}).get('source', src) or 'fit'})")
            )
    for w in verdict.get("warm") or []:
        if isinstance(w, dict):
            tok, sec = _num(w, "size_tokens", "tokens"), _num(w, "warm_ttft_s")
            if tok is not None and sec is not None:
                pts.append((tok, sec, "warm"))
    if pts:
        return pts
    for p in verdict.get("points") or []:
        if not isinstance(p, dict):
            continue
        tok = _num(p, "tokens", "prompt_tokens", "size_tokens")
        sec = _num(p, "prefill_s", "ttft_s")
        if sec is None and _num(p, "ttft_ms") is not None:
            sec = float(p["ttft_ms"]) / 1000.0
        if tok is not None and sec is not None and "k" not in p:
            pts.append((tok, sec, str(p.get("leg") or p.get("kind") or "")))
    return pts


def probe_plots(verdict: dict[str, Any]) -> list[Plot]:
    """Prefill fit with its points, and the eviction bisection, from a probe's verdict.json.

    Fit points come from ``prefill_fits[prefill_fit.source].points`` (``[tokens,
    seconds]`` of the cold legs, ``kvreplay.experiments.probe.legs``) plus the warm
    legs of ``warm``; bisection steps are the ``points`` entries with ``k`` and
    ``flushed`` (None = could not tell), in the order they were run.
    """
    out = []
    fit = verdict.get("prefill_fit") or {}
    pts = _fit_points(verdict)
    a, rate = _num(fit, "a_s"), _num(fit, "rate_tokens_per_s")
    title = "probe: prefill seconds against prompt tokens"
    if pts:
        r2 = _num(fit, "r2")
        why = (
            f"fit r² {r2:.3f}"
            if r2 is not None
            else ("no fit in verdict.json" if a is None else None)
        )
        out.append(
            Plot("probe-prefill-fit", title, "measured", why, plots.prefill_fit_png(pts, a, rate))
        )
    else:
        out.append(
            Plot(
                "probe-prefill-fit",
                title,
                "failed",
                "verdict.json has no legs with tokens and prefill time",
            )
        )
    raw = verdict.get("bisection") or verdict.get("points") or []
    steps = [p for p in raw if isinstance(p, dict) and "k" in p and "flushed" in p]
    title = "probe: eviction bisection (foreign prompts k)"
    if steps:
        br = verdict.get("flush_bracket")
        note = (
            f"minimum flushing k {verdict.get('min_flush_k')}, bracket {br}"
            if br
            else (verdict.get("eviction_note") or None)
        )
        out.append(
            Plot(
                "probe-bisection",
                title,
                "measured",
                note,
                plots.bisection_png([(float(p["k"]), p["flushed"]) for p in steps]),
            )
        )
    elif verdict.get("eviction_note") or "min_flush_k" in verdict:
        out.append(
            Plot(
                "probe-bisection",
                title,
                "deferred",
                verdict.get("eviction_note") or "no eviction legs were run",
            )
        )
    return out


def simulate_plots(sim: dict[str, Any]) -> list[Plot]:
    """The miss-ratio curve with the recommended capacity from a simulate ``--json`` output."""
    curve = [p for p in sim.get("curve") or [] if isinstance(p, dict) and "capacity" in p]
    rec = sim.get("recommended")
    rec_cap = (
        _num(rec, "capacity")
        if isinstance(rec, dict)
        else (float(rec) if isinstance(rec, (int, float)) else None)
    )
    if not curve:
        return [
            Plot(
                "simulate-mrc", "simulate: hit ratio against capacity", "failed", "no curve points"
            )
        ]
    return [
        Plot(
            "simulate-mrc",
            "simulate: hit ratio against capacity",
            "measured",
            None if rec_cap is not None else "no recommended capacity",
            plots.curve_png(curve, rec_cap),
        )
    ]
