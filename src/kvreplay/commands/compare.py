"""``kvreplay compare RUN_DIR...``: paired ratios, bootstrap intervals and a verdict.

Examples::

    kvreplay compare runs/ab-trace --primary ttft_p50:-5% --protected itl_p50:+3%
    kvreplay compare runs/off-1 runs/on-1 runs/off-2 runs/on-2 --primary c4.ttft_p50:-5%

Arguments are ``kvreplay ab`` directories, or plain run directories in pairs
(baseline, candidate). Prints the verdict and writes ``compare.json`` and
``compare.md`` into ``--out`` (default: the single ab directory given, else the
current directory). See ``kvreplay.experiments.ab.compare``.

Runs of different workloads, concurrency or arrival (open vs closed loop) get
no verdict: it reads ``not comparable: <reason>``, and every difference (body
order too) is a warning in the output and in compare.json's ``comparability``.
With ``--quiet`` the warnings still go to stderr.

Sweep directories (``kvreplay sweep``; all of the arguments) are drawn on one chart
instead: ``compare-sweeps.html`` in ``--out`` (default the current directory;
``kvreplay.sweeps.compare``).

A thin layer over ``kvreplay.api.comparison`` (``kvreplay.compare``), which declares
the options, compares and writes the files; this module prints.
"""

from __future__ import annotations

import argparse

from kvreplay.api.comparison import compare_args
from kvreplay.argtypes import add_declared
from kvreplay.options.compare import CompareConfig
from kvreplay.options.declare import from_dests
from kvreplay.safe_io import echo

__all__ = ["add_arguments", "run"]

NAME = "compare"
HELP = "Compare matched A/B blocks: median paired ratios with bootstrap CIs and a verdict."


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register ``compare``'s options: ``CompareConfig``'s fields."""
    add_declared(p, CompareConfig, ("compare",))


def run(args: argparse.Namespace) -> int:
    """Execute ``kvreplay compare``; exit 0 (the verdict is in the output, not the status)."""
    from pathlib import Path

    from kvreplay.api.sweeping import compare_sweep_dirs, is_sweep
    from kvreplay.errors import ConfigError

    sweeps = [d for d in args.dirs if is_sweep(Path(d))]
    if sweeps and len(sweeps) == len(args.dirs):
        path = compare_sweep_dirs(args.dirs, args.out or ".")
        if not args.quiet:
            echo(f"{len(args.dirs)} sweeps on one chart: {path}")
        return 0
    if sweeps:  # it said "neither an ab directory (ab.json) nor a run directory" of the sweep
        raise ConfigError(f"a sweep directory (sweep.json) is compared with sweeps only, not with "
                          f"{', '.join(d for d in args.dirs if d not in sweeps)}", path=sweeps[0], field="dirs")
    result, text = compare_args(from_dests(CompareConfig, vars(args)))
    if not args.quiet:
        echo(text)
    else:
        for w in result["comparability"]["warnings"]:
            tag = "not comparable" if w["blocking"] else "warning"
            echo(f"kvreplay compare: {tag}: {w['message']}", err=True)
    return 0
