"""Run ``kvreplay run`` against a HostileServer in a subprocess; collect what the assertions need."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

HERE = Path(__file__).resolve().parent
KEY = "sk-hostile-7f3a9c2e5b1d4a60-LEAKCHECK"
N_BODIES = 4


def make_workload(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(N_BODIES):
        (folder / f"{i:03d}.json").write_bytes(orjson.dumps(
            {"model": "m", "stream": True, "max_tokens": 8,
             "messages": [{"role": "user", "content": f"question {i}"}]}))
    return folder


@dataclass
class Result:
    code: int
    seconds: float
    out: Path
    stdout: str
    stderr: str
    rss_kib: int
    records: list[dict]


def run_case(url: str, workload: Path, out: Path, conc: int, *, extra: list[str] = (), timeout: float = 60,
             key: str = KEY, quiet: bool = True) -> Result:
    rss_file = out.parent / (out.name + ".rss")
    cmd = [sys.executable, str(HERE / "_rss_main.py"), str(rss_file), "run", str(workload), "--target", url,
           "--backend", "none", "--phase", f"p:forward:c{conc}", "--out", str(out), *(["--quiet"] if quiet else []),
           "--api-key-env", "HOSTILE_KEY", "--connect-timeout", "3", "--read-timeout", "3",
           # every position must end as a record here, so consecutive transport failures do not
           # abort (issue 27's default of 3 is tested on its own in test_hostile_servers)
           "--max-transport-failures", "0",
           *extra]
    env = {**os.environ, "HOSTILE_KEY": key, "MPLBACKEND": "Agg"}
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    dt = time.monotonic() - t0
    recs = []
    rp = out / "records.jsonl"
    if rp.exists():
        recs = [orjson.loads(ln) for ln in rp.read_bytes().splitlines()]
    rss = int(rss_file.read_text()) if rss_file.exists() else -1
    return Result(p.returncode, dt, out, p.stdout, p.stderr, rss, recs)


def leaked(res: Result, key: str = KEY, min_part: int = 8) -> list[str]:
    """Files (and streams) holding the key or any ``min_part``-character piece of it."""
    parts = {key[i:i + min_part] for i in range(len(key) - min_part + 1)}
    hits = []
    for name, text in (("stdout", res.stdout), ("stderr", res.stderr)):
        if any(p in text for p in parts):
            hits.append(name)
    for f in res.out.rglob("*"):
        if f.is_file():
            data = f.read_bytes()
            if any(p.encode() in data for p in parts):
                hits.append(str(f.relative_to(res.out)))
    return hits
