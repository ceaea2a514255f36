"""Where a one-token request's client CPU goes, measured inside the running loop (issue 43 item 2).

A micro-benchmark times one part alone, with its code and data in cache; inside a C64 run each
part costs about twice that (the kernel's TCP work between two requests evicts them). So each
part is measured here the way the issue's figure is: a ``bench_client`` kvreplay run (C64,
one-token answers, ``bench/_fastserver.py`` writing each answer at once, client pinned to CPU 0
and the server to CPU 1) with that one part replaced by a no-op, against the same run with
nothing replaced, alternating; the difference of the medians is the part's in-loop cost.

Parts: ``write`` (``RecordWriter.write``: orjson and the record's write), ``add``
(``PhaseStats.add``: summary and histograms), ``record`` (the record dict: a stored copy),
``body`` (``IndexedBodies.__getitem__``: ``pread``, SHA-256 and ``Body``: a stored copy). A
part's no-op changes what the run writes (records, figures): the runs here are for their CPU
only. One run moves by 2-3 µs against the next here: a part under ~2 µs is not resolved by a
few rounds.

Beside them, the **coroutine floor**: 64 coroutines, each writing its request and awaiting a
future that ``data_received`` resolves at the answer's end, the body read with ``pread`` per
request, with and without its SHA-256: what the runner's shape costs on this machine before any
of kvreplay's own work.

    PYTHONPATH=src .venv/bin/python bench/bench_request_parts.py                  # all parts, 3 rounds
    PYTHONPATH=src .venv/bin/python bench/bench_request_parts.py --parts body,add --rounds 5

Prints µs of client CPU per request (``time.process_time`` around the measured run, after
200 unmeasured requests), the median of ``--reps`` runs per round; the load average before
and after.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

PARTS = ("write", "add", "record", "body")


def _stub(part: str) -> None:
    """Replace ``part`` with a no-op (or a stored copy) in this process."""
    from kvreplay.metrics import summary
    from kvreplay.rundir import records
    from kvreplay.runner import _records
    from kvreplay.workload import index

    if part == "write":
        records.RecordWriter.write = lambda self, rec: None  # type: ignore[method-assign]
    elif part == "add":
        summary.PhaseStats.add = lambda self, rec, token_ns=None: None  # type: ignore[method-assign]
    elif part == "record":
        made = _records.RecordMaking.record
        kept: dict = {}

        def record(self, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
            if "r" not in kept:
                kept["r"] = made(self, *a, **k)
            return dict(kept["r"])

        _records.RecordMaking.record = record  # type: ignore[method-assign]
    elif part == "body":
        get = index.IndexedBodies.__getitem__
        bodies: dict = {}

        def getitem(self, i):  # noqa: ANN001, ANN202
            if i not in bodies:
                bodies[i] = get(self, i)
            return bodies[i]

        index.IndexedBodies.__getitem__ = getitem  # type: ignore[method-assign]


def _child(a: argparse.Namespace) -> None:
    """One process: ``--stub`` applied, ``--reps`` measured runs; prints the µs per request of each."""
    import bench_client

    if a.stub:
        _stub(a.stub)
    if hasattr(os, "sched_setaffinity") and a.cpu is not None:
        os.sched_setaffinity(0, {a.cpu})
    out = []
    for rep in range(a.reps):
        d = Path(a.out) / f"r{rep}"
        ns = argparse.Namespace(port=a.port, conc=64, requests=a.requests, warmup=200, workload=a.workload,
                                out=str(d), cpu=a.cpu, workers=1, tokens=1)
        r = bench_client.child_kvreplay(ns)
        out.append(r["cpu_s"] / a.requests * 1e6)
        shutil.rmtree(d, ignore_errors=True)
    print(json.dumps(out))


def coroutine_floor(port: int, workload: Path, n: int, sha: bool) -> float:
    """µs of CPU per request of the runner's shape alone (see the module docstring)."""
    import uvloop

    raw = workload.read_bytes().split(b"\n", 1)[0]
    fd = os.open(workload, os.O_RDONLY)
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(raw)

    class Conn(asyncio.Protocol):
        def connection_made(self, t: asyncio.BaseTransport) -> None:
            self.t = t
            self.fut: asyncio.Future | None = None

        def data_received(self, d: bytes) -> None:
            if d.endswith(b"0\r\n\r\n") and self.fut is not None:  # a chunked answer's end
                f, self.fut = self.fut, None
                f.set_result(None)

    async def main() -> float:
        loop = asyncio.get_running_loop()
        conns = [(await loop.create_connection(Conn, "127.0.0.1", port))[1] for _ in range(64)]
        left = [n]

        async def worker(c: Conn) -> None:
            while left[0] > 0:
                left[0] -= 1
                body = os.pread(fd, len(raw), 0)
                if sha:
                    hashlib.sha256(body).digest()
                c.fut = loop.create_future()
                c.t.write(head + body)  # type: ignore[attr-defined]
                await c.fut

        t = time.process_time()
        await asyncio.gather(*(worker(c) for c in conns))
        cpu = time.process_time() - t
        for c in conns:
            c.t.close()
        return cpu

    try:
        return uvloop.run(main()) / n * 1e6
    finally:
        os.close(fd)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (each part and the baseline once)")
    ap.add_argument("--reps", type=int, default=3, help="measured runs per process (median)")
    ap.add_argument("--requests", type=int, default=12000)
    a = ap.parse_args(argv)
    parts = [p for p in a.parts.split(",") if p]
    bad = [p for p in parts if p not in PARTS]
    if bad:
        ap.error(f"--parts: unknown part {bad[0]!r} (one of {', '.join(PARTS)})")
    import bench_client

    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    server_cpu, client_cpu = (cpus[-1], cpus[0]) if len(cpus) >= 2 else (None, None)
    load0 = os.getloadavg()
    got: dict[str, list[float]] = {"": [], **{p: [] for p in parts}}
    with tempfile.TemporaryDirectory(prefix="kvreplay-parts-") as td:
        tmp = Path(td)
        wl = tmp / "one.jsonl"
        bench_client.make_workload(wl, 500, max_tokens=1)
        srv, port = bench_client._start_server(server_cpu, 1, -1)
        try:
            for r in range(a.rounds):
                order = ["", *parts] if r % 2 == 0 else [*parts, ""]
                for part in order:
                    cmd = [sys.executable, __file__, "_child", "--port", str(port), "--workload", str(wl),
                           "--out", str(tmp / "o"), "--requests", str(a.requests), "--reps", str(a.reps)]
                    cmd += ["--stub", part] if part else []
                    cmd += ["--cpu", str(client_cpu)] if client_cpu is not None else []
                    res = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=600)
                    got[part].append(statistics.median(json.loads(res.stdout.strip().splitlines()[-1])))
            floor = statistics.median(coroutine_floor(port, wl, a.requests, False) for _ in range(3))
            floor_sha = statistics.median(coroutine_floor(port, wl, a.requests, True) for _ in range(3))
        finally:
            bench_client._stop_server(srv)
    load1 = os.getloadavg()
    base = statistics.median(got[""])
    print(f"one-token requests at C64, {a.requests} a run, medians of {a.reps} runs x {a.rounds} rounds; "
          f"load average {load0[0]:.2f} before, {load1[0]:.2f} after")
    print("| replaced by a no-op | µs a request (rounds) | median | the part's in-loop cost |")
    print("|---|---|---:|---:|")
    print(f"| nothing | {', '.join(f'{x:.1f}' for x in got[''])} | {base:.1f} | |")
    for p in parts:
        m = statistics.median(got[p])
        print(f"| {p} | {', '.join(f'{x:.1f}' for x in got[p])} | {m:.1f} | {base - m:+.1f} |")
    print(f"\ncoroutine floor (64 coroutines, pread a request): {floor:.1f} µs a request; "
          f"with the body's SHA-256: {floor_sha:.1f}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_child":
        ap = argparse.ArgumentParser()
        ap.add_argument("_child")
        ap.add_argument("--port", type=int, required=True)
        ap.add_argument("--workload", required=True)
        ap.add_argument("--out", required=True)
        ap.add_argument("--requests", type=int, required=True)
        ap.add_argument("--reps", type=int, required=True)
        ap.add_argument("--stub", default=None)
        ap.add_argument("--cpu", type=int, default=None)
        _child(ap.parse_args())
        sys.exit(0)
    sys.exit(main())
