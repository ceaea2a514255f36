"""``kvreplay export aiperf --aiperf-type raw_payload``: each chat body's exact bytes, a folder per session set."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvreplay.cli import main
from kvreplay.errors import WorkloadError
from kvreplay.workload.import_sharegpt import import_sharegpt
from kvreplay.workload.peers import export_aiperf

TAIL = b',"max_tokens":8,"stream":true,"stream_options":{"include_usage":true}}'


def _flat(tmp_path: Path, *bodies: bytes) -> Path:
    p = tmp_path / "w.jsonl"
    p.write_bytes(b"".join(b + b"\n" for b in bodies))
    return p


def test_single_file_keeps_each_body_byte_for_byte(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = b'{"model":"m","messages":[{"role":"user","content":"h\xc3\xa9 1"}]' + TAIL
    b = b'{"model": "m", "messages": [{"role": "user", "content": "two"}], "max_tokens": 8}'
    wl = _flat(tmp_path, a, b)
    res = export_aiperf(wl, tmp_path / "r.jsonl", kind="raw_payload")
    assert res.path.read_bytes() == a + b"\n" + b + b"\n"
    assert (res.kind, res.lines, res.bodies) == ("raw_payload", 2, 2)
    assert res.notes == {"sent re-serialized by AIPerf (not compact JSON as orjson writes it)": 1}
    assert main(["export", "aiperf", str(wl), "--out", str(tmp_path / "c.jsonl"), "--aiperf-type", "raw_payload"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"2 bodies as 2 aiperf raw_payload lines -> {tmp_path / 'c.jsonl'}\n")
    assert "--custom-dataset-type raw_payload --endpoint-type raw" in out


def test_completions_body_refused_with_its_index(tmp_path: Path) -> None:
    wl = _flat(tmp_path, b'{"model":"m","messages":[{"role":"user","content":"a"}]}', b'{"model":"m","prompt":"x"}')
    with pytest.raises(WorkloadError, match="completions body: AIPerf 0.13's raw_payload loader") as e:
        export_aiperf(wl, tmp_path / "r.jsonl", kind="raw_payload")
    assert e.value.body_index == 1


def test_sessions_give_one_file_per_session_in_order(tmp_path: Path) -> None:
    src = tmp_path / "c.json"
    src.write_text('[{"id":"a","conversations":[{"from":"human","value":"h1"},{"from":"gpt","value":"g1"},'
                   '{"from":"human","value":"h2"}]},{"id":"b","conversations":[{"from":"human","value":"x"}]}]')
    wl = import_sharegpt(src, tmp_path / "w", max_tokens=8, think_time=2.0).workload
    bodies = wl.read_bytes().splitlines()
    res = export_aiperf(wl, tmp_path / "raw", kind="raw_payload")
    assert sorted(p.name for p in res.path.iterdir()) == ["000000.jsonl", "000001.jsonl"]
    assert (res.path / "000000.jsonl").read_bytes() == bodies[0] + b"\n" + bodies[1] + b"\n"
    assert (res.path / "000001.jsonl").read_bytes() == bodies[2] + b"\n"
    assert (res.lines, res.notes) == (3, {"think times dropped (raw_payload has no delay)": 1})
    with pytest.raises(WorkloadError, match="exists: with sessions the raw_payload export is a folder"):
        export_aiperf(wl, tmp_path / "raw", kind="raw_payload")
