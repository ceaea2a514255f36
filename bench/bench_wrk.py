"""The non-parsing ceiling: wrk (a C client) against the same fake server, beside kvreplay and the plain client.

Issue 21 item 2. One ``bench/_fastserver.py`` process (pinned to one core)
serves all three clients in the same run, one after the other, each pinned to
the other core, at the same concurrency:

- ``wrk`` (Debian package ``wrk``, 4.x): one thread, ``-c C`` keep-alive
  connections, POSTing one 1k-token chat body for ``--seconds``; it frames the
  HTTP response (llhttp's predecessor, http_parser, chunked included) but never
  parses SSE or JSON, stamps no token and writes nothing: the floor of reading
  the same bytes off the same sockets. Its CPU is the child's ``ru_utime +
  ru_stime`` (``os.wait4``); tokens are its completed responses x ``--tokens``.
- ``plain`` and ``kvreplay``: ``bench_client.py``'s children (a measured run after
  a warm-up, ``time.process_time()``).

It prints CPU seconds per 1M streamed tokens for each, and the user/system split
where known. The machine's load average is printed; CPU time is robust to a shared
machine, wall-clock rates are not.

    .venv/bin/python bench/bench_wrk.py --conc 64 --requests 3000 --seconds 5 --reps 2
    .venv/bin/python bench/bench_wrk.py --server per-event,burst    # both server modes, one sitting

``--server``: ``per-event`` (one write per SSE event, the default) or ``burst`` (a whole
answer's events in one write: the cheapest server, where per-chunk client work shows);
a comma-separated list runs each mode in turn against its own server process, and the
table has a row per client and mode.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_client import _per, _run_child, _start_server, _stop_server, make_workload  # noqa: E402

_REQS = re.compile(r"(\d+) requests in ([\d.]+)(\w+)")


def run_wrk(port: int, conc: int, seconds: int, body: bytes, tmp: Path, cpu: int | None) -> dict:
    """One wrk run; returns its CPU (s, user and system), completed requests and errors.

    Raises:
        RuntimeError: wrk failed or printed no request count.
    """
    lua = tmp / "post.lua"
    body_file = tmp / "body.json"
    body_file.write_bytes(body)
    lua.write_text(
        'wrk.method = "POST"\n'
        'wrk.headers["Content-Type"] = "application/json"\n'
        f'local f = io.open("{body_file}", "rb")\nwrk.body = f:read("*a")\nf:close()\n'
    )
    cmd = ["wrk", "-t1", f"-c{conc}", f"-d{seconds}s", "-s", str(lua), f"http://127.0.0.1:{port}/v1/chat/completions"]
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu), *cmd]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = p.stdout.read() if p.stdout else ""
    _, status, ru = os.wait4(p.pid, 0)
    if status != 0:
        raise RuntimeError(f"wrk failed ({status}):\n{out}")
    m = _REQS.search(out)
    if m is None:
        raise RuntimeError(f"no request count in wrk's output:\n{out}")
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)|Socket errors: (.*)", out)
    return {"requests": int(m.group(1)), "cpu_s": ru.ru_utime + ru.ru_stime, "user_s": ru.ru_utime,
            "sys_s": ru.ru_stime, "errors": errors.group(0) if errors else None}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--conc", type=int, default=64)
    ap.add_argument("--requests", type=int, default=3000, help="per plain/kvreplay run")
    ap.add_argument("--seconds", type=int, default=5, help="per wrk run")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--server", default="per-event",
                    help="per-event, burst, or both comma-separated (one server process per mode)")
    a = ap.parse_args(argv)
    modes = [m.strip() for m in a.server.split(",") if m.strip()]
    if not modes or any(m not in ("per-event", "burst") for m in modes):
        print(f"--server: per-event, burst or both, not {a.server!r}", file=sys.stderr)
        return 2
    if shutil.which("wrk") is None:
        print("wrk not found (apt-get install wrk)", file=sys.stderr)
        return 2
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    server_cpu, client_cpu = (cpus[-1], cpus[0]) if len(cpus) >= 2 else (None, None)
    load0 = os.getloadavg()
    rows: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="kvreplay-wrk-") as td:
        tmp = Path(td)
        wl = tmp / "workload.jsonl"
        make_workload(wl, 200, max_tokens=a.tokens)
        body = wl.read_bytes().split(b"\n")[0]
        for mode in modes:
            srv, port = _start_server(server_cpu, a.tokens, -1 if mode == "burst" else 1)
            try:
                warm = min(a.requests, max(200, 2 * a.conc))
                for rep in range(a.reps):
                    w = run_wrk(port, a.conc, a.seconds, body, tmp, client_cpu)
                    per = w["cpu_s"] / (w["requests"] * a.tokens) * 1e6
                    rows.setdefault(("wrk", mode), []).append(per)
                    print(f"# {mode} wrk      rep {rep}: {w['requests']} req, {w['cpu_s']:.2f} s CPU "
                          f"(user {w['user_s']:.2f}, sys {w['sys_s']:.2f}), {per:.2f} s/1M tok, "
                          f"errors {w['errors']}", file=sys.stderr)
                    for kind in ("plain", "kvreplay") if rep % 2 == 0 else ("kvreplay", "plain"):
                        r = _run_child(kind, port, a.conc, a.requests, warm, wl, tmp, client_cpu)
                        r.update(_per(r))
                        rows.setdefault((kind, mode), []).append(r["cpu_s_per_1M_tokens"])
                        print(f"# {mode} {kind:8s} rep {rep}: {r['cpu_s']:.2f} s CPU, "
                              f"{r['cpu_s_per_1M_tokens']:.2f} s/1M tok", file=sys.stderr)
            finally:
                _stop_server(srv)
    load1 = os.getloadavg()
    print(f"\nC{a.conc}, {a.tokens} tokens/response, server {a.server}, server on cpu {server_cpu}, "
          f"clients on cpu {client_cpu}, "
          f"medians of {a.reps} reps; load average before {load0[0]:.2f}, after {load1[0]:.2f}\n")
    print("| server | client | CPU s / 1M tokens (reps) | median | ratio to wrk | ratio to plain |\n"
          "|---|---|---|---|---|---|")
    for mode in modes:
        ref = statistics.median(rows[("wrk", mode)])
        plain = statistics.median(rows[("plain", mode)])
        for kind in ("wrk", "plain", "kvreplay"):
            vals = rows[(kind, mode)]
            m = statistics.median(vals)
            print(f"| {mode} | {kind} | {', '.join(f'{v:.2f}' for v in vals)} | {m:.2f} | {m / ref:.2f} | "
                  f"{m / plain:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
