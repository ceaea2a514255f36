"""``kvreplay experiment``: run a whole diagnosis window from one TOML file as one frozen plan.

Examples::

    kvreplay experiment fixtures/experiments/host-cache-diagnosis.toml --out runs/diag
    kvreplay experiment fixtures/experiments/host-cache-diagnosis.toml --dry-run
    kvreplay experiment FILE.toml --stop-new-after 70m --hard-deadline 90m
    kvreplay experiment --resume runs/diag      # after kill -9: go on with the same window

Exit status: 0 when every step was measured (result.json ``status`` complete); 2 for a
bad file (nothing sent); 3 when a step failed, was aborted or deferred, or the window
was aborted (all outputs written, the restore run). The terminal ends with the status
line (``incomplete: 1 step aborted, 3 steps deferred``), the latency convention, and,
even under ``--quiet``, the server the window left running (URL, port, pid) if any.

``--resume EXP_DIR`` takes no file: it uses the frozen ``experiment.json`` (and the copy
of the file beside it, ``experiment.toml``), re-runs the step the kill interrupted from
its start (preceded by its incarnation when it followed one; the partial folder kept as
``steps/NN-name.interrupted``), then the remaining steps within the original window's
wall-clock deadlines (past ``stop_new_after``: only the restore, exit 3). It refuses (exit
2) when the server's identity changed, or the experiment no longer freezes to the same
hash; it exits 0 when the window completes (``experiments.window.resume``).
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

NAME = "experiment"
HELP = "Run a whole diagnosis window (incarnations, runs, controls, probes, A/B arms, restore) from one TOML file."

EXIT_INCOMPLETE = 3


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register ``experiment``'s options."""
    from kvreplay.argtypes import integer
    from kvreplay.commands.run import parse_duration

    p.add_argument("file", nargs="?", default=None,
                   help="experiment TOML file (docs/reference/experiment-files.md, 'The whole window in one file')")
    p.add_argument("--resume", default=None, metavar="EXP_DIR",
                   help="go on with a window that was killed (its experiment.json; no FILE): the interrupted step "
                        "runs again from its start, then the rest, within the original deadlines")
    p.add_argument("--out", default=None, help="experiment directory (default runs/<UTC timestamp>)")
    p.add_argument("--dry-run", action="store_true",
                   help="freeze and print every step (condition, workload, gates, deadlines, the exact lifecycle "
                        "commands); write nothing, send nothing")
    p.add_argument("--stop-new-after", type=parse_duration, default=None, metavar="DUR",
                   help="override [window] stop_new_after: no step starts, and no request is sent, after it")
    p.add_argument("--hard-deadline", type=parse_duration, default=None, metavar="DUR",
                   help="override [window] hard_deadline (in-flight requests are cancelled at it minus "
                        "restore_reserve; the restore must finish by it)")
    p.add_argument("--restore-reserve", type=parse_duration, default=None, metavar="DUR",
                   help="override [window] restore_reserve (time kept for the restore before the hard deadline)")
    p.add_argument("--max-transport-failures", type=integer(0), default=None, metavar="N",
                   help="override [window] max_transport_failures: N consecutive sends that never reached the "
                        "server fail the step and abort the window (0 = never; default 3)")
    p.add_argument("--max-body-bytes", type=integer(1, unit="bytes"), default=None, metavar="BYTES",
                   help="largest request body read from a workload; a larger one is refused (bytes; default "
                        "as kvreplay run)")
    p.add_argument("--quiet", action="store_true", help="print no progress (the output directory holds everything)")


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
    server = doc.get("server") or {}
    if server.get("target") == "sim":
        from kvreplay.experiments.timescale import fast_scale_warning

        base = server.get("sim") or {}
        for s in [None, *doc["steps"]]:  # the window's simulator, then each incarnation's overlay
            sim = base if s is None else {**base, **(s.get("sim") or {})}
            if s is not None and not s.get("sim"):
                continue
            if w := fast_scale_warning(sim.get("time_scale", 1.0), sim.get("itl_s", 0.020)):
                lines.append(f"warning: {'' if s is None else 'step ' + s['name'] + ': '}{w}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Execute ``kvreplay experiment``."""
    from kvreplay.api.experiment import Experiment, unread_warning
    from kvreplay.api.run import install_loop
    from kvreplay.errors import ConfigError
    from kvreplay.rundir import EXPERIMENT
    from kvreplay.safe_io import echo

    if args.resume is not None:
        if args.file is not None or args.dry_run or args.out is not None:
            raise ConfigError("--resume takes no experiment file, --out or --dry-run (it goes on in EXP_DIR)",
                              field="--resume")
        return _resume(args)
    if args.file is None:
        raise ConfigError("an experiment file is required (or --resume EXP_DIR)", field="file")
    keys = ("stop_new_after", "hard_deadline", "restore_reserve")
    experiment = Experiment.from_file(args.file)
    # --dry-run: everything but the writing (prepare); else experiment.json is written before anything runs
    frozen = (experiment.prepare if args.dry_run else experiment.freeze)(
        args.out, **{k: getattr(args, k) for k in keys}, max_transport_failures=args.max_transport_failures,
        max_body_bytes=args.max_body_bytes,
        fields={k: f"--{k.replace('_', '-')}" for k in keys if getattr(args, k) is not None})
    if not args.quiet:
        from kvreplay.experiments.preview import preview

        echo(_schedule(frozen.doc))
        if args.dry_run:
            echo(preview(frozen.doc, experiment.spec, frozen.out))
            echo(f"{EXPERIMENT}: not written (--dry-run writes nothing; it would be {frozen.frozen_path})")
        else:
            echo(f"{EXPERIMENT}: {frozen.frozen_path}")
    if args.dry_run:
        if not args.quiet and (warn := unread_warning(experiment.spec)):
            echo(f"warning: {warn}")
        return 0
    install_loop()
    say = (lambda _m: None) if args.quiet else (lambda m: echo(f"experiment: {m}", err=True))
    result = asyncio.run(frozen.run_async(say))
    return _finish(args, result, frozen.out)


def _finish(args: argparse.Namespace, result: dict, out: Path) -> int:
    """The terminal's last lines and the exit status (0 complete, 3 otherwise)."""
    from kvreplay.experiments.publish import left_line, status_line
    from kvreplay.safe_io import echo

    if not args.quiet:
        for f in result["findings"]:
            echo(f"finding {f['rule']}: {f['summary']}\n  next: {f['next']}")
        echo(f"experiment: {status_line(result)}; latencies: {result['time']['latency']}")
        echo(f"experiment directory: {out}  (result.json, report.md, report.html)")
    # Also under --quiet: nobody should find a server still listening without having been told.
    if left := left_line(result.get("left_running")):
        echo(left, err=True)
    return 0 if result["status"] == "complete" else EXIT_INCOMPLETE


def _resume(args: argparse.Namespace) -> int:
    """``--resume EXP_DIR`` (module docstring; ``kvreplay.api.experiment.resume_experiment``)."""
    from kvreplay.api.experiment import resume_experiment
    from kvreplay.safe_io import echo

    say = (lambda _m: None) if args.quiet else (lambda m: echo(f"experiment: {m}", err=True))
    result = resume_experiment(args.resume, max_body_bytes=args.max_body_bytes, say=say)
    return _finish(args, result, Path(args.resume))
