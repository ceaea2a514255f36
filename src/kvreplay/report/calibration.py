"""The simulator calibration a run used, for the report header.

A ``--target sim`` run with ``--sim-from-verdict verdict.json`` records the
calibration in plan.json (``run.sim_calibration``, written by
``kvreplay.sim.config.config_and_calibration``); a run against ``kvreplay
serve-sim --from-verdict`` finds it in the server's ``/version``
(``calibration``), kept in summary.json ``identity.before.version``. Both have
``source`` (the verdict path), ``sha256`` (of the verdict's bytes), ``changes``
(simulator field -> value it set), ``capacity`` (entries or blocks, or
``"unbounded"`` when the eviction bisection found no flushing k) and
``overridden`` (field -> the value a command-line option gave instead).

The identity copy comes from a server and is treated as hostile: only a JSON
object is read, strings are cut to ``MAX_TEXT`` characters and at most
``MAX_FIELDS`` settings are shown.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_FIELDS", "MAX_TEXT", "calibration_line", "sim_calibration"]

MAX_TEXT = 200
"""Longest string (characters) taken from a calibration record."""

MAX_FIELDS = 32
"""Most settings listed from one calibration record."""


def sim_calibration(plan: dict[str, Any] | None, summary: dict[str, Any] | None) -> tuple[dict[str, Any], str] | None:
    """The run's calibration record and where it was found, or None.

    Args:
        plan: plan.json (``run.sim_calibration`` wins).
        summary: summary.json (``identity.before.version.calibration``: a
            ``serve-sim --from-verdict`` server).

    Returns:
        ``(record, "plan.json")`` or ``(record, "server /version")``; None when
        neither holds a JSON object.
    """
    rec = ((plan or {}).get("run") or {}).get("sim_calibration")
    if isinstance(rec, dict):
        return rec, "plan.json"
    before = (((summary or {}).get("identity") or {}).get("before")) or {}
    version = before.get("version") if isinstance(before, dict) else None
    rec = version.get("calibration") if isinstance(version, dict) else None
    if isinstance(rec, dict):
        return rec, "server /version"
    return None


def _text(v: Any) -> str:
    if isinstance(v, float):
        s = f"{v:.6g}"
    elif isinstance(v, (bool, int, str)) or v is None:
        s = str(v)
    else:
        s = type(v).__name__
    return s if len(s) <= MAX_TEXT else s[:MAX_TEXT] + "..."


def _settings(d: Any) -> str:
    if not isinstance(d, dict) or not d:
        return "none"
    items = list(d.items())
    shown = ", ".join(f"{_text(k)} = {_text(v)}" for k, v in items[:MAX_FIELDS])
    return shown + (f", ... ({len(items) - MAX_FIELDS} more)" if len(items) > MAX_FIELDS else "")


def calibration_line(rec: dict[str, Any], where: str) -> str:
    """One header line for a calibration record (see the module docstring).

    Example: ``from v.json (sha256 ab12...); set cache = entries, prefill_base_s
    = 1.52; capacity 16 entries; recorded in plan.json``. Floats show 6
    significant digits; an unbounded capacity says that the bisection found no
    flushing k.
    """
    cap = rec.get("capacity")
    changes_raw = rec.get("changes")
    changes = changes_raw if isinstance(changes_raw, dict) else {}
    if cap == "unbounded":
        cap_text = "unbounded (the eviction bisection found no flushing k)"
    elif isinstance(cap, int) and not isinstance(cap, bool):
        unit = "entries" if changes.get("cache") == "entries" else "blocks"
        cap_text = f"{cap} {unit}"
    else:
        cap_text = "not set"
    parts = [
        f"from {_text(rec.get('source'))} (sha256 {_text(rec.get('sha256'))})",
        f"set {_settings(changes)}",
        f"capacity {cap_text}",
    ]
    if rec.get("overridden"):
        parts.append(f"overridden by options: {_settings(rec.get('overridden'))}")
    parts.append(f"recorded in {where}")
    return "; ".join(parts)
