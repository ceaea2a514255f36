r"""``kvreplay sweep``: a load sweep whose every point is a run directory with a declared, verified cache state.

A thin layer over ``kvreplay.api.sweeping`` (points, sweep.json): the flags are derived from
``kvreplay.options.sweep.SweepConfig`` (a run's and the sweep's own); this module prints each
point as it is measured, the knee and the paths.

Examples::

    kvreplay sweep fixtures/workloads/mtbench-52 --target sim --concurrency 1,2,4,8 \
        --cache cold --slo ttft_ms<=500 --out sweeps/x
    kvreplay sweep W --target http://127.0.0.1:8000 --rate auto --arrivals gamma:2 --duration 60s --out sweeps/y
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from kvreplay.redaction import install_streams
from kvreplay.safe_io import echo

NAME = "sweep"
HELP = ("Sweep a concurrency or rate over points (each an ordinary run), with goodput, a verified cache state "
        "per point and the knee.")

__all__ = ["add_arguments", "point_line", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``run``'s flags (``api.run.add_arguments``: target, simulator, timeouts, ...), then the sweep's own."""
    from kvreplay.api.run import add_arguments as add_run_arguments
    from kvreplay.argtypes import add_declared
    from kvreplay.options.sweep import SweepConfig

    add_run_arguments(p)
    add_declared(p.add_argument_group("sweep"), SweepConfig, ("sweep",))


def _ms(block: Any, stat: str) -> str:
    v = (block or {}).get(stat)
    return "–" if v is None else f"{v:.4g}"


def point_line(entry: dict[str, Any], kind: str) -> str:
    """One line per measured point: load, throughput, TTFT p50/p99, goodput and attainment, cache state."""
    cache = entry.get("cache") or {}
    state = f"{cache.get('declared')} " + ("verified" if cache.get("verified") else
                                            f"UNVERIFIED ({cache.get('reason')})")
    gp, att = entry.get("goodput_rps"), entry.get("slo_attainment")
    thr = entry.get("throughput_rps")
    return (f"  {entry['phase']:>8}: {('–' if thr is None else f'{thr:.4g}')} req/s, "
            f"TTFT p50 {_ms(entry.get('ttft_ms'), 'p50')} p99 {_ms(entry.get('ttft_ms'), 'p99')} ms, "
            f"goodput {('–' if gp is None else f'{gp:.4g}')} req/s "
            f"(SLO attainment {('–' if att is None else f'{att:.1%}')}), cache {state}"
            + (f", limit crossed: {entry['limit_broken']}" if entry.get("limit_broken") else ""))


def run(args: argparse.Namespace) -> int:
    """Execute ``kvreplay sweep``; exit 0, 2 bad input, 3 when a point was aborted, 130 interrupted between points."""
    from kvreplay.api.run import EXIT_ABORTED, install_loop
    from kvreplay.api.sweeping import SweepInterrupted, run_sweep
    from kvreplay.options.sweep import SweepConfig

    config = SweepConfig.from_dests(vars(args))
    install_loop()
    old = install_streams()
    quiet = config.quiet
    kind = "rate" if config.rate is not None and config.concurrency is None else "concurrency"
    try:
        doc = asyncio.run(run_sweep(
            config, on_point=None if quiet else (lambda e: echo(point_line(e, kind))),
            on_message=None if quiet else echo))
    except SweepInterrupted as exc:  # between points: sweep.json keeps those measured
        echo(f"kvreplay: sweep {exc.stopped}; sweep directory: {exc.out} (kvreplay report {exc.out})", err=True)
        return 130  # the command line's "interrupted" (kvreplay.cli)
    finally:
        import sys

        sys.stdout, sys.stderr = old
    out = doc.pop("_out")
    if not quiet:
        knee = doc.get("knee")
        if knee:
            echo(f"knee: {kind} {knee[kind]:g} ({knee['throughput_rps']:.4g} requests/s): {knee['reason']}")
        if doc.get("stopped"):
            echo(f"stopped: {doc['stopped']}")
        echo(f"sweep directory: {out} (sweep.json, points/)")
    aborted = any(p.get("aborted") for p in doc.get("points") or [])
    return EXIT_ABORTED if aborted else 0
