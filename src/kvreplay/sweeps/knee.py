"""The automatic search of ``--concurrency auto`` / ``--rate auto`` and the knee it names.

The search doubles the load from ``start`` until the throughput gains less than
``gain`` (5%) over the previous point, a limit breaks (``--until``, an aborted run),
or the next load would pass ``max_load``; it then bisects between the last two points
(whole numbers for a concurrency: until they are 1 apart; a rate: until they are within
``gain`` of each other, at most ``MAX_BISECTIONS`` steps). On a plateau a midpoint whose
throughput is within ``gain`` of the best measured moves the upper end down, else the
lower end up; a midpoint that breaks a limit moves the upper end down.

The knee (``knee``) is the smallest load, among the points that broke no limit, whose
throughput is within ``gain`` of the best such point's: past it more load buys (almost)
no throughput, only latency.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["DEFAULT_GAIN", "MAX_BISECTIONS", "KneeSearch", "knee"]

DEFAULT_GAIN = 0.05
"""The throughput gain below which doubling stops, and the knee's tolerance (a fraction)."""
MAX_BISECTIONS = 6
"""Most bisection steps of a rate search (a concurrency's stops at adjacent integers first)."""


@dataclass(slots=True)
class KneeSearch:
    """The next load to measure, given the points measured so far.

    Attributes:
        kind: ``"concurrency"`` (whole loads) or ``"rate"``.
        start: The first load (>= 1 for a concurrency).
        max_load: Doubling stops before passing it.
        gain: ``DEFAULT_GAIN``.
        measured: ``(load, throughput_rps, broken)`` in the order measured.
        stop_reason: Why the doubling stopped (set once it has).
    """

    kind: str
    start: float
    max_load: float
    gain: float = DEFAULT_GAIN
    measured: list[tuple[float, float, bool]] = field(default_factory=list)
    stop_reason: str | None = None
    _bracket: tuple[float, float] | None = None
    _plateau: bool = True
    _bisections: int = 0

    def record(self, load: float, throughput_rps: float | None, broken: bool) -> None:
        """Add a measured point (``throughput_rps`` None counts as 0; ``broken``: a limit broke there)."""
        thr = throughput_rps or 0.0
        self.measured.append((load, thr, broken))
        if self._bracket is None and self.stop_reason is None:
            prev = [m for m in self.measured[:-1] if not m[2]]
            if broken:
                self.stop_reason = f"a limit broke at {load:g}"
                self._plateau = False
                self._bracket = (prev[-1][0], load) if prev else None
            elif prev and thr < prev[-1][1] * (1 + self.gain):
                self.stop_reason = (f"throughput gained {_pct(thr, prev[-1][1])} from {prev[-1][0]:g} to {load:g} "
                                    f"(< {self.gain:.0%})")
                self._bracket = (prev[-1][0], load)
            elif load * 2 > self.max_load:
                self.stop_reason = f"the next load would pass the largest allowed ({self.max_load:g})"
            return
        if self._bracket is not None:
            lo, hi = self._bracket
            best = max((m[1] for m in self.measured if not m[2]), default=0.0)
            self._bisections += 1
            if broken or (self._plateau and thr >= best * (1 - self.gain)):
                self._bracket = (lo, load)
            else:
                self._bracket = (load, hi)

    def next_load(self) -> float | None:
        """The load to measure next, or None when the search is over."""
        if not self.measured:
            return self.start
        if self.stop_reason is None:
            return self.measured[-1][0] * 2
        if self._bracket is None:
            return None
        lo, hi = self._bracket
        if self.kind == "concurrency":
            if hi - lo <= 1:
                return None
            mid: float = int((lo + hi) // 2)
        else:
            if hi <= lo * (1 + self.gain) or self._bisections >= MAX_BISECTIONS:
                return None
            mid = round((lo + hi) / 2, 6)
        done = {m[0] for m in self.measured}
        return None if mid in done else mid


def knee(points: Sequence[dict[str, Any]], kind: str, gain: float = DEFAULT_GAIN) -> dict[str, Any] | None:
    """The knee of measured points (module docstring).

    Args:
        points: sweep.json points: each with ``kind`` (the load), ``throughput_rps``
            and ``limit_broken`` (None when no limit broke).
        kind: ``"concurrency"`` or ``"rate"``.
        gain: ``DEFAULT_GAIN``.

    Returns:
        ``{kind: load, "throughput_rps", "reason"}``, or None when no point kept its limits.
    """
    good = [p for p in points if not p.get("limit_broken") and isinstance(p.get("throughput_rps"), (int, float))]
    if not good:
        return None
    best = max(good, key=lambda p: p["throughput_rps"])
    floor = best["throughput_rps"] * (1 - gain)
    k = min((p for p in good if p["throughput_rps"] >= floor), key=lambda p: p[kind])
    return {kind: k[kind], "throughput_rps": k["throughput_rps"],
            "reason": (f"the smallest {kind} whose throughput ({k['throughput_rps']:.4g} requests/s) is within "
                       f"{gain:.0%} of the best measured ({best['throughput_rps']:.4g} at {best[kind]:g}), "
                       f"among {len(good)} point(s) that kept every limit")}


def _pct(new: float, old: float) -> str:
    return f"{(new / old - 1):+.1%}" if old > 0 else "n/a"
