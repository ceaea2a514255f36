"""Units of the report's columns: common counter names and the simulator's time scale.

Counter units follow the common names of ``kvreplay.runner.backend``: names
ending in ``_tokens`` count tokens, ``bytes`` / ``host_bytes`` bytes,
``host_rows_used`` rows, ``host_pages_used`` pages, the load gauges requests,
``entries`` cache entries; the rest (lookups, hits, misses, stores, evictions,
refused and their host twins) count events, whose size is the server's own unit
(a vLLM block, an SGLang node, a halogen entry). A summary that names units
itself (``summary["units"]``: name -> unit, issue 16) wins.

Simulator time: ``--target sim`` runs every simulated delay multiplied by
``--sim-time-scale`` (``kvreplay.sim.config.SimConfig.time_scale``); a run
records the scale as ``plan.json`` ``run.sim_time_scale`` and a probe as
``verdict.json`` ``sim_time_scale``. Model seconds = measured seconds / scale.
"""

from __future__ import annotations

from typing import Any

from kvreplay.clock import model_time_scale

__all__ = ["sim_time_scale", "unit_of"]

_FIXED = {
    "bytes": "bytes",
    "host_bytes": "bytes",
    "host_rows_used": "rows",
    "host_pages_used": "pages",
    "entries": "entries",
    "running": "requests",
    "waiting": "requests",
    "retiring": "requests",
    "transfers_in_flight": "transfers",
    "transfers_waiting": "transfers",
}


def unit_of(name: str, summary: dict[str, Any] | None = None) -> str:
    """The unit of a common counter or gauge, for a column header (``tokens``, ``bytes``, ``events``...).

    Args:
        name: A common counter/gauge name (``runner.backend``) or another numeric key.
        summary: summary.json; its ``units`` map (when present) wins.
    """
    units = (summary or {}).get("units")
    if isinstance(units, dict) and isinstance(units.get(name), str):
        return units[name]
    if name.endswith("_tokens"):
        return "tokens"
    return _FIXED.get(name, "events")


def sim_time_scale(plan: dict[str, Any] | None, summary: dict[str, Any] | None = None) -> float | None:
    """The simulator's time scale of a run (``plan.json`` ``run.sim_time_scale``), or None.

    None for a run against a real server, and when the scale is 1 or 0
    (``kvreplay.clock.model_time_scale``); a plan without a converting scale
    falls back to ``summary["sim_time_scale"]``.
    """
    for src in ((plan or {}).get("run") or {}, summary or {}):
        if (scale := model_time_scale(src.get("sim_time_scale"))) is not None:
            return scale
    return None
