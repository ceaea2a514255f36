"""Scale table: kvreplay's whole-run and steady-state cost at 2,000 / 20,000 / 200,000 requests.

Issue 21 item 5. One fast streaming server (``bench/_fastserver.py``: zero delay,
128 one-token chunks per answer, 1k-token chat prompts) runs in its own process
pinned to one core; each client runs in a fresh process pinned to the other, at
C64, once per size, both clients in the same run (order alternates per size).
Per size and client:

- **whole-run CPU** per request: user + system CPU of the whole client process
  (``os.wait4`` rusage: interpreter start, imports, plan, requests, summary,
  histogram logs, report.md/report.html with figures for kvreplay) / requests;
- **steady-state CPU** per 1M streamed tokens: kvreplay's own phase CPU
  (``summary.json`` ``phases[0].client.cpu_s``, ``time.process_time()`` over the
  phase) / completion tokens; the plain client's ``time.process_time()`` around
  its request loop / tokens;
- **startup CPU** (kvreplay): process CPU when its phase starts sending
  (``ClientMonitor.start`` wrapped), i.e. everything before the first request;
- **after-phase CPU** (kvreplay): whole-run - startup - phase CPU: summary.json,
  histogram logs and the reports (report.md, report.html with its figures);
- **peak RSS** of the client process (``ru_maxrss``, MB).

kvreplay is the real command line (``kvreplay run WORKLOAD --target URL --phase
main:forward:c64:xR``); the plain client is ``bench/bench_client.py``'s aiohttp +
orjson client (no warm-up run, so its whole-run figure is comparable).

    .venv/bin/python bench/bench_scale.py                        # 2k, 20k, 200k (~10+ min)
    .venv/bin/python bench/bench_scale.py --sizes 2000,20000     # the small sizes only
    .venv/bin/python bench/bench_scale.py --sizes 2000 --json out.json

CPU times are robust to load on a shared machine; wall-clock figures are not
printed. Load is printed (``os.getloadavg``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_client import _start_server, make_workload  # noqa: E402

HOOK = r"""
import json, os, sys, time
if os.environ.get("BENCH_CPU"):
    os.sched_setaffinity(0, {int(os.environ["BENCH_CPU"])})
from kvreplay.metrics import selfmeasure
seen = {}
_orig = selfmeasure.ClientMonitor.start
def _start(self, *a, **k):
    if not seen:
        seen["startup_cpu_s"] = time.process_time()
    return _orig(self, *a, **k)
selfmeasure.ClientMonitor.start = _start
from kvreplay.cli import main
rc = main(sys.argv[1:])
seen["rc"] = rc
with open(os.environ["BENCH_OUT"], "w") as f:
    json.dump(seen, f)
sys.exit(rc)
"""


def _run_measured(cmd: list[str], env: dict[str, str] | None = None) -> tuple[int, float, float, str, str]:
    """Run ``cmd`` to completion; (rc, user+sys CPU s, peak RSS MB, stdout, stderr) of that process.

    The child's rusage comes from ``os.wait4`` (its own, not all children's).
    """
    with tempfile.TemporaryFile("w+") as fo, tempfile.TemporaryFile("w+") as fe:
        p = subprocess.Popen(cmd, stdout=fo, stderr=fe, text=True, env=env)
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        fo.seek(0)
        fe.seek(0)
        return p.returncode, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024.0, fo.read(), fe.read()


def run_kvreplay(port: int, workload: Path, n: int, bodies: int, conc: int, cpu: int | None,
                 tmp: Path) -> dict:
    """One ``kvreplay run`` of ``n`` requests at ``conc``; the row's figures."""
    out = Path(tempfile.mkdtemp(dir=tmp, prefix=f"kv-{n}-"))
    sel = f"x{n // bodies}" if n >= bodies else f"first{n}"
    side = out / "hook.json"
    env = dict(os.environ, BENCH_OUT=str(side))
    if cpu is not None:
        env["BENCH_CPU"] = str(cpu)
    cmd = [sys.executable, "-c", HOOK, "run", str(workload), "--target", f"http://127.0.0.1:{port}",
           "--backend", "none", "--phase", f"main:forward:c{conc}:{sel}", "--out", str(out / "run"),
           "--quiet"]
    rc, cpu_s, rss, _, err = _run_measured(cmd, env)
    if rc != 0:
        raise RuntimeError(f"kvreplay {n} failed (rc {rc}):\n{err[-3000:]}")
    hook = json.loads(side.read_text())
    ph = json.loads((out / "run" / "summary.json").read_text())["phases"][0]
    tokens = ph["tokens"]["completion"]
    return {
        "client": "kvreplay",
        "requests": ph["ok"],
        "tokens": tokens,
        "whole_cpu_s": cpu_s,
        "steady_cpu_s": ph["client"]["cpu_s"],
        "startup_cpu_s": hook["startup_cpu_s"],
        # What is left: the phase's own tail (after the probe stops) and everything after
        # it: summary.json, histogram logs, report.md and report.html with figures.
        "after_cpu_s": cpu_s - hook["startup_cpu_s"] - ph["client"]["cpu_s"],
        "rss_mb": rss,
        "self": {k: ph["client"].get(k) for k in ("verdict", "cpu_utilisation", "starvation_share",
                                                  "loop_lag_p99_ms")},
    }


def run_plain(port: int, workload: Path, n: int, conc: int, cpu: int | None, tmp: Path) -> dict:
    """The plain aiohttp + orjson client of ``bench_client.py`` (no warm-up), ``n`` requests."""
    out = Path(tempfile.mkdtemp(dir=tmp, prefix=f"plain-{n}-"))
    cmd = [sys.executable, str(HERE / "bench_client.py"), "_child", "plain", "--port", str(port),
           "--conc", str(conc), "--requests", str(n), "--warmup", "0", "--workload", str(workload),
           "--out", str(out)]
    if cpu is not None:
        cmd += ["--cpu", str(cpu)]
    rc, cpu_s, rss, so, err = _run_measured(cmd)
    if rc != 0:
        raise RuntimeError(f"plain {n} failed (rc {rc}):\n{err[-3000:]}")
    r = json.loads(so.strip().splitlines()[-1])
    return {"client": "plain", "requests": r["requests"], "tokens": r["tokens"], "whole_cpu_s": cpu_s,
            "steady_cpu_s": r["cpu_s"], "startup_cpu_s": None, "rss_mb": rss}


def per(r: dict) -> dict:
    """Derived figures: whole-run CPU ms per request, steady-state CPU s per 1M tokens."""
    return {
        "whole_cpu_ms_per_request": r["whole_cpu_s"] / r["requests"] * 1e3 if r["requests"] else None,
        "steady_cpu_s_per_1M_tokens": r["steady_cpu_s"] / r["tokens"] * 1e6 if r["tokens"] else None,
    }


def table(rows: list[dict]) -> str:
    """The Markdown scale table (kvreplay / plain ratios per size)."""
    lines = [
        "| requests | client | whole-run CPU s | whole-run CPU ms / request | steady CPU s / 1M tokens "
        "| startup CPU s | after-phase CPU s | peak RSS MB | whole / plain | steady / plain |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    by = {(r["size"], r["client"]): r for r in rows}
    for r in rows:
        p = by.get((r["size"], "plain"))

        def ratio(k: str, r: dict = r, p: dict | None = p) -> str:
            if r["client"] == "plain" or not p or not p.get(k):
                return ""
            return f"{r[k] / p[k]:.2f}x"

        lines.append(
            f"| {r['size']:,} | {r['client']} | {r['whole_cpu_s']:.2f} | {r['whole_cpu_ms_per_request']:.3f} "
            f"| {r['steady_cpu_s_per_1M_tokens']:.2f} | "
            + (f"{r['startup_cpu_s']:.3f}" if r["startup_cpu_s"] is not None else "")
            + " | "
            + (f"{r['after_cpu_s']:.2f}" if r.get("after_cpu_s") is not None else "")
            + f" | {r['rss_mb']:.0f} | {ratio('whole_cpu_ms_per_request')} | {ratio('steady_cpu_s_per_1M_tokens')} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="2000,20000,200000", help="comma-separated request counts")
    ap.add_argument("--conc", type=int, default=64)
    ap.add_argument("--bodies", type=int, default=500, help="distinct bodies (sizes >= it must be multiples)")
    ap.add_argument("--tokens", type=int, default=128, help="output tokens per answer (one per chunk)")
    ap.add_argument("--json", default=None, help="also write the rows here")
    a = ap.parse_args(argv)
    sizes = [int(s) for s in a.sizes.split(",") if s]
    for n in sizes:
        if n >= a.bodies and n % a.bodies:
            ap.error(f"--sizes: {n} is not a multiple of --bodies {a.bodies}")
    ncpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    srv_cpu, cli_cpu = (0, 1) if ncpu >= 2 else (None, None)
    print(f"cores: {ncpu} (server on {srv_cpu}, client on {cli_cpu}); load {os.getloadavg()}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="kvreplay-scale-") as td:
        tmp = Path(td)
        wl = tmp / "wl.jsonl"
        make_workload(wl, a.bodies, max_tokens=a.tokens)
        srv, port = _start_server(srv_cpu, a.tokens)
        try:
            for i, n in enumerate(sizes):
                order = ("kvreplay", "plain") if i % 2 == 0 else ("plain", "kvreplay")
                got = {}
                for kind in order:
                    got[kind] = (run_kvreplay(port, wl, n, a.bodies, a.conc, cli_cpu, tmp) if kind == "kvreplay"
                                 else run_plain(port, wl, n, a.conc, cli_cpu, tmp))
                for kind in ("kvreplay", "plain"):
                    r = {"size": n, **got[kind]}
                    r.update(per(r))
                    rows.append(r)
                    print(json.dumps(r), flush=True)
        finally:
            srv.terminate()
            srv.wait(timeout=10)
    print(f"\nC{a.conc}, {a.tokens} one-token chunks per answer; load after: {os.getloadavg()}\n")
    print(table(rows))
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
