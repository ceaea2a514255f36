"""rundir.merge_records: the workers' records in (phase, position) order, bytes as written.

The merge reads (phase, position) from a record's first bytes when it has the
runner's layout (``{"phase":..,"repetition":..,"position":..,``) and parses the
whole record otherwise; both must give the same order.
"""

import orjson

from kvreplay.rundir import merge_records


def _line(phase: str, rep: int, pos: int, **more) -> bytes:
    return orjson.dumps({"phase": phase, "repetition": rep, "position": pos, "worker": 0, **more})


def test_records_merge_in_phase_then_position_order_with_every_byte_kept(tmp_path):
    odd = 'we"ird é,"repetition":9'  # a quote, a non-ASCII letter and the key text inside the name
    w0 = [
        _line("b", 7, 1),
        _line(odd, 0, 2),
        _line("a", 5, 0, text="x,\"position\":99"),
        b'{"position": 1, "phase": "a", "repetition": 0}',  # another key order, spaces: parsed whole
    ]
    w1 = [
        _line("b", 0, 0),
        _line("zz", 0, 0),  # a phase the plan does not have: last
        _line(odd, 3, 0),
        _line("a", 1, 2),
        _line("b", 2, 10),
    ]
    (tmp_path / "w0.jsonl").write_bytes(b"\n".join(w0) + b"\n")
    (tmp_path / "w1.jsonl").write_bytes(b"\n".join(w1))  # no newline after the last line
    (tmp_path / "w2.jsonl").write_bytes(b"")
    out = tmp_path / "run"
    out.mkdir()
    n = merge_records([tmp_path / "w0.jsonl", tmp_path / "w1.jsonl", tmp_path / "w2.jsonl",
                       tmp_path / "missing.jsonl"], {"a": 0, odd: 1, "b": 2}, out)
    assert n == 9
    expected = [w0[2], w0[3], w1[3], w1[2], w0[1], w1[0], w0[0], w1[4], w1[1]]
    assert (out / "records.jsonl").read_bytes() == b"\n".join(expected) + b"\n"


def test_a_repetition_is_never_read_as_the_position(tmp_path):
    # Repetitions in reverse of positions: a parser that took the repetition would reverse the order.
    lines = [_line("a", 9 - p, p) for p in (3, 0, 2, 1)]
    (tmp_path / "w0.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    out = tmp_path / "run"
    out.mkdir()
    assert merge_records([tmp_path / "w0.jsonl"], {"a": 0}, out) == 4
    got = [orjson.loads(x)["position"] for x in (out / "records.jsonl").read_bytes().splitlines()]
    assert got == [0, 1, 2, 3]
