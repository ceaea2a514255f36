"""Issue 44 lows on ``kvreplay record``: malformed client requests are one line each, rate-limited, and
``--upstream`` credentials never reach the terminal.

Before: aiohttp logged each request it could not parse with a full traceback on stderr (any
client could flood the terminal), and the listening line printed ``--upstream`` as given.
"""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
from pathlib import Path

from kvreplay.api.recording import _BadRequestLog

BAD = [b"POST /v1/completions HTTP/1.1\r\nContent-Length: abc\r\n\r\n",
       b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"]


def test_malformed_requests_are_one_line_each_and_rate_limited(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "kvreplay", "record", "--upstream",
                             "http://user:hunter2-secret-pw@127.0.0.1:9", "--out", str(tmp_path / "cap"),
                             "--duration", "4"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        url = first.split("listening on ", 1)[1].split(" ", 1)[0]
        host, port = url.removeprefix("http://").split(":")
        for k in range(8):
            with socket.create_connection((host, int(port)), timeout=5) as s:
                s.sendall(BAD[k % 2])
                assert s.recv(12) == b"HTTP/1.0 400"
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert "hunter2-secret-pw" not in first + out + err
    assert first.startswith("kvreplay record listening on ") and " -> http://[REDACTED]@127.0.0.1:9," in first
    assert "Traceback" not in err
    lines = err.splitlines()
    assert lines[:5] == [f"kvreplay record: malformed request from 127.0.0.1: 400, message: {what}"
                         for what in ["Invalid character in Content-Length: b'Content-Length: abc' ^",
                                      "Invalid character in chunk size: b'zz' ^"] * 2
                         + ["Invalid character in Content-Length: b'Content-Length: abc' ^"]]
    assert lines[5] == "kvreplay record: 3 more malformed requests not shown"


def test_the_rate_limit_opens_a_new_window() -> None:
    now = [0.0]
    f = _BadRequestLog(burst=2, window_s=10.0, clock=lambda: now[0])

    def rec() -> logging.LogRecord:
        try:
            raise ValueError("bad\nbytes")
        except ValueError:
            return logging.LogRecord("aiohttp.server", logging.ERROR, "", 0, "Error handling request from %s",
                                     ("10.0.0.1",), sys.exc_info())

    assert [f.filter(rec()) for _ in range(5)] == [False] * 5
    assert (f.shown, f.suppressed) == (2, 3)
    now[0] = 10.0
    assert f.filter(rec()) is False
    assert (f.shown, f.suppressed) == (3, 3)
    other = logging.LogRecord("aiohttp.server", logging.INFO, "", 0, "something else", (), None)
    assert f.filter(other) is True
