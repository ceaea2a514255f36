"""Counter-ratio metrics for ``kvreplay ab`` / ``compare``: ``ratio:NUM/DEN``.

A ratio metric is the quotient of two figures of one phase of ``summary.json``:

- a **common counter name** (``evidence.vocab.COUNTER_NAMES``: ``hit_tokens``,
  ``query_tokens``, ``prompt_tokens``, ``computed_tokens``, ``hits``,
  ``lookups``, ``host_fetched_tokens``...), read from the phase's
  ``counter_delta`` (the counters' increase over the phase), or
- a **usage total**: ``tokens.prompt``, ``tokens.cached``, ``tokens.completion``
  (the sums of the responses' ``usage`` over the phase's ``ok`` requests).

``ratio:hit_tokens/query_tokens`` is the share of looked-up prompt tokens the
server served from its prefix cache (its counters' view);
``ratio:tokens.cached/tokens.prompt`` is the same share as the responses'
``usage.prompt_tokens_details.cached_tokens`` tell it. The value is
``NUM / DEN``; it is missing (``n/a``) when either figure is absent (no counters,
a counter the server does not report, a restart inside the phase) or ``DEN`` is 0.

Like every metric it is compared as the paired ratio candidate / baseline, and a
threshold is a relative change: ``--primary ratio:hit_tokens/query_tokens:+5%``
means the candidate's hit share is at least 5% *higher than the baseline's*
(0.60 -> 0.63 or more), not 5 percentage points. A baseline value of 0 gives no
ratio (``n/a``) for that pair.
"""

from __future__ import annotations

import re
from typing import Any

from kvreplay.errors import ConfigError
from kvreplay.evidence.engine import counter_value, usable_delta
from kvreplay.evidence.vocab import COUNTER_NAMES

__all__ = ["RATIO_PREFIX", "USAGE_FIELDS", "check_ratio_metric", "missing_counter", "ratio_value"]

RATIO_PREFIX = "ratio:"
USAGE_FIELDS = ("tokens.prompt", "tokens.cached", "tokens.completion")
"""Usage totals a ratio may name (keys of a summary phase's ``tokens``)."""

_RATIO_RE = re.compile(r"^ratio:([a-z_.]+)/([a-z_.]+)$")


def _operand(name: str, text: str, field: str) -> str:
    if name in COUNTER_NAMES or name in USAGE_FIELDS:
        return name
    raise ConfigError(
        f"{text!r}: {name!r} is neither a common counter ({', '.join(COUNTER_NAMES)}) "
        f"nor a usage total ({', '.join(USAGE_FIELDS)})",
        field=field,
    )


def check_ratio_metric(metric: str, *, field: str = "--primary") -> tuple[str, str]:
    """Validate ``ratio:NUM/DEN`` and return ``(NUM, DEN)``.

    Raises:
        ConfigError: not of that form, an unknown operand, or NUM == DEN.
    """
    m = _RATIO_RE.match(metric)
    if not m:
        raise ConfigError(f"{metric!r}: a ratio metric is ratio:NUM/DEN, e.g. ratio:hit_tokens/query_tokens",
                          field=field)
    num, den = _operand(m.group(1), metric, field), _operand(m.group(2), metric, field)
    if num == den:
        raise ConfigError(f"{metric!r}: numerator and denominator are the same", field=field)
    return num, den


def _figure(phase: dict[str, Any], name: str) -> float | None:
    if name not in USAGE_FIELDS:
        # absent is not zero; a restart inside the phase voids its delta (evidence.engine)
        return counter_value(phase.get("counter_delta"), name)
    v = (phase.get("tokens") or {}).get(name.split(".", 1)[1])
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def ratio_value(phase: dict[str, Any], metric: str) -> float | None:
    """The value of ``ratio:NUM/DEN`` in one phase of summary.json; None when missing or DEN is 0."""
    num, den = check_ratio_metric(metric)
    a, b = _figure(phase, num), _figure(phase, den)
    if a is None or b is None or b == 0:
        return None
    return a / b


def missing_counter(phase: dict[str, Any], metric: str, backend: str | None) -> str | None:
    """Why ``ratio:NUM/DEN`` has no value in ``phase``: a counter the backend lacks.

    Args:
        phase: One phase of summary.json (its ``counter_delta`` lists the
            counters the backend read over the phase).
        metric: ``ratio:NUM/DEN``.
        backend: The backend's name (``identity.before.backend`` or
            ``plan.json`` ``run.backend``); None = unknown.

    Returns:
        ``"query_tokens: no such counter for backend halogen (have: lookups,
        hits, ...)"`` (the common counters it has, in ``COUNTER_NAMES`` order),
        ``"hits: no counters were read (backend none)"``, or None when every
        counter operand is there (or the delta is void by a restart).
    """
    delta = phase.get("counter_delta")
    if isinstance(delta, dict) and usable_delta(delta) is None:
        return None
    have = [c for c in COUNTER_NAMES if isinstance(delta, dict) and delta.get(c) is not None]
    for name in check_ratio_metric(metric):
        if name in USAGE_FIELDS or name in have:
            continue
        who = backend or "unknown"
        if not have:
            return f"{name}: no counters were read (backend {who})"
        return f"{name}: no such counter for backend {who} (have: {', '.join(have)})"
    return None
