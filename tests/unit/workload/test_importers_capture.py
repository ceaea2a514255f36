"""``kvreplay import har`` and ``import openai-batch`` on files written here: exact bytes, skips, errors."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvreplay.cli import main
from kvreplay.errors import WorkloadError
from kvreplay.workload import importers_capture as ic
from kvreplay.workload import load_workload
from kvreplay.workload.importers_capture import body_value_span, import_har, import_openai_batch

# Hand-made bodies whose bytes a re-serialiser would change: spacing, key order, 1.50, \u00e9, \/.
CHAT_A = b'{"model" : "m", "messages":[{"role":"user","content":"caf\\u00e9 \\/ }]\\""}],  "temperature":1.50}'
CHAT_B = b'{"messages":[{"role":"system","content":"s"},{"role":"user","content":"x"}],"model":"m","stream":true}'
COMP_C = b'{"prompt":"hello  world","max_tokens":3}'


def har_entry(started: str, method: str, url: str, text: bytes | None = None, **extra) -> dict:
    req: dict = {"method": method, "url": url, "httpVersion": "HTTP/1.1",
                 "headers": [{"name": "Authorization", "value": "Bearer sk-har-secret-0123456789abcdef"},
                             {"name": "Content-Type", "value": "application/json"}],
                 "cookies": [{"name": "sid", "value": "cookie-har-777"}], "queryString": [],
                 "headersSize": -1, "bodySize": -1}
    if text is not None:
        req["postData"] = {"mimeType": "application/json", "text": text.decode()}
    e = {"startedDateTime": started, "time": 812.5, "request": req,
         "response": {"status": 200, "statusText": "OK", "httpVersion": "HTTP/1.1", "headers": [], "cookies": [],
                      "content": {"size": 0, "mimeType": "application/json", "text": ""},
                      "redirectURL": "", "headersSize": -1, "bodySize": -1},
         "cache": {}, "timings": {"send": 0, "wait": 100, "receive": 1}}
    e.update(extra)
    return e


def write_har(path: Path, entries: list[dict]) -> Path:
    path.write_bytes(orjson.dumps({"log": {"version": "1.2", "creator": {"name": "t", "version": "1"},
                                           "entries": entries}}))
    return path


SSE_USAGE = (
    'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n'
    'data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":1,'
    '"prompt_tokens_details":{"cached_tokens":4}}}\n\ndata: [DONE]\n\n'
)


def test_har_keeps_post_data_bytes_orders_by_start_and_skips_the_rest(tmp_path, capsys):
    sse_resp = {"status": 200, "content": {"mimeType": "text/event-stream", "text": SSE_USAGE}}
    entries = [
        har_entry("2025-03-01T10:00:01.250+00:00", "POST", "https://api.example/v1/chat/completions?x=1", CHAT_B,
                  response=sse_resp),
        har_entry("2025-03-01T10:00:00.000Z", "POST", "https://api.example/v1/chat/completions", CHAT_A),
        har_entry("2025-03-01T10:00:00.500Z", "GET", "https://api.example/v1/models"),
        har_entry("2025-03-01T10:00:00.600Z", "POST", "https://api.example/v1/embeddings", b'{"input":"x"}'),
        har_entry("2025-03-01T11:00:02.000+01:00", "POST", "https://api.example/v1/completions", COMP_C),
        har_entry("2025-03-01T10:00:03.000Z", "POST", "https://api.example/v1/completions"),  # no postData
    ]
    src = write_har(tmp_path / "s.har", entries)
    w = tmp_path / "W"
    assert main(["import", "har", str(src), "--out", str(w)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == (f"3 bodies ({len(CHAT_A) + len(CHAT_B) + len(COMP_C)} bytes) retained; "
                                   f"skipped: method 1, no postData 1, path 1 -> {w}")
    wl = load_workload(w)
    assert [b.raw for b in wl.bodies] == [CHAT_A, CHAT_B, COMP_C]  # by startedDateTime, exact bytes
    # 10:00:00.000, 10:00:01.250, 11:00:02+01:00 = 10:00:02.000 UTC
    assert json.loads((tmp_path / "W.arrivals.json").read_text()) == [0.0, 1250.0, 2000.0]
    man = [json.loads(x) for x in (w / "capture.jsonl").read_text().splitlines()]
    assert [m["source"] for m in man] == ["s.har:log.entries[1]", "s.har:log.entries[0]", "s.har:log.entries[4]"]
    assert [m["cached_tokens"] for m in man] == [None, 4, None]
    assert [m["e2e_ms"] for m in man] == [812.5] * 3 and [m["status"] for m in man] == [200] * 3
    assert [m["path"] for m in man] == ["/v1/chat/completions", "/v1/chat/completions", "/v1/completions"]
    on_disk = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file() and p != src)
    on_disk += b"".join(p.read_bytes() for p in w.iterdir())
    assert b"sk-har-secret" not in on_disk and b"cookie-har-777" not in on_disk
    assert man[0]["headers"] == {"content-type": "application/json"}
    assert main(["run", str(w), "--target", "sim", "--sim-time-scale", "0", "--phase", "r:forward:c1",
                 "--out", str(tmp_path / "run"), "--quiet"]) == 0


def test_har_base64_post_data_and_path_filter(tmp_path):
    e = har_entry("2025-03-01T10:00:00Z", "POST", "http://h/custom/gen", None)
    e["request"]["postData"] = {"mimeType": "application/json", "encoding": "base64",
                                "text": base64.b64encode(CHAT_A).decode()}
    res = import_har(write_har(tmp_path / "b.har", [e, har_entry("2025-03-01T10:00:01Z", "POST",
                                                                   "http://h/v1/chat/completions", CHAT_B)]),
                     tmp_path / "W", paths=("/custom/gen",))
    assert (res.summary.retained, res.summary.skipped) == (1, {"path": 1})
    assert (tmp_path / "W" / "000000.json").read_bytes() == CHAT_A


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.pop("log"), "b.har, field 'log': missing or not an object"),
        (lambda d: d["log"]["entries"][1].__setitem__("startedDateTime", "yesterday"),
         "b.har, field 'log.entries[1].startedDateTime': not an ISO 8601 date-time: 'yesterday'"),
        (lambda d: d["log"]["entries"][1]["request"].pop("url"),
         "b.har, field 'log.entries[1].request.url': missing or not a string"),
        (lambda d: d["log"]["entries"][1]["request"]["postData"].__setitem__("text", '{"model":"m"}'),
         "b.har, field 'log.entries[1].request.postData.text (body field messages)': neither 'messages' (chat) "
         "nor 'prompt' (completions): not a generation request"),
        (lambda d: d["log"]["entries"][1]["request"]["postData"].__setitem__("text", "{oops"),
         "b.har, field 'log.entries[1].request.postData.text': body is not valid JSON"),
    ],
)
def test_har_errors_name_the_field(tmp_path, mutate, message, capsys):
    doc = {"log": {"version": "1.2", "entries": [
        har_entry("2025-03-01T10:00:00Z", "POST", "http://h/v1/chat/completions", CHAT_A),
        har_entry("2025-03-01T10:00:01Z", "POST", "http://h/v1/chat/completions", CHAT_B)]}}
    mutate(doc)
    src = tmp_path / "b.har"
    src.write_bytes(orjson.dumps(doc))
    with pytest.raises(WorkloadError) as ei:
        import_har(src, tmp_path / "W")
    assert str(ei.value).replace(str(tmp_path) + "/", "").startswith(message)
    assert not (tmp_path / "W").exists()  # nothing written for a bad file
    assert main(["import", "har", str(src), "--out", str(tmp_path / "W")]) == 2
    assert "kvreplay: error: " in capsys.readouterr().err


def test_har_without_generation_entries_is_an_error_with_the_counts(tmp_path):
    src = write_har(tmp_path / "n.har", [har_entry("2025-03-01T10:00:00Z", "GET", "http://h/v1/models")])
    with pytest.raises(WorkloadError, match=r"no generation request .* skipped: method 1$"):
        import_har(src, tmp_path / "W")


def batch_line(cid: str, url: str, body: bytes, *, order: str = "cmub") -> bytes:
    parts = {"c": b'"custom_id": "' + cid.encode() + b'"', "m": b'"method":"POST"',
             "u": b'"url": "' + url.encode() + b'"', "b": b'"body" :  ' + body}
    return b"{" + b", ".join(parts[k] for k in order) + b"}"


def test_batch_takes_the_exact_byte_span_of_body(tmp_path, capsys):
    lines = [
        batch_line("r1", "/v1/chat/completions", CHAT_A),
        b"",
        batch_line("r2", "/v1/embeddings", b'{"input": "x", "model": "e"}'),
        batch_line("r3", "/v1/completions", COMP_C, order="bcmu"),  # body first
        b'{"custom_id":"r4","method":"GET","url":"/v1/chat/completions","body":{}}',
        batch_line("r5", "/v1/chat/completions", CHAT_B) + b"\r",
    ]
    src = tmp_path / "batch.jsonl"
    src.write_bytes(b"\n".join(lines) + b"\n")
    w = tmp_path / "W"
    assert main(["import", "openai-batch", str(src), "--out", str(w)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (f"3 bodies ({len(CHAT_A) + len(COMP_C) + len(CHAT_B)} bytes) retained; "
                      f"skipped: method 1, path 1 -> {w}")
    assert not any("re-serialised" in x for x in out) and not any("arrivals" in x for x in out)
    assert [b.raw for b in load_workload(w).bodies] == [CHAT_A, COMP_C, CHAT_B]
    man = [json.loads(x) for x in (w / "capture.jsonl").read_text().splitlines()]
    assert [(m["custom_id"], m["source"], m["reserialised"]) for m in man] == [
        ("r1", "batch.jsonl:1", False), ("r3", "batch.jsonl:4", False), ("r5", "batch.jsonl:6", False)]
    assert not (tmp_path / "W.arrivals.json").exists()
    plan = (tmp_path / "W.plan.toml").read_text()
    assert "arrival" not in plan and "concurrency = 64" in plan


def test_batch_falls_back_to_reserialising_and_says_so(tmp_path, monkeypatch, capsys):
    src = tmp_path / "b.jsonl"
    src.write_bytes(batch_line("r1", "/v1/chat/completions", CHAT_A) + b"\n"
                    + batch_line("r2", "/v1/chat/completions", CHAT_B) + b"\n")
    real = ic.body_value_span
    monkeypatch.setattr(ic, "body_value_span", lambda line: None if b'"r2"' in line else real(line))
    assert main(["import", "openai-batch", str(src), "--out", str(tmp_path / "W")]) == 0
    out = capsys.readouterr().out
    assert "  re-serialised (exact bytes of 'body' not found in the line): b.jsonl:2 (custom_id r2)\n" in out
    bodies = [b.raw for b in load_workload(tmp_path / "W").bodies]
    assert bodies == [CHAT_A, orjson.dumps(orjson.loads(CHAT_B))]
    man = [json.loads(x) for x in (tmp_path / "W" / "capture.jsonl").read_text().splitlines()]
    assert [m["reserialised"] for m in man] == [False, True]


@pytest.mark.parametrize(
    "line, message",
    [
        (b'{"custom_id": "r", "method": "POST", "url": "/v1/chat/completions"', "b.jsonl:2: not JSON"),
        (b'["a"]', "b.jsonl:2: not a JSON object"),
        (b'{"custom_id": "r", "method": "POST", "url": "/v1/chat/completions"}',
         "b.jsonl:2, field 'body': missing or not an object"),
        (b'{"custom_id": 7, "method": "POST", "url": "/v1/chat/completions", "body": {}}',
         "b.jsonl:2, field 'custom_id': missing or not a string"),
        (b'{"custom_id": "r", "method": "POST", "url": "/v1/chat/completions", "body": {"model": "m"}}',
         "b.jsonl:2, field 'body.messages': neither 'messages' (chat) nor 'prompt' (completions)"),
        (b'{"custom_id": "r", "method": "POST", "url": "/v1/completions", "body": {"prompt": 5}}',
         "b.jsonl:2, field 'body.prompt': must be a string or a list"),
    ],
)
def test_batch_errors_name_line_and_field(tmp_path, line, message):
    src = tmp_path / "b.jsonl"
    src.write_bytes(batch_line("ok", "/v1/chat/completions", CHAT_A) + b"\n" + line + b"\n")
    with pytest.raises(WorkloadError) as ei:
        import_openai_batch(src, tmp_path / "W")
    assert str(ei.value).replace(str(tmp_path) + "/", "").startswith(message)
    assert not (tmp_path / "W").exists()


@pytest.mark.parametrize(
    "line, key, want",
    [
        (b'{"a":1,"body":{"x":[1,{"y":"}]\\""}]},"c":2}', "body", b'{"x":[1,{"y":"}]\\""}]}'),
        (b' { "body" : "s\\"t" , "z": null } ', "body", b'"s\\"t"'),
        (b'{"body":1,"body":[2]}', "body", b"[2]"),  # duplicate: the last, as orjson
        (b'{"bod\\u0079": -1.5e3}', "body", b"-1.5e3"),  # escaped key
        (b'{"a": {"body": 1}}', "body", None),  # not top level
        (b"[1]", "body", None),
    ],
)
def test_body_value_span(line, key, want):
    span = body_value_span(line, key)
    assert (line[span[0] : span[1]] if span else None) == want


def test_mooncake_import_is_unchanged(tmp_path, capsys):
    src = tmp_path / "t.jsonl"
    src.write_bytes(b'{"timestamp": 0, "input_length": 8, "output_length": 2, "hash_ids": [1]}\n')
    assert main(["import", "mooncake", str(src), "--out", str(tmp_path / "mc"), "--block-tokens", "8"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == f"1 bodies (8 prompt tokens, simulator tokenizer) -> {tmp_path / 'mc.jsonl'}"


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)


def _dump(v, ws: str, escape: bool) -> str:
    """JSON text of ``v`` with ``ws`` around every token and optional \\u escapes (what orjson never writes)."""
    if isinstance(v, dict):
        return "{" + ws + ("," + ws).join(_dump(k, ws, escape) + ws + ":" + ws + _dump(x, ws, escape)
                                        for k, x in v.items()) + ws + "}"
    if isinstance(v, list):
        return "[" + ws + ("," + ws).join(_dump(x, ws, escape) for x in v) + ws + "]"
    return json.dumps(v, ensure_ascii=escape)


@settings(max_examples=300, deadline=None)
@given(body=_json_values, other=_json_values, ws=st.sampled_from(["", " ", "\t ", " \n"]), escape=st.booleans(),
       first=st.booleans())
def test_body_value_span_is_the_value_for_any_formatting(body, other, ws, escape, first):
    items = [("body", body), ("custom_id", other)] if first else [("custom_id", other), ("body", body)]
    line = _dump(dict(items), ws, escape).encode()
    span = body_value_span(line)
    assert span is not None
    assert orjson.loads(line[span[0] : span[1]]) == body
    assert line[span[0] : span[1]].decode() == _dump(body, ws, escape)  # the exact bytes, not a re-dump
