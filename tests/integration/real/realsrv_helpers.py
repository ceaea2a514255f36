"""Helpers for the real_server tests, independent of kvreplay's own parsing."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def scrape(url: str) -> dict[str, float]:
    """GET /metrics (text format) and return {name{labels}: value} for every sample."""
    req = urllib.request.Request(url + "/metrics", headers={"Accept": "text/plain"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        text = resp.read().decode("utf-8")
    out = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if m and not line.startswith("#"):
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def series(samples: dict[str, float], name: str) -> float:
    """Sum of the samples of one series name over its label sets."""
    return sum(v for k, v in samples.items() if k == name or k.startswith(name + "{"))


def post_json(url: str, path: str, obj: dict) -> dict:
    req = urllib.request.Request(
        url + path, data=json.dumps(obj).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def kvreplay(*args: str, timeout_s: float = 600) -> subprocess.CompletedProcess:
    """Run the kvreplay CLI of this interpreter as a subprocess (bounded)."""
    return subprocess.run(
        [sys.executable, "-m", "kvreplay", *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def read_records(out: Path) -> list[dict]:
    return [
        json.loads(line)
        for line in (out / "records.jsonl").read_text().splitlines()
        if line.strip()
    ]


def lcp(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


# `kvreplay probe` in a subprocess, with the probe's send_body wrapped so that the
# exact bytes of every leg are kept (by SHA-256): the tests then measure the
# shared prefix of the cold and warm legs with the server's own tokenizer.
_PROBE_CAPTURE = """
import hashlib, json, sys
import kvreplay.experiments.probe.legs as probe
from kvreplay.cli import main

sink = open(sys.argv[1], "a", encoding="utf-8")
real_send = probe.send_body

async def send_body(session, url, raw, **kw):
    sink.write(json.dumps({"sha256": hashlib.sha256(raw).hexdigest(), "raw": raw.decode()}) + "\\n")
    sink.flush()
    return await real_send(session, url, raw, **kw)

probe.send_body = send_body
sys.exit(main(sys.argv[2:]))
"""


def kvreplay_probe(out: Path, *args: str, timeout_s: float = 600):
    """Run ``kvreplay probe --out OUT ARGS``; return (process, verdict, legs, bodies by sha256)."""
    out.mkdir(parents=True, exist_ok=True)
    bodies_path = out / "bodies.jsonl"
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE_CAPTURE, str(bodies_path), "probe", "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if proc.returncode != 0:
        return proc, None, [], {}
    verdict = json.loads((out / "verdict.json").read_text())
    legs = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines() if x.strip()]
    bodies = {}
    for line in bodies_path.read_text().splitlines():
        row = json.loads(line)
        bodies[row["sha256"]] = json.loads(row["raw"])
    return proc, verdict, legs, bodies


class Recorder:
    """``kvreplay record --upstream URL --listen 127.0.0.1:PORT --out W`` as a subprocess.

    ``url`` is the proxy's (from its first stdout line); ``stop()`` sends SIGINT and
    returns (exit status, stderr), bounded.
    """

    def __init__(self, upstream: str, out: Path, port: int) -> None:
        self.err_path = out.parent / (out.name + ".record.stderr")
        self._err = open(self.err_path, "wb")  # noqa: SIM115 - the child writes to it until stop()
        self.p = subprocess.Popen(
            [sys.executable, "-m", "kvreplay", "record", "--upstream", upstream,
             "--listen", f"127.0.0.1:{port}", "--out", str(out)],
            stdout=subprocess.PIPE, stderr=self._err,
        )
        line = self.p.stdout.readline().decode()  # type: ignore[union-attr]
        if "listening on " not in line:
            self.p.kill()
            raise AssertionError(f"kvreplay record did not start: {line!r} {self.err_path.read_text()}")
        self.url = line.split("listening on ")[1].split()[0]

    def stop(self, timeout_s: float = 30) -> tuple[int, str]:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGINT)
        try:
            rc = self.p.wait(timeout=timeout_s)
        finally:
            if self.p.poll() is None:
                self.p.kill()
                self.p.wait()
            self.p.stdout.close()  # type: ignore[union-attr]
            self._err.close()
        return rc, self.err_path.read_text(errors="replace")
