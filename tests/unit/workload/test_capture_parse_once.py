"""The capture writer parses each retained body once (issue 31 item 2: the proxy's work per request).

``CaptureWriter.finish`` hands its one ``orjson.loads`` to ``check_body`` and ``find_secrets``
(``doc=``); the verdicts and messages stay those of parsing in each.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from kvreplay.errors import WorkloadError
from kvreplay.workload._loader import check_body
from kvreplay.workload.capture import CaptureWriter
from kvreplay.workload.secrets import find_secrets

CLEAN = b'{"messages":[{"role":"user","content":"hi"}],"stream":true}'
KEYED = b'{"messages":[{"role":"user","content":"use sk-abcdefghij0123456789"}]}'


def retain(tmp_path: Path, raw: bytes, monkeypatch) -> tuple[object, int]:
    w = CaptureWriter(tmp_path / "W", paths=("/v1/chat/completions",))
    pending = w.begin("POST", "/v1/chat/completions", 1)
    pending.feed(raw)
    calls = []
    real = orjson.loads
    monkeypatch.setattr(orjson, "loads", lambda b: calls.append(b) or real(b))
    slot = w.finish(pending)
    monkeypatch.undo()
    w.close()
    return slot, len(calls)


def test_a_retained_body_is_parsed_once(tmp_path, monkeypatch):
    slot, parses = retain(tmp_path, CLEAN, monkeypatch)
    assert slot is not None and slot.body.kind == "chat" and slot.body.stream is True
    assert parses == 1  # not once for the checks and again for the secret scan


def test_a_body_with_a_key_is_still_refused_after_one_parse(tmp_path, monkeypatch):
    slot, parses = retain(tmp_path, KEYED, monkeypatch)
    assert slot is None and parses == 1


def test_the_same_findings_with_the_parsed_document():
    assert find_secrets(KEYED, [], doc=orjson.loads(KEYED)) == find_secrets(KEYED, []) != []


@pytest.mark.parametrize("raw, message", [
    (b'{"prompt": "\xff"}', "body is not UTF-8 (byte 12)"),  # named as before, though orjson parses first
    (b'{"prompt": [}', "body is not valid JSON"),
    (b"null", "body is a JSON NoneType, not an object"),  # JSON null: parsed again, the same verdict
])
def test_check_body_messages(raw, message):
    with pytest.raises(WorkloadError, match=message.replace("(", r"\(").replace(")", r"\)")):
        check_body(raw, 0, Path("W/000000.json"), None, 1 << 20)
