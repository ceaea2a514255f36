"""Sessions offline: the order N conversations in flight send their turns in, and reuse by turn.

A workload with a sessions side file (``workload.sessions``) is simulated in one of two
orders:

- **workload order** (default): the bodies in file order, as ``kvreplay simulate`` always did;
- **N conversations in flight** (``--sessions N``): a closed loop of ``N`` sessions, taken in
  the side file's session order; a session's turn ``k + 1`` is sent ``service_time_s +
  think time`` after its turn ``k`` was sent (the think time from the side file, or
  ``--think-time`` for every later turn), and when a session ends the next one starts at
  that moment, its first turn ``service_time_s`` after the last turn of the one it
  replaces. Requests are ordered by send time, ties first come first served (in the order
  they became due). With equal think times and ``service_time_s = 0`` this is round robin:
  between two turns of a conversation each of the ``N - 1`` others sends one turn. The
  cache models have no clock, so only this order matters: the smallest capacity that keeps
  the hit ratio near its best in this order is the number of entries (or blocks) needed to
  keep ``N`` conversations warm at that think time.

Reuse by turn (``by_turn``) sums, per turn index, the requests, their prompt tokens and the
cached tokens the simulator's own cache class credits them (``reference.brute_entries`` /
``brute_radix`` run at one capacity).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from kvreplay.workload.sessions import Sessions

__all__ = ["by_turn", "session_order"]


def session_order(sessions: Sessions, concurrency: int, *, think_time_s: float | None = None,
                  service_time_s: float = 0.0) -> list[int]:
    """Body indices in the order ``concurrency`` conversations in flight send them (module docstring).

    Args:
        sessions: The workload's sessions.
        concurrency: Conversations in flight (>= 1).
        think_time_s: Think time before every later turn (s); None = each turn's own.
        service_time_s: Time from a turn's send to its last byte (s), the same for every turn.

    Returns:
        Every body index once.

    Raises:
        ValueError: ``concurrency`` < 1 or a negative time.
    """
    if concurrency < 1 or service_time_s < 0 or (think_time_s is not None and think_time_s < 0):
        raise ValueError("concurrency must be >= 1 and times >= 0")
    order: list[int] = []
    waiting = iter(enumerate(sessions.order))  # (rank, session id)
    heap: list[tuple[float, int, int, str]] = []  # (send time, when it became due, turn, session)
    due = iter(range(1 << 62))

    def start(t: float) -> None:
        nxt = next(waiting, None)
        if nxt is not None:
            heapq.heappush(heap, (t, next(due), 0, nxt[1]))

    for _ in range(concurrency):
        start(0.0)
    while heap:
        t, _, k, sid = heapq.heappop(heap)
        bodies = sessions.bodies[sid]
        order.append(bodies[k])
        if k + 1 < len(bodies):
            think = sessions.turns[bodies[k + 1]].think_time_s if think_time_s is None else think_time_s
            heapq.heappush(heap, (t + service_time_s + think, next(due), k + 1, sid))
        else:
            start(t + service_time_s)
    return order


def by_turn(turns: Sequence[int], prompt_tokens: Sequence[int], cached_tokens: Sequence[int]) -> list[dict]:
    """Reuse by turn index: one row per turn index present, in order.

    Args:
        turns: Turn index of each request (0-based).
        prompt_tokens: Prompt tokens of each request.
        cached_tokens: Cached tokens credited to each request.

    Returns:
        Rows ``{"turn", "requests", "prompt_tokens", "cached_tokens", "hit_requests",
        "hit_ratio_tokens"}`` (``hit_ratio_tokens`` = cached / prompt tokens, 0 when none).
    """
    acc: dict[int, list[int]] = {}
    for k, n, c in zip(turns, prompt_tokens, cached_tokens, strict=True):
        a = acc.setdefault(k, [0, 0, 0, 0])
        a[0] += 1
        a[1] += n
        a[2] += c
        a[3] += c > 0
    return [{"turn": k, "requests": a[0], "prompt_tokens": a[1], "cached_tokens": a[2], "hit_requests": a[3],
             "hit_ratio_tokens": a[2] / a[1] if a[1] else 0.0} for k, a in sorted(acc.items())]
