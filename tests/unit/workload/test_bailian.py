"""``kvreplay import bailian``: sessions from parent_chat_id chains ordered by turn; bodies from 16-token blocks."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from kvreplay.cli import main
from kvreplay.errors import WorkloadError
from kvreplay.workload.import_bailian import import_bailian
from kvreplay.workload.importers import block_text
from kvreplay.workload.sessions import Turn, load_sessions

ROWS = [  # chat_id, parent_chat_id, timestamp s, input_length, output_length, turn, hash_ids
    (10, -1, 1.0, 20, 3, 1, [1, 2]),
    (11, -1, 1.5, 5, 2, 1, [7]),
    (12, 10, 4.25, 40, 3, 2, [1, 2, 3]),
    (14, 13, 9.0, 10, 1, 4, [9]),        # its parent comes later in the file
    (13, 12, 6.0, 50, 1, 3, [1, 2, 3, 4]),
    (20, 99, 2.0, 16, 1, 2, [5]),        # parent absent from the file: a session of its own
]


def _trace(tmp_path: Path, rows: list = ROWS, extra: bytes = b"") -> Path:
    p = tmp_path / "qwen_trace.jsonl"
    p.write_bytes(b"".join(orjson.dumps({"chat_id": c, "parent_chat_id": par, "timestamp": ts, "input_length": n,
                                         "output_length": o, "type": "text", "turn": t, "hash_ids": ids}) + b"\n"
                           for c, par, ts, n, o, t, ids in rows) + extra)
    return p


def _words(h: int, n: int) -> str:
    return "".join(" " + w for w in block_text(h, 16).split()[:n])


def test_sessions_and_exact_bodies(tmp_path: Path) -> None:
    res = import_bailian(_trace(tmp_path), tmp_path / "w")
    assert (res.sessions, res.bodies) == (3, 6)
    s = load_sessions(res.workload, 6)
    assert s is not None
    assert s.turns == (Turn(0, "10", 0, 0.0), Turn(1, "11", 0, 0.0), Turn(2, "10", 1, 3.25), Turn(3, "10", 3, 3.0),
                       Turn(4, "10", 2, 1.75), Turn(5, "20", 0, 0.0))
    assert s.order == ("10", "11", "20")
    lines = res.workload.read_bytes().splitlines()
    tail = b',"stream":true,"stream_options":{"include_usage":true}}'
    assert lines[1] == b'{"model":"kvreplay-sim","prompt":"' + _words(7, 5).encode() + b'","max_tokens":2' + tail
    assert lines[2] == (b'{"model":"kvreplay-sim","prompt":"' + (block_text(1, 16) + block_text(2, 16)
                        + _words(3, 8)).encode() + b'","max_tokens":3' + tail)


def test_cli_chat_bodies_and_block_tokens(tmp_path: Path) -> None:
    out = tmp_path / "w.jsonl"
    assert main(["import", "bailian", str(_trace(tmp_path)), "--out", str(out), "--chat", "--model", "q",
                 "--ignore-eos", "--limit", "2"]) == 0
    first = orjson.loads(out.read_bytes().splitlines()[0])
    assert first == {"model": "q", "messages": [{"role": "user", "content": block_text(1, 16) + _words(2, 4)}],
                     "max_tokens": 3, "stream": True, "stream_options": {"include_usage": True}, "ignore_eos": True}
    s = load_sessions(out, 2)
    assert s is not None and s.order == ("10", "11")
    # 4-token blocks: row 10 (20 tokens in 2 blocks) no longer fits
    with pytest.raises(WorkloadError, match="cannot hold input_length 20") as ei:
        import_bailian(_trace(tmp_path), tmp_path / "v", block_tokens=4)
    assert (ei.value.line, ei.value.field) == (1, "hash_ids")


@pytest.mark.parametrize(("rows", "extra", "line", "field", "msg"), [
    ([], b'{"parent_chat_id": -1}\n', 1, "chat_id", "not an integer"),
    ([(1, -1, 0.0, 5, 1, 1, [1])], b'{"chat_id": 2, "timestamp": "x", "input_length": 5, "output_length": 1, '
     b'"hash_ids": [1]}\n', 2, "timestamp", "number of seconds"),
    ([(1, -1, 0.0, 5, 1, 0, [1])], b"", 1, "turn", "integer >= 1"),
    ([(1, -1, 0.0, 5, 1, 1, [1]), (1, -1, 1.0, 5, 1, 1, [2])], b"", 2, "chat_id", "used twice"),
    ([(1, 2, 0.0, 5, 1, 1, [1]), (2, 1, 1.0, 5, 1, 2, [2])], b"", 1, "parent_chat_id", "loops"),
    ([(1, -1, 0.0, 5, 1, 1, [])], b"", 1, "hash_ids", "non-empty list"),
    ([(1, -1, 0.0, 5, 1, 1, [1])], b"{nope\n", 2, None, "not JSON"),
])
def test_malformed_lines_name_file_line_and_field(tmp_path: Path, rows: list, extra: bytes, line: int,
                                                  field: str | None, msg: str) -> None:
    src = _trace(tmp_path, rows, extra)
    with pytest.raises(WorkloadError, match=msg) as ei:
        import_bailian(src, tmp_path / "w")
    assert (ei.value.path, ei.value.line, ei.value.field) == (src, line, field)
    assert sorted(x.name for x in tmp_path.iterdir()) == [src.name]
