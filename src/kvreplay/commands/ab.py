r"""``kvreplay ab``: did the change help, and did it hurt anything?

Examples::

    kvreplay ab fixtures/workloads/mtbench-52 --target http://127.0.0.1:8000 \\
        --arm off='./switch.sh trace-off' --arm on='./switch.sh trace-on' \\
        --reps 3 --primary ttft_p50:-5% --protected itl_p50:+3% --out runs/ab-trace
    kvreplay ab WORKLOAD --target sim --arm off=sim: --arm on=sim:prefill_scale=1.1 --out runs/ab-sim
    kvreplay ab WORKLOAD --target sim --arm off=sim: --arm on=sim:prefill_scale=1.5 --reps 1 \\
        --phases c1 --select first8 --sim-time-scale 0 --out runs/ab-quick
    kvreplay ab WORKLOAD --target http://127.0.0.1:8000 --arm off='./switch.sh off' \\
        --arm on='./switch.sh on' --reps 3 --stop-new-after 70m --hard-deadline 80m \\
        --abort-if 'host_bytes>34e9' --expect-identity models=llama-3-8b \\
        --primary ratio:hit_tokens/query_tokens:+5% --protected tpot_p90:+3%

An arm command runs in its own session and process group with stdin from
/dev/null and its output in ``commands/NN-ARM.log`` (``runner.usercmd``); it may
leave the server it starts running in the background (``./switch.sh`` starting
it with ``&``): the block starts once the shell exits and the server is ready.

Writes ``ab.json`` (arms, the frozen block order, the plan hash; with ``--target
sim`` each arm's time scale and the ``--sim-from-verdict`` calibration; before the
first request), one run directory per block under ``blocks/`` (whose ``plan.json``
keeps the scale and the calibration as ``kvreplay run``'s does), then
``compare.json`` and ``compare.md``. See ``kvreplay.experiments.ab.arms``.
``--select firstN|lastN`` sends the first (last) N bodies in every phase. The verdict
line is followed by its caveats (``timing_not_computed`` at ``--sim-time-scale 0``, where
timing checks read ``not computed``; ``host_busy`` of a decision accepted with
``--accept-busy-host [FACTOR]``). Exit status: 0 with a verdict, 2 bad input, 3 when a
block aborted or a deadline stopped the experiment. ``kvreplay report DIR`` draws ``report.html``.

A thin layer over ``kvreplay.api.abtest`` (``kvreplay.ab``), which declares the options
and runs the experiment; this module prints the verdict lines and maps the outcome to
an exit status.
"""

from __future__ import annotations

import argparse
import asyncio

from kvreplay.api.abtest import ab_args_async as ab_async
from kvreplay.api.abtest import write_report
from kvreplay.api.run import add_target_arguments, install_loop
from kvreplay.argtypes import add_declared
from kvreplay.experiments.ab.compare import NOT_COMPUTED, ci_pct_text
from kvreplay.options.ab import AbConfig
from kvreplay.safe_io import echo

__all__ = ["EXIT_ABORTED", "ab_async", "add_arguments", "run"]

NAME = "ab"
HELP = (
    "A/B repetitions of two arms in a frozen alternating order, compared with bootstrap intervals."
)

EXIT_ABORTED = 3


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register ``ab``'s flags: ``AbConfig``'s (its own, the contract's, its output's), then the target's."""
    for group in ("ab", "contract", "ab-out"):
        add_declared(p, AbConfig, (group,))
    add_target_arguments(p)


def run(args: argparse.Namespace) -> int:
    """Execute ``kvreplay ab``; exit 0 with a verdict, 3 when a block aborted."""
    install_loop()
    result = asyncio.run(ab_async(args))  # read into an AbConfig there
    if not args.quiet:
        echo(f"verdict: {result['verdict']}")
        for cav in result.get("caveats") or []:
            echo(f"  caveat: {cav}")
        reps = result.get("reps") or {}
        if reps and reps["measured"] < reps["planned"]:
            echo(f"  fewer repetitions than planned were measured: {reps['measured']} of {reps['planned']}")
        for c in result["checks"]:
            line = f"  {c['phase']}.{c['metric']} ({c['role']} {c['threshold_pct']:+g}%): {c['decision']}"
            if c.get("change_pct") is not None:
                line += f", change {c['change_pct']:+.2f}% CI {ci_pct_text(c.get('ci_change_pct'))}"
            if c.get("reason") and c["decision"] != NOT_COMPUTED:  # not computed: the caveat above says why
                line += f" ({c['reason']})"
            echo(line)
        echo(f"experiment directory: {result['_out']}")
    try:
        html = write_report(result["_out"])
        if not args.quiet:
            echo(f"report: {html}")
    except Exception as exc:  # noqa: BLE001 - ab.json/compare.json are written; a report bug keeps the exit code
        echo(f"kvreplay ab: report.html not written ({type(exc).__name__}: {exc}); "
             f"retry with: kvreplay report {result['_out']}", err=True)
    return EXIT_ABORTED if result["ab"].get("stopped") else 0
