"""The report's throughput table: wall-clock against service-time request throughput per phase.

``throughput_rps`` is ok requests / phase wall time: it includes every pause of
the client between requests (at C1 with per-request counter reads, the reads).
``service_throughput_rps`` (summary.json, ``metrics.summary``) is ok x C / the
sum of E2E: the same requests without those pauses. Runs written before it
existed show it as deferred ("not in this summary"). Against the simulator with a
time scale (``report.units.sim_time_scale``) rates are per model second
(measured x scale) and the headers say so.
"""

from __future__ import annotations

from typing import Any

from kvreplay.report.cells import Cell, deferred, fmt, measured, phase_gate, phases_in_order
from kvreplay.report.sections import Table, one_reason, phase_name
from kvreplay.report.units import sim_time_scale
from kvreplay.rundir import RunData

__all__ = ["throughput_notes", "throughput_table"]


def _rate(ph: dict[str, Any], key: str, missing: str, nd: int = 3, scale: float | None = None) -> Cell:
    v = ph.get(key)
    if v is None:
        return deferred(missing)
    return measured(fmt(round(float(v) * (scale or 1.0), nd), nd))


def _pauses(ph: dict[str, Any]) -> str:
    if ph.get("attribution") == "per_request":
        return "counter read after each request: in wall-clock, not in service"
    if (ph.get("schedule") or {}).get("open_loop"):
        return "open loop: the schedule sets the rate"
    return "none by design"


def throughput_table(run: RunData) -> Table:
    """Per phase: wall-clock req/s, service-time req/s, output tokens/s, and the client's pauses.

    Args:
        run: The loaded run directory.

    Returns:
        Table ``throughput`` (columns in the order shown in the report).
    """
    s = run.summary
    scale = sim_time_scale(run.plan, s)
    per_s = "per model s" if scale else "/s"
    t = Table("throughput", [f"wall-clock req {per_s}", f"service-time req {per_s}",
                             f"output tokens {per_s} (wall)", "client pauses between requests"])
    for ph in phases_in_order(s, run.plan):
        gate = phase_gate(ph, s)
        if gate is not None or isinstance(ph, str):
            gate = gate or deferred("not run")
            t.rows.append((phase_name(ph), one_reason([gate] * len(t.columns), gate)))
            continue
        service_missing = ("open loop" if (ph.get("schedule") or {}).get("open_loop")
                           else "not in this summary" if "service_throughput_rps" not in ph else "no ok request")
        t.rows.append((phase_name(ph), [
            _rate(ph, "throughput_rps", "no wall time", scale=scale),
            _rate(ph, "service_throughput_rps", service_missing, scale=scale),
            _rate(ph, "output_tokens_per_s", "no wall time", 1, scale=scale),
            measured(_pauses(ph)),
        ]))
    return t


def throughput_notes() -> list[str]:
    """The definitions printed under the table."""
    return [
        "wall-clock req/s = ok requests / phase wall time: includes the client's pauses between "
        "requests (per-request counter reads at C1).",
        "service-time req/s = ok requests x C / sum of their E2E: the rate without those pauses "
        "(counter reads excluded); compare it with a client that reads no counters.",
    ]
