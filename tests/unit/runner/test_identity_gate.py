"""IdentityGate (issue 30 item 3): records wait for an identity read that vouches for them."""

from __future__ import annotations

import pytest

from kvreplay.runner.identity import IdentityGate


class ListWriter:
    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.closed = False

    @property
    def count(self) -> int:
        return len(self.rows)

    def write(self, rec: dict) -> None:
        self.rows.append(rec)

    def close(self) -> None:
        self.closed = True


def rec(pos: int, t: int | None, phase: str = "a") -> dict:
    return {"phase": phase, "position": pos, "t_sent_ns": t, "sent": t is not None}


def test_without_a_baseline_records_pass_straight_through() -> None:
    w = ListWriter()
    g = IdentityGate(w)
    g.write(rec(0, 10))
    assert w.rows == [rec(0, 10)] and g.count == 1


def test_held_until_a_read_started_after_the_send_matches_then_marked_after_drift() -> None:
    w = ListWriter()
    g = IdentityGate(w)
    g.baseline(100)
    g.write(rec(0, 50))    # sent before the baseline read: written at once
    g.write(rec(1, 150))   # held
    g.write(rec(2, 250))   # held
    g.write(rec(3, None))  # not sent, but behind held records: keeps its place
    assert [r["position"] for r in w.rows] == [0] and g.count == 4
    g.matched(200)         # vouches for position 1 only; 2 (sent at 250) blocks 3
    assert [r["position"] for r in w.rows] == [0, 1]
    g.write(rec(4, 300))
    g.drifted(400)
    g.write(rec(5, 350))   # completes after the drift, sent after the last match (200): marked
    g.write(rec(6, 150))   # sent before the last match: not marked
    assert [(r["position"], r.get("identity_unverified", False)) for r in w.rows] == [
        (0, False), (1, False), (2, True), (3, False), (4, True), (5, True), (6, False)]
    assert g.unverified == {"a": 3}
    assert g.count == 7
    g.matched(500)  # after a drift nothing is vouched for again
    g.write(rec(7, 600))
    assert w.rows[-1].get("identity_unverified") is True and g.unverified == {"a": 4}


def test_failed_read_releases_records_sent_before_it_and_close_flushes_unmarked() -> None:
    w = ListWriter()
    g = IdentityGate(w)
    g.baseline(0)
    g.write(rec(0, 10))
    g.write(rec(1, 30))
    g.unread(20)
    assert [r["position"] for r in w.rows] == [0]
    g.close()
    assert [r["position"] for r in w.rows] == [0, 1] and w.closed
    assert "identity_unverified" not in w.rows[1]


def test_an_unserialisable_record_fails_at_write_not_at_the_flush() -> None:
    g = IdentityGate(ListWriter())
    g.baseline(0)
    with pytest.raises(TypeError):
        g.write({"t_sent_ns": 5, "bad": object()})
    assert g.pending == []
