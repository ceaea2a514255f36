r"""``kvreplay ab``: did the change help, and did it hurt anything?

Examples::

    kvreplay ab fixtures/workloads/mtbench-52 --target http://127.0.0.1:8000 \\
        --arm off='./switch.sh trace-off' --arm on='./switch.sh trace-on' \\
        --reps 3 --primary ttft_p50:-5% --protected itl_p50:+3% --out runs/ab-trace
    kvreplay ab WORKLOAD --target sim --arm off=sim: --arm on=sim:prefill_scale=1.1 --out runs/ab-sim
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
Exit status: 0 with a verdict, 2 bad input, 3 when a block aborted or a
deadline stopped the experiment. ``kvreplay report DIR`` draws ``report.html``.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from kvreplay.commands.run import (
    add_contract_arguments,
    add_target_arguments,
    contract_options,
    default_out,
    install_loop,
    parse_bound,
    parse_duration,
    read_api_key,
    split_credentials,
)
from kvreplay.errors import ConfigError
from kvreplay.experiments.ab.arms import block_phase_specs, parse_arm, run_ab
from kvreplay.experiments.ab.compare import ci_pct_text, parse_threshold
from kvreplay.plan import build_plan
from kvreplay.safe_io import echo
from kvreplay.workload import DEFAULT_MAX_BODY_BYTES, load_workload

NAME = "ab"
HELP = (
    "A/B repetitions of two arms in a frozen alternating order, compared with bootstrap intervals."
)

EXIT_ABORTED = 3


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register ``ab``'s options (plus the target options of ``run``)."""
    p.add_argument("workload", help="folder of *.json bodies or a .jsonl file")
    p.add_argument(
        "--arm",
        action="append",
        default=[],
        metavar="NAME=CMD",
        required=True,
        help="an arm and the command that switches the server to it (twice; baseline first); "
        "with --target sim: NAME=sim:KEY=VALUE,... (e.g. sim:prefill_scale=1.1)",
    )
    p.add_argument("--reps", type=int, default=3, help="repetitions (pairs of blocks; default 3)")
    p.add_argument(
        "--phases", default="c1,c4", help="concurrencies of each block's phases (default c1,c4)"
    )
    p.add_argument(
        "--order",
        default="forward",
        help="body order inside a phase: forward, reverse, shuffle:SEED",
    )
    p.add_argument(
        "--primary",
        action="append",
        default=[],
        metavar="METRIC:±X%",
        help="primary check, e.g. ttft_p50:-5%% (lower by 5%% is a benefit) or "
        "ratio:hit_tokens/query_tokens:+5%% (a counter ratio 5%% higher is a benefit); metrics: "
        "ttft/itl/tpot/e2e _p50/_p90/_p99, throughput, output_tps, cached_tokens, ratio:NUM/DEN; repeatable",
    )
    p.add_argument(
        "--protected",
        action="append",
        default=[],
        metavar="METRIC:±X%",
        help="protected check, e.g. itl_p50:+3%% (rising by more is a regression); repeatable",
    )
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.add_argument("--ready-timeout", type=parse_duration, default=60.0, metavar="DUR")
    p.add_argument("--cmd-timeout", type=parse_duration, default=600.0, metavar="DUR")
    p.add_argument("--drain-timeout", type=parse_duration, default=10.0, metavar="DUR")
    p.add_argument("--stop-new-after", type=parse_duration, default=None, metavar="DUR",
                   help="send no new request after this long from the experiment's start (e.g. 70m); "
                        "later blocks are deferred and the exit status is 3")
    p.add_argument("--hard-deadline", type=parse_duration, default=None, metavar="DUR",
                   help="cancel requests (and arm commands) still running at this point (e.g. 80m)")
    p.add_argument("--abort-if", action="append", default=[], type=parse_bound, metavar="NAME>VALUE",
                   help="abort the block (and the experiment) when a common counter or gauge crosses a "
                        "bound, e.g. 'host_bytes>34e9'; repeatable")
    add_contract_arguments(p)
    p.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES)
    p.add_argument(
        "--out", default=None, help="experiment directory (default runs/<UTC timestamp>)"
    )
    p.add_argument("--quiet", action="store_true")
    add_target_arguments(p)


async def ab_async(args: argparse.Namespace) -> dict:
    """Resolve inputs and run the experiment; returns the comparison."""
    arms = [parse_arm(a) for a in args.arm]
    thresholds = [parse_threshold(t, "primary") for t in args.primary]
    thresholds += [parse_threshold(t, "protected") for t in args.protected]
    workload = load_workload(args.workload, max_body_bytes=args.max_body_bytes)
    plan = build_plan(workload, block_phase_specs(args.phases, args.order))
    api_key = read_api_key(args)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    # URL credentials: an Authorization header, registered as secrets, never written (as in run).
    target, target_label = (split_credentials(args.target, headers) if args.target != "sim"
                            else (args.target, args.target))
    sim_base = calibration = None
    if args.target == "sim":
        from kvreplay.sim.config import config_and_calibration

        sim_base, calibration = config_and_calibration(args, prefix="sim-")
        from kvreplay.experiments.timescale import fast_scale_warning

        if (warn := fast_scale_warning(sim_base.time_scale, sim_base.itl_s)) and not args.quiet:
            echo(f"ab: warning: {warn}", err=True)  # before the first block
    contract = contract_options(args, {}, None)
    if contract["identity_pins"] and args.backend == "none":
        raise ConfigError("identity pins need a backend that reads the server's identity, not --backend none",
                          field="--expect-identity")
    say = (lambda _m: None) if args.quiet else (lambda m: echo(f"ab: {m}"))
    out = Path(args.out) if args.out else default_out()
    return await run_ab(
        workload=workload,
        plan=plan,
        arms=arms,
        reps=args.reps,
        out=out,
        target=target,
        target_label=target_label,
        backend_name=args.backend,
        thresholds=thresholds,
        sim_base=sim_base,
        profile=args.profile,
        headers=headers,
        seed=args.seed,
        ready_timeout_s=args.ready_timeout,
        cmd_timeout_s=args.cmd_timeout,
        drain_timeout_s=args.drain_timeout,
        progress=say,
        stop_new_after_s=args.stop_new_after,
        hard_deadline_s=args.hard_deadline,
        abort_if=tuple(args.abort_if),
        contract=contract,
        sim_calibration=calibration,
    ) | {"_out": str(out)}


def run(args: argparse.Namespace) -> int:
    """Execute ``kvreplay ab``; exit 0 with a verdict, 3 when a block aborted."""
    install_loop()
    result = asyncio.run(ab_async(args))
    if not args.quiet:
        echo(f"verdict: {result['verdict']}")
        reps = result.get("reps") or {}
        if reps and reps["measured"] < reps["planned"]:
            echo(f"  fewer repetitions than planned were measured: {reps['measured']} of {reps['planned']}")
        for c in result["checks"]:
            echo(
                f"  {c['phase']}.{c['metric']} ({c['role']} {c['threshold_pct']:+g}%): {c['decision']}"
                + (
                    f", change {c['change_pct']:+.2f}% CI {ci_pct_text(c.get('ci_change_pct'))}"
                    if c.get("change_pct") is not None
                    else (f" ({c['reason']})" if c.get("reason") else "")
                )
            )
        echo(f"experiment directory: {result['_out']}")
    try:
        from kvreplay.report.abreport import write_ab_report

        html = write_ab_report(result["_out"])
        if not args.quiet:
            echo(f"report: {html}")
    except Exception as exc:  # noqa: BLE001 - ab.json/compare.json are written; a report bug keeps the exit code
        echo(f"kvreplay ab: report.html not written ({type(exc).__name__}: {exc}); "
             f"retry with: kvreplay report {result['_out']}", err=True)
    return EXIT_ABORTED if result["ab"].get("stopped") else 0
