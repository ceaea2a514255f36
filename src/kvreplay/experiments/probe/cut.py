"""A probe cut short at ``stop_new_after``: which legs were sent, and what its cells may claim.

Inside an experiment window a probe step sends no new request once the window's
``stop_new_after`` has passed (``experiments.probe.run_probe``'s ``stop_new``); the
requests in flight finish, and the verdict records the cut as ``stopped``::

    {"reason": "stop_new_after", "requests": 5, "cold": [3, 4], "warm": [2, 4],
     "eviction_points": [0, 6]}

(``[sent, planned]``; eviction points are bisection points whose every repeat
completed, out of at most ``2 + ceil(log2(flush_max))``). A cut verdict is no
evidence: the cells of a leg group cut short are ``aborted`` with ``"partial: 3 of
4 cold legs sent (STEP REASON)"`` and a group that sent nothing is ``deferred``
with ``"not run: ..."``, as a run step's phases (``experiments.findings.cells``);
``sim.calibrate`` refuses such a verdict.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["StopNew", "cut_cell", "eviction_points_max", "stopped_json"]


class StopNew(Exception):  # noqa: N818 - a signal, not an error
    """No new probe request may start: the window's ``stop_new_after`` has passed."""


def eviction_points_max(flush_max: int) -> int:
    """The most bisection points the eviction legs can measure: k = 0, ``flush_max``, then halvings.

    ``0`` when ``flush_max`` is 0 (no eviction legs); ``2 + ceil(log2(flush_max))`` otherwise
    (16 -> 6: k = 0, 16, 8, 4, 2, 1).
    """
    return 0 if flush_max <= 0 else 2 + math.ceil(math.log2(flush_max))


def stopped_json(*, requests: int, cold: int, warm: int, points: int, cfg: Any) -> dict[str, Any]:
    """The verdict's ``stopped`` object (module docstring) for a probe cut after ``requests`` legs.

    Args:
        requests: Leg requests sent (``verdict["requests"]``).
        cold: Cold (A) legs sent.
        warm: Warm (B) legs sent.
        points: Eviction points completed.
        cfg: The ``ProbeConfig`` (planned counts).
    """
    return {"reason": "stop_new_after", "requests": requests,
            "cold": [cold, len(cfg.sizes) * cfg.cold_repeats], "warm": [warm, len(cfg.sizes)],
            "eviction_points": [points, eviction_points_max(cfg.flush_max)]}


def _group(metric: str, stopped: dict[str, Any]) -> tuple[int, int | None, str]:
    """(sent, planned or None, words) of the leg group a cell is computed from."""
    if metric.startswith("prefill_fit."):
        sent, planned = stopped["cold"]
        return sent, planned, "cold legs sent"
    if metric == "min_flush_k":
        sent, planned = stopped["eviction_points"]
        return sent, planned, "eviction points measured"
    return stopped["requests"], None, "probe requests sent"


def cut_cell(metric: str, value: Any, stopped: dict[str, Any], reason: str | None) -> dict[str, Any] | None:
    """Status, value and reason of one cell of a cut probe, or None when its leg group was complete.

    Args:
        metric: The cell's metric (``experiments.probe_step.PROBE_CELLS``).
        value: The verdict's value for it (kept beside an ``aborted`` status, as a run step's
            partial phase keeps its figures; never ``measured``).
        stopped: ``verdict["stopped"]``.
        reason: The step's reason (appended in parentheses).

    Returns:
        ``{"status", "value", "reason"}``: ``deferred`` (value None) with ``"not run: 0 of 4
        cold legs sent (REASON)"`` (``"0 of up to 6 eviction points measured"``) when the group
        sent nothing, ``aborted`` with ``"partial: 3 of 4 cold legs sent (REASON)"`` when it was
        cut; None when every planned leg of the group was sent (the cold legs before a cut in the
        eviction legs). Cmax and bytes per token read every leg, and the eviction bisection's
        length is not known in advance: they are partial whenever the probe was cut
        (``"partial: 5 probe requests sent"``).
    """
    sent, planned, words = _group(metric, stopped)
    why = f" ({reason})" if reason else ""
    if planned is not None and metric.startswith("prefill_fit.") and sent >= planned:
        return None
    of = "" if planned is None else (f" of up to {planned}" if metric == "min_flush_k" else f" of {planned}")
    if sent == 0:
        return {"status": "deferred", "value": None, "reason": f"not run: 0{of} {words}{why}"}
    return {"status": "aborted", "value": value, "reason": f"partial: {sent}{of} {words}{why}"}
