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

Issue 32: ``--distinct`` is the flat-memory table. Per size it generates that many
*distinct* bodies (~6 KB each, streamed into a temporary folder that is deleted
after; 1,000,000 bodies is about 6 GB of disk: check ``df -h /tmp``), replays each
once with kvreplay only, closed loop (C64) and open loop (``rRATE`` at most 64 in
flight), with short outputs (``--tokens 8``) against the zero-delay server, and
prints per run: peak RSS, whole-run CPU per request, the CPU of indexing the
workload (first ``kvreplay inspect``-free load), and the cost of ``kvreplay report
RUN_DIR`` (CPU s, peak RSS) on the closed-loop run; with ``--simulate`` also
``kvreplay simulate`` over a generated Mooncake-style block trace of that many
requests (CPU s, peak RSS). Not part of ``make test``.

    .venv/bin/python bench/bench_scale.py --distinct --sizes 2000,20000,200000 --tokens 8
    .venv/bin/python bench/bench_scale.py --distinct --sizes 1000000 --tokens 8 --simulate
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


def run_plain(port: int, workload: Path, n: int, conc: int, cpu: int | None, tmp: Path,
              kind: str = "plain", tokens: int = 128) -> dict:
    """The plain aiohttp + orjson client of ``bench_client.py`` (no warm-up), ``n`` requests.

    ``kind="floor"``: ``bench/_read_floor.py`` instead (stamps each read, parses nothing;
    ``tokens`` per answer is its token count), the whole process's CPU all the same.
    """
    out = Path(tempfile.mkdtemp(dir=tmp, prefix=f"{kind}-{n}-"))
    cmd = [sys.executable, str(HERE / "bench_client.py"), "_child", kind, "--port", str(port),
           "--conc", str(conc), "--requests", str(n), "--warmup", "0", "--workload", str(workload),
           "--out", str(out), "--tokens", str(tokens)]
    if cpu is not None:
        cmd += ["--cpu", str(cpu)]
    rc, cpu_s, rss, so, err = _run_measured(cmd)
    if rc != 0:
        raise RuntimeError(f"{kind} {n} failed (rc {rc}):\n{err[-3000:]}")
    r = json.loads(so.strip().splitlines()[-1])
    return {"client": kind, "requests": r["requests"], "tokens": r["tokens"], "whole_cpu_s": cpu_s,
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


def make_distinct_workload(path: Path, n: int, body_bytes: int = 6000, max_tokens: int = 8) -> int:
    """Write ``n`` distinct chat bodies of about ``body_bytes`` bytes, streamed (never all in memory).

    Returns the file's size (bytes).
    """
    words = ("alpha", "beta", "gamma", "delta", "omega", "kappa", "sigma", "theta", "lambda", "zeta")
    filler = " ".join(words[(i * 7) % len(words)] for i in range(body_bytes // 6))[: body_bytes - 160]
    with open(path, "wb", buffering=1 << 20) as f:
        for i in range(n):
            f.write(b'{"model":"bench","stream":true,"stream_options":{"include_usage":true},"max_tokens":%d,'
                    b'"messages":[{"role":"user","content":"request %d: %s"}]}\n' % (max_tokens, i, filler.encode()))
    return path.stat().st_size


def make_block_trace(path: Path, n: int, seed: int = 7) -> None:
    """A Mooncake-style block trace of ``n`` requests (``hash_ids`` of 512-token blocks), streamed."""
    import random

    rng = random.Random(seed)
    with open(path, "w", buffering=1 << 20) as f:
        nxt = 10_000
        for i in range(n):
            shared = list(range(rng.randrange(0, 40)))  # a shared system prefix of varying depth
            own = list(range(nxt, nxt + rng.randrange(1, 8)))
            nxt += len(own)
            f.write(json.dumps({"timestamp": i * 5, "input_length": 512 * (len(shared) + len(own)),
                                "output_length": 8, "hash_ids": shared + own}) + "\n")


def run_distinct(port: int, workload: Path, n: int, conc: int, loop: str, rate: float, cpu: int | None,
                 tmp: Path) -> dict:
    """One ``kvreplay run`` of the whole distinct workload, once; the row's figures."""
    out = Path(tempfile.mkdtemp(dir=tmp, prefix=f"kv-{n}-{loop}-"))
    side = out / "hook.json"
    env = dict(os.environ, BENCH_OUT=str(side))
    if cpu is not None:
        env["BENCH_CPU"] = str(cpu)
    phase = f"main:forward:c{conc}" + (f":r{rate:g}" if loop == "open" else "")
    cmd = [sys.executable, "-c", HOOK, "run", str(workload), "--target", f"http://127.0.0.1:{port}",
           "--backend", "none", "--phase", phase, "--out", str(out / "run"), "--quiet"]
    rc, cpu_s, rss, _, err = _run_measured(cmd, env)
    if rc != 0:
        raise RuntimeError(f"kvreplay {n} {loop} failed (rc {rc}):\n{err[-3000:]}")
    hook = json.loads(side.read_text())
    ph = json.loads((out / "run" / "summary.json").read_text())["phases"][0]
    return {"client": f"kvreplay-{loop}", "requests": ph["ok"], "tokens": ph["tokens"]["completion"],
            "whole_cpu_s": cpu_s, "steady_cpu_s": ph["client"]["cpu_s"], "startup_cpu_s": hook["startup_cpu_s"],
            "after_cpu_s": cpu_s - hook["startup_cpu_s"] - ph["client"]["cpu_s"], "rss_mb": rss,
            "run_dir": str(out / "run")}


def kv_cost(args: list[str]) -> dict:
    """CPU s and peak RSS MB of one ``kvreplay ARGS`` process."""
    rc, cpu_s, rss, _, err = _run_measured([sys.executable, "-m", "kvreplay", *args])
    if rc != 0:
        raise RuntimeError(f"kvreplay {args[0]} failed (rc {rc}):\n{err[-3000:]}")
    return {"cpu_s": cpu_s, "rss_mb": rss}


def main_distinct(a: argparse.Namespace, sizes: list[int], srv_cpu: int | None, cli_cpu: int | None) -> int:
    """The issue-32 table: distinct bodies, closed and open loop, report and simulate costs."""
    rows = []
    srv, port = _start_server(srv_cpu, a.tokens)
    try:
        for n in sizes:
            with tempfile.TemporaryDirectory(prefix="kvreplay-scale-", dir=a.tmp) as td:
                tmp = Path(td)
                wl = tmp / "wl.jsonl"
                size = make_distinct_workload(wl, n, max_tokens=a.tokens)
                idx = kv_cost(["inspect", str(wl), "--json"]) if a.inspect else None
                for loop in a.loops.split(","):
                    r = {"size": n, "workload_bytes": size,
                         **run_distinct(port, wl, n, a.conc, loop, a.rate, cli_cpu, tmp)}
                    r["whole_cpu_ms_per_request"] = r["whole_cpu_s"] / max(1, r["requests"]) * 1e3
                    if loop == "closed":
                        r["report"] = kv_cost(["report", r["run_dir"]])
                    if idx is not None:
                        r["inspect"] = idx
                    rows.append(r)
                    print(json.dumps(r), flush=True)
                if a.simulate:
                    tr = tmp / "trace.jsonl"
                    make_block_trace(tr, n)
                    sim = {"size": n, "client": "simulate", **kv_cost(["simulate", str(tr), "--json"])}
                    rows.append(sim)
                    print(json.dumps(sim), flush=True)
    finally:
        srv.terminate()
        srv.wait(timeout=10)
    print(f"\nC{a.conc}, {a.tokens} one-token chunks per answer; load after: {os.getloadavg()}\n")
    print("| requests | run | peak RSS MB | whole-run CPU s | CPU ms / request | report CPU s | report RSS MB |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if r["client"] == "simulate":
            print(f"| {r['size']:,} | simulate (block trace) | {r['rss_mb']:.0f} | {r['cpu_s']:.2f} | | | |")
            continue
        rep = r.get("report") or {}
        print(f"| {r['size']:,} | {r['client']} | {r['rss_mb']:.0f} | {r['whole_cpu_s']:.2f} "
              f"| {r['whole_cpu_ms_per_request']:.3f} | {rep.get('cpu_s', float('nan')):.2f} "
              f"| {rep.get('rss_mb', float('nan')):.0f} |")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="2000,20000,200000", help="comma-separated request counts")
    ap.add_argument("--conc", type=int, default=64)
    ap.add_argument("--bodies", type=int, default=500, help="distinct bodies (sizes >= it must be multiples)")
    ap.add_argument("--tokens", type=int, default=128, help="output tokens per answer (one per chunk)")
    ap.add_argument("--json", default=None, help="also write the rows here")
    ap.add_argument("--distinct", action="store_true", help="issue 32: distinct bodies, one per request")
    ap.add_argument("--loops", default="closed,open", help="--distinct: closed, open or both")
    ap.add_argument("--rate", type=float, default=2000.0, help="--distinct: open-loop rate (requests/s)")
    ap.add_argument("--simulate", action="store_true", help="--distinct: also time kvreplay simulate")
    ap.add_argument("--inspect", action="store_true", help="--distinct: also time kvreplay inspect")
    ap.add_argument("--tmp", default=None, help="--distinct: where the temporary folder goes")
    a = ap.parse_args(argv)
    sizes = [int(s) for s in a.sizes.split(",") if s]
    if a.distinct:
        ncpu = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        srv_cpu, cli_cpu = (0, 1) if ncpu >= 2 else (None, None)
        print(f"cores: {ncpu}; load {os.getloadavg()}", flush=True)
        return main_distinct(a, sizes, srv_cpu, cli_cpu)
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
