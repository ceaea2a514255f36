"""The recording proxy against hand-written upstreams: transparency, secrets, limits, paths.

Everything runs in one event loop: an aiohttp upstream that notes what it received, the
proxy (``RecordingProxy`` + ``CaptureWriter``), and an aiohttp client.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import io
import json
import socket
from pathlib import Path

import aiohttp
import orjson
import pytest
from aiohttp import web
from yarl import URL

from kvreplay.api import serving
from kvreplay.cli import main
from kvreplay.commands import record as record_cmd
from kvreplay.recorder._proxy import RecordingProxy
from kvreplay.workload import load_workload
from kvreplay.workload.capture import CaptureWriter

KEY = "sk-test-0123456789abcdefghijKLMN"
COOKIE = "sessid=c00kie-value-42"
XKEY = "x-api-secret-value-77"


def chat(content: str, *, stream: bool = True, pad: str = "") -> bytes:
    # hand-made bytes: odd spacing and an escaped unicode character, kept exactly
    s = "true" if stream else "false"
    return (f'{{"model": "m",  "messages":[{{"role":"user","content":"{content}\\u00e9"}}]{pad},'
            f'"stream": {s}, "stream_options":{{"include_usage":true}}}}').encode()


def sse(events: list[dict]) -> list[bytes]:
    return [b"data: " + orjson.dumps(e) + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]


MALFORMED_STREAM = [b'data: {"choices":[{"index":0,"delta":{"content":"ok"}}]}\n\n', b"data: {not json\n\n",
                    b'data: {"choices":[],"usage":{"prompt_tokens":3}}\n\n', b"data: " + b"x" * (2 << 20) + b"\n\n"]


class Upstream:
    """Notes each request (method, path, headers, body); answers by body content."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, list[tuple[str, str]], bytes]] = []
        self.gap = asyncio.Event()
        self.sent_first: float | None = None

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        return app

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.seen.append((request.method, request.path_qs, list(request.headers.items()), body))
        if request.path == "/v1/models":
            return web.json_response({"object": "list", "data": [{"id": "m"}]})
        if request.path == "/gz":
            return web.Response(body=gzip.compress(b"hello" * 10), headers={"Content-Encoding": "gzip",
                                                                           "Content-Type": "text/plain"})
        if not request.path.startswith("/v1/"):
            return web.Response(text="other", headers={"X-Up": "1"})
        auth = request.headers.get("Authorization", "")
        if b"MALFORMED" in body:  # a hostile stream: a broken event, then a huge line
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for chunk in MALFORMED_STREAM:
                await resp.write(chunk)
            await resp.write_eof()
            return resp
        if b"ECHO-ERROR" in body:  # a 401 JSON error that quotes the key
            return web.json_response({"error": {"message": f"Invalid API key {auth} provided"}}, status=401,
                                     headers={"X-Echo": auth})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "X-Echo": auth,
                                           "X-Upstream": "yes"})
        await resp.prepare(request)
        events = [
            {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
            {"choices": [{"index": 0, "delta": {"content": f"your key {auth}"}}]},
            {"choices": [{"index": 0, "delta": {"content": " and cookie " + request.headers.get("Cookie", "")}}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            {"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13,
                                      "prompt_tokens_details": {"cached_tokens": 7}, "echo": auth}},
        ]
        for i, chunk in enumerate(sse(events)):
            await resp.write(chunk)
            if i == 1 and b"SLOW" in body:
                self.sent_first = asyncio.get_running_loop().time()
                await asyncio.sleep(0.4)
        await resp.write_eof()
        return resp


@contextlib.asynccontextmanager
async def stack(tmp_path: Path, **writer_kw):
    up = Upstream()
    runner = web.AppRunner(up.app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    log = io.StringIO()
    writer = CaptureWriter(tmp_path / "W", **writer_kw)
    proxy = RecordingProxy(f"http://127.0.0.1:{port}", writer, log=log)
    url = await proxy.start()
    try:
        async with aiohttp.ClientSession(auto_decompress=False) as client:
            yield up, proxy, url, client, log
    finally:
        await proxy.stop()
        await runner.cleanup()


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 30))


def test_forwards_exact_bytes_and_headers_streams_unbuffered_and_keeps_no_secret(tmp_path):
    hdrs = {"Authorization": f"Bearer {KEY}", "Cookie": COOKIE, "X-Api-Key": XKEY,
            "Content-Type": "application/json", "X-Custom": "kept-on-the-wire", "User-Agent": "agent/1"}
    b0, b1 = chat("SLOW hello"), chat("ECHO-ERROR", stream=False)

    async def go():
        async with stack(tmp_path) as (up, proxy, url, client, log):
            loop = asyncio.get_running_loop()
            got: list[tuple[float, bytes]] = []
            async with client.post(URL(url + "/v1/chat/completions?x=%7e1&y=a%2Fb", encoded=True), data=b0,
                                   headers=hdrs) as r:
                assert r.status == 200 and r.headers["X-Upstream"] == "yes"
                assert r.headers["X-Echo"] == f"Bearer {KEY}"  # relayed unchanged to the client
                async for chunk in r.content.iter_any():
                    got.append((loop.time(), chunk))
            async with client.post(url + "/v1/chat/completions", data=b1, headers=hdrs) as r:
                assert r.status == 401
                err = await r.json()
            async with client.get(url + "/v1/models", headers=hdrs) as r:
                models = await r.json()
            async with client.get(url + "/gz") as r:
                gz = await r.read()
                assert r.headers["Content-Encoding"] == "gzip"
            return up, got, err, models, gz

    up, got, err, models, gz = run(go())
    # Upstream received the exact bytes and the client's headers, nothing added but Host/Content-Length.
    assert [s[3] for s in up.seen[:2]] == [b0, b1]
    assert up.seen[0][:2] == ("POST", "/v1/chat/completions?x=%7e1&y=a%2Fb")  # not re-quoted
    names = {k.lower() for k, _ in up.seen[0][2]}
    assert names == {"host", "content-length", "authorization", "cookie", "x-api-key", "content-type",
                     "x-custom", "user-agent", "accept", "accept-encoding"}  # accept*: the test client's own
    assert dict(up.seen[0][2])["X-Custom"] == "kept-on-the-wire"
    # Unbuffered: the first token chunk reached the client before the upstream's 0.4 s pause ended.
    text = b"".join(c for _, c in got)
    assert text.startswith(b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n')
    assert text.endswith(b"data: [DONE]\n\n") and text.count(b"\n\n") == 6
    assert KEY.encode() in text  # the client sees the echo: the proxy does not alter responses
    first_token_t = next(t for t, c in got if b"your key" in c)
    assert first_token_t < up.sent_first + 0.2 and got[-1][0] >= up.sent_first + 0.35
    assert err == {"error": {"message": f"Invalid API key Bearer {KEY} provided"}}
    assert models["data"] == [{"id": "m"}] and gzip.decompress(gz) == b"hello" * 10
    # Only the two generation bodies are retained; no secret is anywhere on disk.
    w = tmp_path / "W"
    assert sorted(p.name for p in w.iterdir()) == ["000000.json", "000001.json", "capture.jsonl"]
    assert (w / "000000.json").read_bytes() == b0 and (w / "000001.json").read_bytes() == b1
    on_disk = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())
    for secret in (KEY, COOKIE, "c00kie-value-42", XKEY):
        assert secret.encode() not in on_disk, secret
    man = [json.loads(x) for x in (w / "capture.jsonl").read_text().splitlines()]
    assert man[0]["headers"] == {"content-type": "application/json", "user-agent": "agent/1",
                                 "accept": "*/*"}
    assert man[0]["usage"] == {"prompt_tokens": 11, "completion_tokens": 2, "total_tokens": 13,
                               "prompt_tokens_details": {"cached_tokens": 7}, "echo": "[REDACTED]"}
    assert man[0]["cached_tokens"] == 7 and man[0]["status"] == 200 and man[0]["outcome"] == "complete"
    assert man[0]["ttft_ms"] < 300 and man[0]["e2e_ms"] >= 400
    assert man[1]["status"] == 401 and man[1]["error"] == "Invalid API key [REDACTED] provided"
    assert man[1]["usage"] is None and man[1]["ttft_ms"] is None and man[1]["stream"] is False


def test_a_body_holding_the_key_is_not_retained(tmp_path):
    hdrs = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}

    async def go():
        async with stack(tmp_path) as (up, proxy, url, client, log):
            for b in (chat("a"), chat(f"my key is {KEY}"), chat("c")):
                async with client.post(url + "/v1/chat/completions", data=b, headers=hdrs) as r:
                    assert r.status == 200
                    await r.read()
            return proxy.writer.summary

    s = run(go())
    assert (s.retained, s.skipped) == (2, {"secret": 1})  # issue 30 item 4: one reason for every secret
    wl = load_workload(tmp_path / "W")
    assert [b.raw for b in wl.bodies] == [chat("a"), chat("c")]
    assert KEY.encode() not in b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())


@pytest.mark.parametrize(
    "kw, retained, skipped, said",
    [
        ({"max_bodies": 2}, [0, 1], {"limit": 3, "path": 1, "method": 1, "invalid": 1}, "--max-bodies 2"),
        # bodies are 122, 132, 142, 152, 162 bytes: 122 + 132 = 254 <= 300, + 142 = 396 > 300 at body 2
        ({"max_bytes": 300}, [0, 1], {"limit": 3, "path": 1, "method": 1, "invalid": 1}, "--max-bytes 300"),
        ({}, [0, 1, 2, 3, 4], {"path": 1, "method": 1, "invalid": 1}, None),
    ],
)
def test_limits_stop_retaining_but_not_proxying(tmp_path, kw, retained, skipped, said):
    bodies = [chat(f"q{i}", pad=" " * (10 * i)) for i in range(5)]
    assert [len(b) for b in bodies] == [122, 132, 142, 152, 162]

    async def go():
        async with stack(tmp_path, **kw) as (up, proxy, url, client, log):
            statuses = []
            async with client.post(url + "/v1/chat/completions", data=b'{"not": "a generation"}') as r:
                statuses.append(r.status)  # invalid: proxied, not retained, not counted for limits
                await r.read()
            for b in bodies:
                async with client.post(url + "/v1/chat/completions", data=b) as r:
                    statuses.append(r.status)
                    await r.read()
            async with client.post(url + "/tokenize", data=b'{"prompt": "x"}') as r:
                statuses.append(r.status)
            async with client.get(url + "/v1/completions") as r:
                statuses.append(r.status)
            return statuses, proxy.writer.summary, log.getvalue(), len(up.seen)

    statuses, s, log, n_up = run(go())
    assert statuses == [200] * 8 and n_up == 8  # every request reached the upstream
    assert s.skipped == skipped and s.retained == len(retained) and s.limit_reached == said
    assert s.retained_bytes == sum(len(bodies[i]) for i in retained)
    w = tmp_path / "W"
    assert [b.raw for b in load_workload(w).bodies] == [bodies[i] for i in retained]
    assert len((w / "capture.jsonl").read_bytes().splitlines()) == len(retained)
    if said:
        assert log == f"kvreplay record: {said} reached: no longer retaining bodies (still proxying)\n"
    else:
        assert log == ""
    plan = (tmp_path / "W.plan.toml").read_text()
    assert plan.startswith(f"# kvreplay record: {s.describe()}\n")


def test_cli_refuses_bad_options_and_a_used_folder(tmp_path, capsys, monkeypatch):
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x.json").write_text("{}")
    base = ["record", "--upstream", "http://127.0.0.1:9", "--duration", "0.01"]
    assert main([*base, "--out", str(tmp_path / "used")]) == 2
    assert "exists and is not an empty folder" in capsys.readouterr().err
    assert main([*base, "--out", str(tmp_path / "a"), "--listen", "nohost"]) == 2
    assert "field '--listen': must be HOST:PORT" in capsys.readouterr().err
    assert main([*base, "--out", str(tmp_path / "b"), "--max-bytes", "lots"]) == 2
    assert "not a size: 'lots'" in capsys.readouterr().err
    assert main(["record", "--upstream", "ftp://x", "--out", str(tmp_path / "c")]) == 2
    assert main([*base, "--out", str(tmp_path / "d"), "--paths", "v1/chat"]) == 2
    # loopback by default, no warning; a non-loopback address warns
    assert main([*base, "--out", str(tmp_path / "e")]) == 0
    cap = capsys.readouterr()
    assert "listening on http://127.0.0.1:" in cap.out and "not loopback" not in cap.err
    assert "0 requests proxied; 0 bodies (0 bytes) retained; skipped: none" in cap.err
    monkeypatch.setattr(serving, "is_loopback", lambda host: False)  # tests bind loopback only
    assert main([*base, "--out", str(tmp_path / "f")]) == 0
    assert "warning: listening on 127.0.0.1, not loopback" in capsys.readouterr().err
    with socket.socket() as busy:  # a port in use: exit 2, and no capture folder left behind
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert main([*base, "--out", str(tmp_path / "g"), "--listen", f"127.0.0.1:{port}"]) == 2
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err
    assert not (tmp_path / "g").exists()
    assert record_cmd.parse_listen("8100") == ("127.0.0.1", 8100)
    assert record_cmd.parse_listen("[::1]:8100") == ("::1", 8100)
    assert record_cmd.parse_listen("0.0.0.0:80") == ("0.0.0.0", 80)


def test_upstream_cut_client_gone_and_unreachable_are_recorded(tmp_path):
    """A cut stream is passed on as a cut; a client that leaves; no upstream at all (502)."""

    async def cut(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"choices":[{"index":0,"delta":{"content":"half"}}]}\n\n')
        if b"LONG" in await request.read():
            for _ in range(200):
                await asyncio.sleep(0.01)
                await resp.write(b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n')
        request.transport.close()  # the upstream dies mid-answer
        return resp

    async def go():
        app = web.Application()
        app.router.add_post("/v1/chat/completions", cut)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        writer = CaptureWriter(tmp_path / "W")
        proxy = RecordingProxy(f"http://127.0.0.1:{port}", writer, log=io.StringIO())
        url = await proxy.start()
        seen = []
        try:
            async with aiohttp.ClientSession() as client:
                async with client.post(url + "/v1/chat/completions", data=chat("a")) as r:
                    with pytest.raises(aiohttp.ClientPayloadError):
                        await r.read()
                    seen.append(r.status)
                r = await client.post(url + "/v1/chat/completions", data=chat("LONG"))
                await r.content.readany()
                r.close()  # the client leaves mid-stream
                await asyncio.sleep(0.3)
            await runner.cleanup()  # now nothing listens there: 502
            async with aiohttp.ClientSession() as client, client.post(url + "/v1/chat/completions",
                                                                      data=chat("c")) as r:
                seen.append((r.status, await r.json()))
        finally:
            await proxy.stop()
        return seen

    seen = run(go())
    assert seen[0] == 200
    assert seen[1] == (502, {"error": {"message": "kvreplay record: upstream unreachable: ClientConnectorError",
                                       "type": "bad_gateway"}})
    man = sorted((json.loads(x) for x in (tmp_path / "W" / "capture.jsonl").read_text().splitlines()),
                 key=lambda m: m["index"])
    assert [(m["outcome"], m["status"]) for m in man] == [
        ("upstream_cut", 200), ("client_gone", 200), ("upstream_error", None)]
    assert man[2]["error"] == "upstream unreachable: ClientConnectorError"
    assert [b.raw for b in load_workload(tmp_path / "W").bodies] == [chat("a"), chat("LONG"), chat("c")]


def test_a_hostile_stream_is_relayed_whole_and_accounting_stops(tmp_path):
    async def go():
        async with stack(tmp_path) as (up, proxy, url, client, log), \
                client.post(url + "/v1/chat/completions", data=chat("MALFORMED")) as r:
            return await r.read()

    assert run(go()) == b"".join(MALFORMED_STREAM)  # every byte relayed, 2 MiB line included
    (m,) = [json.loads(x) for x in (tmp_path / "W" / "capture.jsonl").read_text().splitlines()]
    assert (m["outcome"], m["status"], m["usage"], m["cached_tokens"]) == ("complete", 200, None, None)
    assert 0 < m["ttft_ms"] <= m["e2e_ms"]  # the first token came before the broken event


def test_each_upstream_chunk_reaches_the_client_as_it_arrives(tmp_path):
    # NEWUSER 13(d): the proxy relays each upstream read at once (iter_any, written before the
    # next read); with a pause between the upstream's chunks each reaches the client alone,
    # exactly as sent, a pause apart. (Chunks closer together than the proxy's own per-read
    # turnaround, ~0.1 ms, can share a read; see docs/capture.md.)
    chunks = [b'data: {"choices":[{"index":0,"delta":{"content":"t%d"}}]}\n\n' % i for i in range(4)]
    chunks.append(b"data: [DONE]\n\n")
    pause = 0.08

    async def paced(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i, c in enumerate(chunks):
            if i:
                await asyncio.sleep(pause)
            await resp.write(c)
        await resp.write_eof()
        return resp

    async def go():
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", paced)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]
        proxy = RecordingProxy(f"http://127.0.0.1:{port}", CaptureWriter(tmp_path / "W"), log=io.StringIO())
        url = await proxy.start()
        loop = asyncio.get_running_loop()
        got: list[tuple[float, bytes]] = []
        try:
            async with aiohttp.ClientSession() as client, client.post(
                url + "/v1/chat/completions", data=chat("paced"), headers={"Content-Type": "application/json"}
            ) as r:
                async for chunk in r.content.iter_any():
                    got.append((loop.time(), chunk))
        finally:
            await proxy.stop()
            await runner.cleanup()
        return got

    got = run(go())
    assert [c for _, c in got] == chunks  # one client read per upstream chunk, bytes unchanged
    gaps = [b[0] - a[0] for a, b in zip(got, got[1:], strict=False)]
    assert len(gaps) == 4 and min(gaps) >= pause - 0.01, gaps


async def _raw_exchange(url: str, head: bytes) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = URL(url).host, URL(url).port
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(head)
    await writer.drain()
    return reader, writer


def test_expect_100_continue_is_answered_before_the_body_and_not_forwarded(tmp_path):
    """The proxy answers ``Expect: 100-continue`` itself (RFC 9110 10.1.1), then relays the body exactly.

    A client that waits for the interim response before sending its body would hang if the
    proxy only forwarded; an unknown expectation gets 417 and reaches nothing upstream.
    """
    body = chat("expect me")

    async def go():
        async with stack(tmp_path) as (up, proxy, url, _client, _log):
            head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\n"
                    b"Content-Length: %d\r\nExpect: 100-continue\r\n\r\n" % len(body))
            reader, writer = await _raw_exchange(url, head)
            interim = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)  # before any body byte is sent
            writer.write(body)
            await writer.drain()
            status = await asyncio.wait_for(reader.readline(), 5)
            rest = await asyncio.wait_for(reader.readuntil(b"0\r\n\r\n"), 5)
            writer.close()
            reader2, writer2 = await _raw_exchange(
                url, b"POST /v1/chat/completions HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n"
                     b"Expect: teapot\r\nConnection: close\r\n\r\n{}")
            refused = await asyncio.wait_for(reader2.read(), 5)
            writer2.close()
            return interim, status, rest, refused, list(up.seen), proxy.requests

    interim, status, rest, refused, seen, requests = run(go())
    assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
    assert status == b"HTTP/1.1 200 OK\r\n"
    assert b"cached_tokens" in rest and rest.endswith(b"0\r\n\r\n")
    assert refused.startswith(b"HTTP/1.1 417 ") and b"Unknown Expect: teapot" in refused
    assert len(seen) == 1  # the refused request went nowhere
    method, path, headers, got = seen[0]
    assert (method, path, got) == ("POST", "/v1/chat/completions", body)
    assert "expect" not in {k.lower() for k, _ in headers}
    assert requests == 1
    w = load_workload(tmp_path / "W")
    assert [b.raw for b in w.bodies] == [body]
