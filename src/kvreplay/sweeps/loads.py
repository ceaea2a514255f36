"""What a sweep is asked to do: its loads, arrival process, SLOs and stop limits, parsed once.

``--concurrency 1,2,4,8`` / ``auto``, ``--rate 1,2,4`` / ``auto``, ``--arrivals
constant|poisson[:SEED]|gamma:CV[:SEED]``, ``--slo ttft_ms<=500`` and ``--until
"ttft_ms:p99>2000"``: each parser returns a frozen value or raises ``ConfigError``
naming the flag. The plan's own arrival grammar (``plan.PhaseSpec.arrival``:
``constant``, ``poisson:SEED``, ``gamma:CV:SEED``) is what ``arrival_spec`` returns.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from kvreplay.errors import ConfigError
from kvreplay.plan import MAX_CONCURRENCY, MAX_GAMMA_CV, MAX_RATE, MIN_GAMMA_CV, MIN_RATE

__all__ = ["SLO_METRICS", "UNTIL_METRICS", "UNTIL_STATS", "Loads", "Slo", "Until", "arrival_spec", "parse_loads",
           "parse_slo", "parse_until"]

SLO_METRICS = {"ttft_ms": "ttft_ns", "tpot_ms": "tpot_ns", "e2e_ms": "e2e_ns"}
"""Per-request SLO metrics (measured ms) and the record field (ns) each is read from."""
UNTIL_METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "queue_ms", "ttft_from_intended_ms",
                 "e2e_from_intended_ms")
"""The summary.json latency blocks a ``--until`` limit may name."""
UNTIL_STATS = ("p50", "p90", "p99", "mean", "max")
"""The statistics of a summary.json latency block."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Loads:
    """The loads of a sweep.

    Attributes:
        kind: ``"concurrency"`` (closed loop, requests in flight) or ``"rate"``
            (open loop, requests/s).
        values: The loads in the order given (empty when ``auto``).
        auto: Search the knee (``sweep.knee.KneeSearch``) instead of a list.
    """

    kind: str
    values: tuple[float, ...]
    auto: bool


def parse_loads(concurrency: str | None, rate: str | None) -> Loads:
    """``--concurrency 1,2,4`` / ``auto`` or ``--rate 0.5,1,2`` / ``auto`` (exactly one of them).

    Raises:
        ConfigError: both or neither given, an empty or repeated item, a concurrency that
            is not a whole number in [1, ``plan.MAX_CONCURRENCY``], or a rate outside
            [``plan.MIN_RATE``, ``plan.MAX_RATE``] requests/s (field: the flag).
    """
    if (concurrency is None) == (rate is None):
        raise ConfigError("give --concurrency LIST|auto or --rate LIST|auto (one of them)", field="--concurrency")
    kind, text, flag = ("concurrency", concurrency, "--concurrency") if rate is None else ("rate", rate, "--rate")
    assert text is not None
    if text.strip() == "auto":
        return Loads(kind=kind, values=(), auto=True)
    items = [t.strip() for t in text.split(",")]
    if not items or any(not t for t in items):
        raise ConfigError(f"{text!r}: a comma-separated list of loads, or auto", field=flag)
    values: list[float] = []
    for t in items:
        try:
            v = int(t) if kind == "concurrency" else float(t)
        except ValueError:
            raise ConfigError(f"{t!r} is not a {'whole number' if kind == 'concurrency' else 'number'}",
                              field=flag) from None
        if kind == "concurrency" and not 1 <= v <= MAX_CONCURRENCY:
            raise ConfigError(f"concurrency {v} is outside [1, {MAX_CONCURRENCY}]", field=flag)
        if kind == "rate" and not (math.isfinite(v) and MIN_RATE <= v <= MAX_RATE):
            raise ConfigError(f"rate {t} is outside [{MIN_RATE:g}, {MAX_RATE:g}] requests/s", field=flag)
        if v in values:
            raise ConfigError(f"load {t} given twice", field=flag)
        values.append(v)
    return Loads(kind=kind, values=tuple(values), auto=False)


def arrival_spec(text: str) -> str:
    """``--arrivals`` as a plan arrival: ``constant``, ``poisson[:SEED]``, ``gamma:CV[:SEED]`` (seed 0 by default).

    Returns:
        ``constant``, ``poisson:SEED`` or ``gamma:CV:SEED`` (``plan.PhaseSpec.arrival``).

    Raises:
        ConfigError: anything else, or a CV outside [``plan.MIN_GAMMA_CV``,
            ``plan.MAX_GAMMA_CV``] (field ``--arrivals``).
    """
    t = text.strip()
    if t == "constant":
        return t
    if m := re.fullmatch(r"poisson(?::(\d+))?", t):
        return f"poisson:{m.group(1) or 0}"
    if m := re.fullmatch(r"gamma:(\d+(?:\.\d+)?)(?::(\d+))?", t):
        cv = float(m.group(1))
        if not MIN_GAMMA_CV <= cv <= MAX_GAMMA_CV:
            raise ConfigError(f"gamma's coefficient of variation {m.group(1)} is outside "
                              f"[{MIN_GAMMA_CV:g}, {MAX_GAMMA_CV:g}]", field="--arrivals")
        return f"gamma:{m.group(1)}:{m.group(2) or 0}"
    raise ConfigError(f"{text!r}: constant, poisson[:SEED] or gamma:CV[:SEED] (e.g. gamma:2)", field="--arrivals")


@dataclass(frozen=True, slots=True, kw_only=True)
class Slo:
    """One per-request service-level objective: ``metric <= limit_ms`` (measured ms).

    Attributes:
        metric: ``ttft_ms``, ``tpot_ms`` or ``e2e_ms`` (``SLO_METRICS``).
        limit_ms: The largest value that meets it (ms; ``<`` is stored as the
            limit with ``strict``).
        strict: ``<`` rather than ``<=``.
    """

    metric: str
    limit_ms: float
    strict: bool = False

    def met(self, value_ms: float) -> bool:
        """Whether ``value_ms`` (ms) meets the objective."""
        return value_ms < self.limit_ms if self.strict else value_ms <= self.limit_ms

    def to_json(self) -> dict[str, Any]:
        """``{"metric", "op", "limit_ms"}``."""
        return {"metric": self.metric, "op": "<" if self.strict else "<=", "limit_ms": self.limit_ms}

    def __str__(self) -> str:
        return f"{self.metric}{'<' if self.strict else '<='}{self.limit_ms:g}"


def parse_slo(text: str) -> Slo:
    """``ttft_ms<=500`` (or ``<``) -> ``Slo``.

    Raises:
        ConfigError: an unknown metric, another operator, or a limit that is not a
            finite number >= 0 (field ``--slo``).
    """
    m = re.fullmatch(r"\s*([a-z0-9_]+)\s*(<=|<)\s*([0-9.eE+-]+)\s*", text)
    if not m:
        raise ConfigError(f"{text!r}: METRIC<=MS, e.g. ttft_ms<=500 ({', '.join(SLO_METRICS)})", field="--slo")
    if m.group(1) not in SLO_METRICS:
        raise ConfigError(f"{text!r}: unknown metric {m.group(1)!r} (one of {', '.join(SLO_METRICS)})",
                          field="--slo")
    try:
        limit = float(m.group(3))
    except ValueError:
        raise ConfigError(f"{text!r}: {m.group(3)!r} is not a number", field="--slo") from None
    if not math.isfinite(limit) or limit < 0:
        raise ConfigError(f"{text!r}: the limit must be a finite number >= 0 (ms)", field="--slo")
    return Slo(metric=m.group(1), limit_ms=limit, strict=m.group(2) == "<")


@dataclass(frozen=True, slots=True, kw_only=True)
class Until:
    """A limit that ends a search: a point whose summary ``metric.stat`` crosses ``value``.

    Attributes:
        metric: A latency block of summary.json (``UNTIL_METRICS``) or ``slo_attainment``.
        stat: ``p50``, ``p90``, ``p99``, ``mean``, ``max`` (None for ``slo_attainment``).
        op: ``>``, ``>=``, ``<`` or ``<=``.
        value: The bound (ms, or a fraction for ``slo_attainment``).
    """

    metric: str
    stat: str | None
    op: str
    value: float

    def broken(self, observed: float | None) -> bool:
        """Whether ``observed`` crosses the bound (None, nothing measured, never does)."""
        if observed is None:
            return False
        return {">": observed > self.value, ">=": observed >= self.value,
                "<": observed < self.value, "<=": observed <= self.value}[self.op]

    def __str__(self) -> str:
        return f"{self.metric}{':' + self.stat if self.stat else ''}{self.op}{self.value:g}"


def parse_until(text: str) -> Until:
    """``ttft_ms:p99>2000`` or ``slo_attainment<0.9`` -> ``Until``.

    Raises:
        ConfigError: another shape, metric or statistic (field ``--until``).
    """
    m = re.fullmatch(r"\s*([a-z0-9_]+)(?::([a-z0-9]+))?\s*(>=|<=|>|<)\s*([0-9.eE+-]+)\s*", text)
    if not m:
        raise ConfigError(f"{text!r}: METRIC:STAT>VALUE, e.g. ttft_ms:p99>2000, or slo_attainment<0.9",
                          field="--until")
    metric, stat, op, raw = m.groups()
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{text!r}: {raw!r} is not a number", field="--until") from None
    if metric == "slo_attainment":
        if stat is not None:
            raise ConfigError(f"{text!r}: slo_attainment takes no statistic", field="--until")
    elif metric not in UNTIL_METRICS or stat not in UNTIL_STATS:
        raise ConfigError(f"{text!r}: METRIC is one of {', '.join(UNTIL_METRICS)} or slo_attainment, "
                          f"STAT one of {', '.join(UNTIL_STATS)}", field="--until")
    return Until(metric=metric, stat=stat, op=op, value=value)
