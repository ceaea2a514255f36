"""Issue 9 fuzz: ``kvreplay.workload.load_workload`` raises only ``WorkloadError``.

Random bytes as a ``.jsonl`` file and as one ``*.json`` body of a folder, and
JSON bodies whose ``messages`` / ``prompt`` / ``stream`` have random shapes: a
load either returns bodies that are the exact bytes given, or raises
``WorkloadError`` naming the file (and line for JSONL), within a deadline.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvreplay.errors import WorkloadError
from kvreplay.workload import load_workload

FUZZ = settings(max_examples=150, deadline=5000, suppress_health_check=[HealthCheck.too_slow])


def load_or_error(path: Path, **kw):
    """The workload, or None after checking the WorkloadError names the path."""
    try:
        return load_workload(path, **kw)
    except WorkloadError as exc:
        assert exc.path is not None and Path(exc.path).name in str(exc)
        return None


@FUZZ
@given(data=st.binary(max_size=600))
def test_random_bytes_as_jsonl(data):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "w.jsonl"
        p.write_bytes(data)
        wl = load_or_error(p)
        if wl is not None:
            lines = [ln.rstrip(b"\r") for ln in data.split(b"\n")]
            assert [b.raw for b in wl.bodies] == [ln for ln in lines if ln.strip()]


@FUZZ
@given(data=st.binary(max_size=600), name=st.sampled_from(["000.json", "a.json", "z.json"]))
def test_random_bytes_as_a_folder_body(data, name):
    with tempfile.TemporaryDirectory() as d:
        folder = Path(d) / "wl"
        folder.mkdir()
        (folder / "000-ok.json").write_bytes(b'{"prompt": "x"}')
        (folder / name).write_bytes(data)
        (folder / "ignored.txt").write_bytes(data)
        wl = load_or_error(folder)
        if wl is not None:
            assert data in [b.raw for b in wl.bodies] and len(wl) == 2


_leaf = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5)
_value = st.recursive(
    _leaf,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
    max_leaves=10,
)
_message = st.fixed_dictionaries({}, optional={"role": _value, "content": _value}) | _value
_body = st.fixed_dictionaries(
    {},
    optional={
        "model": _value,
        "messages": st.lists(_message, max_size=3) | _value,
        "prompt": _value,
        "stream": _value,
        "max_tokens": _value,
    },
)


@FUZZ
@given(
    bodies=st.lists(_body | _value, min_size=1, max_size=4), limit=st.sampled_from([40, 1 << 20])
)
def test_random_json_bodies(bodies, limit):
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "w.jsonl"
        lines = [json.dumps(b).encode() for b in bodies]
        p.write_bytes(b"\n".join(lines) + b"\n")
        try:
            wl = load_workload(p, max_body_bytes=limit)
        except WorkloadError as exc:
            assert exc.line is not None and 1 <= exc.line <= len(lines)
            return
        for body, line in zip(wl.bodies, lines, strict=True):
            obj = json.loads(line)
            assert body.raw == line and len(line) <= limit
            assert body.kind == ("chat" if "messages" in obj else "completions")
            assert body.stream is obj.get("stream", False)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\n\n\r\n",
        b"\xff\xfe{}",
        b'{"prompt": "x"}\x00',
        b"[" * 100_000,
        b'{"a":' * 100_000,
        b'{"messages": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        b'{"prompt": "\xed\xa0\x80"}',
        b'{"prompt": "x", "prompt": 3}',
        b'{"prompt": 1e999}',
    ],
)
def test_hand_picked_bodies(data, tmp_path):
    p = tmp_path / "w.jsonl"
    p.write_bytes(data)
    load_or_error(p)
