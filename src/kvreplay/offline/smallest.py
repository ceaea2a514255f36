"""The smallest capacity reaching a target hit ratio: searched exactly, then checked.

``simulate`` answers "how many entries (blocks) keep the prefix": the smallest
capacity whose hits reach ``share`` of the best. Two cases (issue 29):

- **A stack algorithm** (the radix block model and the entries model with
  ``recency="offer"``; see ``mrc`` and ``entries``): the one-pass curve holds
  the hits at *every* capacity, so the answer is read off it exactly
  (``Curve.smallest_capacity``).
- **Not a stack algorithm** (the entries model with ``recency="use"``, the
  simulator's default, with or without truncation at the entry cap; the radix
  model with a host tier): the hits are known only where the simulator's class
  ran. ``search`` then runs it at every integer strictly between the largest
  sampled capacity that misses the target and the smallest sampled one that
  reaches it, and answers the smallest that reaches. (Such a curve need not be
  monotone, so a capacity below the largest sampled miss could in principle
  reach the target; the default sample is dense up to 11, which is where the
  workloads we know of turn.)

Either way ``check`` re-simulates at the answer and at the answer minus one and
records both: at the answer the target is reached, one below it is not.

The target, in the metric's hit counts (tokens or requests), is reached when
``hits >= share * best`` (with a relative slack of 1e-9 for the float product).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

__all__ = ["Point3", "check", "reached", "search"]

Point3 = tuple[int, int, int]
"""``(capacity, hit_requests, hit_tokens)``."""


def _hits(point: Point3, metric: str) -> int:
    return point[2] if metric == "tokens" else point[1]


def reached(hits: int, best: int, share: float) -> bool:
    """Whether ``hits`` reach ``share`` of ``best`` (hit counts of one metric).

    Args:
        hits: Hits at a capacity (tokens or requests).
        best: The best hits (same metric).
        share: In (0, 1].
    """
    return hits >= share * best - 1e-9 * best


def search(
    points: Sequence[Point3],
    run: Callable[[list[int]], list[Point3]],
    *,
    share: float,
    metric: str,
) -> tuple[Point3 | None, int, list[Point3]]:
    """Smallest capacity reaching the target, filling in between sample points.

    Args:
        points: Sampled ``(capacity, hit_requests, hit_tokens)``, any order;
            the best hits are taken among them.
        run: Simulates a list of capacities, returning one point each in order.
        share: Target share of the best, in (0, 1].
        metric: ``"tokens"`` or ``"requests"``.

    Returns:
        ``(answer, best, filled)``: the answer's point (None for no points),
        the best hits among the samples, and the points simulated in between.
    """
    pts = sorted(points)
    if not pts:
        return None, 0, []
    best = max(_hits(p, metric) for p in pts)
    first = next(p for p in pts if reached(_hits(p, metric), best, share))
    below = [p[0] for p in pts if p[0] < first[0]]
    lo = max(below) if below else 0
    filled = run(list(range(lo + 1, first[0]))) if first[0] - lo > 1 else []
    answer = next((p for p in filled if reached(_hits(p, metric), best, share)), first)
    return answer, best, filled


def check(
    answer: int,
    run: Callable[[list[int]], list[Point3]],
    *,
    best: int,
    share: float,
    metric: str,
    method: str,
) -> dict:
    """Re-simulate at ``answer`` and ``answer - 1`` and record whether the boundary holds.

    Args:
        answer: The capacity answered (units, >= 1).
        run: Simulates a list of capacities (>= 1), one point each in order.
        best: The best hits (the metric's count).
        share: Target share.
        metric: ``"tokens"`` or ``"requests"``.
        method: How ``run`` simulates (said in the record).

    Returns:
        ``{"method", "target_hits", "at": {...}, "below": {...}, "holds"}``, each
        of ``at``/``below`` with ``capacity``, ``hit_requests``, ``hit_tokens``
        and ``reached``; capacity 0 holds nothing (0 hits, not simulated).
        ``holds`` is True when the answer reaches the target and one below does not.
    """
    caps = [c for c in (answer, answer - 1) if c >= 1]
    got = dict(zip(caps, run(caps), strict=True))
    got.setdefault(0, (0, 0, 0))

    def side(c: int) -> dict:
        p = got[c]
        return {
            "capacity": c,
            "hit_requests": p[1],
            "hit_tokens": p[2],
            "reached": reached(_hits(p, metric), best, share),
        }

    at, below = side(answer), side(answer - 1)
    return {
        "method": method,
        "target_hits": share * best,
        "at": at,
        "below": below,
        "holds": at["reached"] and not below["reached"],
    }
