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
"""

from __future__ import annotations

import argparse
from pathlib import Path

from kvreplay.experiments.ab.compare import compare_blocks, load_pairs, parse_threshold, render_compare
from kvreplay.safe_io import atomic_write_json, echo, write_markdown

NAME = "compare"
HELP = "Compare matched A/B blocks: median paired ratios with bootstrap CIs and a verdict."


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register ``compare``'s options."""
    p.add_argument(
        "dirs", nargs="+", metavar="RUN_DIR", help="ab directories, or run directories in pairs"
    )
    p.add_argument("--primary", action="append", default=[], metavar="METRIC:±X%")
    p.add_argument("--protected", action="append", default=[], metavar="METRIC:±X%")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument("--n-boot", type=int, default=10_000, help="bootstrap resamples")
    p.add_argument("--out", default=None, help="where to write compare.json / compare.md")
    p.add_argument("--quiet", action="store_true")


def run(args: argparse.Namespace) -> int:
    """Execute ``kvreplay compare``; exit 0 (the verdict is in the output, not the status)."""
    thresholds = [parse_threshold(t, "primary") for t in args.primary]
    thresholds += [parse_threshold(t, "protected") for t in args.protected]
    pairs, arms = load_pairs(args.dirs)
    if not thresholds:
        import orjson

        ab = Path(args.dirs[0]) / "ab.json"
        if ab.exists():
            saved = orjson.loads(ab.read_bytes()).get("thresholds", {})
            thresholds = [parse_threshold(t, "primary") for t in saved.get("primary", [])]
            thresholds += [parse_threshold(t, "protected") for t in saved.get("protected", [])]
    result = compare_blocks(pairs, thresholds, seed=args.seed, n_boot=args.n_boot)
    out = Path(args.out) if args.out else (Path(args.dirs[0]) if len(args.dirs) == 1 else Path("."))
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / "compare.json", result)
    text = render_compare(result, arms)
    write_markdown(out / "compare.md", text)
    if not args.quiet:
        echo(text)
    else:
        for w in result["comparability"]["warnings"]:
            tag = "not comparable" if w["blocking"] else "warning"
            echo(f"kvreplay compare: {tag}: {w['message']}", err=True)
    return 0
