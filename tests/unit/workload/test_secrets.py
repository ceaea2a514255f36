"""Issue 30 item 4: the one body-secret detector (``workload.secrets``), each shape and each JSON encoding."""

from __future__ import annotations

import json

import orjson
import pytest

from kvreplay.workload.capture import CaptureWriter
from kvreplay.workload.secrets import find_secrets, redact_body

OPENAI = "sk-proj-4f9a1c2e7b3d8a60Qx"
ANTHROPIC = "sk-ant-api03-9bX2kLm4Qw7Z-abc"
AWS = "AKIAIOSFODNN7EXAMPLE"
OWN = "hunter2hunter2"


def chat(content: str, **extra: object) -> bytes:
    return orjson.dumps({"model": "m", "messages": [{"role": "user", "content": content}], **extra})


@pytest.mark.parametrize("text, kind", [
    (f"my key is {OPENAI} ok", "sk- key"),
    (f"claude: {ANTHROPIC}", "sk-ant- key"),
    ("Authorization: Bearer abcDEF0123456789xyz", "Bearer token"),
    (f"aws {AWS}", "AWS access key id"),
])
def test_each_key_shape_is_found_with_where_and_never_the_value(text, kind):
    (f,) = find_secrets(chat(text))
    assert (f.kind, f.where) == (kind, "messages[0].content")
    assert text.split()[-1] not in str(f)


@pytest.mark.parametrize("name", ["api_key", "apiKey", "API-KEY", "token", "secret", "password", "access_token"])
def test_secret_fields_with_string_values(name):
    (f,) = find_secrets(chat("hi", **{name: "s3cr3t-value"}))
    assert (f.kind, f.where) == (f"a {name!r} field", name)


@pytest.mark.parametrize("body", [
    chat("hi", max_tokens=5, token=5, password=""),  # not strings / too short
    chat("use sk-learn-model-selection and Bearer authentication; keys AKIA-like"),  # prose
    chat("hi", tools=[{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"token": {"type": "string"}}}}}]),  # a schema, not a value
])
def test_ordinary_bodies_have_no_finding(body):
    assert find_secrets(body) == []


def _escape_all(s: str) -> str:
    return "".join(f"\\u{ord(c):04x}" for c in s)


@pytest.mark.parametrize("encoded", [
    OWN,                                   # as is
    "hunter2\\u0068unter2",                # one character escaped (issue 30's case)
    _escape_all(OWN),                       # every character escaped
    "hunter2\\u0068\\u0075nter2",
])
def test_the_requests_own_credential_in_any_json_encoding(encoded):
    raw = b'{"model":"m","messages":[{"role":"user","content":"x ' + encoded.encode() + b' y"}]}'
    assert json.loads(raw)["messages"][0]["content"] == f"x {OWN} y"
    (f,) = find_secrets(raw, [OWN])
    assert (f.kind, f.where) == ("the request's own credential", "messages[0].content")
    assert find_secrets(raw, []) == []  # not a key shape: found only as the request's own


def test_a_secret_in_a_member_name_is_found_and_not_shown():
    raw = b'{"model":"m","messages":[{"role":"user","content":"x"}],"meta":{"' + OPENAI.encode() + b'":1}}'
    (f,) = find_secrets(raw)
    assert f.where == "meta.{name}" and OPENAI not in str(f)


def test_redaction_rewrites_only_the_strings_that_hold_a_secret():
    raw = (b'{"model": "m",  "messages":[{"role":"user","content":"key ' + OPENAI.encode()
           + b' and \\u00e9 hunter2\\u0068unter2"}], "api_key": "abcd1234", "n" : 1}')
    out = redact_body(raw, [OWN])
    assert out == (b'{"model": "m",  "messages":[{"role":"user","content":"key [REDACTED] and \xc3\xa9 [REDACTED]"}],'
                   b' "api_key": "[REDACTED]", "n" : 1}')
    assert find_secrets(out, [OWN]) == []


def test_the_writer_skips_a_body_with_a_secret_or_retains_it_redacted(tmp_path):
    w = CaptureWriter(tmp_path / "A")
    assert w.admit("POST", "/v1/chat/completions", chat(f"k {OPENAI}"), 0) is None
    assert w.admit("POST", "/v1/chat/completions", chat(OWN), 0, [("Authorization", f"Bearer {OWN}")]) is None
    assert w.close().skipped == {"secret": 2}
    lines = [json.loads(x) for x in (tmp_path / "A" / "capture.jsonl").read_text().splitlines()]
    assert [(m["skipped"], m["detail"]) for m in lines] == [
        ("secret", "sk- key in the body"), ("secret", "the request's own credential in the body")]
    w = CaptureWriter(tmp_path / "B", redact_body_secrets=True)
    body = chat(f"k {OPENAI}")
    slot = w.admit("POST", "/v1/chat/completions", body, 0)
    assert slot is not None
    w.complete(slot, status=200, outcome="complete")
    w.close()
    assert (tmp_path / "B" / "000000.json").read_bytes() == chat("k [REDACTED]")
    (m,) = [json.loads(x) for x in (tmp_path / "B" / "capture.jsonl").read_text().splitlines()]
    import hashlib

    assert m["received_sha256"] == hashlib.sha256(body).hexdigest()
    assert m["body_sha256"] == hashlib.sha256(chat("k [REDACTED]")).hexdigest()
    assert m["redacted"] == ["sk- key at messages[0].content"]
