r"""Sweep a load over points, each an ordinary run: the behaviour of ``kvreplay sweep`` and ``kvreplay.sweeps``.

Every point is executed by ``kvreplay.api.run.run_async`` (the code path of
``kvreplay run``) with its own phases (``kvreplay.sweeps.points``) into
``DIR/points/NN-c4/``; the point's figures are then read back from that directory
alone (``sweep.points.point_entry``: goodput from its records, cache state proved
from its counters and records) and ``DIR/sweep.json`` is rewritten after each point.
The options are ``kvreplay.options.sweep.SweepConfig``: a run's (``RunConfig``, target and
simulator included; each point's) and the sweep's own. Examples::

    kvreplay sweep fixtures/workloads/mtbench-52 --target sim --concurrency 1,2,4,8 \
        --cache cold --slo ttft_ms<=500 --out sweeps/x
    kvreplay sweep W --target http://127.0.0.1:8000 --rate auto --arrivals gamma:2 \
        --duration 60s --until "ttft_ms:p99>2000" --out sweeps/y
"""

from __future__ import annotations

import asyncio
import math
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kvreplay.errors import ConfigError
from kvreplay.options.sweep import DEFAULT_MAX_CONCURRENCY, DEFAULT_MAX_RATE, SweepConfig

__all__ = ["DEFAULT_MAX_CONCURRENCY", "DEFAULT_MAX_RATE", "SweepConfig", "SweepInterrupted", "SweepPoint",
           "SweepResult", "compare_sweep_dirs", "is_sweep", "run_sweep"]


@dataclass(frozen=True)
class SweepPoint:
    """One measured point of a sweep (sweep.json ``points[]``, typed).

    Attributes:
        load: Its concurrency (requests in flight) or rate (requests/s).
        run_dir: The point's run directory (absolute; ``kvreplay.load_run`` reads it).
        phase: The measured phase's name in that run directory.
        throughput_rps: Ok requests / the phase's wall time (requests/s).
        goodput_rps: Ok requests meeting every SLO / the phase's wall time (requests/s).
        slo_attainment: Those requests / every record of the phase (0..1).
        cache_declared: ``cold``, ``warm`` or ``as-is``.
        cache_verified: Whether the point's run directory proves that state.
        cache_reason: Why not, when it does not.
        entry: The whole sweep.json entry (percentiles, evidence).
    """

    load: float
    run_dir: Path
    phase: str
    throughput_rps: float | None
    goodput_rps: float | None
    slo_attainment: float | None
    cache_declared: str
    cache_verified: bool
    cache_reason: str | None
    entry: dict[str, Any] = field(repr=False, compare=False)


@dataclass(frozen=True)
class SweepResult:
    """A finished sweep: its directory and sweep.json, typed.

    Attributes:
        sweep_dir: The sweep directory (sweep.json, points/, report.html).
        kind: ``"concurrency"`` or ``"rate"``.
        points: The points in the order measured.
        knee: ``{kind: load, "throughput_rps", "reason"}`` of an automatic search, else None.
        stopped: Why the sweep ended before its last load (a crossed ``--until``), else None.
        document: sweep.json as a dict.
    """

    sweep_dir: Path
    kind: str
    points: tuple[SweepPoint, ...]
    knee: dict[str, Any] | None
    stopped: str | None
    document: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_document(cls, doc: dict[str, Any], sweep_dir: str | Path) -> SweepResult:
        """From a sweep.json document and its directory."""
        d = Path(sweep_dir)
        kind = doc.get("kind", "concurrency")
        pts = tuple(SweepPoint(
            load=p[kind], run_dir=d / p["run_dir"], phase=p["phase"], throughput_rps=p.get("throughput_rps"),
            goodput_rps=p.get("goodput_rps"), slo_attainment=p.get("slo_attainment"),
            cache_declared=(p.get("cache") or {}).get("declared", ""),
            cache_verified=bool((p.get("cache") or {}).get("verified")),
            cache_reason=(p.get("cache") or {}).get("reason"), entry=p) for p in doc.get("points") or [])
        return cls(sweep_dir=d, kind=kind, points=pts, knee=doc.get("knee"), stopped=doc.get("stopped"),
                   document=doc)


class SweepInterrupted(KeyboardInterrupt):
    """Ctrl-C (SIGINT) outside a point's run: ``sweep.json`` was written with ``stopped``.

    Attributes:
        out: The sweep directory.
        stopped: ``sweep.json``'s ``stopped`` text.
    """

    def __init__(self, out: str, stopped: str) -> None:
        super().__init__(stopped)
        self.out, self.stopped = out, stopped


def _prepare_out(out: Path, force: bool) -> None:
    """Refuse an existing ``--out`` unless ``--force`` and it is an earlier sweep or empty; then clear it."""
    from kvreplay.sweeps.document import CSV_NAME, POINTS_DIR, SWEEP_JSON, is_sweep_dir

    if not out.exists():
        return
    if not out.is_dir():
        raise ConfigError("--out names a file, not a folder", path=out, field="--out")
    empty = not any(out.iterdir())
    if empty:
        return
    if not force:
        raise ConfigError("the folder exists; choose a new --out or give --force to replace an earlier sweep",
                          path=out, field="--out")
    if not is_sweep_dir(out):
        raise ConfigError("--force replaces an earlier sweep only, and this folder holds no sweep.json",
                          path=out, field="--out")
    shutil.rmtree(out / POINTS_DIR, ignore_errors=True)
    for name in (SWEEP_JSON, CSV_NAME, "report.html"):
        (out / name).unlink(missing_ok=True)


def _check_target(target: str) -> None:
    """``--target`` checked as ``run`` checks it (its credentials registered as secrets), before anything is made.

    A query or fragment is refused: requests go to ``TARGET/v1/...``, and an ``?api_key=`` there would be
    sent nowhere useful and kept in every point's files. The message does not repeat the URL.

    Raises:
        ConfigError: field ``--target``.
    """
    from urllib.parse import urlsplit

    from kvreplay.api.run import check_target, split_credentials

    check_target(target, sim=True)
    if target == "sim":
        return
    split_credentials(target, {})
    u = urlsplit(target)
    if u.query or u.fragment or target.endswith(("?", "#")):
        raise ConfigError("a sweep's target URL takes no query or fragment (requests go to TARGET/v1/...); "
                          "give an API key with --api-key-env or --api-key-file, credentials as "
                          "http://USER:PASSWORD@HOST:PORT", field="--target")


async def run_sweep(args: SweepConfig, *, on_point: Callable[[dict[str, Any]], None] | None = None,
                      on_message: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run every point of a sweep and write ``DIR/sweep.json``; its document, with ``_out`` = DIR.

    Args:
        args: The sweep's options (``kvreplay sweep``'s flags, or ``kvreplay.sweep``'s keywords).
        on_point: Called with each point's entry once it is measured (live progress).
        on_message: Called with lines about the sweep itself (the point starting).

    Raises:
        ConfigError, WorkloadError: bad input, before anything is sent.
        BackendError: the target cannot be used.
    """
    from kvreplay.api.run import check_out_dir, default_out, run_async
    from kvreplay.plan import MAX_CONCURRENCY
    from kvreplay.redaction import redact_url
    from kvreplay.sweeps.document import POINTS_DIR, write_points_csv, write_sweep
    from kvreplay.sweeps.knee import KneeSearch, knee
    from kvreplay.sweeps.loads import arrival_spec, parse_loads, parse_slo, parse_until
    from kvreplay.sweeps.points import PointSpec, load_label, point_entry, point_phases, selection
    from kvreplay.workload import load_workload

    for flag, value in (("--phase", args.phase), ("--plan", args.plan), ("--from-plan", args.from_plan)):
        if value:
            raise ConfigError("a sweep builds each point's phases itself: drop it", field=flag)
    loads = parse_loads(args.concurrency, args.rate)
    arrival = arrival_spec(args.arrivals) if loads.kind == "rate" else None
    slos = [parse_slo(s) for s in args.slo]
    until = [parse_until(u) for u in args.until]
    if args.duration is not None and loads.kind != "rate":
        raise ConfigError("--duration sets an open loop's requests (rate x duration): use --requests with "
                          "--concurrency", field="--duration")
    if args.duration is not None and args.requests is not None:
        raise ConfigError("give --duration or --requests, not both", field="--duration")
    if not args.workload:
        raise ConfigError("give a workload (folder of *.json or a .jsonl file)", field="workload")
    workload = load_workload(args.workload, max_body_bytes=args.max_body_bytes)
    if workload.sessions is not None:
        raise ConfigError("a conversation workload (sessions side file) is not swept: give a plain workload",
                          field="workload")
    try:
        chosen = selection(args.select, len(workload.bodies))
    except ValueError as exc:
        raise ConfigError(str(exc), field="--select") from None
    _check_target(args.target or "sim")
    out = Path(args.out) if args.out else default_out()
    _prepare_out(out, args.force)
    check_out_dir(out, Path(workload.path))
    del workload

    def bodies_for(load: float) -> tuple[int, ...]:
        n = args.requests
        if args.duration is not None:
            n = max(1, math.ceil(load * args.duration))
        if n is None:
            return tuple(chosen)
        return tuple(chosen[i % len(chosen)] for i in range(n))

    target = args.target or "sim"
    doc: dict[str, Any] = {
        "created_utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "workload": str(args.workload), "target": target if target == "sim" else redact_url(target),
        "backend": args.backend, "kind": loads.kind, "loads": "auto" if loads.auto else list(loads.values),
        "arrivals": arrival, "max_in_flight": args.max_in_flight if loads.kind == "rate" else None,
        "select": args.select or "all", "requests": args.requests, "duration_s": args.duration,
        "warmup": args.warmup, "cache": args.cache, "warm_min": args.warm_min,
        "slos": [s.to_json() for s in slos], "until": [str(u) for u in until],
        "points": [], "stopped": None,
    }
    search = None
    if loads.auto:
        cap = args.max_load or (DEFAULT_MAX_CONCURRENCY if loads.kind == "concurrency" else DEFAULT_MAX_RATE)
        start = args.start or 1
        if loads.kind == "concurrency":
            start, cap = max(1, int(start)), min(int(cap), MAX_CONCURRENCY)
        search = KneeSearch(kind=loads.kind, start=start, max_load=cap)
    pending = list(loads.values)
    index = 0
    try:
        while True:
            load = search.next_load() if search is not None else (pending.pop(0) if pending else None)
            if load is None:
                break
            index += 1
            spec = PointSpec(kind=loads.kind, load=load, bodies=bodies_for(load), cache=args.cache,
                             warmup=args.warmup, arrival=arrival, max_in_flight=args.max_in_flight)
            run_dir = out / POINTS_DIR / f"{index:02d}-{load_label(loads.kind, load)}"
            if on_message is not None:
                on_message(f"point {index}: {load_label(loads.kind, load)}, {len(spec.bodies)} measured request(s)"
                           + (f" after {args.warmup} warm-up" if args.warmup else "") + f", cache {args.cache}")
            point_args = args.run_config(out=str(run_dir), phase=[], quiet=True)
            summary = await run_async(point_args, point_phases(spec))
            summary.pop("_out", None)
            if args.report != "none":
                from kvreplay.api.run import write_reports_for

                write_reports_for(point_args, summary, str(run_dir))
            entry = point_entry(run_dir, out, spec, slos=slos, until=until, warm_min=args.warm_min)
            doc["points"].append(entry)
            if search is not None:
                search.record(load, entry["throughput_rps"], entry["limit_broken"] is not None)
            if on_point is not None:
                on_point(entry)
            write_sweep(out, doc)
            if entry["aborted"]:
                doc["stopped"] = f"point {index} ({load_label(loads.kind, load)}) was aborted: {entry['aborted']}"
                break
            if entry["limit_broken"] is not None and search is None:
                doc["stopped"] = (f"point {index} ({load_label(loads.kind, load)}) crossed a limit: "
                                  f"{entry['limit_broken']}")
                break
    except (KeyboardInterrupt, asyncio.CancelledError):
        # a signal outside a point's run (its runner stops that run itself: an aborted point): keep
        # what was measured, so that the folder stays a sweep `kvreplay report` reads
        doc["stopped"] = (f"interrupted (SIGINT) at point {index}; sweep.json keeps the "
                          f"{len(doc['points'])} point(s) measured")
        write_sweep(out, doc)
        raise SweepInterrupted(str(out), doc["stopped"]) from None
    if search is not None:
        doc["search"] = {"stop_reason": search.stop_reason}
        doc["knee"] = knee(doc["points"], loads.kind)
    write_sweep(out, doc)
    if args.csv:
        write_points_csv(out, doc)
    if args.report == "html":
        from kvreplay.sweeps.report import write_sweep_report

        write_sweep_report(out, doc)
    doc["_out"] = str(out)
    return doc


def is_sweep(path: Path) -> bool:
    """Whether ``path`` is a sweep directory (holds sweep.json; ``kvreplay.sweeps.document``)."""
    from kvreplay.sweeps.document import is_sweep_dir

    return is_sweep_dir(path)


def compare_sweep_dirs(dirs: list[str], out: str) -> Path:
    """``kvreplay compare SWEEP_DIR...``: the sweeps on one chart, ``out/compare-sweeps.html``; its path.

    Raises:
        ConfigError: a directory that is not a sweep, or sweeps of different load kinds.
    """
    from kvreplay.sweeps.compare import write_compare_sweeps

    return write_compare_sweeps(dirs, out)
