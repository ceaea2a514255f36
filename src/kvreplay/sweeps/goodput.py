"""Goodput and SLO attainment of one measured phase, from its own records and wall time.

The definition is DistServe's (Zhong et al., OSDI 2024) as vLLM's ``bench serve
--goodput`` applies it: a request counts when it finished ok and meets every
per-request SLO. Here, in **measured** ms (a record's ``ttft_ns`` / 1e6, the units of
summary.json's ``ttft_ms``; never the simulator's model ms):

- ``goodput_rps`` = counted requests / the phase's ``wall_s`` (summary.json);
- ``slo_attainment`` = counted requests / every record of that phase, failures and
  positions never sent included.

A ``tpot_ms`` SLO on an ok request with at most one output token (no TPOT exists)
counts as met, as vLLM does (its TPOT is 0 there); any other missing value does not.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kvreplay.sweeps.loads import SLO_METRICS, Slo

__all__ = ["Goodput", "goodput"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Goodput:
    """One phase's goodput.

    Attributes:
        records: Records of the phase (every status).
        ok: Records with ``status == "ok"``.
        met: Ok records meeting every SLO (all ok records when there is no SLO).
        wall_s: The phase's wall time (s).
        goodput_rps: ``met / wall_s`` (requests/s); None when ``wall_s`` is not > 0.
        slo_attainment: ``met / records``; None without records.
    """

    records: int
    ok: int
    met: int
    wall_s: float | None
    goodput_rps: float | None
    slo_attainment: float | None


def _meets(rec: dict[str, Any], slos: Sequence[Slo]) -> bool:
    for slo in slos:
        ns = rec.get(SLO_METRICS[slo.metric])
        if not isinstance(ns, (int, float)):
            usage = rec.get("usage") or {}
            out = usage.get("completion_tokens") if isinstance(usage, dict) else None
            if slo.metric == "tpot_ms" and isinstance(out, int) and out <= 1:
                continue
            return False
        if not slo.met(ns / 1e6):
            return False
    return True


def goodput(records: Iterable[dict[str, Any]], phase: str, wall_s: float | None, slos: Sequence[Slo]) -> Goodput:
    """Goodput of ``phase`` from the run's records (other phases' records are skipped).

    Args:
        records: A run's records (``rundir.iter_records``), any phases.
        phase: The measured phase's name.
        wall_s: That phase's ``wall_s`` from summary.json (s).
        slos: The SLOs; none: every ok request counts.

    Returns:
        The counts and the two figures (module docstring).
    """
    n = ok = met = 0
    for rec in records:
        if rec.get("phase") != phase:
            continue
        n += 1
        if rec.get("status") != "ok":
            continue
        ok += 1
        if _meets(rec, slos):
            met += 1
    rps = met / wall_s if isinstance(wall_s, (int, float)) and wall_s > 0 else None
    return Goodput(records=n, ok=ok, met=met, wall_s=wall_s, goodput_rps=rps,
                   slo_attainment=met / n if n else None)
