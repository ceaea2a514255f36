"""The sessions side file: exact parse, and each malformed line refused with file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvreplay.errors import WorkloadError
from kvreplay.workload.sessions import Turn, load_sessions, sessions_path, write_sessions


def _jsonl(tmp_path: Path, n: int = 3) -> Path:
    w = tmp_path / "w.jsonl"
    w.write_text("".join(f'{{"model":"m","prompt":"p{i}"}}\n' for i in range(n)))
    return w


def test_side_file_paths(tmp_path: Path) -> None:
    w = _jsonl(tmp_path)
    assert sessions_path(w) == tmp_path / "w.sessions.jsonl"
    (tmp_path / "d").mkdir()
    assert sessions_path(tmp_path / "d") == tmp_path / "d" / "sessions.jsonl"


def test_no_side_file_means_no_sessions(tmp_path: Path) -> None:
    assert load_sessions(_jsonl(tmp_path), 3) is None


def test_round_trip_orders_sessions_by_first_body(tmp_path: Path) -> None:
    w = _jsonl(tmp_path, 4)
    write_sessions(w, [Turn(3, "b", 1, 2.5), Turn(0, "b", 0), Turn(1, "a", 0), Turn(2, "a", 1, 0.25)])
    s = load_sessions(w, 4)
    assert s is not None
    assert s.order == ("b", "a")
    assert s.bodies == {"b": (0, 3), "a": (1, 2)}
    assert s.turns[3] == Turn(3, "b", 1, 2.5)
    assert len(s) == 2
    assert (tmp_path / "w.sessions.jsonl").read_bytes().splitlines()[0] == (
        b'{"body":0,"session":"b","turn":0,"think_time_s":0.0}')


@pytest.mark.parametrize(("lines", "line", "field", "text"), [
    (['{"body":0,"session":"a","turn":0}', '{"body":1,"session":"a","turn":2}', '{"body":2,"session":"c","turn":0}'],
     2, "turn", "turn 1 missing"),
    (['{"body":0,"session":"a","turn":0}', '{"body":0,"session":"b","turn":0}'], 2, "body", "listed twice"),
    (['{"body":0,"session":"a","turn":0,"think_time_s":-1}'], 1, "think_time_s", "negative"),
    (['{"body":0,"session":"a","turn":0,"think_time_s":90000}'], 1, "think_time_s", "unit error"),
    (['{"body":3,"session":"a","turn":0}'], 1, "body", "[0, 3)"),
    (['{"body":0,"turn":0}'], 1, "session", "missing"),
    (['{"body":0,"session":"a","turn":0}', 'nope'], 2, None, "not JSON"),
])
def test_malformed_lines_name_file_line_and_field(tmp_path: Path, lines: list[str], line: int, field: str | None,
                                                  text: str) -> None:
    w = _jsonl(tmp_path)
    (tmp_path / "w.sessions.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(WorkloadError) as ei:
        load_sessions(w, 3)
    assert (ei.value.line, ei.value.field) == (line, field)
    assert text in ei.value.message


def test_every_body_must_be_listed(tmp_path: Path) -> None:
    w = _jsonl(tmp_path)
    (tmp_path / "w.sessions.jsonl").write_text('{"body":1,"session":"a","turn":0}\n')
    with pytest.raises(WorkloadError, match="2 bodies have no session line \\(first: body 0\\)"):
        load_sessions(w, 3)


def test_think_time_bound_is_inclusive(tmp_path: Path) -> None:
    """A day (86,400 s) is the largest think time accepted; a millisecond more is refused."""
    w = _jsonl(tmp_path, 1)
    side = tmp_path / "w.sessions.jsonl"
    side.write_text('{"body":0,"session":"a","turn":0,"think_time_s":86400}\n')
    s = load_sessions(w, 1)
    assert s is not None and s.turns[0].think_time_s == 86400.0
    side.write_text('{"body":0,"session":"a","turn":0,"think_time_s":86400.001}\n')
    with pytest.raises(WorkloadError) as ei:
        load_sessions(w, 1)
    assert (ei.value.line, ei.value.field) == (1, "think_time_s")
