"""kvreplay.evidence: the counter/tier vocabulary and the one restore-evidence engine.

- ``evidence.vocab``: every common counter and gauge name, their units, the tiers
  (host, device, usage) with their lookup and restore keys, and ``ABSENT``.
- ``evidence.engine``: the rules (absent is not zero, a reset delta is void, the
  tier compared, only repeats are evidence) that the run report, the experiment
  findings and ``kvreplay compare`` all decide with.
- ``evidence.bodykeys``: sets of sent bodies in flat memory (``KeySet``: 16-byte
  keys of their SHA-256 in a sorted array), for the replay rule at any scale.

It sits low in the layers (beside ``metrics``): it reads summary, record and
counter dicts and imports nothing of the project but the bottom modules.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvreplay.evidence.engine import (
    PhaseEvidence,
    PhaseSends,
    SentBodies,
    Tier,
    common_tier,
    counter_cached,
    counter_value,
    delta_evidence,
    figure_on,
    phase_evidence,
    replay_orders,
    restored_on,
    tiers_present,
    usable,
    usable_delta,
)
from kvreplay.evidence.vocab import (
    ABSENT,
    COMMON_UNITS,
    COUNTER_NAMES,
    DEVICE_KEYS,
    DEVICE_LOOKUP_KEYS,
    DEVICE_WORK_KEYS,
    GAUGE_NAMES,
    HOST_KEYS,
    HOST_LOOKUP_KEYS,
    LOAD_GAUGES,
    RESTORE_KEYS,
    TIERS,
    TOKEN_TWINS,
    USAGE_HOST_KEYS,
)

__all__ = [
    "ABSENT",
    "COMMON_UNITS",
    "COUNTER_NAMES",
    "DEVICE_KEYS",
    "DEVICE_LOOKUP_KEYS",
    "DEVICE_WORK_KEYS",
    "GAUGE_NAMES",
    "HOST_KEYS",
    "HOST_LOOKUP_KEYS",
    "KEY",
    "LOAD_GAUGES",
    "RESTORE_KEYS",
    "TIERS",
    "TOKEN_TWINS",
    "USAGE_HOST_KEYS",
    "KeySet",
    "PhaseEvidence",
    "PhaseSends",
    "SentBodies",
    "Tier",
    "common_tier",
    "counter_cached",
    "counter_value",
    "delta_evidence",
    "figure_on",
    "phase_evidence",
    "replay_orders",
    "restored_on",
    "tiers_present",
    "usable",
    "usable_delta",
]

if TYPE_CHECKING:
    from kvreplay.evidence.bodykeys import KEY, KeySet


def __getattr__(name: str) -> Any:
    """``KEY`` and ``KeySet``, imported on first use.

    ``evidence.bodykeys`` imports numpy, which commands that never replay-check a plan
    (``import``, ``run`` before its first request) must not pay for (issue 35's start-up;
    the import memory limits of tests/hostile).
    """
    if name in ("KEY", "KeySet"):
        from kvreplay.evidence import bodykeys

        return getattr(bodykeys, name)
    raise AttributeError(f"module 'kvreplay.evidence' has no attribute {name!r}")
