"""Soak: a long closed-loop run at C64 against the simulator with random, seeded faults.

Issue 9 asks that a 10-minute run at C64 with faults injected at random ends
with every planned request accounted for (ok + failed + not sent == planned,
counted from ``records.jsonl``) and the client's memory flat (RSS growth under
10% after warm-up). This script:

1. starts ``kvreplay serve-sim --port 0`` in its own process with faults that
   never abort a run (``error-event``, ``cut``, ``stall`` at=between, and
   ``malformed``, each at a small ``p`` with its own seed);
2. calibrates the request rate with a short run, and sizes the plan so that it
   lasts about ``--minutes`` (``--stop-new-after`` bounds it either way);
3. runs ``kvreplay run`` as a subprocess and samples its ``VmRSS`` from
   ``/proc/PID/status`` every ``--interval-s`` seconds;
4. checks the run directory: one record per planned position, statuses counted,
   and prints the figures (JSON with ``--json``, a markdown table otherwise).

Both processes are started under ``nice`` (``--nice``, default 10) so that a
shared machine stays usable. Linux only (``/proc``).

Example::

    python bench/soak.py --minutes 10 --concurrency 64 --out runs/soak
    python bench/soak.py --minutes 0.5 --warmup-s 10 --json soak.json

Exit status: 0 when every check passes, 1 when one fails.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MTBENCH = ROOT / "fixtures" / "workloads" / "mtbench-52"

DEFAULT_FAULTS = (
    "error-event:p=0.004,seed=11",
    "cut:chunks=2,p=0.004,seed=12",
    "stall:s=4,at=between,chunks=2,p=0.002,seed=13",
    "malformed:p=0.004,seed=14",
)
"""Faults that make failed records but never abort a run (see docs/simulator.md)."""

FAILURE_CLASSES = (
    "connect",
    "write",
    "timeout",
    "http",
    "stream_error",
    "cut",
    "malformed",
    "aborted",
)


def rss_kib(pid: int) -> int | None:
    """Resident set size of a process (KiB) from ``/proc/PID/status``; None once it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


class RssSampler:
    """Samples a process's RSS on a background thread.

    Args:
        pid: The process to watch.
        interval_s: Seconds between samples.
        done_path: A file whose appearance ends the load (the run's summary.json,
            written before the report); None = no such marker.

    Attributes:
        samples: ``(seconds since start, RSS KiB)`` in time order.
        done_s: Seconds since start at which ``done_path`` was first seen, or None.
    """

    def __init__(self, pid: int, interval_s: float, done_path: Path | None = None) -> None:
        self.pid = pid
        self.interval_s = interval_s
        self.done_path = done_path
        self.done_s: float | None = None
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> None:
        """Start sampling (t = 0 now)."""
        self._t0 = time.monotonic()
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            v = rss_kib(self.pid)
            if v is None:
                return
            t = time.monotonic() - self._t0
            if self.done_s is None and self.done_path is not None and self.done_path.exists():
                self.done_s = t
            if v:  # 0 (or absent) while the child is still exec'ing
                self.samples.append((t, v))
            self._stop.wait(self.interval_s)

    def stop(self) -> None:
        """Stop sampling and wait for the thread."""
        self._stop.set()
        self._thread.join(timeout=5)


def _niced(level: int):  # noqa: ANN202 - a preexec_fn
    def apply() -> None:
        if level:
            os.nice(level)

    return apply


def start_sim(args: argparse.Namespace, faults: list[str]) -> tuple[subprocess.Popen, str]:
    """Start ``kvreplay serve-sim --port 0`` and read its URL from the first stdout line.

    Raises:
        RuntimeError: it did not print a URL within 30 s.
    """
    cmd = [
        sys.executable,
        "-m",
        "kvreplay",
        "serve-sim",
        "--port",
        "0",
        "--time-scale",
        str(args.time_scale),
        "--slots",
        str(max(args.concurrency, 16)),
        "--output-tokens",
        str(args.output_tokens),
    ]
    for f in faults:
        cmd += ["--fault", f]
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        preexec_fn=_niced(args.nice),
    )
    found: dict[str, str] = {}

    def read() -> None:
        line = proc.stdout.readline() if proc.stdout else ""
        m = re.search(r"listening on (http://\S+)", line)
        if m:
            found["url"] = m.group(1)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(30)
    if "url" not in found:
        stop(proc)
        raise RuntimeError("serve-sim printed no URL within 30 s")
    return proc, found["url"]


def stop(proc: subprocess.Popen) -> None:
    """Stop one process we started: SIGTERM, then SIGKILL after 10 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def run_client(
    args: argparse.Namespace, url: str, out: Path, repeats: int, seconds: float, sample: bool
) -> tuple[int, list[tuple[float, int]], float, float | None]:
    """Run ``kvreplay run`` as a subprocess.

    Returns:
        ``(exit code, RSS samples, wall seconds, load end)``; the load end is when
        summary.json appeared (s since start), None when not sampled.
    """
    cmd = [
        sys.executable,
        "-m",
        "kvreplay",
        "run",
        str(args.workload),
        "--target",
        url,
        "--backend",
        args.backend,
        "--phase",
        f"soak:forward:c{args.concurrency}:x{repeats}",
        "--stop-new-after",
        f"{seconds:g}s",
        "--read-timeout",
        str(args.read_timeout),
        "--out",
        str(out),
        "--quiet",
    ]
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_niced(args.nice),
    )
    sampler = RssSampler(proc.pid, args.interval_s, out / "summary.json") if sample else None
    if sampler:
        sampler.start()
    try:
        _, err = proc.communicate(timeout=seconds + 600)
    except subprocess.TimeoutExpired:
        stop(proc)
        raise
    finally:
        if sampler:
            sampler.stop()
    if err.strip():
        print(err.strip()[-2000:], file=sys.stderr)
    if sampler is None:
        return proc.returncode, [], time.monotonic() - t0, None
    return proc.returncode, sampler.samples, time.monotonic() - t0, sampler.done_s


def account(out: Path) -> dict[str, Any]:
    """Count the run directory's records against its plan.

    Returns:
        ``planned`` (positions in plan.json), ``records``, ``distinct_positions``,
        ``ok``, ``failed`` (by class), ``not_sent``, ``balanced``
        (ok + failed + not sent == planned, one record per position) and the
        summary's abort reason.
    """
    plan = json.loads((out / "plan.json").read_text())
    planned = sum(len(p["sequence"]) for p in plan["phases"])
    statuses: Counter[str] = Counter()
    positions: set[tuple[str, int]] = set()
    n = ok = not_sent = 0
    failed: Counter[str] = Counter()
    with open(out / "records.jsonl", "rb") as f:
        for line in f:
            rec = json.loads(line)
            n += 1
            positions.add((rec["phase"], rec["position"]))
            statuses[rec["status"]] += 1
            if not rec.get("sent", True):
                not_sent += 1
            elif rec["status"] == "ok":
                ok += 1
            else:
                failed[rec["status"]] += 1
    summary = json.loads((out / "summary.json").read_text())
    return {
        "planned": planned,
        "records": n,
        "distinct_positions": len(positions),
        "ok": ok,
        "failed": dict(sorted(failed.items())),
        "not_sent": not_sent,
        "balanced": ok + sum(failed.values()) + not_sent == planned == n == len(positions),
        "aborted": (summary.get("aborted") or {}).get("reason"),
        "timeout_kinds": _timeout_kinds(out),
    }


def _timeout_kinds(out: Path) -> dict[str, int]:
    kinds: Counter[str] = Counter()
    with open(out / "records.jsonl", "rb") as f:
        for line in f:
            if b'"status":"timeout"' in line:
                kinds[json.loads(line).get("timeout_kind") or "?"] += 1
    return dict(kinds)


def rss_figures(
    samples: list[tuple[float, int]], warmup_s: float, load_end_s: float
) -> dict[str, Any]:
    """RSS at warm-up and at the end of the load window, and growth between them.

    Warm-up RSS is the median of the samples within 10 s before ``warmup_s``;
    end RSS is the median of the samples within 10 s before ``load_end_s`` (the
    stop-new deadline, or when summary.json appeared if the plan ran out first:
    the report written after it is not load). ``peak_kib`` is the largest sample
    between the two.
    """

    def window(end: float) -> list[int]:
        return [v for t, v in samples if end - 10.0 <= t <= end]

    warm, last = window(warmup_s), window(load_end_s)
    if not warm or not last or load_end_s <= warmup_s:
        return {
            "warmup_kib": None,
            "end_kib": None,
            "peak_kib": None,
            "growth_pct": None,
            "samples": len(samples),
        }
    w, e = statistics.median(warm), statistics.median(last)
    peak = max(v for t, v in samples if warmup_s <= t <= load_end_s)
    after = [v for t, v in samples if t > load_end_s]
    return {
        "warmup_kib": int(w),
        "end_kib": int(e),
        "peak_kib": peak,
        "growth_pct": round(100.0 * (e - w) / w, 2),
        "samples": len(samples),
        "first_kib": samples[0][1],
        "post_load_peak_kib": max(after) if after else None,
        "post_load_s": round(samples[-1][0] - load_end_s, 1) if after else None,
        "series": [[round(t, 1), v] for t, v in samples[:: max(1, len(samples) // 60)]],
    }


def main(argv: list[str] | None = None) -> int:
    """Run the soak and print its figures; 0 when every check passes."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--minutes", type=float, default=10.0, help="length of the load (minutes; default 10)"
    )
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--workload", type=Path, default=MTBENCH)
    ap.add_argument(
        "--fault",
        action="append",
        default=None,
        metavar="SPEC",
        help="simulator fault (repeatable; default: error-event, cut, stall, malformed at small p)",
    )
    ap.add_argument(
        "--time-scale", type=float, default=0.02, help="simulator time scale (default 0.02)"
    )
    ap.add_argument("--output-tokens", type=int, default=24)
    ap.add_argument(
        "--read-timeout", type=float, default=2.0, help="client read-idle timeout (s; default 2)"
    )
    ap.add_argument(
        "--backend", default="halogen", help="counter adapter of the client (default halogen)"
    )
    ap.add_argument(
        "--warmup-s", type=float, default=None, help="warm-up (s; default 10%% of the run, >= 10 s)"
    )
    ap.add_argument(
        "--calibrate-s", type=float, default=15.0, help="rate calibration run (s; 0 = skip)"
    )
    ap.add_argument(
        "--rate", type=float, default=None, help="assumed requests/s (skips calibration)"
    )
    ap.add_argument("--interval-s", type=float, default=1.0, help="RSS sampling interval (s)")
    ap.add_argument("--max-growth-pct", type=float, default=10.0)
    ap.add_argument("--nice", type=int, default=10)
    ap.add_argument(
        "--out", type=Path, default=None, help="run directory (default: a temporary one, removed)"
    )
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args(argv)
    seconds = args.minutes * 60.0
    warmup_s = args.warmup_s if args.warmup_s is not None else max(10.0, 0.1 * seconds)
    faults = args.fault if args.fault is not None else list(DEFAULT_FAULTS)
    n_bodies = sum(1 for _ in args.workload.glob("*.json")) if args.workload.is_dir() else None
    tmp = Path(tempfile.mkdtemp(prefix="kvreplay-soak-"))
    out = args.out or tmp / "run"
    sim, url = start_sim(args, faults)
    try:
        rate = args.rate
        if rate is None and args.calibrate_s > 0:
            cal = tmp / "calibrate"
            run_client(args, url, cal, 300, args.calibrate_s, sample=False)
            c = account(cal)
            rate = (c["ok"] + sum(c["failed"].values())) / args.calibrate_s
        rate = rate or 100.0
        per_rep = n_bodies or 52
        repeats = max(1, int(rate * seconds * 1.15 / per_rep) + 1)
        print(
            f"soak: {url}, ~{rate:.0f} req/s, {repeats} x {per_rep} positions, {seconds:g} s, "
            f"C{args.concurrency}, faults {faults}",
            file=sys.stderr,
        )
        rc, samples, wall_s, done_s = run_client(args, url, out, repeats, seconds, sample=True)
    finally:
        stop(sim)
    acc = account(out)
    # The load ends at the stop-new deadline, or earlier when the plan ran out
    # (summary.json appears before report.html is written).
    load_end_s = min(seconds, done_s) if done_s is not None else seconds
    rss = rss_figures(samples, warmup_s, load_end_s)
    result = {
        "minutes": args.minutes,
        "concurrency": args.concurrency,
        "faults": faults,
        "exit_code": rc,
        "wall_s": round(wall_s, 1),
        "requests_per_s": round((acc["ok"] + sum(acc["failed"].values())) / seconds, 1),
        **acc,
        "rss": rss,
        "warmup_s": warmup_s,
        "load_end_s": round(load_end_s, 1),
    }
    growth = rss["growth_pct"]
    result["checks"] = {
        "balanced": acc["balanced"],
        "rss_growth_under_limit": growth is not None and growth < args.max_growth_pct,
        "exit_code_ok": rc in (0, 3) and (rc == 0 or acc["aborted"] == "deadline"),
    }
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(markdown(result))
    if args.out is None:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0 if all(result["checks"].values()) else 1


def markdown(r: dict[str, Any]) -> str:
    """The soak's figures as a two-column markdown table."""
    rss = r["rss"]
    sent = r["ok"] + sum(r["failed"].values())
    rows = [
        ("length / concurrency", f"{r['minutes']:g} min at C{r['concurrency']}"),
        ("faults", ", ".join(f"`{f}`" for f in r["faults"])),
        ("planned positions", f"{r['planned']:,}"),
        ("sent", f"{sent:,} ({r['requests_per_s']} req/s)"),
        ("ok", f"{r['ok']:,}"),
        ("failed", ", ".join(f"{k} {v:,}" for k, v in r["failed"].items()) or "0"),
        ("timeout kinds", ", ".join(f"{k} {v}" for k, v in r["timeout_kinds"].items()) or "-"),
        ("not sent", f"{r['not_sent']:,}"),
        ("ok + failed + not sent == planned", "yes" if r["balanced"] else "**NO**"),
        ("exit code / abort", f"{r['exit_code']} / {r['aborted'] or '-'}"),
        ("client RSS first sample", _mib(rss.get("first_kib"))),
        (f"client RSS at warm-up ({r['warmup_s']:g} s)", _mib(rss["warmup_kib"])),
        ("client RSS at end of load", _mib(rss["end_kib"])),
        ("client RSS peak after warm-up", _mib(rss["peak_kib"])),
        (
            "after the load: report writing",
            f"{rss.get('post_load_s')} s, RSS peak {_mib(rss.get('post_load_peak_kib'))}",
        ),
        (
            "RSS growth after warm-up",
            f"{rss['growth_pct']}%" if rss["growth_pct"] is not None else "n/a",
        ),
    ]
    lines = ["| figure | value |", "|---|---|"] + [f"| {a} | {b} |" for a, b in rows]
    return "\n".join(lines)


def _mib(kib: int | None) -> str:
    return "n/a" if kib is None else f"{kib / 1024:.1f} MiB"


if __name__ == "__main__":
    sys.exit(main())
