"""``kvreplay inspect``: prefix groups, unique and identical bodies, expected reuse."""

from __future__ import annotations

import orjson
import pytest

from kvreplay.cli import main

SYS = b'{"role":"system","content":"You answer in one line."}'  # 53 bytes
U1 = b'{"role":"user","content":"What is 2+2?"}'  # 40 bytes
A1 = b'{"role":"assistant","content":"4"}'  # 34 bytes
U2 = b'{"role":"user","content":"And 3+3?"}'  # 36 bytes
U3 = b'{"role":"user","content":"Name a colour."}'  # 42 bytes
OTHER = b'{"role":"system","content":"Different."}'  # 40 bytes


def body(*msgs: bytes) -> bytes:
    return b'{"model":"m","stream":true,"messages":[' + b",".join(msgs) + b"]}"


@pytest.fixture
def workload(tmp_path):
    bodies = [
        body(SYS, U1),  # 0
        body(SYS, U1, A1, U2),  # 1: multi-turn extension of 0
        body(SYS, U3),  # 2: shares only the system message
        body(OTHER, U1),  # 3: unique
        body(SYS, U1),  # 4: identical to 0
    ]
    path = tmp_path / "wl.jsonl"
    path.write_bytes(b"\n".join(bodies) + b"\n")
    return path


def test_sizes_are_what_the_literals_say():
    assert [len(m) for m in (SYS, U1, A1, U2, U3, OTHER)] == [53, 40, 34, 36, 42, 40]


def test_inspect_json(workload, capsys):
    assert main(["inspect", str(workload), "--json"]) == 0
    a = orjson.loads(capsys.readouterr().out)
    assert a["bodies"] == 5 and a["kinds"] == {"chat": 5}
    assert a["unique_bodies"] == [3]
    assert a["identical_bodies"] == [[0, 4]]
    assert a["groups"] == [
        {"links": 1, "bytes": 53, "bodies": [0, 1, 2, 4]},
        {"links": 2, "bytes": 93, "bodies": [0, 1, 4]},
    ]
    # Hashed bytes: 93 + 163 + 95 + 80 + 93 = 524. Already seen in order:
    # body 1 reuses SYS+U1 (93), body 2 reuses SYS (53), body 4 reuses all 93.
    assert a["prefix_bytes"] == 524
    assert a["expected_reuse"]["bytes"] == 93 + 53 + 93
    assert a["expected_reuse"]["fraction"] == pytest.approx(239 / 524)
    assert [r["reused_links"] for r in a["per_body"]] == [0, 2, 1, 0, 2]


def test_inspect_text(workload, capsys):
    assert main(["inspect", str(workload)]) == 0
    out = capsys.readouterr().out
    assert "5 bodies: 5 chat" in out
    assert "239 of 524 bytes (45.6%)" in out
    assert "      2          93       3  0-1,4" in out
    assert "unique     1 bodies share no first link: 3" in out


def test_inspect_completions_blocks(tmp_path, capsys):
    prompt = "x" * 2500
    path = tmp_path / "c.jsonl"
    path.write_bytes(orjson.dumps({"prompt": prompt}) + b"\n"
                     + orjson.dumps({"prompt": prompt[:2100] + "y" * 10}) + b"\n")
    assert main(["inspect", str(path), "--json", "--block-bytes", "1000"]) == 0
    a = orjson.loads(capsys.readouterr().out)
    assert a["kinds"] == {"completions": 2}
    assert a["groups"] == [{"links": 2, "bytes": 2000, "bodies": [0, 1]}]
    assert a["expected_reuse"]["bytes"] == 2000


def test_inspect_bad_workload(tmp_path, capsys):
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b'{"input":"x"}\n')
    assert main(["inspect", str(path)]) == 2
    assert "bad.jsonl:1" in capsys.readouterr().err
