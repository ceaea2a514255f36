"""A per-request counter read is complete at once only when the request's own usage has landed (issue 31 item 3)."""

from __future__ import annotations

import asyncio

from kvreplay.runner.backend import Snapshot
from kvreplay.runner.counters import expected_after, settled_snapshot


def snap(prompt: float | None, hits: float | None = None, running: float | None = 0.0, *,
         started: float | None = 1.0, invalid: dict | None = None) -> Snapshot:
    common = {k: v for k, v in (("prompt_tokens", prompt), ("hit_tokens", hits), ("running", running))
              if v is not None}
    return Snapshot(taken_ns=0, raw={}, common=common, started=started, invalid=invalid or {})


def test_complete_when_prompt_and_hits_moved_by_the_usage_and_nothing_runs() -> None:
    done = expected_after(snap(1000, 200), prompt_tokens=300, cached_tokens=128)
    assert done is not None
    assert done(snap(1300, 328)) is True
    assert done(snap(1299, 328)) is False  # prompt tokens not all counted yet
    assert done(snap(1300, 200)) is False  # hits not counted yet
    assert done(snap(1300, 328, running=1)) is False  # still running
    assert done(snap(1300, 328, started=2.0)) is False  # restarted: settle as before
    assert done(snap(1300, 328, invalid={"hit_tokens": "NaN"})) is False


def test_hits_unchecked_without_usage_cached_tokens_or_counter() -> None:
    done = expected_after(snap(1000, 200), prompt_tokens=300, cached_tokens=None)
    assert done is not None and done(snap(1300, 999)) is True
    done = expected_after(snap(1000), prompt_tokens=300, cached_tokens=128)
    assert done is not None and done(snap(1300)) is True


def test_no_test_without_a_read_before_usage_or_prompt_counter() -> None:
    assert expected_after(None, 300, 0) is None
    assert expected_after(snap(1000), None, 0) is None
    assert expected_after(snap(None, 5), 300, 0) is None


class Reads:
    def __init__(self, *snaps: Snapshot) -> None:
        self.snaps, self.n = list(snaps), 0

    async def snapshot(self) -> Snapshot:
        self.n += 1
        return self.snaps.pop(0)


def test_settled_snapshot_stops_at_a_complete_first_read_and_else_settles() -> None:
    done = expected_after(snap(1000, 0), prompt_tokens=10, cached_tokens=0)
    r = Reads(snap(1010, 0), snap(1010, 0))
    got = asyncio.run(settled_snapshot(r, complete=done))  # type: ignore[arg-type]
    assert (r.n, got.common["prompt_tokens"]) == (1, 1010)
    r = Reads(snap(1005, 0), snap(1010, 0), snap(1010, 0))  # first read too early: reads until two agree
    got = asyncio.run(settled_snapshot(r, complete=done, interval_s=0))  # type: ignore[arg-type]
    assert (r.n, got.common["prompt_tokens"]) == (3, 1010)
