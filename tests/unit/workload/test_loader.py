import hashlib
import json
from pathlib import Path

import pytest
from helpers import MTBENCH

from kvreplay.errors import WorkloadError
from kvreplay.workload import load_workload


def test_folder_bodies_are_exact_bytes_sorted_by_name(tmp_path: Path):
    raw_b = b'{"messages":[{"role":"user","content":"b"}],  "stream":true}'
    raw_a = b'{ "prompt" : "a" }\n'
    (tmp_path / "b.json").write_bytes(raw_b)
    (tmp_path / "a.json").write_bytes(raw_a)
    (tmp_path / "notes.txt").write_text("ignored")
    wl = load_workload(tmp_path)
    assert [b.raw for b in wl.bodies] == [raw_a, raw_b]  # never re-serialised
    assert wl.bodies[0].sha256 == hashlib.sha256(raw_a).hexdigest()
    assert wl.bodies[0].kind == "completions" and wl.bodies[0].path == "/v1/completions"
    assert wl.bodies[1].kind == "chat" and wl.bodies[1].stream is True
    assert wl.bodies[1].body_bytes == len(raw_b)


def test_jsonl_line_numbers_skip_blank_lines(tmp_path: Path):
    f = tmp_path / "w.jsonl"
    f.write_bytes(b'{"prompt":"x"}\n\n{"prompt":"y"}\r\n')
    wl = load_workload(f)
    assert [b.source for b in wl.bodies] == ["w.jsonl:1", "w.jsonl:3"]
    assert wl.bodies[1].raw == b'{"prompt":"y"}'


@pytest.mark.parametrize(
    "content, needle, field",
    [
        (b'{"prompt": "x"}\n{"messages": [}\n', "not valid JSON", None),
        (b'{"prompt": "x"}\n[1, 2]\n', "JSON list, not an object", None),
        (b'{"prompt": "x"}\n{"model": "m"}\n', "neither 'messages'", "messages"),
        (b'{"prompt": "x"}\n{"messages": []}\n', "non-empty list", "messages"),
        (b'{"prompt": "x"}\n{"messages": [{"content": "hi"}]}\n', "string 'role'", "messages[0]"),
        (b'{"prompt": "x"}\n{"prompt": "x", "stream": "yes"}\n', "true or false", "stream"),
        (b'{"prompt": "x"}\n{"prompt": "\xff\xfe"}\n', "not UTF-8", None),
    ],
)
def test_bad_bodies_name_file_line_and_field(tmp_path: Path, content, needle, field):
    f = tmp_path / "bad.jsonl"
    f.write_bytes(content)
    with pytest.raises(WorkloadError) as ei:
        load_workload(f)
    err = ei.value
    assert needle in str(err)
    assert f"{f}:2" in str(err)
    assert err.line == 2 and err.body_index == 1 and err.field == field


def test_empty_and_missing(tmp_path: Path):
    with pytest.raises(WorkloadError, match="holds no bodies"):
        load_workload(tmp_path)
    with pytest.raises(WorkloadError, match="no such workload"):
        load_workload(tmp_path / "nope")


def test_size_limit_and_duplicates(tmp_path: Path):
    (tmp_path / "a.json").write_bytes(b'{"prompt":"same"}')
    (tmp_path / "b.json").write_bytes(b'{"prompt":"same"}')
    wl = load_workload(tmp_path)
    assert list(wl.duplicates().values()) == [[0, 1]]
    with pytest.raises(WorkloadError, match="over the limit of 10"):
        load_workload(tmp_path, max_body_bytes=10)


def test_bundled_mtbench52_shape():
    wl = load_workload(MTBENCH)
    assert len(wl) == 52
    systems = {json.loads(b.raw)["messages"][0]["content"] for b in wl.bodies}
    assert len(systems) == 1  # one shared system block
    (system,) = systems
    assert 11_000 < len(system) <= 12_000  # ~3,000 tokens at ~4 chars/token
    for b in wl.bodies:
        obj = json.loads(b.raw)
        assert obj["stream"] is True and obj["stream_options"] == {"include_usage": True}
        assert obj["max_tokens"] == 128 and obj["temperature"] == 1 and obj["top_p"] == 0.95
    assert len(wl.duplicates()) == 0
