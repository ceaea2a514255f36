"""IdentityGate (issue 30 item 3): every record is written at once; after a drift, those sent past the
last identity read that matched are marked ``identity_unverified`` (later ones as written, earlier
ones by one atomic rewrite of records.jsonl when the gate closes)."""

from __future__ import annotations

import orjson

from kvreplay.rundir.records import RecordWriter, mark_records, read_records
from kvreplay.runner.identity import IdentityGate


def rec(pos: int, t: int | None, phase: str = "a") -> dict:
    return {"phase": phase, "position": pos, "t_sent_ns": t, "sent": t is not None}


def test_without_a_baseline_records_pass_straight_through(tmp_path):
    g = IdentityGate(RecordWriter(tmp_path / "records.jsonl"))
    g.write(rec(0, 10))
    assert read_records(tmp_path / "records.jsonl") == [rec(0, 10)] and g.count == 1  # on disk at once
    g.close()


def test_written_at_once_and_marked_after_a_drift(tmp_path):
    path = tmp_path / "records.jsonl"
    g = IdentityGate(RecordWriter(path))
    g.baseline(100)
    g.write(rec(0, 50))    # sent before the baseline read
    g.write(rec(1, 150))
    g.write(rec(2, 250))
    g.write(rec(3, None))  # not sent: never checked
    assert [r["position"] for r in read_records(path)] == [0, 1, 2, 3]  # nothing held back
    g.matched(200)         # vouches for position 1 (sent at 150) only
    g.write(rec(4, 300))
    g.drifted(400)         # 2 and 4 were sent after the last match (200): to be marked
    g.write(rec(5, 350))   # written after the drift, sent after the last match: marked at once
    g.write(rec(6, 150))   # sent before the last match: not marked
    assert read_records(path)[-2].get("identity_unverified") is True
    assert g.unverified == {"a": 3} and g.count == 7
    g.matched(500)         # after a drift nothing is vouched for again
    g.write(rec(7, 600))
    assert g.unverified == {"a": 4}
    g.close()
    assert [(r["position"], r.get("identity_unverified", False)) for r in read_records(path)] == [
        (0, False), (1, False), (2, True), (3, False), (4, True), (5, True), (6, False), (7, True)]


def test_a_failed_read_leaves_the_records_before_it_unmarked(tmp_path):
    path = tmp_path / "records.jsonl"
    g = IdentityGate(RecordWriter(path))
    g.baseline(0)
    g.write(rec(0, 10))
    g.write(rec(1, 30))
    g.unread(20)           # 0 was sent before the failed read: no longer in question
    g.drifted(40)          # 1 was sent after the last match (0) and after the failed read
    g.close()
    assert [(r["position"], r.get("identity_unverified", False)) for r in read_records(path)] == [
        (0, False), (1, True)]
    assert g.unverified == {"a": 1}


def test_mark_records_keeps_every_other_line_byte_for_byte(tmp_path):
    path = tmp_path / "records.jsonl"
    lines = [orjson.dumps(rec(i, 100 * i)) for i in range(4)]
    path.write_bytes(b"\n".join(lines) + b'\n{"torn')
    assert mark_records(path, {("a", 2, 200)}, "identity_unverified") == 1
    out = path.read_bytes().splitlines()
    assert out[:2] == lines[:2] and out[3] == lines[3] and len(out) == 4  # the torn line is dropped
    assert orjson.loads(out[2]) == {**rec(2, 200), "identity_unverified": True}
