"""The whole client path's CPU per streamed token, without a socket (robust on a shared machine).

``bench_client.py`` measures the client end to end over loopback TCP; there more
than half of the client's CPU is the kernel's (``recv``, epoll, loopback TCP),
and how many SSE events each read holds follows the machine's load, so on a
shared machine its per-token figure moves by ±20 % from run to run. This script
runs the same ``execute_plan`` phase (records.jsonl flushed per record,
histograms, summary.json) but replaces each TCP connection by an in-process
transport that answers every request with the fast server's canned response
(``bench/_fastserver.py``: role chunk, 128 one-token chunks, usage chunk,
``[DONE]``), handed to ``data_received`` ``--per-read`` chunked frames at a time,
one read per event-loop iteration (so 64 streams interleave as on a socket).
What is left is the client's own work per read and per request: HTTP framing
(llhttp), the SSE accountant, the record, histograms and the loop. CPU time is
``time.process_time()`` of the measured phase (after a warm-up phase in the same
process); the median of ``--reps`` phases is printed.

    .venv/bin/python bench/bench_client_path.py                 # C64, 1 and 3 events per read
    .venv/bin/python bench/bench_client_path.py --per-read 1 --reps 7

Only the HTTP client's connection set-up is replaced (``H1Client._acquire``);
nothing is sent anywhere.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _fastserver import HEAD, build_events  # noqa: E402
from bench_client import make_workload  # noqa: E402


class _Transport(asyncio.Transport):
    """Answers each request written to it with the canned response, one read per loop iteration."""

    def __init__(self, proto: asyncio.Protocol, reads: list[bytes]) -> None:
        super().__init__()
        self._proto = proto
        self._reads = reads
        self._closing = False
        self._loop = asyncio.get_running_loop()

    def write(self, data: bytes) -> None:  # noqa: D102 - one request per write (H1Client writes head + body at once)
        self._loop.call_soon(self._feed, 0)

    def _feed(self, i: int) -> None:
        if self._closing:
            return
        self._proto.data_received(self._reads[i])
        if i + 1 < len(self._reads):
            self._loop.call_soon(self._feed, i + 1)

    def get_extra_info(self, name: str, default: object = None) -> object:  # noqa: D102
        return default

    def is_closing(self) -> bool:  # noqa: D102
        return self._closing

    def close(self) -> None:  # noqa: D102
        if not self._closing:
            self._closing = True
            self._loop.call_soon(self._proto.connection_lost, None)


def _reads(per_read: int, tokens: int, prompt_tokens: int) -> list[bytes]:
    frames = build_events(tokens, prompt_tokens)
    # The head arrives with the first frame (as a server's first write often does not,
    # but the head is once per request either way).
    out = [HEAD + frames[0]]
    rest = frames[1:]
    out += [b"".join(rest[i:i + per_read]) for i in range(0, len(rest), per_read)]
    return out


def run(conc: int, requests: int, per_read: int, reps: int, tokens: int = 128,
        hlog_interval_s: float | None = None) -> dict:
    """Median CPU s per 1M tokens (and per 1k requests) of ``reps`` measured phases."""
    import uvloop

    from kvreplay.plan import PhaseSpec, build_plan
    from kvreplay.runner import RunOptions, execute_plan
    from kvreplay.runner import h1 as h1mod
    from kvreplay.workload import load_workload

    reads = _reads(per_read, tokens, 1024)

    async def _acquire(self, fresh: bool):  # noqa: ANN001, ANN202 - replaces H1Client._acquire
        idle = self.idle
        while idle and not fresh:
            c = idle.pop()
            if not c.closed:
                return c
        proto = h1mod._H1Conn(self)
        proto.connection_made(_Transport(proto, reads))
        self._all.add(proto)
        return proto

    h1mod.H1Client._acquire = _acquire
    out: list[float] = []
    with tempfile.TemporaryDirectory(prefix="kvreplay-path-") as td:
        tmp = Path(td)
        make_workload(tmp / "wl.jsonl", 500, max_tokens=tokens)
        wl = load_workload(tmp / "wl.jsonl")

        def plan(name: str, n: int):  # noqa: ANN202
            return build_plan(wl, [PhaseSpec(name=name, concurrency=conc, repeats=max(1, n // 500),
                                             select="all" if n >= 500 else f"first:{n}")])

        async def go() -> None:
            opts = dict(target_url="http://127.0.0.1:9", quiet=True)
            if hlog_interval_s is not None:
                opts["hlog_interval_s"] = hlog_interval_s
            await execute_plan(plan("warm", 500), wl, RunOptions(out_dir=tmp / "warm", **opts))
            for i in range(reps):
                gc.collect()
                c0 = time.process_time()
                s = await execute_plan(plan(f"m{i}", requests), wl, RunOptions(out_dir=tmp / f"m{i}", **opts))
                cpu = time.process_time() - c0
                ph = s["phases"][0]
                assert ph["ok"] == requests, ph
                out.append(cpu / ph["tokens"]["completion"] * 1e6)

        uvloop.run(go())
    med = statistics.median(out)
    return {"conc": conc, "per_read": per_read, "requests": requests, "cpu_s_per_1m_tokens": round(med, 3),
            "cpu_s_per_1k_requests": round(med * tokens / 1000, 4), "reps": [round(v, 3) for v in out]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--conc", type=int, default=64)
    ap.add_argument("--requests", type=int, default=3000)
    ap.add_argument("--per-read", default="1,3", help="chunked frames per read (comma-separated)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--hlog-interval-s", type=float, default=None,
                    help="histogram log interval (s); a large value leaves only the end-of-phase cut (for runs "
                         "under valgrind, where wall-clock cuts come 50x as often per request)")
    a = ap.parse_args(argv)
    from kvreplay.accounting import IMPLEMENTATION

    print(f"accountant: {IMPLEMENTATION}; C{a.conc}, {a.requests} requests of 128 tokens per phase")
    print("| events per read | CPU s / 1M tokens (median) | CPU s / 1k requests | reps |\n|---|---|---|---|")
    for pr in (int(x) for x in a.per_read.split(",")):
        r = run(a.conc, a.requests, pr, a.reps, hlog_interval_s=a.hlog_interval_s)
        print(f"| {pr} | {r['cpu_s_per_1m_tokens']:.3f} | {r['cpu_s_per_1k_requests']:.4f} | {r['reps']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
