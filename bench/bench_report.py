"""Report cost at scale: ``kvreplay report RUN_DIR --html`` on synthetic runs of N records.

Writes a run directory the way ``kvreplay run`` does (plan.json with one
sequence entry per request, records.jsonl with the runner's record fields and a
host tier's per-request counter deltas, summary.json built by
``metrics.summary.PhaseStats``, and the HdrHistogram logs), then times the
report in a process of its own and prints, per size: wall and CPU seconds
(user + system, from ``os.wait4``) and the process's peak RSS (``ru_maxrss``).
CPU time is the robust figure on a shared machine.

Targets (issue 20): at 200,000 records, report <= 5 s and its process <= 150 MB.

    .venv/bin/python bench/bench_report.py                 # 2,000, 20,000 and 200,000 records
    .venv/bin/python bench/bench_report.py --records 200000 --keep /tmp/run200k

Exit status 1 when the largest size misses a target.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

from kvreplay.metrics.summary import PhaseStats

TARGET_S = 5.0
TARGET_MB = 150.0
N_BODIES = 1000
TEXT = ("prefix queue warm gamma value it for on cache model for batch as fetch as river row "
        "be store and store in value be batch to quiet as to alpha beta or on north prefix ")[:256]


def _sha(i: int) -> str:
    return hashlib.sha256(f"body {i}".encode()).hexdigest()


def _record(phase: str, c: int, pos: int, rng: random.Random, t_ns: int) -> dict:
    body = (pos * 7) % N_BODIES
    prompt = 2000 + (body * 37) % 2000
    ok = rng.random() > 0.002
    cached = int(prompt * rng.random()) // 16 * 16
    ttft = int((20 + 0.01 * (prompt - cached) + rng.expovariate(0.2)) * 1e6)
    e2e = ttft + 128 * 200_000
    base = {
        "phase": phase, "repetition": 0, "position": pos, "body_index": body,
        "body_sha256": _sha(body), "body_bytes": 12000 + body, "concurrency": c, "sent": True,
    }
    if not ok:
        return {**base, "status": "http", "http_status": 503, "error": "HTTP 503: overloaded",
                "t_sent_ns": t_ns, "t_done_ns": t_ns + 1_000_000, "ttft_ns": None, "e2e_ns": 1_000_000,
                "usage": None, "attribution": "per_request" if c == 1 else "phase_only",
                "counter_delta": None}
    fetched = max(0, prompt - cached - 16) if rng.random() < 0.3 else 0
    delta = {
        "query_tokens": prompt, "hit_tokens": cached, "prompt_tokens": prompt, "computed_tokens": 1,
        "stores": 12, "evictions": 12, "host_query_tokens": prompt - cached, "host_lookups": 1,
        "host_hits": 1 if fetched else 0, "host_fetched_tokens": fetched,
        "host_reused_tokens": cached + fetched, "host_stores": 1, "host_evictions": 1,
        "entries": 256, "host_bytes": 3.2e10, "host_rows_used": 156, "host_pages_used": 866,
        "running": 0, "waiting": 0,
    } if c == 1 else None
    return {
        **base, "status": "ok", "http_status": 200, "finish_reason": "length", "terminal": "finished",
        "done_marker": True, "visible": True, "reasoning_only": False, "chunks": 131,
        "content_deltas": 128, "reasoning_deltas": 0,
        "usage": {"prompt_tokens": prompt, "completion_tokens": 128, "cached_tokens": cached,
                  "reasoning_tokens": None},
        "usage_raw": {"prompt_tokens": prompt, "completion_tokens": 128, "total_tokens": prompt + 128,
                      "prompt_tokens_details": {"cached_tokens": cached}},
        "timings": None, "error": None, "timeout_kind": None, "reconnects": 0, "t_intended_ns": None,
        "t_sent_ns": t_ns, "t_headers_ns": t_ns + 3_000_000, "t_first_byte_ns": t_ns + ttft,
        "t_first_token_ns": t_ns + ttft, "t_first_content_ns": t_ns + ttft,
        "t_last_token_ns": t_ns + e2e, "t_done_ns": t_ns + e2e, "ttft_ns": ttft, "tpot_ns": 200_000,
        "e2e_ns": e2e, "queue_ns": None, "ttft_from_intended_ns": None, "e2e_from_intended_ns": None,
        "itl": {"n": 127, "mean_ms": 0.2, "p50_ms": 0.2, "max_ms": 1.2}, "text_head": TEXT,
        "attribution": "per_request" if c == 1 else "phase_only", "counter_delta": delta,
    }


def make_run(out: Path, n: int, seed: int = 0) -> Path:
    """A run directory of ``n`` records: phase ``prime`` at C1 and ``load`` at C4, half each."""
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    phases = [("prime", 1, n // 2), ("load", 4, n - n // 2)]
    plan = {
        "format": "kvreplay-plan/1",
        "workload": {"path": "synthetic", "n_bodies": N_BODIES, "sha256": "0" * 64},
        "phases": [
            {"name": name, "order": "forward", "concurrency": c, "repeats": 1, "select": "all",
             "drain": False, "reset": False, "fresh": False,
             "sequence": [{"position": p, "body_index": (p * 7) % N_BODIES,
                           "body_sha256": _sha((p * 7) % N_BODIES), "repetition": 0} for p in range(k)]}
            for name, c, k in phases
        ],
        "plan_sha256": "f" * 64,
        "run": {"target": "sim", "backend": "prometheus", "kvreplay_version": "0.1.0",
                "implementation": "pure", "wall_anchor_ns": 1_796_108_764_894_516_891,
                "unplanned_requests": [], "sim_time_scale": 0.01},
    }
    (out / "plan.json").write_bytes(orjson.dumps(plan, option=orjson.OPT_INDENT_2) + b"\n")
    del plan
    summary_phases = []
    t = 0
    with open(out / "records.jsonl", "wb") as f:
        for name, c, k in phases:
            st = PhaseStats(name, c, 1, k)
            st.start_ns = t
            for p in range(k):
                r = _record(name, c, p, rng, t)
                t += 5_000_000 // c
                st.add(r)
                f.write(orjson.dumps(r) + b"\n")
            st.end_ns = t
            st.peak_in_flight = c
            st.attribution = "per_request" if c == 1 else "phase_only"
            st.histogram_files = st.hists.write_logs(out / "histograms", name, 0.0, t / 1e9)
            summary_phases.append(st.to_json())
    summary = {
        "schema_version": 1, "plan_sha256": "f" * 64, "implementation": "pure", "aborted": None,
        "restarts": 0,
        "identity": {"before": {"backend": "halogen", "models": ["kvreplay-sim"],
                                "version": {"version": "0.1.0", "build": "sim-1"}},
                     "after": {"backend": "halogen", "models": ["kvreplay-sim"],
                               "version": {"version": "0.1.0", "build": "sim-1"}}},
        "wall_s": t / 1e9, "records": n, "phases": summary_phases,
    }
    (out / "summary.json").write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2) + b"\n")
    return out


def measure(run_dir: Path) -> tuple[float, float, float]:
    """``(wall s, CPU s, peak RSS MB)`` of ``kvreplay report RUN_DIR --html`` in its own process."""
    cmd = [sys.executable, "-m", "kvreplay", "report", str(run_dir), "--html"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, ru = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    err = proc.stderr.read().decode() if proc.stderr else ""
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"kvreplay report failed: {err}")
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, action="append", default=None,
                    help="run sizes (repeatable; default 2000, 20000, 200000)")
    ap.add_argument("--keep", default=None, metavar="DIR", help="keep the largest run directory here")
    ap.add_argument("--make", nargs=2, default=None, metavar=("DIR", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.make:
        make_run(Path(args.make[0]), int(args.make[1]))
        return 0
    sizes = sorted(args.records or [2000, 20000, 200000])
    tmp = Path(tempfile.mkdtemp(prefix="kvreplay-bench-report-"))
    rows = []
    try:
        for n in sizes:
            # Made in a process of its own: a child's peak RSS (ru_maxrss) starts at its
            # parent's size at fork and survives exec, so this process stays small.
            d = tmp / f"run{n}"
            subprocess.run([sys.executable, __file__, "--make", str(d), str(n)], check=True)
            mb = sum(f.stat().st_size for f in d.rglob("*") if f.is_file()) / 1e6
            wall, cpu, rss = measure(d)
            html = (d / "report.html").stat().st_size / 1e6
            rows.append((str(n), mb, wall, cpu, rss, html))
            if args.keep and n == sizes[-1]:
                shutil.copytree(d, args.keep, dirs_exist_ok=True)
            if n == sizes[-1]:
                # A killed run: summary.json rebuilt from the records streamed once, then the report.
                for f in ("summary.json", "report.md", "report.html"):
                    (d / f).unlink()
                w2, c2, r2 = measure(d)
                size = (d / "report.html").stat().st_size / 1e6
                rows.append((f"{n}, summary rebuilt", mb, w2, c2, r2, size))
            shutil.rmtree(d)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("| records | run dir MB | report wall s | report CPU s | peak RSS MB | report.html MB |")
    print("|---:|---:|---:|---:|---:|---:|")
    for n, mb, wall, cpu, rss, html in rows:
        print(f"| {n} | {mb:.0f} | {wall:.2f} | {cpu:.2f} | {rss:.0f} | {html:.2f} |")
    n, _, wall, cpu, rss, _ = next(r for r in rows if r[0] == str(sizes[-1]))
    ok = cpu <= TARGET_S and rss <= TARGET_MB
    print(f"targets at {n} records (summary.json present): CPU {cpu:.2f} s <= {TARGET_S} s, "
          f"RSS {rss:.0f} MB <= {TARGET_MB:.0f} MB: {'met' if ok else 'MISSED'} "
          f"(wall {wall:.2f} s; shared machine, CPU time is the robust figure)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
