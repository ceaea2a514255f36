"""Where kvreplay's steady-state client CPU goes: cProfile of one C64 phase against the fast server.

Issue 21 item 2 (the profile table of docs/performance.md). The fast server
(``bench/_fastserver.py``) runs in its own process; this process runs a warm-up
``execute_plan`` and then a profiled one of ``--requests`` requests at
``--conc``, and prints the functions with the most own time (tottime), grouped
by module, as a Markdown table: share of the profiled phase's CPU, own seconds,
calls. cProfile adds its own overhead per Python call (C calls count to their
caller), so shares, not absolute seconds, are the figure to read.

    .venv/bin/python bench/profile_client.py --requests 4000 --conc 64 --top 25
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_client import _start_server, make_workload  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=4000)
    ap.add_argument("--conc", type=int, default=64)
    ap.add_argument("--bodies", type=int, default=500)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--server", choices=("per-event", "burst"), default="per-event",
                    help="burst: the whole answer in one write (per-request work shows)")
    a = ap.parse_args(argv)
    import uvloop

    from kvreplay.plan import PhaseSpec, build_plan
    from kvreplay.runner import RunOptions, execute_plan
    from kvreplay.workload import load_workload

    ncpu = len(os.sched_getaffinity(0))
    srv_cpu, cli_cpu = (0, 1) if ncpu >= 2 else (None, None)
    if cli_cpu is not None:
        os.sched_setaffinity(0, {cli_cpu})
    with tempfile.TemporaryDirectory(prefix="kvreplay-prof-") as td:
        tmp = Path(td)
        make_workload(tmp / "wl.jsonl", a.bodies, max_tokens=a.tokens)
        wl = load_workload(tmp / "wl.jsonl")
        srv, port = _start_server(srv_cpu, a.tokens, -1 if a.server == "burst" else 1)
        url = f"http://127.0.0.1:{port}"

        def plan(name: str, n: int):  # noqa: ANN202
            return build_plan(wl, [PhaseSpec(name=name, concurrency=a.conc, repeats=max(1, n // a.bodies),
                                             select="all" if n >= a.bodies else f"first:{n}")])

        prof = cProfile.Profile()

        async def go() -> dict:
            await execute_plan(plan("warm", 500), wl, RunOptions(target_url=url, out_dir=tmp / "w", quiet=True))
            prof.enable()
            s = await execute_plan(plan("main", a.requests), wl,
                                   RunOptions(target_url=url, out_dir=tmp / "m", quiet=True))
            prof.disable()
            return s

        try:
            c0 = time.process_time()
            s = uvloop.run(go())
            cpu = time.process_time() - c0
        finally:
            srv.terminate()
            srv.wait(timeout=10)
    st = pstats.Stats(prof)
    total = sum(v[2] for v in st.stats.values())  # type: ignore[attr-defined]
    rows = sorted(st.stats.items(), key=lambda kv: kv[1][2], reverse=True)[: a.top]  # type: ignore[attr-defined]
    ph = s["phases"][0]
    print(f"C{a.conc}, {ph['ok']} requests, {ph['tokens']['completion']} tokens; profiled own time {total:.2f} s "
          f"(process CPU incl. warm-up and profiler: {cpu:.2f} s)\n")
    print("| share | own s | calls | function |\n|---|---|---|---|")
    root = str(Path(__file__).resolve().parents[1])
    for (file, line, fn), (_cc, nc, tt, _ct, _callers) in rows:
        where = file.replace(root + "/", "").replace(sys.prefix, "<venv>")
        where = where.split("site-packages/")[-1]
        print(f"| {tt / total:.1%} | {tt:.3f} | {nc:,} | `{fn}` ({where}:{line}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
