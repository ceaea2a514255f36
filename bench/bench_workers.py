"""CPU per request of ``kvreplay run --workers 2`` against one worker (issue 32 item 6).

Whole-process-tree CPU (user + system of the ``kvreplay run`` process and every
worker it starts, from ``os.wait4``'s rusage; the fork server the workers fork
from is adopted and reaped here, ``PR_SET_CHILD_SUBREAPER``), so the coordinator,
the workers, their start-up and the merge are all charged. Each worker count
runs at two request counts; the difference gives the per-request cost with the
fixed costs (interpreter start, imports, planning, spawning and importing the
workers, the merge's fixed part, summary and report) cancelled, and the
intercept gives the fixed cost:

    per_request = (cpu(N_large) - cpu(N_small)) / (N_large - N_small)
    fixed       = cpu(N_small) - N_small * per_request

The server is ``bench/_fastserver.py`` in burst mode (one write per response,
the cheapest server, so the client's cost dominates); C64 closed loop, 1k-token
prompts, 128-token answers, ``--backend none --report none``. CPU time is
robust to other jobs on the machine; wall clock is not (it is printed too).
Imports are byte-compiled (a pycache in the temporary folder, filled by one
unmeasured run per worker count), as an installed package has them.
Reps alternate the order of the worker counts; medians are printed, and the
ratio ``--workers 2 / --workers 1`` of the per-request CPU and of the whole
run's CPU at ``N_large``.

    .venv/bin/python bench/bench_workers.py                          # 1,000 and 10,000 requests, 3 reps
    .venv/bin/python bench/bench_workers.py --small 1000 --large 20000 --reps 5
    .venv/bin/python bench/bench_workers.py --workers 1,2,4 --json out.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_client import _start_server, _stop_server, make_workload  # noqa: E402


def become_subreaper() -> bool:
    """Adopt this process's orphaned descendants (Linux ``PR_SET_CHILD_SUBREAPER``); False elsewhere.

    The runner's fork server outlives the run by a moment and is never waited for by the
    run's process: adopted here, it is reaped (with the workers it reaped) and charged.
    """
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        return False


def _children() -> set[int]:
    out: set[int] = set()
    for task in Path("/proc/self/task").glob("*"):
        with contextlib.suppress(OSError):
            out |= {int(x) for x in (task / "children").read_text().split()}
    return out


def run_tree_cpu(cmd: list[str], env: dict[str, str], keep: frozenset[int] = frozenset()) -> tuple[float, float, int]:
    """Run ``cmd``; (CPU s of its whole process tree, wall s, exit status).

    CPU is ``ru_utime + ru_stime`` from ``os.wait4``: the process and every
    descendant it waited for (the runner joins its workers), plus every orphaned
    descendant adopted after it exited (:func:`become_subreaper`), waited for here.
    ``keep``: this process's own long-lived children (the server), never waited for.
    """
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert p.stderr is not None
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    p.stderr.close()
    cpu = ru.ru_utime + ru.ru_stime
    deadline = time.monotonic() + 30
    while (orphans := _children() - keep) and time.monotonic() < deadline:
        for pid in orphans:
            got, _, oru = os.wait4(pid, os.WNOHANG)
            if got:
                cpu += oru.ru_utime + oru.ru_stime
        time.sleep(0.01)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{cmd} failed ({p.returncode}):\n{err.decode(errors='replace')[-3000:]}")
    return cpu, wall, p.returncode


def kvreplay_cmd(wl: Path, url: str, out: Path, conc: int, repeats: int, workers: int) -> list[str]:
    """The ``kvreplay run`` command line of one measured run (``repeats`` passes over the bodies)."""
    return [
        sys.executable, "-m", "kvreplay", "run", str(wl), "--target", url,
        "--phase", f"main:forward:c{conc}:x{repeats}", "--workers", str(workers),
        "--backend", "none", "--report", "none", "--quiet", "--out", str(out),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", default="1,2", help="comma-separated worker counts; the first is the baseline")
    ap.add_argument("--conc", type=int, default=64)
    ap.add_argument("--bodies", type=int, default=500)
    ap.add_argument("--small", type=int, default=1000, help="requests of the small run (a multiple of --bodies)")
    ap.add_argument("--large", type=int, default=10000, help="requests of the large run (a multiple of --bodies)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--json", default=None, help="also write every measurement here")
    a = ap.parse_args(argv)
    if a.small % a.bodies or a.large % a.bodies or a.large <= a.small:
        ap.error("--small and --large must be multiples of --bodies, --large > --small")
    counts = [int(w) for w in a.workers.split(",")]
    if not become_subreaper():
        print("# not Linux: a fork server's CPU is not charged", file=sys.stderr)
    env = dict(os.environ)
    load0 = os.getloadavg()
    rows: dict[tuple[int, int], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="kvreplay-bench-workers-") as td:
        tmp = Path(td)
        wl = tmp / "workload.jsonl"
        make_workload(wl, a.bodies, max_tokens=a.tokens)
        srv, port = _start_server(None, a.tokens, -1)  # burst; unpinned, as the workers are
        url = f"http://127.0.0.1:{port}"
        keep = frozenset({srv.pid})
        # Byte-compiled imports, as an installed package has them (PYTHONDONTWRITEBYTECODE
        # would make every worker compile kvreplay's sources again): one unmeasured run each.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
        try:
            for w in counts:
                run_tree_cpu(kvreplay_cmd(wl, url, tmp / f"warm-{w}", a.conc, 1, w), env, keep)
            for rep in range(a.reps):
                order = counts if rep % 2 == 0 else counts[::-1]
                for w in order:
                    for n in (a.small, a.large):
                        out = Path(tempfile.mkdtemp(dir=tmp, prefix=f"w{w}-n{n}-"))
                        cpu, wall, _ = run_tree_cpu(kvreplay_cmd(wl, url, out, a.conc, n // a.bodies, w), env, keep)
                        rows.setdefault((w, n), []).append({"cpu_s": cpu, "wall_s": wall})
                        print(f"# workers {w} requests {n} rep {rep}: {cpu:.2f} CPU s, {wall:.2f} wall s",
                              file=sys.stderr)
        finally:
            _stop_server(srv)
    load1 = os.getloadavg()

    def med(w: int, n: int, key: str) -> float:
        return statistics.median(r[key] for r in rows[(w, n)])

    print(
        f"\n--workers CPU per request: C{a.conc}, burst server, {a.tokens} tokens/response, "
        f"{a.small} and {a.large} requests, medians of {a.reps}; load average before "
        f"{load0[0]:.2f}, after {load1[0]:.2f} ({os.cpu_count()} CPUs)\n"
    )
    print("| workers | CPU s @ small | CPU s @ large | per request (ms CPU) | fixed (CPU s) | wall s @ large |")
    print("|---|---|---|---|---|---|")
    per: dict[int, float] = {}
    for w in counts:
        cs, cl = med(w, a.small, "cpu_s"), med(w, a.large, "cpu_s")
        per[w] = (cl - cs) / (a.large - a.small)
        fixed = cs - a.small * per[w]
        print(f"| {w} | {cs:.2f} | {cl:.2f} | {per[w] * 1e3:.4f} | {fixed:.2f} | {med(w, a.large, 'wall_s'):.2f} |")
    base = counts[0]

    def rep_per(w: int, i: int) -> float:
        return (rows[(w, a.large)][i]["cpu_s"] - rows[(w, a.small)][i]["cpu_s"]) / (a.large - a.small)

    for w in counts[1:]:
        # Each rep's ratio from runs close in time: robust to the machine's load drifting.
        paired = sorted(rep_per(w, i) / rep_per(base, i) for i in range(a.reps))
        print(
            f"\nratio --workers {w} / --workers {base}: per request {per[w] / per[base]:.3f} "
            f"(of the medians; median of the {a.reps} reps' own ratios {statistics.median(paired):.3f}, "
            f"range {paired[0]:.3f}-{paired[-1]:.3f}); "
            f"whole run at {a.large} requests {med(w, a.large, 'cpu_s') / med(base, a.large, 'cpu_s'):.3f}"
        )
    if a.json:
        Path(a.json).write_text(json.dumps({f"{w}:{n}": v for (w, n), v in rows.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
