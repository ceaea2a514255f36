"""Counter reads the runner makes around requests and phases (generic over ``Backend``).

Counters move at different moments (SERVERS.md: vLLM prefix counters at
admission, prompt counters at the first token, request histograms at finish),
so a per-request "after" snapshot is taken only once two consecutive reads agree.
None of these functions sends a generation request.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from kvreplay.clock import now_ns
from kvreplay.evidence.vocab import COUNTER_NAMES, LOAD_GAUGES
from kvreplay.runner.backend import Backend, Snapshot

__all__ = ["DrainResult", "check_fresh", "checked_snapshot", "expected_after", "settled_snapshot", "wait_drained"]


def _raw_text(v: float) -> str:
    return "NaN" if math.isnan(v) else ("+Inf" if v > 0 else "-Inf")


def _texts_for_nonfinite(raw: dict[str, Any], path: str, bad: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in raw.items():
        if isinstance(v, dict):
            out[k] = _texts_for_nonfinite(v, f"{path}{k}/", bad)
        elif isinstance(v, float) and not math.isfinite(v):
            bad.append(f"{path}{k}")
            out[k] = _raw_text(v)
        else:
            out[k] = v
    return out


def checked_snapshot(snap: Snapshot, notice: Callable[[str], None], seen: set[str]) -> Snapshot:
    """``snap`` with every value that cannot be differenced marked, never dropped (issue 30 item 2).

    A raw NaN or infinity is replaced by its exposition text (``NaN``, ``+Inf``,
    ``-Inf``), so counters.jsonl keeps it (big integers are kept exactly by the
    output sink); a common value that is not finite moves to ``invalid``. Each
    series or name is noticed once (``seen`` is updated), naming the series and
    the reason.

    Args:
        snap: A counter read.
        notice: Called with one line per newly seen invalid series.
        seen: Names already noticed.
    """
    bad_raw: list[str] = []
    raw = _texts_for_nonfinite(snap.raw, "", bad_raw)
    invalid = dict(snap.invalid)
    common = {}
    for k, v in snap.common.items():
        if isinstance(v, float) and not math.isfinite(v):
            invalid.setdefault(k, f"{k}: not a finite number")
        else:
            common[k] = v
    for k in bad_raw:
        if k not in seen:
            seen.add(k)
            notice(f"counter {k[:200]} is not a finite number (NaN or infinite): left out of deltas, "
                   "its text kept in counters.jsonl")
    for k, why in sorted(invalid.items()):
        if k not in seen:
            seen.add(k)
            notice(f"counter {k} is invalid for deltas ({why[:240]}): its deltas are null, "
                   "its raw text kept in counters.jsonl")
    if not bad_raw and invalid == snap.invalid and len(common) == len(snap.common):
        return snap
    return replace(snap, raw=raw, common=common, invalid=invalid)


def _same_counters(a: Snapshot, b: Snapshot) -> bool:
    return all(a.common.get(n) == b.common.get(n) for n in COUNTER_NAMES) and all(
        a.common.get(g) == b.common.get(g) for g in LOAD_GAUGES
    )


async def settled_snapshot(
    backend: Backend, *, prev: Snapshot | None = None, interval_s: float = 0.02, timeout_s: float = 2.0,
    complete: Callable[[Snapshot], bool] | None = None,
) -> Snapshot:
    """Read counters until two consecutive reads agree, bounded by ``timeout_s``.

    Args:
        backend: The adapter.
        prev: A read taken just before, used as the first of the pair.
        interval_s: Pause between reads (s).
        timeout_s: Give up waiting after this long (s) and return the last read.
        complete: A test of the first read: True when it already shows everything
            expected to move (``expected_after``: the request's own usage counted and
            the load gauges at zero), so it is returned without a second read.

    Returns:
        The last snapshot read.

    Raises:
        BackendError: from the adapter.
    """
    deadline = now_ns() + int(timeout_s * 1e9)
    first = await backend.snapshot()
    if complete is not None and complete(first):
        return first
    cur: Snapshot | None
    if prev is None:
        prev, cur = first, None
    else:
        cur = first
    while True:
        if cur is not None and _same_counters(prev, cur):
            return cur
        if now_ns() >= deadline:
            return cur if cur is not None else prev
        if cur is not None:
            prev = cur
            await asyncio.sleep(interval_s)
        cur = await backend.snapshot()


def expected_after(before: Snapshot | None, prompt_tokens: int | None,
                   cached_tokens: int | None) -> Callable[[Snapshot], bool] | None:
    """The test ``settled_snapshot(complete=...)`` applies to the read after one request at C1.

    A read is complete when, from ``before``, the server's ``prompt_tokens`` counter
    moved by exactly the request's usage ``prompt_tokens``, its ``hit_tokens`` (where
    read, and the usage gives ``cached_tokens``) by exactly ``cached_tokens``, and every
    load gauge read (``running``, ``waiting``, ...) is zero: the request's accounting has
    landed and nothing else is in flight, so a second read would only repeat it (vLLM
    counts prompt and prefix-cache tokens in the same stats update; its
    ``vllm:prompt_tokens_total`` and ``vllm:prefix_cache_hits_total``).

    Args:
        before: The read before the request (the last per-request read).
        prompt_tokens: The request's usage ``prompt_tokens``.
        cached_tokens: The request's usage ``cached_tokens`` (None when not reported).

    Returns:
        The test, or None when it cannot be decided (no earlier read, no usage, or a
        server without a ``prompt_tokens`` counter): then reads must agree twice.
    """
    if before is None or prompt_tokens is None or before.common.get("prompt_tokens") is None:
        return None
    p0 = before.common["prompt_tokens"]
    h0 = before.common.get("hit_tokens")

    def complete(snap: Snapshot) -> bool:
        c = snap.common
        if snap.invalid or snap.started != before.started or c.get("prompt_tokens") != p0 + prompt_tokens:
            return False
        if h0 is not None and cached_tokens is not None and c.get("hit_tokens") != h0 + cached_tokens:
            return False
        return all(c.get(g) in (None, 0) for g in LOAD_GAUGES)

    return complete


@dataclass(frozen=True, slots=True)
class DrainResult:
    """Outcome of a drain check.

    Attributes:
        passed: Load gauges zero and counters unchanged across two reads.
        waited_s: Time spent (s).
        snapshot: The last read.
        reason: Why it did not pass (None when it did).
    """

    passed: bool
    waited_s: float
    snapshot: Snapshot
    reason: str | None = None

    def to_json(self) -> dict:
        """JSON form for summaries."""
        return {"passed": self.passed, "waited_s": round(self.waited_s, 3), "reason": self.reason}


async def wait_drained(backend: Backend, *, interval_s: float = 0.2, timeout_s: float = 10.0,
                       on_read: Callable[[Snapshot], None] | None = None) -> DrainResult:
    """Wait until the server is drained: ``backend.drained(a, b)`` for two reads ``interval_s`` apart.

    Args:
        backend: The counters adapter.
        interval_s: Time between two reads (s).
        timeout_s: Give up after this long (s).
        on_read: Called with every read (the runner logs them in counters.jsonl, ``at: "drain"``).

    Returns:
        A ``DrainResult``; ``passed`` False after ``timeout_s`` (s) with the gauges
        or counters that kept it busy in ``reason``.
    """
    t0 = now_ns()
    deadline = t0 + int(timeout_s * 1e9)
    a = await backend.snapshot()
    if on_read is not None:
        on_read(a)
    while True:
        await asyncio.sleep(interval_s)
        b = await backend.snapshot()
        if on_read is not None:
            on_read(b)
        if backend.drained(a, b):
            return DrainResult(True, (now_ns() - t0) / 1e9, b)
        if now_ns() >= deadline:
            busy = [g for g in LOAD_GAUGES if b.common.get(g, 0) != 0]
            moving = [n for n in COUNTER_NAMES if a.common.get(n) != b.common.get(n)]
            reason = "busy: " + ", ".join(busy) if busy else "counters moving: " + ", ".join(moving)
            return DrainResult(False, (now_ns() - t0) / 1e9, b, reason)
        a = b


def check_fresh(snap: Snapshot) -> tuple[bool, str | None]:
    """A fresh server: every counter zero and the cache empty (``entries``/``bytes`` zero).

    Returns:
        ``(True, None)`` or ``(False, reason)``.
    """
    nonzero = [n for n in COUNTER_NAMES if snap.common.get(n, 0) != 0]
    nonzero += [g for g in ("entries", "bytes", "host_bytes") if snap.common.get(g, 0) != 0]
    if nonzero:
        return False, "not fresh: " + ", ".join(f"{n}={snap.common[n]}" for n in nonzero)
    return True, None
