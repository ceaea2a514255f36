"""Issue 30 item 6: ``import openai-batch`` and ``import har`` of a 60 MB body fit in 1 GiB of address space.

Before: the Batch importer's byte-span scan ran a backtracking regular expression over
the body (``"(?:[^"\\\\]|\\\\.)*"``), 7.65 GB for a 60 MB line (127 times), and
``MemoryError`` under a 4 GB limit. Now the scan is linear (``workload.jsonscan``) and
the file is read a line at a time, so the peak is a few times the longest line. Each
import runs in a subprocess whose ``RLIMIT_AS`` is 1 GiB (the interpreter and its
imports take about a third of it here).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys

import orjson
import pytest

LIMIT = 1 << 30
BODY_MB = 60


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def _import(*argv: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kvreplay", "import", *map(str, argv)], capture_output=True,
                          text=True, timeout=300, preexec_fn=_limited)


def _body() -> bytes:
    # escapes along the way: the scan must step over \" and \\ without a regex
    text = ('say \\"hi\\" \\\\ ' + "x" * 1000) * (BODY_MB * 1000)
    return b'{"model": "m", "messages": [{"role": "user", "content": "' + text.encode() + b'"}]}'


@pytest.mark.timeout(300)
def test_a_60_mb_batch_line_imports_under_1_gib(tmp_path):
    body = _body()
    assert len(body) >= BODY_MB * 10**6
    src = tmp_path / "b.jsonl"
    src.write_bytes(b'{"custom_id": "big", "method": "POST", "url": "/v1/chat/completions", "body": ' + body
                    + b'}\n{"custom_id": "small", "method": "POST", "url": "/v1/chat/completions", "body": '
                    + b'{"model": "m", "prompt": "p"}}\n')
    p = _import("openai-batch", src, "--out", tmp_path / "W")
    assert p.returncode == 0, p.stderr[-2000:]
    assert "Traceback" not in p.stderr and "MemoryError" not in p.stderr
    assert (tmp_path / "W" / "000000.json").read_bytes() == body  # the exact span, not re-serialised
    man = [json.loads(x) for x in (tmp_path / "W" / "capture.jsonl").read_text().splitlines()]
    assert [m["reserialised"] for m in man] == [False, False]


@pytest.mark.timeout(300)
def test_a_60_mb_har_body_imports_under_1_gib(tmp_path):
    body = _body()
    src = tmp_path / "s.har"
    entry = {"startedDateTime": "2026-01-01T00:00:00.000Z", "time": 5,
             "request": {"method": "POST", "url": "http://h/v1/chat/completions", "headers": [],
                         "postData": {"mimeType": "application/json", "text": body.decode()}}}
    src.write_bytes(orjson.dumps({"log": {"version": "1.2", "entries": [entry]}}))
    del entry
    p = _import("har", src, "--out", tmp_path / "W")
    assert p.returncode == 0, p.stderr[-2000:]
    assert "Traceback" not in p.stderr
    assert (tmp_path / "W" / "000000.json").read_bytes() == body


def test_the_byte_span_scan_is_linear_in_memory():
    """The span of a 6 MB body value under tracemalloc: extra allocations stay below the body's size."""
    import tracemalloc

    from kvreplay.workload.importers_capture import body_value_span

    body = _body_small()
    line = b'{"custom_id": "c", "body": ' + body + b', "url": "/v1/completions"}'
    tracemalloc.start()
    span = body_value_span(line)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert span is not None and line[span[0]:span[1]] == body
    assert peak < len(body) // 4, peak


def _body_small() -> bytes:
    text = ('say \\"hi\\" \\\\ ' + "x" * 1000) * 6000
    return b'{"model": "m", "prompt": "' + text.encode() + b'"}'
