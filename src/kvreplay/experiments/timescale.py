"""Simulator time in an experiment's publication: which scale each step ran at, and the words.

One convention with the run report (``kvreplay.report.units``, ``report.document``):
against the simulator with a time scale, every simulated delay ran ``scale`` x its
model length, and latencies are *shown* in model ms = measured ms / scale with the
scale stated. ``result.json`` keeps each latency cell's ``value`` as measured (ms of
this machine's wall clock, the summary's own figure) and adds ``model_ms`` beside it
where the step ran at a scale; ``report.md``/``report.html`` show model ms.

A run step records its scale in ``plan.json`` ``run.sim_time_scale`` (as ``kvreplay run
--target sim`` does); a step directory written before that is read from the frozen
``experiment.json``: the incarnation's ``sim`` overlay, else ``[server.sim]``, else the
simulator's default (1).
"""

from __future__ import annotations

from typing import Any

from kvreplay.clock import model_time_scale
from kvreplay.report.units import sim_time_scale

__all__ = ["ab_scale", "fast_scale_warning", "latency_line", "model_fit", "model_ms", "probe_scale", "scale_of_step"]


def scale_of_step(plan: dict[str, Any] | None, summary: dict[str, Any] | None, frozen: dict[str, Any] | None,
                  incarnation: str | None) -> float | None:
    """The simulator time scale a run step ran at, or None (real server, scale 1 or 0).

    Args:
        plan: The step's ``plan.json`` (``run.sim_time_scale`` wins when present).
        summary: The step's ``summary.json``.
        frozen: ``experiment.json`` (fallback for step directories without the key).
        incarnation: The incarnation step the run step ran in (None: the incumbent).
    """
    run = (plan or {}).get("run") or {}
    if "sim_time_scale" in run:
        return sim_time_scale(plan, summary)
    server = (frozen or {}).get("server") or {}
    if server.get("target") != "sim":
        return None
    overlay = next((s.get("sim") or {} for s in (frozen or {}).get("steps", []) if s.get("name") == incarnation), {})
    if "time_scale" in overlay:
        return model_time_scale(overlay["time_scale"])
    return model_time_scale((server.get("sim") or {}).get("time_scale", 1.0))


def model_ms(value: Any, scale: float | None) -> float | None:
    """``value`` (measured ms) in model ms: ``value / scale``, rounded to 3 decimals; None without both."""
    if scale is None or not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    return round(float(value) / scale, 3)


def latency_line(scales: dict[str, float | None], is_sim: bool, configured: float | None = None) -> str:
    """The report's statement of the latency convention.

    Args:
        scales: Step name -> its scale (``scale_of_step``), for the steps with latency figures.
        is_sim: True when the experiment's target is the embedded simulator.
        configured: The simulator's time scale as the experiment file set it (``[server.sim]``),
            named when no step gave a latency figure (never "1 or 0" for a window at 0.01).

    Returns:
        e.g. ``"model ms at simulator time scale 0.01 (measured / 0.01; the client's own overhead
        is divided too): steps A, B"``; ``"ms as measured (no simulator time scale)"``.
    """
    groups: dict[float, list[str]] = {}
    for name, sc in scales.items():
        if sc is not None:
            groups.setdefault(sc, []).append(name)
    parts = [f"model ms at simulator time scale {sc:g} (measured / {sc:g}; the client's own overhead is "
             f"divided too): step{'s' if len(names) > 1 else ''} {', '.join(names)}" for sc, names in groups.items()]
    plain = [n for n, sc in scales.items() if sc is None]
    if plain and parts:
        parts.append(f"ms as measured: step{'s' if len(plain) > 1 else ''} {', '.join(plain)}")
    if not parts:
        if not is_sim:
            return "ms as measured (no simulator time scale)"
        if configured is not None and model_time_scale(configured) is not None:
            return (f"no latency figure from a step at a time scale (simulator configured at time scale "
                    f"{configured:g}: figures would be in model ms, measured / {configured:g})")
        if configured is not None:
            return f"ms as measured (simulator at time scale {configured:g}: no conversion)"
        return "ms as measured (simulator at time scale 1 or 0: no conversion)"
    return "; ".join(parts)


def ab_scale(ab: dict[str, Any] | None) -> float | None:
    """The time scale of an ab step (``ab.json`` ``sim_time_scale``: arm -> scale), or None.

    The arms' common scale when it changes the figures; None against a real server, at
    scale 1 or 0, and when the arms ran at different scales (each block's report then
    states its own, from its ``plan.json``).
    """
    scales = (ab or {}).get("sim_time_scale")
    if not isinstance(scales, dict) or not scales:
        return None
    got = {model_time_scale(v) for v in scales.values()}
    return got.pop() if len(got) == 1 else None


def probe_scale(verdict: dict[str, Any] | None) -> float | None:
    """The time scale of a probe step (``verdict.json`` ``sim_time_scale``), or None."""
    return model_time_scale((verdict or {}).get("sim_time_scale"))


def model_fit(cells: list[dict[str, Any]], scale: float | None) -> list[dict[str, Any]]:
    """A probe step's cells with the prefill fit in model time beside the scaled value.

    ``prefill_fit.a_s`` gets ``model_s`` = a / scale (rounded to 4 decimals) and
    ``prefill_fit.rate_tokens_per_s`` gets ``model_tokens_per_s`` = rate x scale (3
    decimals); the cells are returned unchanged without a scale.
    """
    if scale is None:
        return cells
    for c in cells:
        v = c.get("value")
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            continue
        if c["metric"] == "prefill_fit.a_s":
            c["model_s"] = round(float(v) / scale, 4)
        elif c["metric"] == "prefill_fit.rate_tokens_per_s":
            c["model_tokens_per_s"] = round(float(v) * scale, 3)
    return cells


FINEST_ITL_US = 100.0
"""Below this modelled ITL (µs) the latency histogram's 1 µs step is over 1% of the value."""


def fast_scale_warning(scale: Any, itl_s: Any = 0.020) -> str | None:
    """A warning, before the run, when a simulator time scale makes ITL too short to resolve; else None.

    At time scale ``s`` the simulator's inter-token latency is ``itl_s * s``; the latency
    histograms step by 1 µs there (``experiments.ab.resolution``), so below ``FINEST_ITL_US``
    an ITL check of a few percent cannot be decided (its checks will read "no decision:
    below resolution").

    Args:
        scale: The time scale (0 and 1 and non-numbers: None, no conversion).
        itl_s: The simulator's modelled ITL (s; ``SimConfig.itl_s``).
    """
    sc = model_time_scale(scale)
    if sc is None or not isinstance(itl_s, (int, float)) or isinstance(itl_s, bool) or itl_s <= 0:
        return None
    itl_us = itl_s * sc * 1e6
    if itl_us >= FINEST_ITL_US:
        return None
    return (f"time scale {sc:g} makes the simulator's ITL {itl_us:.3g} µs ({itl_s * 1000:g} ms x {sc:g}): the "
            f"latency histograms step by 1 µs ({100 / itl_us:.2g}% of it), so ITL checks of a few percent will "
            f"read 'no decision: below resolution'; use a time scale of at least "
            f"{FINEST_ITL_US / (itl_s * 1e6):.2g} for A/B decisions on ITL")
