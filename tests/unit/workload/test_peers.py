"""AIPerf and vLLM bench custom datasets both ways: exact bodies and sessions in, exact lines out."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from kvreplay.cli import main
from kvreplay.errors import WorkloadError
from kvreplay.workload.import_sharegpt import import_sharegpt
from kvreplay.workload.peers import export_aiperf, export_vllm, import_aiperf, import_vllm
from kvreplay.workload.sessions import Turn, load_sessions, sessions_path

TAIL = b',"stream":true,"stream_options":{"include_usage":true}}'


def _body(msgs: bytes, n: int = 256) -> bytes:
    return b'{"model":"kvreplay-sim","messages":[' + msgs + b'],"max_tokens":' + str(n).encode() + TAIL


def _lines(tmp_path: Path, name: str, *objs: object) -> Path:
    p = tmp_path / name
    p.write_bytes(b"".join(orjson.dumps(o) + b"\n" for o in objs))
    return p


def test_import_aiperf_multi_and_single_turn(tmp_path: Path) -> None:
    src = _lines(tmp_path, "a.jsonl",
                 {"session_id": "s1", "turns": [{"role": "system", "text": "Sys"}, {"text": "Q1", "output_length": 5},
                                                {"text": "Q2", "delay": 1500}]},
                 {"text": "solo"},
                 {"session_id": "s2", "text": "A", "delay": 10},
                 {"session_id": "s2", "texts": ["B"], "delay": 250, "output_length": 7})
    res = import_aiperf(src, tmp_path / "w")
    assert (res.sessions, res.bodies) == (3, 5)
    sys_, q1, q2 = (b'{"role":"system","content":"Sys"}', b'{"role":"user","content":"Q1"}',
                    b'{"role":"user","content":"Q2"}')
    assert res.workload.read_bytes().splitlines() == [
        _body(sys_ + b"," + q1, 5),
        _body(sys_ + b"," + q1 + b"," + q2),  # no replies in the file: the user turns back to back
        _body(b'{"role":"user","content":"solo"}'),
        _body(b'{"role":"user","content":"A"}'),  # single_turn entries are self-contained
        _body(b'{"role":"user","content":"B"}', 7),
    ]
    s = load_sessions(res.workload, 5)
    assert s is not None
    assert s.turns == (Turn(0, "s1", 0, 0.0), Turn(1, "s1", 1, 1.5), Turn(2, "#2", 0, 0.0), Turn(3, "s2", 0, 0.0),
                       Turn(4, "s2", 1, 0.25))


def test_import_aiperf_single_turn_without_sessions_is_flat(tmp_path: Path) -> None:
    res = import_aiperf(_lines(tmp_path, "a.jsonl", {"text": "x"}, {"text": "y", "output_length": 3}), tmp_path / "w",
                        model="m", max_tokens=9)
    assert res.workload.read_bytes().splitlines()[1] == (
        b'{"model":"m","messages":[{"role":"user","content":"y"}],"max_tokens":3' + TAIL)
    assert res.sessions_file is None and not sessions_path(res.workload).exists()


@pytest.mark.parametrize(("obj", "field", "msg"), [
    ({"turns": []}, "turns", "non-empty list"),
    ({"turns": [{"text": "a"}, {"image": "x.png", "text": "b"}]}, "turns[1].image", "text only"),
    ({"text": "a", "timestamp": 5}, "timestamp", "fixed-schedule"),
    ({"text": 3}, "text", "not a string"),
    ({"text": "a", "output_length": 0}, "output_length", ">= 1"),
    ({"turns": [{"text": "a"}, {"text": "b", "delay": -1}]}, "turns[1].delay", "milliseconds"),
    ({"turns": [{"text": "a"}, {"text": "b", "role": "system"}]}, "turns[1].role", "first turn"),
    ({"session_id": 4, "text": "a"}, "session_id", "non-empty string"),
])
def test_import_aiperf_refuses_with_line_and_field(tmp_path: Path, obj: dict, field: str, msg: str) -> None:
    src = _lines(tmp_path, "a.jsonl", {"text": "ok"}, obj)
    with pytest.raises(WorkloadError, match=msg) as ei:
        import_aiperf(src, tmp_path / "w")
    assert (ei.value.path, ei.value.line, ei.value.field) == (src, 2, field)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["a.jsonl"]


def test_import_vllm(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _lines(tmp_path, "v.jsonl", {"prompt": "What is 1?", "output_tokens": 10}, {"prompt": "é\n"})
    assert main(["import", "vllm", str(src), "--out", str(tmp_path / "w"), "--max-tokens", "4"]) == 0
    assert (tmp_path / "w.jsonl").read_bytes().splitlines() == [
        b'{"model":"kvreplay-sim","messages":[{"role":"user","content":"What is 1?"}],"max_tokens":10' + TAIL,
        '{"model":"kvreplay-sim","messages":[{"role":"user","content":"é\\n"}],"max_tokens":4'.encode() + TAIL]
    assert capsys.readouterr().out.startswith(f"2 bodies -> {tmp_path / 'w.jsonl'}\n")
    bad = _lines(tmp_path, "b.jsonl", {"prompt": "a"}, {"text": "b"})
    with pytest.raises(WorkloadError, match="not a string") as ei:
        import_vllm(bad, tmp_path / "x")
    assert (ei.value.line, ei.value.field) == (2, "prompt")


def _conversations(tmp_path: Path) -> Path:
    src = tmp_path / "c.json"
    src.write_text('[{"id":"a","conversations":[{"from":"system","value":"S"},{"from":"human","value":"h1"},'
                   '{"from":"gpt","value":"g1"},{"from":"human","value":"h2"}]},'
                   '{"id":"b","conversations":[{"from":"human","value":"x"}]}]')
    return import_sharegpt(src, tmp_path / "w", max_tokens=8, think_time=2.0).workload


def test_export_vllm_exact_lines(tmp_path: Path) -> None:
    res = export_vllm(_conversations(tmp_path), tmp_path / "v.jsonl", lossy=True)
    assert res.path.read_bytes() == (b'{"prompt":"S\\n\\nh1","output_tokens":8}\n'
                                     b'{"prompt":"S\\n\\nh1\\n\\ng1\\n\\nh2","output_tokens":8}\n'
                                     b'{"prompt":"x","output_tokens":8}\n')
    assert (res.lost, res.messages_lost, res.notes) == ({"roles flattened into one prompt": 2, "sessions": 2}, {}, {})


def test_export_aiperf_each_type_exact_lines(tmp_path: Path) -> None:
    wl = _conversations(tmp_path)
    res = export_aiperf(wl, tmp_path / "m.jsonl", lossy=True)
    assert res.kind == "multi_turn"
    assert (res.lost, res.messages_lost) == ({"reply (the peer sends its own)": 1}, {"assistant reply": 1})
    assert res.path.read_bytes() == (
        b'{"session_id":"a","turns":[{"role":"system","text":"S"},{"text":"h1","output_length":8},'
        b'{"text":"h2","delay":2000.0,"output_length":8}]}\n'
        b'{"session_id":"b","turns":[{"text":"x","output_length":8}]}\n')
    res = export_aiperf(wl, tmp_path / "t.jsonl", kind="mooncake_trace")
    assert (res.lost, res.messages_lost, res.lossy) == ({}, {}, False)
    assert res.path.read_bytes().splitlines()[1] == (
        b'{"messages":[{"role":"system","content":"S"},{"role":"user","content":"h1"},'
        b'{"role":"assistant","content":"g1"},{"role":"user","content":"h2"}],"session_id":"a","delay":2000.0,'
        b'"output_length":8}')
    res = export_aiperf(wl, tmp_path / "s.jsonl", kind="single_turn", lossy=True)
    assert res.path.read_bytes().splitlines()[1] == b'{"text":"h2","session_id":"a","delay":2000.0,"output_length":8}'
    assert res.lost == {"message role system": 2, "message role user": 1, "message role assistant": 1}
    assert res.messages_lost == {"system": 2, "user": 1, "assistant": 1}


def test_round_trip_aiperf_multi_turn_keeps_sessions(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wl = _conversations(tmp_path)
    assert main(["export", "aiperf", str(wl), "--out", str(tmp_path / "m.jsonl"), "--lossy"]) == 0
    assert capsys.readouterr().out.startswith(f"3 bodies as 2 aiperf multi_turn lines -> {tmp_path / 'm.jsonl'}\n")
    back = import_aiperf(tmp_path / "m.jsonl", tmp_path / "back", max_tokens=8)
    s0, s1 = load_sessions(wl, 3), load_sessions(back.workload, 3)
    assert s0 is not None and s1 is not None and s1.turns == s0.turns
    # the replies are not in AIPerf's multi_turn file: turn 1 comes back without "g1"
    assert orjson.loads(back.workload.read_bytes().splitlines()[1])["messages"] == [
        {"role": "system", "content": "S"}, {"role": "user", "content": "h1"}, {"role": "user", "content": "h2"}]


def test_import_aiperf_an_explicit_id_never_joins_a_lines_implicit_session(tmp_path: Path) -> None:
    """Issue 44 low: line 1 has no session_id (its session is "#1"); line 2 naming "#1" joined it silently."""
    src = _lines(tmp_path, "a.jsonl", {"text": "one"}, {"session_id": "#1", "text": "two"})
    with pytest.raises(WorkloadError, match="session id '#1' is also the session of line 1, which has no "
                                            "session_id") as ei:
        import_aiperf(src, tmp_path / "W")
    assert (ei.value.line, ei.value.field) == (2, "session_id")
