"""Helpers for the real_server tests, independent of kvreplay's own parsing."""

from __future__ import annotations

import json
import re
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
