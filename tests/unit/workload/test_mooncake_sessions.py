"""``kvreplay import mooncake --sessions``: sessions inferred from shared hash_ids prefixes, exactly."""

from __future__ import annotations

from pathlib import Path

import orjson

from kvreplay.cli import main
from kvreplay.workload.importers import infer_sessions, read_mooncake
from kvreplay.workload.sessions import Turn, load_sessions

# 4-token blocks. (timestamp ms, input_length, hash_ids)
ROWS = [
    (0, 10, [1, 2, 3]),        # full blocks [1,2] (3 is partial)     -> mc-0 turn 0
    (1000, 9, [1, 5, 6]),      # shares block 1 only (< 2 blocks)     -> mc-1 turn 0
    (3500, 15, [1, 2, 7, 8]),  # extends row 0's full blocks [1,2]    -> mc-0 turn 1, think 3.5
    (4000, 12, [1, 2, 9]),     # [1,2] again, but row 0 was continued -> mc-2 turn 0
    (5000, 16, [1, 2, 7, 10]), # extends row 2's full blocks [1,2,7]  -> mc-0 turn 2, think 1.5
    (500, 12, [1, 5, 11]),     # extends row 1's [1,5], earlier time  -> mc-1 turn 1, think 0 (clamped)
    (6000, 20, [1, 2, 7, 10, 12]),  # extends row 4 (all 4 full)      -> mc-0 turn 3, think 1.0
]
WANT = [Turn(0, "mc-0", 0, 0.0), Turn(1, "mc-1", 0, 0.0), Turn(2, "mc-0", 1, 3.5), Turn(3, "mc-2", 0, 0.0),
        Turn(4, "mc-0", 2, 1.5), Turn(5, "mc-1", 1, 0.0), Turn(6, "mc-0", 3, 1.0)]


def _trace(tmp_path: Path) -> Path:
    p = tmp_path / "t.jsonl"
    p.write_bytes(b"".join(orjson.dumps({"timestamp": t, "input_length": n, "output_length": 2, "hash_ids": ids})
                           + b"\n" for t, n, ids in ROWS))
    return p


def test_rule_on_a_hand_made_trace(tmp_path: Path) -> None:
    rows = read_mooncake(_trace(tmp_path), block_tokens=4)
    assert infer_sessions(rows, 4) == WANT
    # min_blocks 1: row 1 still starts its own session (row 0's tip is [1,2], not [1]); row 3 too
    assert [t.session for t in infer_sessions(rows, 4, 1)] == ["mc-0", "mc-1", "mc-0", "mc-2", "mc-0", "mc-1",
                                                              "mc-0"]
    # min_blocks 3: [1,2] and [1,5] no longer join anything; [1,2,7] still does
    assert [(t.session, t.turn) for t in infer_sessions(rows, 4, 3)] == [
        ("mc-0", 0), ("mc-1", 0), ("mc-2", 0), ("mc-3", 0), ("mc-2", 1), ("mc-4", 0), ("mc-2", 2)]


def test_cli_writes_the_side_file_only_with_sessions(tmp_path: Path, capsys) -> None:
    src, out = _trace(tmp_path), tmp_path / "w.jsonl"
    assert main(["import", "mooncake", str(src), "--out", str(out), "--block-tokens", "4", "--sessions"]) == 0
    s = load_sessions(out, 7)
    assert s is not None and s.turns == tuple(WANT)
    assert s.bodies == {"mc-0": (0, 2, 4, 6), "mc-1": (1, 5), "mc-2": (3,)}
    assert "sessions (3 inferred from shared hash_ids prefixes)" in capsys.readouterr().out
    assert main(["import", "mooncake", str(src), "--out", str(out), "--block-tokens", "4", "--force"]) == 0
    assert load_sessions(out, 7) is None  # the earlier side file is not left to describe other bodies


def _naive(rows: list, block_tokens: int, min_blocks: int) -> list[tuple[str, int]]:
    """The rule written the slow, obvious way: tuple prefixes, longest first."""
    tips: dict[tuple[int, ...], tuple[str, int]] = {}
    out, n = [], 0
    for r in rows:
        ids = r.hash_ids
        hit = next((tips.pop(ids[:k]) for k in range(len(ids), min_blocks - 1, -1) if ids[:k] in tips), None)
        if hit is None:
            sid, turn = f"mc-{n}", 0
            n += 1
        else:
            sid, turn = hit[0], hit[1] + 1
        out.append((sid, turn))
        full = min(len(ids), r.input_length // block_tokens)
        if full >= min_blocks:
            tips[ids[:full]] = (sid, turn)
    return out


def test_published_conversation_trace_against_the_naive_rule() -> None:
    rows = read_mooncake(Path(__file__).parents[3] / "fixtures" / "traces" / "mooncake_fast25_conversation_trace.jsonl")
    for min_blocks, sessions in ((1, 6745), (2, 8099)):
        got = infer_sessions(rows, 512, min_blocks)
        assert [(t.session, t.turn) for t in got] == _naive(rows, 512, min_blocks)
        assert sum(t.turn == 0 for t in got) == sessions  # of 12,031 requests
