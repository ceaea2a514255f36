"""The performance guard: run before every stop (issue 43 item 4).

One run measures the client's and the proxy's costs against references in the same
run, prints each beside its target and the last landed figure
(``bench/guard-baseline.json``), and exits 1 when a figure regressed past its
tolerance. It reuses the benchmarks' pieces (``bench_client``, ``bench_scale``,
``bench_record``); nothing here measures differently from them.

Figures (each a median over alternating repetitions; the arms of a pair alternate
which goes first):

- **per token, C64** (``token_ratio``): ``bench_client``'s children (a warm-up run,
  then ``time.process_time()`` around the measured run in the same process; kvreplay a
  normal ``execute_plan`` run) against ``bench/_fastserver.py`` streaming 128 one-token
  events per answer: kvreplay's CPU per streamed token over the plain aiohttp + orjson
  client's. Target 0.12x (issue 43 item 1).
- **whole run, C64** (``whole_ratio``): ``bench_scale``'s ``run_kvreplay`` /
  ``run_plain``, no warm-up: the user + system CPU (``os.wait4``) of a whole ``kvreplay
  run`` process (interpreter start, imports, plan, requests, summary, histogram logs,
  report.md and report.html) over the plain client's whole process, same server. Target
  0.25x at 20,000 requests (``--full``; the default's small N is dominated by the fixed
  start and report cost, so its ratio is higher: compare it with its own baseline). Work
  moved out of the measured phase still counts here.
- **per request, one-token answers, C64** (``request_ratio``): ``bench_client``'s
  children (a warm-up run, then ``time.process_time()`` around the measured run in
  the same process) against a server answering one token. Target 0.25x (item 2).
- **the floor** of those three (``token_ratio_floor``, ``request_ratio_floor``,
  ``whole_ratio_floor``; printed beside each target, not judged): ``bench/_read_floor.py``,
  a client on the same loop that writes each request, stamps each read and parses nothing,
  as a third arm of the same alternation, over the plain client; per request it reads a
  second server that writes each answer at once (one read an answer: against the
  per-event server it reads each of an answer's writes alone, 3-4 a request, which is no
  floor). No client that reads each event as it arrives can cost less here; when it is
  over a target, the target is below what this machine allows (docs/performance.md, "The
  read floor").
- **kvreplay over the floor** (judged): CPU per socket read with 128-token answers
  (``read_over_floor``: ``syscr`` of ``/proc/self/io`` around the measured run; per read,
  because a slower client joins more events a read and so hides a per-read cost per
  token), CPU per one-token request over the one-read floor (``request_over_floor``) and the whole run
  (``whole_over_floor``). Both arms see the same machine in the same minutes, so these
  move less with load than the ratios to the plain client (which lags and batches).
- **proxy over the relay floor, C64** (``proxy_over_floor``): ``kvreplay record``'s
  CPU per streamed token over ``bench/_relay_floor.py``'s on alternating C64 runs
  in front of ``kvreplay serve-sim --time-scale 0.05 --slots 64`` (``bench_record``'s
  ``Proc``, ``floor_relay``, ``alternate_c64``). Target 1.5x (item 3).
- **peak RSS at N distinct bodies** (``rss_mb``): ``bench_scale``'s ``run_distinct``
  (one distinct ~6 KB body per request, closed loop C64, 8 tokens an answer),
  ``ru_maxrss`` of the whole ``kvreplay run``. Target 150 MB (issue 32).

Tolerances (a figure regresses when it is worse than the baseline by more than):
CPU ratios 25% (``--tol-ratio``): on this 2-CPU machine shared with other jobs, the
same tree's per-request and whole-run medians moved by up to ~20% between runs
(docs/performance.md, "The guard"); absolute CPU moves far more, which is why every CPU
figure is a ratio to a reference measured in the same run. The per-token figures 40%
(``--tol-noisy``), with more repetitions: kvreplay's CPU per token against a server that
writes one event per send is bimodal (when the client keeps up, every read carries one
event and a token costs a read; when it lags, reads carry several: one run read 0.381 and
0.699 for the same tree), and the proxy and its floor (read from ``/proc``'s schedstat in ns
since 2026-12-05; before, in 10 ms clock ticks: single pairs 1.3-3.5 in one run) vary run to run. RSS 10 MB
(``--tol-rss-mb``): it does not depend on load (same tree: within 2 MB).

    PYTHONPATH=src .venv/bin/python bench/guard.py            # small N: 60-100 s here at load 3-8
    PYTHONPATH=src .venv/bin/python bench/guard.py --full     # the issue's sizes: ~4 min quiet
    PYTHONPATH=src .venv/bin/python bench/guard.py --write-baseline --note "why"

The guard measures the tree it sits in: it puts its own ``src/`` first on
``PYTHONPATH`` for every process it starts. Exit status: 0 no regression, 1 a
figure regressed (named on stderr), 2 a measurement failed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
BASELINE = HERE / "guard-baseline.json"
os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])
sys.path[:0] = [str(ROOT / "src"), str(HERE)]

from bench_client import _run_child, _start_server, _stop_server, make_workload  # noqa: E402
from bench_record import Proc, alternate_c64, file_create_us, floor_relay  # noqa: E402
from bench_scale import make_distinct_workload, run_distinct, run_kvreplay, run_plain  # noqa: E402

#: Sizes per mode: requests of the C64 128-token runs (per token, after a warm-up run;
#: whole run, none), of the one-token runs (and their warm-up), of each proxy/floor C64 run, distinct bodies for
#: the RSS figure, and repetitions (pairs) of the alternating figures (the proxy's: its
#: CPU is read in clock ticks from ``/proc``, so it takes more).
SIZES: dict[str, dict[str, int]] = {
    "default": {"token_n": 1000, "token_warm": 150, "whole_n": 500, "request_n": 2000, "request_warm": 200,
                "proxy_n": 128, "proxy_reps": 3, "rss_n": 2000, "reps": 2, "token_reps": 3},
    "full": {"token_n": 3000, "token_warm": 400, "whole_n": 20000, "request_n": 6000, "request_warm": 600,
             "proxy_n": 384, "proxy_reps": 3, "rss_n": 20000, "reps": 2, "token_reps": 3},
}

#: Each figure: (label, unit, target (None: the issue sets none), tolerance kind); lower is better for all.
FIGURES: dict[str, tuple[str, str, float | None, str]] = {
    "token_ratio": ("CPU per streamed token, C64, kvreplay / plain", "x", 0.12, "noisy"),
    "read_over_floor": ("CPU per socket read, C64 128-token answers, kvreplay / read floor", "x", None, "floor"),
    "whole_ratio": ("whole-run CPU, C64, kvreplay / plain", "x", 0.25, "ratio"),
    "whole_over_floor": ("whole-run CPU, C64, kvreplay / read floor", "x", None, "ratio"),
    "request_ratio": ("CPU per request, one-token answers, C64, kvreplay / plain", "x", 0.25, "ratio"),
    "request_over_floor": ("CPU per request, one-token answers, C64, kvreplay / one-read floor", "x", None, "ratio"),
    "proxy_over_floor": ("proxy CPU per token / relay floor's, C64", "x", 1.5, "noisy"),
    "rss_mb": ("peak RSS of kvreplay run at N distinct bodies", "MB", 150.0, "rss"),
}


def _cpus() -> tuple[int | None, int | None]:
    """(server CPU, client CPU): the last and the first core this process may use, or None with one."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    return (cpus[-1], cpus[0]) if len(cpus) >= 2 else (None, None)


def _alternate(reps: int, arms: dict[str, Callable[[], dict]]) -> dict[str, list[dict]]:
    """Run each arm ``reps`` times, the order reversed every other repetition."""
    names = list(arms)
    got: dict[str, list[dict]] = {n: [] for n in names}
    for rep in range(reps):
        for n in names if rep % 2 == 0 else names[::-1]:
            got[n].append(arms[n]())
    return got


def _under(src: Path | None, fn: Callable[[], dict]) -> Callable[[], dict]:
    """``fn`` run with ``src`` first on the children's ``PYTHONPATH`` (None: unchanged)."""
    if src is None:
        return fn

    def call() -> dict:
        keep = os.environ["PYTHONPATH"]
        os.environ["PYTHONPATH"] = os.pathsep.join([str(src.resolve()), keep])
        try:
            return fn()
        finally:
            os.environ["PYTHONPATH"] = keep

    return call


def _children(tmp: Path, tokens: int, n: int, warm: int, reps: int, srv_cpu: int | None, cli_cpu: int | None,
              ref: Path | None, per: str) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """``bench_client``'s children at C64 against a ``tokens``-token server, alternating.

    Returns (CPU µs ``per`` "token" or "request" by arm, the arm / plain ratio per repetition
    by arm); the arms are ``kvreplay`` (this tree), ``plain``, ``floor`` (``bench/_read_floor.py``:
    a client that stamps each read and parses nothing, the least any per-read client costs
    here; per request against a second server writing each answer at once, so one read an
    answer) and, with ``ref``, ``ref`` (the kvreplay under ``ref``, in the same run).
    """
    wl = tmp / f"w{tokens}.jsonl"
    make_workload(wl, 500, max_tokens=tokens)
    srv, port = _start_server(srv_cpu, tokens)
    # Per request the floor reads a server that writes each answer at once (one read an answer):
    # against the per-event server it is fast enough to read each of an answer's writes alone
    # (3-4 reads a request where kvreplay takes 1-2), which is no floor (docs/performance.md).
    burst = _start_server(srv_cpu, tokens, -1) if per == "request" else None
    floor_port = burst[1] if burst is not None else port
    arms = {c: (lambda c=c: _run_child(c, port, 64, n, warm, wl, tmp, cli_cpu, 1, tokens))
            for c in ("kvreplay", "plain")}
    arms["floor"] = lambda: _run_child("floor", floor_port, 64, n, warm, wl, tmp, cli_cpu, 1, tokens)
    if ref is not None:
        arms["ref"] = _under(ref, lambda: _run_child("kvreplay", port, 64, n, warm, wl, tmp, cli_cpu))
    try:
        got = _alternate(reps, arms)
    finally:
        _stop_server(srv)
        if burst is not None:
            _stop_server(burst[0])
    key = "tokens" if per == "token" else "requests"
    us = {c: [r["cpu_s"] / r[key] * 1e6 for r in rows] for c, rows in got.items()}
    ratios = {c: [k / p for k, p in zip(us[c], us["plain"], strict=True)] for c in us if c != "plain"}
    for c in ("kvreplay", "floor"):  # CPU per socket read (``bench_client._reads``: syscr)
        us[c + "_read"] = [r["cpu_s"] / r["reads"] * 1e6 if r.get("reads") else float("nan") for r in got[c]]
    return us, ratios


def _group(name: str, per: str, us: dict[str, list[float]], ratios: dict[str, list[float]]) -> dict:
    out: dict[str, Any] = {name: statistics.median(ratios["kvreplay"]), name + "_reps": ratios["kvreplay"],
                           "detail": {c: {f"us_per_{per}": statistics.median(v)} for c, v in us.items()}}
    if "ref" in ratios:
        out[name + "_ref"], out[name + "_ref_reps"] = statistics.median(ratios["ref"]), ratios["ref"]
    out[name + "_floor"], out[name + "_floor_reps"] = statistics.median(ratios["floor"]), ratios["floor"]
    if per == "token":  # per socket read: a slower client joins more events a read, so per token hides it
        over = [k / f for k, f in zip(us["kvreplay_read"], us["floor_read"], strict=True)]
        out["read_over_floor"], out["read_over_floor_reps"] = statistics.median(over), over
    else:
        over = [k / f for k, f in zip(us["kvreplay"], us["floor"], strict=True)]
        out["request_over_floor"], out["request_over_floor_reps"] = statistics.median(over), over
    return out


def per_token(tmp: Path, n: int, warm: int, reps: int, srv_cpu: int | None, cli_cpu: int | None,
              ref: Path | None = None) -> dict:
    """CPU per streamed token at C64, 128 tokens an answer (``bench_client``'s children), kvreplay over plain."""
    return _group("token_ratio", "token", *_children(tmp, 128, n, warm, reps, srv_cpu, cli_cpu, ref, "token"))


def whole_run(tmp: Path, n: int, reps: int, srv_cpu: int | None, cli_cpu: int | None) -> dict:
    """Whole-process CPU of ``n`` requests at C64, 128 tokens an answer, without a warm-up, kvreplay over plain.

    ``bench_scale``'s ``run_kvreplay`` (the ``kvreplay run`` command line, reports included)
    and ``run_plain``; per-request work moved out of the measured phase still counts here.
    """
    wl = tmp / "whole.jsonl"
    make_workload(wl, 500, max_tokens=128)
    srv, port = _start_server(srv_cpu, 128)
    try:
        got = _alternate(reps, {
            "kvreplay": lambda: run_kvreplay(port, wl, n, 500, 64, cli_cpu, tmp),
            "plain": lambda: run_plain(port, wl, n, 64, cli_cpu, tmp),
            "floor": lambda: run_plain(port, wl, n, 64, cli_cpu, tmp, "floor"),
        })
    finally:
        _stop_server(srv)
    whole = [k["whole_cpu_s"] / p["whole_cpu_s"] for k, p in zip(got["kvreplay"], got["plain"], strict=True)]
    floor = [f["whole_cpu_s"] / p["whole_cpu_s"] for f, p in zip(got["floor"], got["plain"], strict=True)]
    over = [k["whole_cpu_s"] / f["whole_cpu_s"] for k, f in zip(got["kvreplay"], got["floor"], strict=True)]
    return {"whole_ratio": statistics.median(whole), "whole_ratio_reps": whole,
            "whole_ratio_floor": statistics.median(floor), "whole_ratio_floor_reps": floor,
            "whole_over_floor": statistics.median(over), "whole_over_floor_reps": over,
            "detail": {c: {"whole_cpu_s": statistics.median(r["whole_cpu_s"] for r in rows),
                           "startup_cpu_s": rows[0].get("startup_cpu_s")}
                       for c, rows in got.items()}}


def per_request(tmp: Path, n: int, warm: int, reps: int, srv_cpu: int | None, cli_cpu: int | None,
                ref: Path | None = None) -> dict:
    """CPU per request with one-token answers at C64 (``bench_client``'s children), kvreplay over plain."""
    return _group("request_ratio", "request", *_children(tmp, 1, n, warm, reps, srv_cpu, cli_cpu, ref, "request"))


async def _proxy_runs(sim: Proc, rec: Proc, floor: Proc, n: int, reps: int) -> dict:
    cpu = await alternate_c64(sim, {"proxied": rec, "floor": floor}, n, reps)
    ratio = [p / f for p, f in zip(cpu["proxied"], cpu["floor"], strict=True)]
    return {"proxy_over_floor": statistics.median(ratio), "proxy_over_floor_reps": ratio,
            "detail": {k: {"us_per_token": statistics.median(v)} for k, v in cpu.items()}}


def proxy(tmp: Path, n: int, reps: int) -> dict:
    """``kvreplay record`` against the byte-relay floor, alternating C64 runs (``bench_record``'s pieces)."""
    import uvloop

    sim = Proc("serve-sim", "--port", "0", "--time-scale", "0.05", "--slots", "64")
    procs = [sim]
    # What a body file costs where the capture is written, before and after the runs: on an ext4
    # without a journal (this machine's) it is 15-700 µs, depending on the files deleted in the last
    # minutes anywhere on the disk (docs/performance.md, "The proxy at C64"), and the proxy's
    # figure carries it once a body.
    probes = [tmp / "probe-before", tmp / "probe-after"]
    for p in probes:
        p.mkdir()
    create = [file_create_us(probes[0])]
    try:
        procs.append(Proc("record", "--upstream", sim.url, "--out", str(tmp / "W")))
        procs.append(floor_relay(sim))
        got = uvloop.run(_proxy_runs(sim, procs[1], procs[2], n, reps))
    finally:
        for p in reversed(procs):
            p.stop()
    create.append(file_create_us(probes[1]))
    got["detail"]["body_file_us"] = [round(x, 1) for x in create]
    return got


def rss(tmp: Path, n: int, srv_cpu: int | None, cli_cpu: int | None) -> dict:
    """Peak RSS of one closed-loop C64 ``kvreplay run`` of ``n`` distinct bodies (``bench_scale``)."""
    wl = tmp / "distinct.jsonl"
    make_distinct_workload(wl, n, max_tokens=8)
    srv, port = _start_server(srv_cpu, 8)
    try:
        r = run_distinct(port, wl, n, 64, "closed", 0.0, cli_cpu, tmp)
    finally:
        _stop_server(srv)
    return {"rss_mb": r["rss_mb"], "detail": {"requests": r["requests"], "whole_cpu_s": r["whole_cpu_s"]}}


def measure(mode: str, only: set[str] | None = None, ref: Path | None = None) -> dict:
    """Every figure of ``mode`` (``default`` or ``full``); ``only`` limits the groups run (for trying).

    ``ref``: another tree's ``src/``, measured as a third arm of the per-token and
    per-request groups (``token_ratio_ref``, ``request_ratio_ref``).
    """
    z = SIZES[mode]
    srv_cpu, cli_cpu = _cpus()
    out: dict[str, Any] = {}
    groups: dict[str, Callable[[Path], dict]] = {
        "token": lambda t: per_token(t, z["token_n"], z["token_warm"], z["token_reps"], srv_cpu, cli_cpu, ref),
        "whole": lambda t: whole_run(t, z["whole_n"], z["reps"], srv_cpu, cli_cpu),
        "request": lambda t: per_request(t, z["request_n"], z["request_warm"], z["reps"], srv_cpu, cli_cpu, ref),
        "proxy": lambda t: proxy(t, z["proxy_n"], z["proxy_reps"]),
        "rss": lambda t: rss(t, z["rss_n"], srv_cpu, cli_cpu),
    }
    with tempfile.TemporaryDirectory(prefix="kvreplay-guard-") as td:
        for name, fn in groups.items():
            if only and name not in only:
                continue
            t0 = time.perf_counter()
            sub = Path(td) / name
            sub.mkdir()
            got = fn(sub)
            out.update({k: v for k, v in got.items() if k != "detail"})
            out.setdefault("detail", {})[name] = {**got["detail"], "wall_s": round(time.perf_counter() - t0, 1)}
            print(f"# {name}: {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    return out


def _git_head() -> str:
    r = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return r.stdout.strip() + ("+changes" if dirty else "")


@dataclass(frozen=True)
class Tolerances:
    """How far past its baseline a figure may go before it regresses (lower is better for all).

    Attributes:
        ratio: CPU ratios to a reference measured in the same run (fraction, 0.25 = +25%).
        noisy: the per-token ratios to the plain client and the proxy over its relay floor.
        floor: kvreplay's CPU per socket read over the read floor's.
        rss_mb: peak RSS (MB, added).
    """

    ratio: float = 0.25
    noisy: float = 0.4
    floor: float = 0.15
    rss_mb: float = 10.0

    def limit(self, kind: str, base: float) -> float:
        """The worst figure of tolerance ``kind`` that still passes against ``base``."""
        if kind == "rss":
            return base + self.rss_mb
        return base * (1 + {"noisy": self.noisy, "floor": self.floor}.get(kind, self.ratio))

    def shown(self, kind: str) -> str:
        """The tolerance as the table prints it."""
        if kind == "rss":
            return f"+{self.rss_mb:g} MB"
        return f"+{ {'noisy': self.noisy, 'floor': self.floor}.get(kind, self.ratio):.0%}"


def verdicts(got: dict, base: dict | None, tol: Tolerances) -> list[tuple[str, str]]:
    """``[(figure key, "ok" | "REGRESSED" | "no baseline" | "not measured")]`` against ``base`` (lower is better).

    A figure that is not a finite number (NaN: e.g. no ``/proc/self/io`` for the per-read
    count) is "not measured", never "ok": NaN compares false with any limit.
    """
    out = []
    for key, (_, _, _, kind) in FIGURES.items():
        if key not in got:
            continue
        if not math.isfinite(got[key]):
            out.append((key, "not measured"))
            continue
        if not base or key not in base:
            out.append((key, "no baseline"))
            continue
        limit = tol.limit(kind, base[key])
        out.append((key, "REGRESSED" if got[key] > limit else "ok"))
    return out


def report(got: dict, base: dict | None, mode: str, tol: Tolerances) -> list[str]:
    """The printed table: figure, this run (its repetitions), target, last landed figure, verdict."""
    z = SIZES[mode]
    lines = [f"performance guard ({mode}: C64 runs of {z['token_n']} requests x 128 tokens after "
             f"{z['token_warm']} unmeasured, whole runs of {z['whole_n']}, "
             f"{z['request_n']} one-token requests, {z['proxy_reps']} proxy/floor pairs of {z['proxy_n']}, RSS at "
             f"{z['rss_n']} distinct bodies; {z['reps']} alternating reps ({z['token_reps']} per token), medians)",
             "| figure | this run | reps | target | floor, this run | baseline | tolerance | verdict |",
             "|---|---:|---|---:|---:|---:|---|---|"]
    for key, verdict in verdicts(got, base, tol):
        label, unit, target, kind = FIGURES[key]
        reps = ", ".join(f"{x:.3f}" for x in got.get(key + "_reps", []))

        def fmt(x: float, unit: str = unit, kind: str = kind) -> str:
            return f"{x:.0f} {unit}" if kind == "rss" else f"{x:.3f}{unit}"

        b = fmt(base[key]) if base and key in base else "-"
        if key + "_ref_reps" in got:
            b += " (ref, this run: " + ", ".join(f"{x:.3f}" for x in got[key + "_ref_reps"]) + ")"
        tgt = "-" if target is None else f"<= {fmt(target)} ({'met' if got[key] <= target else 'not met'})"
        floor = got.get(key + "_floor")
        fl = "-" if floor is None else fmt(floor) + (" (over the target)" if target and floor > target else "")
        lines.append(f"| {label} | {fmt(got[key])} | {reps} | {tgt} | {fl} | {b} | {tol.shown(kind)} "
                     f"| {verdict} |")
    return lines


def _implementation() -> str:
    """Which twins the measured tree runs: ``accountant native, exchange native`` (a stale or missing build reads pure).

    Asked of a child with the measured tree's ``PYTHONPATH``, as every kvreplay arm is run; a tree
    older than the exchange's compiled twin says ``exchange -``.
    """
    code = ("import warnings; warnings.simplefilter('ignore')\n"
            "from kvreplay.accounting import IMPLEMENTATION as a\n"
            "try:\n    from kvreplay.runner.h1 import EXCHANGE_IMPLEMENTATION as e\n"
            "except ImportError:\n    e = '-'\n"
            "print(f'accountant {a}, exchange {e}')")
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    except (subprocess.SubprocessError, OSError):
        return "implementation unknown"
    return r.stdout.strip()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--full", action="store_true",
                    help="the issue's sizes (~4 min on a quiet machine) instead of small N (60-100 s at load 3-8)")
    ap.add_argument("--baseline", type=Path, default=BASELINE, help="the landed figures (default %(default)s)")
    ap.add_argument("--write-baseline", action="store_true", help="store this run's figures as the mode's baseline")
    ap.add_argument("--note", default="", help="with --write-baseline: why the figures moved, the conditions")
    ap.add_argument("--tol-ratio", type=float, default=0.25, help="CPU ratios: regression past +%(default)s")
    ap.add_argument("--tol-noisy", type=float, default=0.4,
                    help="per-token figures (C64 per token, the proxy over its floor): regression past +%(default)s")
    ap.add_argument("--tol-floor", type=float, default=0.15,
                    help="kvreplay's CPU per socket read over the read floor's: regression past +%(default)s")
    ap.add_argument("--tol-rss-mb", type=float, default=10.0, help="RSS: regression past +%(default)s MB")
    ap.add_argument("--only", default="", help="comma-separated groups to run: token,whole,request,proxy,rss")
    ap.add_argument("--json", type=Path, default=None, help="also write this run's figures here")
    ap.add_argument("--src", type=Path, default=None,
                    help="measure the kvreplay under this src/ folder instead of this tree's (a before/after "
                         "comparison: an exported older tree with its compiled .so files)")
    ap.add_argument("--ref-src", type=Path, default=None,
                    help="another tree's src/ (main's, exported with its .so files) measured in the same run as a "
                         "third arm of the per-token and per-request figures; those two are then judged against "
                         "it instead of the stored baseline (the per-token figure moves with the machine's load)")
    a = ap.parse_args(argv)
    if a.src is not None:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(a.src.resolve()), os.environ["PYTHONPATH"]])
    mode = "full" if a.full else "default"
    stored = json.loads(a.baseline.read_text()) if a.baseline.exists() else {}
    base = (stored.get(mode) or {}).get("figures")
    load0, t0 = os.getloadavg(), time.perf_counter()
    try:
        got = measure(mode, set(filter(None, a.only.split(","))) or None, a.ref_src)
    except (TimeoutError, RuntimeError, SystemExit, OSError, subprocess.SubprocessError) as e:
        print(f"guard: a measurement failed: {e}", file=sys.stderr)
        return 2
    load1, wall = os.getloadavg(), time.perf_counter() - t0
    if a.ref_src is not None:  # judged against the reference tree measured in this run
        base = {**(base or {}), **{k: got[k + "_ref"] for k in ("token_ratio", "request_ratio") if k + "_ref" in got}}
    tol = Tolerances(ratio=a.tol_ratio, noisy=a.tol_noisy, floor=a.tol_floor, rss_mb=a.tol_rss_mb)
    print("\n".join(report(got, base, mode, tol)))
    bf = got.get("detail", {}).get("proxy", {}).get("body_file_us")
    if bf:
        print(f"proxy: a body file where the capture is written (create, write 13 KB, rename) cost {bf[0]:.0f} us of "
              f"CPU before the runs, {bf[1]:.0f} after; the proxy's figure carries it once a body (~104 tokens): "
              "100 us a body is ~0.13x of a 7.5 us floor")
    print(f"tree {a.src or _git_head()} ({_implementation()}); {wall:.0f} s; {os.cpu_count()} CPUs, load average "
          f"{load0[0]:.2f} before, {load1[0]:.2f} after; baseline: {(stored.get(mode) or {}).get('note', 'none')}")
    if a.json:
        a.json.write_text(json.dumps(got, indent=1))
    if a.write_baseline:
        stored[mode] = {"figures": {k: round(got[k], 4) for k in FIGURES if k in got},
                        "tree": str(a.src) if a.src else _git_head(),
                        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                        "load": [round(load0[0], 2), round(load1[0], 2)], "wall_s": round(wall),
                        "note": a.note}
        a.baseline.write_text(json.dumps(stored, indent=1) + "\n")
        print(f"baseline written: {a.baseline} ({mode})")
        return 0
    unmeasured = [k for k, v in verdicts(got, base, tol) if v == "not measured"]
    if unmeasured:
        print(f"guard: not measured (not judged): {', '.join(unmeasured)}", file=sys.stderr)
    bad = [k for k, v in verdicts(got, base, tol) if v == "REGRESSED"]
    if bad:
        print(f"guard: regressed past tolerance: {', '.join(bad)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
