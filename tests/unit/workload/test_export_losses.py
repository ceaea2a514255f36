"""Issue 44 item 4: every export counts what it loses, refuses it without ``--lossy``, and round-trips.

Before: a multi_turn export of ``[system, user, assistant, user]`` kept 2 of 4 messages
with only "other body fields dropped"; ``developer``/``tool`` messages vanished with no
note; the bundled conversations' replies were gone on re-import uncounted; Mooncake and
Bailian sessions went through ``export aiperf`` to about 2.25 times their prompts (every
turn's whole prompt as its text, resent by AIPerf with the history).
"""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from kvreplay.cli import main
from kvreplay.errors import WorkloadError
from kvreplay.workload.importers import block_text
from kvreplay.workload.peers import export_aiperf, export_vllm, import_aiperf, import_vllm
from kvreplay.workload.sessions import sessions_path

ROOT = Path(__file__).resolve().parents[3]


def _workload(tmp_path: Path, *bodies: dict) -> Path:
    wl = tmp_path / "w.jsonl"
    wl.write_bytes(b"".join(orjson.dumps(b) + b"\n" for b in bodies))
    return wl


def _msgs(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"role": r, "content": c} for r, c in pairs]


def test_multi_turn_of_a_body_with_history_counts_the_two_messages_it_drops(tmp_path: Path) -> None:
    wl = _workload(tmp_path, {"model": "m", "max_tokens": 4,
                              "messages": _msgs(("system", "S"), ("user", "u1"), ("assistant", "a1"), ("user", "u2"))})
    with pytest.raises(WorkloadError, match=r"multi_turn cannot hold all of it \(1 bodies: message role assistant; "
                                            r"1 bodies: message role user\); nothing written: give --lossy"):
        export_aiperf(wl, tmp_path / "m.jsonl", kind="multi_turn")
    assert not (tmp_path / "m.jsonl").exists() and not (tmp_path / "m.jsonl.manifest.json").exists()
    res = export_aiperf(wl, tmp_path / "m.jsonl", kind="multi_turn", lossy=True)
    assert (tmp_path / "m.jsonl").read_bytes() == (b'{"session_id":"0","turns":[{"role":"system","text":"S"},'
                                                   b'{"text":"u2","output_length":4}]}\n')
    assert json.loads((tmp_path / "m.jsonl.manifest.json").read_text()) == {
        "workload": str(wl), "path": str(tmp_path / "m.jsonl"), "kind": "multi_turn", "lines": 1, "bodies": 1,
        "lossy": True, "lost": {"message role assistant": 1, "message role user": 1},
        "messages_lost": {"assistant": 1, "user": 1}, "notes": {}}
    assert res.lines_lost() == ["lost in 1 bodies: message role assistant (1 messages)",
                                "lost in 1 bodies: message role user (1 messages)"]


def test_developer_and_tool_messages_and_their_fields_are_counted(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    wl = _workload(tmp_path, {"model": "m", "temperature": 0.5, "messages": [
        {"role": "developer", "content": "D"}, {"role": "user", "content": "U"},
        {"role": "tool", "content": "T", "tool_call_id": "c1"}, {"role": "user", "content": "V"}]},
        {"model": "m", "messages": _msgs(("user", "alone"))})
    out = tmp_path / "s.jsonl"
    assert main(["export", "aiperf", str(wl), "--out", str(out), "--aiperf-type", "single_turn"]) == 2
    assert "single_turn cannot hold all of it" in capsys.readouterr().err and not out.exists()
    assert main(["export", "aiperf", str(wl), "--out", str(out), "--aiperf-type", "single_turn", "--lossy"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"2 bodies as 2 aiperf single_turn lines -> {out}",
        "  lost in 1 bodies: field temperature",
        "  lost in 1 bodies: message field tool_call_id",
        "  lost in 1 bodies: message role developer (1 messages)",
        "  lost in 1 bodies: message role tool (1 messages)",
        "  lost in 1 bodies: message role user (1 messages)",
        f"  manifest (what was lost, counted) -> {out}.manifest.json",
        f"  run:  aiperf profile --input-file {out} --custom-dataset-type single_turn --endpoint-type chat "
        "--streaming ...",
    ]


def test_vllm_counts_flattened_roles_and_lost_sessions(tmp_path: Path) -> None:
    wl = ROOT / "fixtures" / "workloads" / "conversations"
    res = export_vllm(wl, tmp_path / "v.jsonl", lossy=True)
    assert (res.bodies, res.lost) == (12, {"roles flattened into one prompt": 12, "sessions": 12})


def test_the_bundled_conversations_count_their_replies(tmp_path: Path) -> None:
    """4 sessions of 3 turns: each later turn resends one captured reply, which AIPerf replaces with its own."""
    wl = ROOT / "fixtures" / "workloads" / "conversations"
    with pytest.raises(WorkloadError, match=r"8 bodies: reply \(the peer sends its own\)"):
        export_aiperf(wl, tmp_path / "m.jsonl")
    res = export_aiperf(wl, tmp_path / "m.jsonl", lossy=True)
    assert (res.kind, res.lines, res.lost, res.messages_lost) == (
        "multi_turn", 4, {"reply (the peer sends its own)": 8}, {"assistant reply": 8})


# --- round trips: import -> export -> import gives the first import back, per format ---------


def _same_import(first: Path, again: Path) -> None:
    assert again.read_bytes() == first.read_bytes()
    s0, s1 = sessions_path(first), sessions_path(again)
    assert s1.exists() == s0.exists()
    if s0.exists():
        assert s1.read_bytes() == s0.read_bytes()


AIPERF_MULTI = [
    {"session_id": "a", "turns": [{"role": "system", "text": "S"}, {"text": "h1", "output_length": 5},
                                  {"text": "h2", "delay": 1500, "output_length": 7},
                                  {"text": "h3", "delay": 100}]},
    {"session_id": "b", "turns": [{"text": "x"}]},
]
AIPERF_SINGLE = [{"text": "p", "session_id": "s", "output_length": 3}, {"text": "q", "session_id": "s", "delay": 250},
                 {"text": "r"}]


@pytest.mark.parametrize(("kind", "rows"), [("multi_turn", AIPERF_MULTI), ("single_turn", AIPERF_SINGLE)])
def test_aiperf_round_trip_is_a_fixed_point(tmp_path: Path, kind: str, rows: list[dict]) -> None:
    src = tmp_path / "src.jsonl"
    src.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    first = import_aiperf(src, tmp_path / "one").workload
    res = export_aiperf(first, tmp_path / "exp.jsonl", kind=kind)  # nothing lost: no --lossy needed
    assert (res.lost, res.lossy) == ({}, False)
    again = import_aiperf(tmp_path / "exp.jsonl", tmp_path / "two").workload
    _same_import(first, again)


def test_vllm_round_trip_is_a_fixed_point(tmp_path: Path) -> None:
    src = tmp_path / "src.jsonl"
    src.write_bytes(b'{"prompt": "a b", "output_tokens": 9}\n{"prompt": "c"}\n')
    first = import_vllm(src, tmp_path / "one").workload
    res = export_vllm(first, tmp_path / "exp.jsonl")
    assert (res.lost, res.notes) == ({}, {})
    _same_import(first, import_vllm(tmp_path / "exp.jsonl", tmp_path / "two").workload)


def test_a_block_trace_session_exports_each_turns_new_text_only(tmp_path: Path) -> None:
    """Three turns of 4-token blocks: [1,2] (full), [1,2,3] (half of 3), [1,2,4,5] (3 filled in as 4)."""
    trace = tmp_path / "t.jsonl"
    rows = [(0, 8, [1, 2]), (1000, 10, [1, 2, 3]), (2500, 16, [1, 2, 4, 5])]
    trace.write_bytes(b"".join(orjson.dumps({"timestamp": t, "input_length": n, "output_length": 2, "hash_ids": ids})
                               + b"\n" for t, n, ids in rows))
    assert main(["import", "mooncake", str(trace), "--out", str(tmp_path / "w.jsonl"), "--block-tokens", "4",
                 "--sessions"]) == 0
    with pytest.raises(WorkloadError, match="1 bodies: history diverges within the previous turn's text"):
        export_aiperf(tmp_path / "w.jsonl", tmp_path / "m.jsonl")
    res = export_aiperf(tmp_path / "w.jsonl", tmp_path / "m.jsonl", lossy=True)
    b1, b2, b3, b4, b5 = (block_text(h, 4) for h in (1, 2, 3, 4, 5))
    half3 = "".join(" " + w for w in b3.split()[:2])
    line = orjson.loads((tmp_path / "m.jsonl").read_bytes())
    assert [t["text"] for t in line["turns"]] == [b1 + b2, half3, b4 + b5]
    assert [t.get("delay") for t in line["turns"]] == [None, 1000.0, 1500.0]
    # the texts add up to 8 + 2 + 8 = 18 words against 8 + 10 + 16 = 34 resent before (1.9x)
    assert sum(len(t["text"].split()) for t in line["turns"]) == 18
    assert res.lost == {"history diverges within the previous turn's text (the peer resends that turn's own)": 1}


def test_a_retried_turn_is_counted_and_sent_again(tmp_path: Path) -> None:
    body = {"model": "m", "messages": _msgs(("user", "same"))}
    wl = _workload(tmp_path, body, body)
    sessions_path(wl).write_bytes(b'{"body": 0, "session": "s", "turn": 0, "think_time_s": 0}\n'
                                  b'{"body": 1, "session": "s", "turn": 1, "think_time_s": 2}\n')
    res = export_aiperf(wl, tmp_path / "m.jsonl", lossy=True)
    assert res.lost == {"turn adds no user message (its last one is sent again)": 1}
    assert (tmp_path / "m.jsonl").read_bytes() == (b'{"session_id":"s","turns":[{"text":"same"},'
                                                   b'{"text":"same","delay":2000.0}]}\n')
