"""Issue 30 item 4: a secret inside a request body reaches no file and no stream, through record and every importer.

``kvreplay record`` (in a subprocess, in front of a raw upstream), ``kvreplay import
har`` and ``kvreplay import openai-batch`` each get one body per secret shape (an
OpenAI and an Anthropic key, an AWS key id, a Bearer token, an ``api_key`` field, and
the request's own credential JSON-escaped as ``hunter2\\u0068unter2``) and one clean
body. Each secret body is forwarded (record) but not retained, counted ``secret``;
with ``--redact-body-secrets`` it is retained with the secret replaced. Then every
file written and every stream is searched for each secret and each 8-character piece
of it, and for a traceback.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from hostile.rawhttp import RawUpstream, post_head, send

OWN = "hunter2hunter2-Zq81xW"
SECRETS = {
    "openai": "sk-proj-4f9a1c2e7b3d8a60QxLEAK",
    "anthropic": "sk-ant-api03-9bX2kLm4Qw7Z-LEAK",
    "aws": "AKIAIOSFODNN7EXAMPL3",
    "bearer": "Bearer 9f8e7d6c5b4a3210LEAKtoken",
    "field": "field-value-5150-LEAK",
}
PIECE = 8
PIECES = {s[i:i + PIECE] for s in [OWN, *SECRETS.values()] for i in range(len(s) - PIECE + 1)} - {"Bearer 9"}


def bodies() -> list[tuple[str, bytes, list[tuple[str, str]]]]:
    """(name, body bytes, request headers): one per secret, the own credential escaped, one clean."""
    out = []
    for name, sec in SECRETS.items():
        if name == "field":
            b = orjson.dumps({"model": "m", "api_key": sec, "messages": [{"role": "user", "content": "hi"}]})
        else:
            b = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": f"here: {sec} thanks"}]})
        out.append((name, b, []))
    escaped = OWN.replace("h", "\\u0068", 1)  # hunter2\u0068unter2...: not the header's bytes
    out.append(("own", b'{"model":"m","messages":[{"role":"user","content":"pw ' + escaped.encode() + b'"}]}',
                [("Authorization", f"Bearer {OWN}")]))
    out.append(("clean", orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "clean"}]}), []))
    return out


def _kvreplay(*argv: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kvreplay", *map(str, argv)], capture_output=True, text=True,
                          timeout=120, env={**os.environ})


def _record(out: Path, *extra: str) -> tuple[list[bytes], str, str, int]:
    async def go():
        async with RawUpstream() as up:
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "kvreplay", "record", "--upstream", up.url, "--out", str(out), *extra,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            first = (await proc.stdout.readline()).decode()
            url = first.split("listening on ")[1].split()[0]
            for _, b, hdrs in bodies():
                h = "".join(f"{k}: {v}\r\n" for k, v in hdrs).rstrip("\r\n")
                status, _ = await send(url, post_head("/v1/chat/completions", length=len(b), extra=h), [b])
                assert status == 200
            proc.send_signal(signal.SIGINT)
            rest, err = await proc.communicate()
            return [w for _, w in up.got], first + rest.decode(), err.decode(), proc.returncode

    return asyncio.run(asyncio.wait_for(go(), 60))


def _har(path: Path) -> Path:
    entries = []
    for i, (_, b, hdrs) in enumerate(bodies()):
        entries.append({"startedDateTime": f"2026-01-01T00:00:0{i}.000Z", "time": 5,
                        "request": {"method": "POST", "url": "http://127.0.0.1:9/v1/chat/completions",
                                    "headers": [{"name": k, "value": v} for k, v in hdrs],
                                    "postData": {"mimeType": "application/json", "text": b.decode()}},
                        "response": {"status": 200, "content": {"mimeType": "application/json", "text": "{}"}}})
    path.write_text(json.dumps({"log": {"version": "1.2", "entries": entries}}))
    return path


def _batch(path: Path) -> Path:
    """The same bodies as Batch lines, the own-credential one changed to carry the key-shaped secrets only
    (a Batch line has no headers, so no credential of its own)."""
    with open(path, "wb") as f:
        for i, (name, b, _) in enumerate(bodies()):
            if name == "own":
                b = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": SECRETS["openai"]}]})
            f.write(b'{"custom_id":"r%d","method":"POST","url":"/v1/chat/completions","body":' % i + b + b"}\n")
    return path


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bodysecrets")
    out, inputs = tmp / "out", tmp / "in"
    out.mkdir()
    inputs.mkdir()
    streams: dict[str, tuple[str, str, int]] = {}
    received, so, se, rc = _record(out / "record" / "W")
    streams["record"] = (so, se, rc)
    received_r, so, se, rc = _record(out / "record-redact" / "W", "--redact-body-secrets")
    streams["record-redact"] = (so, se, rc)
    har, batch = _har(inputs / "s.har"), _batch(inputs / "b.jsonl")
    for name, argv in (("import-har", ("har", har, "--out", out / "har" / "W")),
                       ("import-batch", ("openai-batch", batch, "--out", out / "batch" / "W")),
                       ("import-batch-redact", ("openai-batch", batch, "--out", out / "batch-redact" / "W",
                                                "--redact-body-secrets"))):
        p = _kvreplay("import", *argv)
        streams[name] = (p.stdout, p.stderr, p.returncode)
    return out, streams, received, received_r


def test_every_secret_body_was_forwarded_exactly(outputs):
    _, _, received, received_r = outputs
    assert received == [b for _, b, _ in bodies()] == received_r


@pytest.mark.parametrize("name, folder", [("record", "record"), ("import-har", "har"), ("import-batch", "batch")])
def test_secret_bodies_are_skipped_and_counted(outputs, name, folder):
    out, streams, _, _ = outputs
    _, err, rc = streams[name]
    assert rc == 0, err
    w = out / folder / "W"
    assert sorted(p.name for p in w.glob("*.json")) == ["000000.json"]
    assert b'"clean"' in (w / "000000.json").read_bytes()
    said = streams[name][1] if name == "record" else streams[name][0]
    assert "secret 6" in said, said
    lines = [json.loads(x) for x in (w / "capture.jsonl").read_text().splitlines()]
    assert sorted(m.get("skipped") or "kept" for m in lines) == ["kept"] + ["secret"] * 6


@pytest.mark.parametrize("folder", ["record-redact", "batch-redact"])
def test_redacted_bodies_are_retained_with_both_hashes(outputs, folder):
    out, _, _, _ = outputs
    w = out / folder / "W"
    assert len(list(w.glob("*.json"))) == 7
    lines = [json.loads(x) for x in (w / "capture.jsonl").read_text().splitlines()]
    red = [m for m in lines if "redacted" in m]
    assert len(red) == 6 and all(m["received_sha256"] != m["body_sha256"] for m in red)
    assert all(b"[REDACTED]" in (w / m["file"]).read_bytes() for m in red)


def test_no_secret_and_no_traceback_anywhere(outputs):
    out, streams, _, _ = outputs
    for name, (so, se, rc) in streams.items():
        assert rc == 0 and "Traceback" not in se, (name, se[-2000:])
        for text in (so, se):
            assert not [p for p in PIECES if p in text], name
    files = [f for f in out.rglob("*") if f.is_file()]
    assert len(files) >= 20
    leaks = {str(f.relative_to(out)): sorted(p for p in PIECES if p.encode() in f.read_bytes()) for f in files}
    assert {k: v for k, v in leaks.items() if v} == {}
