"""End-to-end client overhead: kvreplay against a plain aiohttp + orjson client, same run.

Issue 11 / issue 3 ("end-to-end client-overhead benchmark"). One fast streaming
server (``bench/_fastserver.py``: zero delay, 128 one-token chunks, usage chunk,
``[DONE]``) runs in its own process pinned to one core; each client runs in a
fresh process pinned to the other core, at C1, C64 and C256, with 1k-token chat
prompts. Per client and concurrency it reports:

- client CPU seconds (``time.process_time()`` of the client process around the
  measured run, after a warm-up run in the same process) per 1M streamed
  tokens and per 1,000 requests;
- TTFT p50 the client itself reports (µs) — at C1 the instrument's floor;
- the client process's peak RSS (``ru_maxrss``, MB).

The kvreplay client is a normal ``execute_plan`` run (records.jsonl written and
flushed per record, HdrHistograms, summary.json, histogram logs, report.md).
The plain client posts the same bodies, iterates ``resp.content`` line by line
and ``orjson.loads`` every ``data:`` payload (the baseline of the issue). Both
use uvloop. Ratios are kvreplay / plain. Reps alternate the order of the two
clients; the table gives medians.

    .venv/bin/python bench/bench_client.py                 # full table (~2-4 min)
    .venv/bin/python bench/bench_client.py --quick         # smaller counts
    .venv/bin/python bench/bench_client.py --conc 64 --reps 5 --json out.json
    .venv/bin/python -m pytest bench/bench_client.py --benchmark-only   # one C64 run per client

Two cores are needed for the intended layout; with one, both share it (the
table says so). Load on the machine is printed (``os.getloadavg``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

WORDS = [
    "alpha", "beta", "gamma", "delta", "epsilon", "zeta", "theta", "iota", "kappa", "lambda", "omicron", "sigma",
    "tau", "upsilon", "phi", "chi", "psi", "omega", "river", "stone", "cloud", "field", "light", "shadow", "garden",
    "window",
]


def make_workload(path: Path, n: int, prompt_tokens: int = 1024, max_tokens: int = 128) -> None:
    """Write ``n`` distinct chat bodies of about ``prompt_tokens`` tokens (simulator tokenizer)."""
    import orjson

    from kvreplay.sim.tokenizer import count_tokens

    # One word ~ 1 token here (short words, single leading space).
    filler = " ".join(WORDS[(i * 7) % len(WORDS)] for i in range(prompt_tokens))
    while count_tokens(filler) > prompt_tokens - 24:
        filler = filler.rsplit(" ", 8)[0]
    lines = []
    for i in range(n):
        body = {
            "model": "bench",
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": f"request {i}: {filler}"}],
        }
        lines.append(orjson.dumps(body))
    path.write_bytes(b"\n".join(lines) + b"\n")


def _pin(cpu: int | None) -> None:
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _reads() -> int:
    """Read system calls this process made so far (``syscr`` of ``/proc/self/io``; 0 where there is none).

    libuv reads a TCP socket with ``read(2)``, so each socket read counts once (a body's
    ``pread`` too: one a request).
    """
    try:
        with open("/proc/self/io") as f:
            for line in f:
                if line.startswith("syscr:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


# --------------------------------------------------------------------------- plain client


async def _plain_once(url: str, bodies: list[bytes], order: list[int], conc: int) -> dict:
    import aiohttp
    import orjson

    from kvreplay.clock import now_ns

    ttft: list[int] = []
    tokens = 0
    it = iter(order)
    conn = aiohttp.TCPConnector(limit=conc, limit_per_host=conc)
    headers = {"Content-Type": "application/json"}

    async with aiohttp.ClientSession(connector=conn, auto_decompress=False) as s:

        async def worker() -> None:
            nonlocal tokens
            for i in it:
                t0 = now_ns()
                first = None
                n = 0
                async with s.post(url, data=bodies[i], headers=headers) as resp:
                    async for line in resp.content:
                        if not line.startswith(b"data: "):
                            continue
                        payload = line[6:].rstrip()
                        if payload == b"[DONE]":
                            break
                        obj = orjson.loads(payload)
                        for ch in obj.get("choices") or ():
                            if (ch.get("delta") or {}).get("content"):
                                n += 1
                                if first is None:
                                    first = now_ns()
                if first is not None:
                    ttft.append(first - t0)
                tokens += n

        await asyncio.gather(*(worker() for _ in range(conc)))
    ttft.sort()
    return {
        "requests": len(order),
        "tokens": tokens,
        "ttft_p50_us": ttft[len(ttft) // 2] / 1e3 if ttft else None,
    }


def child_plain(a: argparse.Namespace) -> dict:
    """Warm-up then measured run of the plain client; CPU of the measured run."""
    import uvloop

    bodies = [ln for ln in Path(a.workload).read_bytes().split(b"\n") if ln]
    url = f"http://127.0.0.1:{a.port}/v1/chat/completions"
    warm = [i % len(bodies) for i in range(a.warmup)]
    order = [i % len(bodies) for i in range(a.requests)]

    async def both() -> tuple[dict, float, float]:
        await _plain_once(url, bodies, warm, a.conc)
        c0, t0, r0 = time.process_time(), time.perf_counter(), _reads()
        r = await _plain_once(url, bodies, order, a.conc)
        return {**r, "reads": _reads() - r0}, time.process_time() - c0, time.perf_counter() - t0

    r, cpu, wall = uvloop.run(both())
    return {**r, "cpu_s": cpu, "wall_s": wall, "rss_mb": _rss_mb()}


# --------------------------------------------------------------------------- the read floor


def child_floor(a: argparse.Namespace) -> dict:
    """Warm-up then measured run of ``_read_floor`` (stamps each read, parses nothing); CPU of the measured run.

    Its token count is the answers' tokens as the server sends them (``--tokens`` each):
    the floor does not parse events, so it cannot count them itself.
    """
    import uvloop

    sys.path.insert(0, str(HERE))
    from _read_floor import run_floor

    bodies = [ln for ln in Path(a.workload).read_bytes().split(b"\n") if ln]
    warm = [i % len(bodies) for i in range(a.warmup)]
    order = [i % len(bodies) for i in range(a.requests)]

    async def both() -> tuple[dict, float, float]:
        await run_floor(a.port, bodies, warm, a.conc)
        c0, t0, r0 = time.process_time(), time.perf_counter(), _reads()
        r = await run_floor(a.port, bodies, order, a.conc)
        return {**r, "reads": _reads() - r0}, time.process_time() - c0, time.perf_counter() - t0

    r, cpu, wall = uvloop.run(both())
    return {**r, "tokens": r["requests"] * a.tokens, "cpu_s": cpu, "wall_s": wall, "rss_mb": _rss_mb()}


# --------------------------------------------------------------------------- kvreplay client


def child_kvreplay(a: argparse.Namespace) -> dict:
    """Warm-up then measured ``execute_plan`` runs; CPU of the measured run (a whole normal run)."""
    import uvloop

    from kvreplay.plan import PhaseSpec, build_plan
    from kvreplay.runner import RunOptions, execute_plan
    from kvreplay.workload import load_workload

    wl = load_workload(a.workload)
    n = len(wl)
    url = f"http://127.0.0.1:{a.port}"
    out = Path(a.out)

    def plan_for(name: str, count: int):  # noqa: ANN202
        reps = -(-count // n)
        sel = "all" if count >= n else f"first:{count}"
        spec = PhaseSpec(
            name=name, concurrency=a.conc, repeats=reps if count >= n else 1, select=sel
        )
        return build_plan(wl, [spec])

    workers = getattr(a, "workers", 1)

    reads: int | None = None  # socket reads of the measured run (one process only)

    async def both() -> tuple[dict, float, float]:
        nonlocal reads
        await execute_plan(
            plan_for("warm", a.warmup),
            wl,
            RunOptions(target_url=url, out_dir=out / "warm", quiet=True),
        )
        c0, t0, r0 = time.process_time(), time.perf_counter(), _reads()
        s = await execute_plan(
            plan_for("main", a.requests),
            wl,
            RunOptions(target_url=url, out_dir=out / "main", quiet=True),
        )
        reads = _reads() - r0
        return s, time.process_time() - c0, time.perf_counter() - t0

    if workers > 1:
        from kvreplay.runner.multiproc import execute_plan_workers

        def cpu_all() -> float:
            ch = resource.getrusage(resource.RUSAGE_CHILDREN)
            return time.process_time() + ch.ru_utime + ch.ru_stime

        c0, t0 = cpu_all(), time.perf_counter()
        s = uvloop.run(
            execute_plan_workers(
                plan_for("main", a.requests),
                wl,
                RunOptions(target_url=url, out_dir=out / "main", quiet=True),
                workers=workers,
            )
        )
        cpu, wall = (
            cpu_all() - c0,
            time.perf_counter() - t0,
        )  # includes spawning and importing N workers
    else:
        s, cpu, wall = uvloop.run(both())
    ph = s["phases"][0]
    p50 = ph["ttft_ms"]["p50"]
    rec = {
        "requests": ph["ok"],
        "tokens": ph["tokens"]["completion"],
        "ttft_p50_us": p50 * 1e3 if p50 is not None else None,
        "cpu_s": cpu,
        "wall_s": wall,
        "rss_mb": _rss_mb(),
        "failed": ph["failed"],
        "records": s["records"],
        "phase_rps": ph["throughput_rps"],
        "reads": reads,
    }
    if "client" in ph:
        rec["self"] = ph["client"]
    return rec


# --------------------------------------------------------------------------- driver


def _start_server(
    cpu: int | None, tokens: int, yield_every: int = 1
) -> tuple[subprocess.Popen, int]:
    cmd = [
        sys.executable,
        str(HERE / "_fastserver.py"),
        "--tokens",
        str(tokens),
        "--yield-every",
        str(yield_every),
    ]
    if cpu is not None:
        cmd += ["--cpu", str(cpu)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline() if p.stdout else ""
    if not line.startswith("PORT "):
        p.kill()
        raise RuntimeError(f"server did not start: {line!r}")
    return p, int(line.split()[1])


def _stop_server(srv: subprocess.Popen) -> None:
    """Stop a ``_start_server`` process (SIGTERM, reaped within 10 s) and close its pipe."""
    srv.terminate()
    srv.wait(timeout=10)
    if srv.stdout is not None:
        srv.stdout.close()


def _run_child(
    kind: str,
    port: int,
    conc: int,
    requests: int,
    warmup: int,
    workload: Path,
    tmp: Path,
    cpu: int | None,
    workers: int = 1,
    tokens: int = 128,
) -> dict:
    out = Path(tempfile.mkdtemp(dir=tmp, prefix=f"{kind}-c{conc}-"))
    cmd = [
        sys.executable,
        __file__,
        "_child",
        kind,
        "--port",
        str(port),
        "--conc",
        str(conc),
        "--requests",
        str(requests),
        "--warmup",
        str(warmup),
        "--workload",
        str(workload),
        "--out",
        str(out),
        "--workers",
        str(workers),
        "--tokens",
        str(tokens),
    ]
    if cpu is not None:
        cmd += ["--cpu", str(cpu)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"{kind} C{conc} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def _per(r: dict) -> dict:
    out = {
        "cpu_s_per_1M_tokens": r["cpu_s"] / r["tokens"] * 1e6 if r["tokens"] else None,
        "cpu_s_per_1k_requests": r["cpu_s"] / r["requests"] * 1e3 if r["requests"] else None,
        "requests_per_s": r.get("phase_rps")
        or (r["requests"] / r["wall_s"] if r["wall_s"] else None),
    }
    me = r.get("self") or {}
    out.update(
        {
            "self_cpu_util": me.get("cpu_utilisation"),
            "self_lag_p99_ms": me.get("loop_lag_p99_ms"),
            "self_bound": me.get("bound"),
        }
    )
    return out


def _median(rows: list[dict], key: str) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--conc", default="1,64,256", help="comma-separated concurrencies")
    ap.add_argument(
        "--requests", default=None, help="per concurrency, e.g. 1:1500,64:6000,256:6000"
    )
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--bodies", type=int, default=500)
    ap.add_argument(
        "--quick", action="store_true", help="a quarter of the default request counts, 1 rep"
    )
    ap.add_argument("--clients", default="plain,kvreplay",
                    help="comma-separated: plain, kvreplay, floor (bench/_read_floor.py: stamps each "
                    "read, parses nothing)")
    ap.add_argument(
        "--workers",
        default="1",
        help="kvreplay --workers N (multiprocess runner); a list "
        "(1,2) runs each, for the throughput comparison",
    )
    ap.add_argument(
        "--server",
        default="per-event",
        choices=["per-event", "burst"],
        help="per-event: one write per SSE event (default); burst: one write per response "
        "(the cheapest server, so the client is the bottleneck)",
    )
    ap.add_argument("--json", default=None, help="also write every measurement here")
    a = ap.parse_args(argv)
    concs = [int(c) for c in a.conc.split(",")]
    counts = {1: 1500, 64: 6000, 256: 6000}
    if a.requests:
        counts.update({int(k): int(v) for k, v in (kv.split(":") for kv in a.requests.split(","))})
    if a.quick:
        counts = {k: max(200, v // 4) for k, v in counts.items()}
        a.reps = 1
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    server_cpu, client_cpu = (cpus[-1], cpus[0]) if len(cpus) >= 2 else (None, None)
    worker_counts = [int(w) for w in str(a.workers).split(",")]
    if max(worker_counts) > 1:
        client_cpu = server_cpu = None  # the workers need the cores; the server shares them
    load0 = os.getloadavg()
    clients = a.clients.split(",")
    kinds = [(c, 1) for c in clients if c != "kvreplay"]
    kinds += [("kvreplay", w) for w in worker_counts] if "kvreplay" in clients else []
    results: dict[tuple[str, int], list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="kvreplay-bench-") as td:
        tmp = Path(td)
        wl = tmp / "workload.jsonl"
        make_workload(wl, a.bodies, max_tokens=a.tokens)
        srv, port = _start_server(server_cpu, a.tokens, -1 if a.server == "burst" else 1)
        try:
            for conc in concs:
                n = counts.get(conc, 4000)
                warm = min(n, max(200, 2 * conc))
                for rep in range(a.reps):
                    order = kinds if rep % 2 == 0 else kinds[::-1]
                    for kind, w in order:
                        r = _run_child(kind, port, conc, n, warm, wl, tmp, client_cpu, w, a.tokens)
                        r.update(_per(r))
                        label = kind if w == 1 else f"{kind}-w{w}"
                        results.setdefault((label, conc), []).append(r)
                        print(
                            f"# {label:8s} C{conc:<4d} rep {rep}: {r['cpu_s']:.2f} s CPU, "
                            f"{r['cpu_s_per_1M_tokens']:.2f} s/1M tok, "
                            f"TTFT p50 {r['ttft_p50_us']:.0f} us, "
                            f"{r['requests_per_s']:.0f} req/s, RSS {r['rss_mb']:.0f} MB",
                            file=sys.stderr,
                        )
        finally:
            _stop_server(srv)
    load1 = os.getloadavg()
    print(
        f"\nclient-overhead benchmark: {a.tokens} tokens/response, 1k-token prompts, "
        f"{a.server} server, "
        f"server on cpu {server_cpu}, client on cpu {client_cpu}, workers {a.workers}, "
        f"medians of {a.reps} reps; load average before {load0[0]:.2f}, after {load1[0]:.2f} "
        f"({os.cpu_count()} CPUs)\n"
    )
    hdr = (
        "| C | client | CPU s / 1M tokens | CPU s / 1k req | TTFT p50 (µs) | req/s | peak RSS (MB) "
        "| self: CPU util / loop lag p99 ms / client_bound |"
    )
    print(hdr)
    print("|---|---|---|---|---|---|---|---|")
    labels = [k if w == 1 else f"{k}-w{w}" for k, w in kinds]
    for conc in concs:
        for kind in labels:
            rows = results.get((kind, conc), [])
            if not rows:
                continue
            me = "—"
            if rows[0].get("self_cpu_util") is not None:
                me = (
                    f"{_median(rows, 'self_cpu_util'):.2f} / "
                    f"{_median(rows, 'self_lag_p99_ms'):.2f} / "
                    f"{sum(bool(r['self_bound']) for r in rows)} of {len(rows)}"
                )
            print(
                f"| {conc} | {kind} | {_median(rows, 'cpu_s_per_1M_tokens'):.2f} | "
                f"{_median(rows, 'cpu_s_per_1k_requests'):.3f} | "
                f"{_median(rows, 'ttft_p50_us'):.0f} | "
                f"{_median(rows, 'requests_per_s'):.0f} | {_median(rows, 'rss_mb'):.0f} | {me} |"
            )
        if ("plain", conc) in results and ("kvreplay", conc) in results:
            k, p = results[("kvreplay", conc)], results[("plain", conc)]
            keys = (
                "cpu_s_per_1M_tokens",
                "cpu_s_per_1k_requests",
                "ttft_p50_us",
                "requests_per_s",
                "rss_mb",
            )
            cells = " | ".join(f"{_median(k, key) / _median(p, key):.2f}" for key in keys)
            print(f"| {conc} | **ratio kvreplay/plain** | {cells} | |")
            if ("floor", conc) in results:
                f = results[("floor", conc)]
                cells = " | ".join(f"{_median(f, key) / _median(p, key):.2f}" for key in keys[:2])
                print(f"| {conc} | **ratio floor/plain** (the least a per-read client costs) | {cells} | | | | |")
    if a.json:
        Path(a.json).write_text(
            json.dumps({f"{k}:{c}": v for (k, c), v in results.items()}, indent=1)
        )
    return 0


# --------------------------------------------------------------------------- pytest-benchmark


@pytest.mark.benchmark(group="client-overhead-c64")
@pytest.mark.parametrize("kind", ["plain", "kvreplay"])
def test_client_overhead_c64(benchmark, kind, tmp_path):
    """One C64 run per client (2,000 requests); ``extra_info`` holds the per-token CPU figures."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    server_cpu, client_cpu = (cpus[-1], cpus[0]) if len(cpus) >= 2 else (None, None)
    wl = tmp_path / "workload.jsonl"
    make_workload(wl, 200)
    srv, port = _start_server(server_cpu, 128)
    try:
        r = benchmark.pedantic(
            _run_child,
            args=(kind, port, 64, 2000, 200, wl, tmp_path, client_cpu),
            rounds=1,
            iterations=1,
        )
    finally:
        _stop_server(srv)
    r.update(_per(r))
    benchmark.extra_info.update(
        {k: r[k] for k in ("cpu_s_per_1M_tokens", "cpu_s_per_1k_requests", "ttft_p50_us", "rss_mb")}
    )


def child_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["plain", "kvreplay", "floor"])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--conc", type=int, required=True)
    ap.add_argument("--requests", type=int, required=True)
    ap.add_argument("--warmup", type=int, required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--cpu", type=int, default=None)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--tokens", type=int, default=128, help="tokens per answer (the floor's count)")
    a = ap.parse_args(argv)
    _pin(a.cpu)
    r = {"plain": child_plain, "kvreplay": child_kvreplay, "floor": child_floor}[a.kind](a)
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_child":
        sys.exit(child_main(sys.argv[2:]))
    sys.exit(main())
