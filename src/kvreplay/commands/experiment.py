"""``kvreplay experiment``: run a whole diagnosis window from one TOML file as one frozen plan.

Examples::

    kvreplay experiment fixtures/experiments/host-cache-diagnosis.toml --out runs/diag
    kvreplay experiment fixtures/experiments/host-cache-diagnosis.toml --dry-run
    kvreplay experiment FILE.toml --stop-new-after 70m --hard-deadline 90m

Exit status: 0 when every step was measured (result.json ``status`` complete); 2 for a
bad file (nothing sent); 3 when a step failed, was aborted or deferred, or the window
was aborted (all outputs written, the restore run). The terminal ends with the status
line (``incomplete: 1 step aborted, 3 steps deferred``), the latency convention, and,
even under ``--quiet``, the server the window left running (URL, port, pid) if any.
"""

from __future__ import annotations

import argparse
import asyncio

NAME = "experiment"
HELP = "Run a whole diagnosis window (incarnations, runs, controls, probes, A/B arms, restore) from one TOML file."

EXIT_INCOMPLETE = 3


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register ``experiment``'s options."""
    from kvreplay.commands.run import parse_duration

    p.add_argument("file", help="experiment TOML file (see README, 'Experiment files')")
    p.add_argument("--out", default=None, help="experiment directory (default runs/<UTC timestamp>)")
    p.add_argument("--dry-run", action="store_true",
                   help="write only experiment.json (the frozen plan) and print the schedule; send nothing")
    p.add_argument("--stop-new-after", type=parse_duration, default=None, metavar="DUR",
                   help="override [window] stop_new_after: no step starts, and no request is sent, after it")
    p.add_argument("--hard-deadline", type=parse_duration, default=None, metavar="DUR",
                   help="override [window] hard_deadline (in-flight requests are cancelled at it minus "
                        "restore_reserve; the restore must finish by it)")
    p.add_argument("--restore-reserve", type=parse_duration, default=None, metavar="DUR",
                   help="override [window] restore_reserve (time kept for the restore before the hard deadline)")
    p.add_argument("--max-body-bytes", type=int, default=None)
    p.add_argument("--quiet", action="store_true")


def _schedule(doc: dict) -> str:
    from kvreplay.experiments.steps import kind_of

    lines = [f"experiment {doc['experiment_sha256'][:16]}  ({len(doc['steps'])} steps)"]
    w = doc["window"]
    lines.append(f"window: stop_new_after {w['stop_new_after_s']} s, hard_deadline {w['hard_deadline_s']} s, "
                 f"restore_reserve {w['restore_reserve_s']} s")
    for s in doc["steps"]:
        extra = kind_of(s["kind"]).schedule(s)
        if not s.get("comparable", True):
            extra += "  [control: comparable = false]"
        lines.append(f"  {s['index']:02d} {s['name']:<14} {s['kind']:<11}{extra}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Execute ``kvreplay experiment`` (``kvreplay.api.experiment.Experiment``; this prints)."""
    from kvreplay.api.experiment import Experiment
    from kvreplay.api.run import install_loop
    from kvreplay.experiments.publish import left_line, status_line
    from kvreplay.rundir import EXPERIMENT
    from kvreplay.safe_io import echo

    keys = ("stop_new_after", "hard_deadline", "restore_reserve")
    frozen = Experiment.from_file(args.file).freeze(
        args.out, **{k: getattr(args, k) for k in keys}, max_body_bytes=args.max_body_bytes,
        fields={k: f"--{k.replace('_', '-')}" for k in keys if getattr(args, k) is not None})
    if not args.quiet:
        echo(_schedule(frozen.doc))
        echo(f"{EXPERIMENT}: {frozen.frozen_path}")
    if args.dry_run:
        return 0
    install_loop()
    say = (lambda _m: None) if args.quiet else (lambda m: echo(f"experiment: {m}", err=True))
    result = asyncio.run(frozen.run_async(say))
    out = frozen.out
    if not args.quiet:
        for f in result["findings"]:
            echo(f"finding {f['rule']}: {f['summary']}\n  next: {f['next']}")
        echo(f"experiment: {status_line(result)}; latencies: {result['time']['latency']}")
        echo(f"experiment directory: {out}  (result.json, report.md, report.html)")
    # Also under --quiet: nobody should find a server still listening without having been told.
    if left := left_line(result.get("left_running")):
        echo(left, err=True)
    return 0 if result["status"] == "complete" else EXIT_INCOMPLETE
