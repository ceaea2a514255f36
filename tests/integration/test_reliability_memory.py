"""Issue 9: bounded client memory on huge responses.

A small raw-asyncio server, run in its own process so that its buffers do not
count, answers every POST with one huge response; ``kvreplay run`` runs in a
second process that prints its peak RSS (``VmHWM``) when it exits. The growth
is that peak minus the peak of the same client against a tiny response.

Responses (``MODE TOTAL_BYTES``):
    big-events   SSE, chunked, token events of 64 KiB of content each
    small-events SSE, chunked, token events of about 100 bytes each
    one-line     SSE, one ``data:`` line that never ends (TOTAL bytes, no LF)
    json         ``application/json`` (Content-Length), one chat.completion whose
                 content is TOTAL bytes

What is kept per request is bounded by design: a 256-character text head and
a 1 MiB line limit (``malformed`` / ``line_too_long``); token arrival times are
an ``array('q')`` (8 bytes per token event) and their gaps are recorded in
bounded numpy blocks: the small-events test measures that.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import write_chat_workload

MIB = 1 << 20

SERVER = r"""
import asyncio, re, sys

MODE, TOTAL = sys.argv[1], int(sys.argv[2])

def event(obj_text):
    return b"data: " + obj_text.encode() + b"\n\n"

def chunk(payload):
    return b"%x\r\n" % len(payload) + payload + b"\r\n"

def token_event(text):
    return event('{"choices":[{"index":0,"delta":{"content":"%s"},"finish_reason":null}]}' % text)

TAIL = (event('{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}')
        + event('{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}')
        + b"data: [DONE]\n\n")

async def handle(reader, writer):
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        n = int(re.search(rb"(?i)content-length:\s*(\d+)", head).group(1))
        await reader.readexactly(n)
        if MODE == "json":
            content = b"x" * (1 << 20)
            pre = (b'{"object":"chat.completion","choices":[{"index":0,"finish_reason":"stop",'
                   b'"message":{"role":"assistant","content":"')
            post = b'"}}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}'
            reps = max(1, TOTAL // len(content))
            size = len(pre) + reps * len(content) + len(post)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Connection: close\r\nContent-Length: %d\r\n\r\n" % size + pre)
            for _ in range(reps):
                writer.write(content)
                await writer.drain()
            writer.write(post)
        else:
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                         b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
            if MODE == "one-line":
                writer.write(chunk(b"data: {\"choices\":[{\"delta\":{\"content\":\""))
                piece = chunk(b"y" * (64 << 10))
            elif MODE == "big-events":
                piece = chunk(token_event("b" * ((64 << 10) - 80)))
            else:  # small-events: ~100-byte events, 64 KiB per HTTP chunk
                ev = token_event("tok")
                piece = chunk(ev * ((64 << 10) // len(ev)))
            sent = 0
            while sent < TOTAL:
                writer.write(piece)
                sent += len(piece)
                await writer.drain()
            if MODE != "one-line":
                writer.write(chunk(TAIL) + b"0\r\n\r\n")
        await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()

async def main():
    srv = await asyncio.start_server(handle, "127.0.0.1", 0)
    print(srv.sockets[0].getsockname()[1], flush=True)
    async with srv:
        await srv.serve_forever()

asyncio.run(main())
"""

CLIENT = r"""
import json, sys
import kvreplay.api.run as run_cmd
from kvreplay.cli import main
run_cmd.write_html_report = lambda out: None  # plotting's own peak would hide the stream's
rc = main(json.loads(sys.argv[1]))
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM:")][0].split()[1]
print("RESULT", rc, hwm, flush=True)
"""


class HugeServer:
    """The server script above in a subprocess (stopped by its PID)."""

    def __init__(self, mode: str, total_bytes: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, mode, str(total_bytes)],
            stdout=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{int(line)}"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.proc.stdout.close()  # type: ignore[union-attr]


def run_client(tmp_path: Path, mode: str, total_bytes: int, *extra: str) -> tuple[int, int, dict]:
    """Run ``kvreplay run`` on one body against the server; (exit code, peak RSS KiB, record)."""
    wl = write_chat_workload(tmp_path / f"wl-{mode}-{total_bytes}", [("s", "q")])
    out = tmp_path / f"out-{mode}-{total_bytes}"
    srv = HugeServer(mode, total_bytes)
    try:
        argv = ["run", str(wl), "--target", srv.url, "--backend", "none", "--phase", "a:forward:c1"]
        argv += ["--read-timeout", "20", "--out", str(out), "--quiet", *extra]
        proc = subprocess.run(
            [sys.executable, "-c", CLIENT, json.dumps(argv)],
            capture_output=True,
            text=True,
            timeout=55,
        )
    finally:
        srv.stop()
    m = re.search(r"RESULT (\d+) (\d+)", proc.stdout)
    assert m, proc.stderr[-2000:]
    (rec,) = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    return int(m.group(1)), int(m.group(2)), rec


@pytest.fixture(scope="module")
def baseline_kib(tmp_path_factory) -> int:
    """Peak RSS of the client for a 64 KiB stream (everything but the response's own cost)."""
    rc, kib, rec = run_client(tmp_path_factory.mktemp("base"), "big-events", 64 << 10)
    assert rc == 0 and rec["status"] == "ok"
    return kib


@pytest.mark.slow
def test_200mb_of_large_events_keeps_memory_flat(tmp_path, baseline_kib):
    rc, kib, rec = run_client(tmp_path, "big-events", 200 * MIB)
    assert rc == 0 and rec["status"] == "ok"
    assert rec["content_deltas"] >= 3000  # 200 MiB / 64 KiB: the whole stream was read
    assert len(rec["text_head"]) == 256  # the head only
    growth_mib = (kib - baseline_kib) / 1024
    assert growth_mib < 16, f"client peak RSS grew {growth_mib:.1f} MiB for a 200 MiB stream"


@pytest.mark.slow
def test_one_200mb_line_is_malformed_and_bounded(tmp_path, baseline_kib):
    rc, kib, rec = run_client(tmp_path, "one-line", 200 * MIB)
    assert rc == 0
    assert rec["status"] == "malformed" and rec["error"].startswith("line_too_long")
    growth_mib = (kib - baseline_kib) / 1024
    assert growth_mib < 16, f"client peak RSS grew {growth_mib:.1f} MiB on one long line"


def test_text_head_is_off_with_no_text(tmp_path):
    rc, _, rec = run_client(tmp_path, "big-events", 1 * MIB, "--no-text")
    assert rc == 0 and rec["status"] == "ok" and rec["text_head"] == ""


@pytest.mark.slow
def test_40mb_of_small_token_events_keeps_memory_flat(tmp_path, baseline_kib):
    # ~525,000 token events of ~100 bytes. Measured (2026-11-29): +40 MiB peak RSS
    # (+12 MiB for 10 MiB / 132,000 events): linear in the number of token events.
    rc, kib, rec = run_client(tmp_path, "small-events", 40 * MIB)
    assert rc == 0 and rec["status"] == "ok" and rec["content_deltas"] > 500_000
    growth_mib = (kib - baseline_kib) / 1024
    assert growth_mib < 16, (
        f"client peak RSS grew {growth_mib:.1f} MiB for {rec['content_deltas']} tokens"
    )


@pytest.mark.slow
def test_100mb_json_response_is_bounded(tmp_path, baseline_kib):
    # Measured (2026-11-29): 200 MiB JSON body -> 858 MiB peak RSS (+800 MiB); 50 MiB -> +200 MiB.
    rc, kib, rec = run_client(tmp_path, "json", 100 * MIB)
    assert (
        rc == 0 and rec["status"] == "malformed" and rec["error"].startswith("response_too_large")
    )
    growth_mib = (kib - baseline_kib) / 1024
    assert growth_mib < 64, f"client peak RSS grew {growth_mib:.1f} MiB for a 100 MiB JSON body"
