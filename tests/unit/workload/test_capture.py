"""CaptureWriter and its helpers: sizes, secrets, redaction, the folder and the files beside it."""

from __future__ import annotations

import json

import pytest

from kvreplay.errors import ConfigError
from kvreplay.plan import load_plan_toml
from kvreplay.workload import load_workload
from kvreplay.workload.capture import (
    CaptureWriter,
    parse_size,
    redact,
    retained_headers,
    secrets_of,
    sidecar_paths,
)

BODY = b'{"messages":[{"role":"user","content":"hi"}],"stream":true}'


@pytest.mark.parametrize("text, want", [("500000", 500000), ("64MiB", 64 << 20), ("1.5G", 1_500_000_000),
                                        ("10kb", 10_000), ("2 GiB", 2 << 30), ("7B", 7), ("1T", 10**12)])
def test_parse_size(text, want):
    assert parse_size(text) == want


def test_parse_size_refuses():
    with pytest.raises(ConfigError, match=r"field '--max-bytes': not a size: '12 parsecs'"):
        parse_size("12 parsecs")


def test_secrets_and_redaction():
    hdrs = [("Authorization", "Bearer tok-AAAA1111"), ("Cookie", "a=xyz987; b=qqqq5555"),
            ("X-Api-Key", "kkkk"), ("X-Session-Id", "abc"), ("Content-Type", "application/json"),
            ("User-Agent", "Bearer-free agent")]
    assert secrets_of(hdrs) == ["a=xyz987; b=qqqq5555", "Bearer tok-AAAA1111", "tok-AAAA1111", "qqqq5555",
                                "xyz987", "kkkk"]
    s = secrets_of(hdrs)
    line = b'{"e":"key tok-AAAA1111 and qqqq5555; kkkk","u":"sk-abcdefghijklmnop1234 x","v":"Bearer zzzzzzzzzz"}'
    assert redact(line, s) == (b'{"e":"key [REDACTED] and [REDACTED]; [REDACTED]","u":"[REDACTED] x",'
                               b'"v":"[REDACTED]"}')
    # a secret with characters JSON escapes is found in its escaped form too
    assert redact(b'{"m":"a\\"quote\\"b"}', ['a"quote"b']) == b'{"m":"[REDACTED]"}'
    assert retained_headers(hdrs + [("Accept", "Bearer tok-AAAA1111")], s) == {
        "content-type": "application/json", "user-agent": "Bearer-free agent"}


def test_writer_folder_sidecars_and_interrupted_lines(tmp_path):
    w = CaptureWriter(tmp_path / "W", origin_ns=1_000_000_000)
    t0 = 1_500_000_000
    slots = [w.admit("POST", "/v1/chat/completions", BODY, t0 + dt) for dt in (0, 250_000, 2_000_123_456)]
    assert [s.index for s in slots] == [0, 1, 2]
    w.complete(slots[1], status=200, outcome="complete", usage={"prompt_tokens": 5,
               "prompt_tokens_details": {"cached_tokens": 3}}, ttft_ns=4_000_000, e2e_ns=9_500_000)
    w.complete(slots[1], status=500, outcome="complete")  # a second call is ignored
    summary = w.close()
    assert summary.describe() == f"3 bodies ({3 * len(BODY)} bytes) retained; skipped: none"
    arrivals, plan = sidecar_paths(tmp_path / "W")
    assert json.loads(arrivals.read_text()) == [0.0, 0.25, 2000.123]
    specs, top = load_plan_toml(plan)
    assert top["workload"] == str(tmp_path / "W")
    assert [(s.name, s.concurrency, s.arrival) for s in specs] == [("capture", 64, f"trace:{arrivals}")]
    man = [json.loads(x) for x in (tmp_path / "W" / "capture.jsonl").read_text().splitlines()]
    assert [(m["index"], m["outcome"], m["status"]) for m in man] == [
        (1, "complete", 200), (0, "interrupted", None), (2, "interrupted", None)]
    assert man[0]["cached_tokens"] == 3 and man[0]["ttft_ms"] == 4.0 and man[0]["e2e_ms"] == 9.5
    assert man[0]["arrival_ms"] == 0.25 and man[0]["since_start_ms"] == 500.25
    assert sorted(p.name for p in (tmp_path / "W").iterdir()) == [
        "000000.json", "000001.json", "000002.json", "capture.jsonl"]
    assert len(load_workload(tmp_path / "W")) == 3


def test_writer_skips_and_refuses_a_used_folder(tmp_path):
    w = CaptureWriter(tmp_path / "W", max_body_bytes=100)
    assert w.admit("POST", "/v1/chat/completions", b'{"model": "m"}', 0) is None
    assert w.admit("POST", "/v1/chat/completions", BODY[:-1] + b',"pad":"' + b"x" * 60 + b'"}', 0) is None
    assert w.admit("POST", "/v1/chat/completions", BODY, 0, content_encoding="gzip") is None
    assert w.admit("PUT", "/v1/chat/completions", BODY, 0) is None
    assert w.admit("POST", "/v1/embeddings", BODY, 0) is None
    # issue 30 item 1: over the cap is "too_large" (the decoded size); BODY labelled gzip is not gzip: "encoding"
    assert w.close().skipped == {"invalid": 1, "too_large": 1, "encoding": 1, "method": 1, "path": 1}
    assert not sidecar_paths(tmp_path / "W")[1].exists()  # nothing retained: no plan
    with pytest.raises(ConfigError, match="exists and is not an empty folder"):
        CaptureWriter(tmp_path / "W")


def test_a_live_capture_plan_is_capped_at_the_observed_in_flight_maximum(tmp_path):
    """Issue 31 item 4: the plan's concurrency is what the client kept in flight, not 64."""
    w = CaptureWriter(tmp_path / "W", origin_ns=0, observed_concurrency=True)
    # arrivals and completions interleaved: in flight 1, 2, 3, then 2 after one ends, then 3 again
    a = w.admit("POST", "/v1/chat/completions", BODY, 10)
    b = w.admit("POST", "/v1/chat/completions", BODY, 20)
    c = w.admit("POST", "/v1/chat/completions", BODY, 30)
    w.complete(b, status=200, outcome="complete")
    d = w.admit("POST", "/v1/chat/completions", BODY, 40)
    for s in (a, c, d):
        w.complete(s, status=200, outcome="complete")
    e = w.admit("POST", "/v1/chat/completions", BODY, 50)
    w.complete(e, status=200, outcome="complete")
    w.close()
    _, plan = sidecar_paths(tmp_path / "W")
    specs, _ = load_plan_toml(plan)
    assert [s.concurrency for s in specs] == [3]
    assert "concurrency = the most requests in flight observed (3)" in plan.read_text().splitlines()[0]
    man = {m["index"]: m for m in map(json.loads, (tmp_path / "W" / "capture.jsonl").read_text().splitlines())}
    assert [man[i]["in_flight_at_arrival"] for i in range(5)] == [1, 2, 3, 3, 1]
