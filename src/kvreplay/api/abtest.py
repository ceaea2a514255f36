r"""A/B repetitions of two arms: the behaviour of ``kvreplay ab`` and ``kvreplay.ab``.

``kvreplay ab`` (``commands/ab.py``) prints the verdict lines; its options are
``kvreplay.options.ab.AbConfig`` (the flags derive from it, ``kvreplay.ab``'s keywords build
it); this module resolves the workload, plan, arms, thresholds,
credentials and simulator calibration and runs the experiment
(``kvreplay.experiments.ab.arms.run_ab``: ab.json, one run directory per block,
compare.json, compare.md), and draws report.html (``write_report``). Examples::

    kvreplay ab fixtures/workloads/mtbench-52 --target http://127.0.0.1:8000 \\
        --arm off='./switch.sh trace-off' --arm on='./switch.sh trace-on' \\
        --reps 3 --primary ttft_p50:-5% --protected itl_p50:+3% --out runs/ab-trace
    kvreplay ab WORKLOAD --target sim --arm off=sim: --arm on=sim:prefill_scale=1.1 --out runs/ab-sim
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kvreplay.api._keywords import config_for
from kvreplay.api.comparison import CompareResult
from kvreplay.errors import ConfigError
from kvreplay.options.ab import AbConfig
from kvreplay.safe_io import echo

__all__ = ["AbConfig", "AbResult", "ab", "ab_args_async", "ab_async", "write_report"]

PathLike = str | os.PathLike[str]


class AbResult(CompareResult):
    """The comparison of an A/B experiment (compare.json), with ``ab`` and ``out``.

    ``ab`` is ab.json: the arms, the frozen block order, each block's run directory,
    plan hash, identity and abort, ``stopped`` (why the experiment stopped early, or
    None); with ``target="sim"`` each arm's time scale and the calibration. ``out`` is the
    experiment directory. The experiment stopped early (a block aborted, a deadline)
    when ``ab["stopped"]`` is set: ``kvreplay ab`` exits 3 then.
    """

    ab: dict[str, Any]
    out: str


async def ab_args_async(args: AbConfig | object) -> dict[str, Any]:
    """Run ``kvreplay ab`` on its options: resolve the inputs, run the blocks, compare.

    Args:
        args: The options (``AbConfig``; an older caller's object of parsed flags by their
            ``dest`` is read into one).

    Returns:
        The comparison (compare.json) with ``ab`` (ab.json) and ``_out`` (the directory).

    Raises:
        ConfigError, WorkloadError: bad input, before the first block.
        BackendError: the target cannot be used.
    """
    from kvreplay.api.run import contract_options, default_out, read_api_key, split_credentials
    from kvreplay.api.runflow.checks import check_backend
    from kvreplay.experiments.ab.arms import block_phase_specs, parse_arm, parse_select, run_ab
    from kvreplay.experiments.ab.compare import parse_threshold
    from kvreplay.plan import build_plan
    from kvreplay.workload import load_workload

    if not isinstance(args, AbConfig):
        args = AbConfig.from_dests(vars(args))
    arms = [parse_arm(a) for a in args.arm]
    thresholds = [parse_threshold(t, "primary") for t in args.primary]
    thresholds += [parse_threshold(t, "protected") for t in args.protected]
    workload = load_workload(args.workload, max_body_bytes=args.max_body_bytes)
    if args.accept_busy_host is not None and not args.accept_busy_host > 0:
        raise ConfigError(f"must be a factor > 0, not {args.accept_busy_host:g}", field="--accept-busy-host")
    try:
        plan = build_plan(workload, block_phase_specs(args.phases, args.order, parse_select(args.select)))
    except ConfigError as exc:  # a selection past the workload: the flag that chose it
        if exc.field != "select":
            raise
        raise ConfigError(exc.message, field="--select") from None
    api_key = read_api_key(args)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    # URL credentials: an Authorization header, registered as secrets, never written (as in run).
    target, target_label = (split_credentials(args.target, headers) if args.target != "sim"
                            else (args.target, args.target))
    sim_base = calibration = None
    if args.target == "sim":
        from kvreplay.sim.config import config_and_calibration_of

        sim_base, calibration = config_and_calibration_of(args.sim, flag_prefix="--sim-")
        from kvreplay.experiments.timescale import fast_scale_warning

        if (warn := fast_scale_warning(sim_base.time_scale, sim_base.itl_s)) and not args.quiet:
            echo(f"ab: warning: {warn}", err=True)  # before the first block
    contract = contract_options(args, {}, None)
    if contract["identity_pins"] and args.backend == "none":
        raise ConfigError("identity pins need a backend that reads the server's identity, not --backend none",
                          field="--expect-identity")
    check_backend(args.backend, args.profile)  # before ab.json and the first block's folder
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
        accept_busy_host=args.accept_busy_host,
    ) | {"_out": str(out)}


def write_report(out: PathLike) -> str:
    """Draw the experiment's report.html from ab.json and compare.json; returns its path."""
    from kvreplay.report.abreport import write_ab_report

    return str(write_ab_report(os.fspath(out)))


def _ab_args(workload: PathLike, arms: Mapping[str, str] | Iterable[str], target: str, reps: int, phases: str,
             primary: Iterable[str], protected: Iterable[str], out: PathLike | None, sim: Mapping[str, Any] | None,
             quiet: bool, options: Mapping[str, Any]) -> AbConfig:
    arm_list = [f"{k}={v}" for k, v in arms.items()] if isinstance(arms, Mapping) else list(arms)
    for name, value in (("arms", arms), ("primary", primary), ("protected", protected)):
        if isinstance(value, str):
            raise ConfigError(f"{name} is a list, e.g. ['off=sim:', 'on=sim:prefill_scale=1.1']", field=name)
    values = {"workload": os.fspath(workload), "arm": arm_list, "target": target, "reps": reps, "phases": phases,
              "primary": list(primary), "protected": list(protected),
              "out": None if out is None else os.fspath(out), "quiet": quiet, **options}
    return config_for(AbConfig, values, sim, fleet=False)


async def ab_async(workload: PathLike, *, arms: Mapping[str, str] | Iterable[str], target: str = "sim",
                   reps: int = 3, phases: str = "c1,c4", primary: Iterable[str] = (), protected: Iterable[str] = (),
                   out: PathLike | None = None, sim: Mapping[str, Any] | None = None, quiet: bool = True,
                   report: bool = False, **options: Any) -> AbResult:
    """Run an A/B experiment (``kvreplay ab``) in the running event loop.

    Two arms alternate in a frozen order (``reps`` pairs of blocks, each block every
    phase of ``phases`` over the whole workload); each arm's command switches the server
    before its block. The blocks are then compared as ``kvreplay.compare`` does.

    Args:
        workload: A folder of ``*.json`` bodies or a ``.jsonl`` file.
        arms: Baseline first: ``{"off": "./switch.sh off", "on": "./switch.sh on"}`` or
            ``["off=...", "on=..."]``; with ``target="sim"``, ``"sim:KEY=VALUE,..."`` commands
            (e.g. ``"sim:prefill_scale=1.1"``).
        target: ``"sim"`` or the server's base URL.
        reps: Repetitions (pairs of blocks).
        phases: Concurrencies of each block's phases, e.g. ``"c1,c4"``.
        primary: Primary checks, e.g. ``["ttft_p50:-5%"]``.
        protected: Protected checks, e.g. ``["itl_p50:+3%"]``.
        out: The experiment directory (default ``runs/<UTC timestamp>``).
        sim: Simulator options without the ``sim-`` prefix, e.g. ``{"time_scale": 0}``.
        quiet: Print no progress (default).
        report: Also draw report.html.
        **options: Any other option of ``kvreplay ab`` by its Python name, e.g.
            ``order="reverse"``, ``select="first8"``, ``accept_busy_host=3.0``,
            ``stop_new_after=4200.0`` (s), ``backend="vllm"``.

    Returns:
        The ``AbResult`` (compare.json, with ab.json as ``ab`` and the directory as ``out``).

    Raises:
        ConfigError, WorkloadError: bad input, before the first block.
        BackendError: the target cannot be used.

    Example::

        res = await kvreplay.ab_async(kvreplay.DEMO_WORKLOAD, arms={"off": "sim:", "on": "sim:prefill_scale=1.1"},
                                      reps=1, sim={"time_scale": 0}, primary=["ttft_p50:-5%"])
    """
    result = await ab_args_async(_ab_args(workload, arms, target, reps, phases, primary, protected, out, sim, quiet,
                                          options))
    result["out"] = result.pop("_out")
    if report:
        write_report(result["out"])
    typed: AbResult = result  # type: ignore[assignment]
    return typed


def ab(workload: PathLike, *, arms: Mapping[str, str] | Iterable[str], target: str = "sim", reps: int = 3,
       phases: str = "c1,c4", primary: Iterable[str] = (), protected: Iterable[str] = (),
       out: PathLike | None = None, sim: Mapping[str, Any] | None = None, quiet: bool = True, report: bool = False,
       **options: Any) -> AbResult:
    """Run an A/B experiment (``kvreplay ab``); blocks until it ends. Arguments as ``ab_async``.

    Example::

        res = kvreplay.ab(kvreplay.DEMO_WORKLOAD, arms={"off": "sim:", "on": "sim:prefill_scale=1.1"},
                          reps=1, sim={"time_scale": 0}, primary=["ttft_p50:-5%"], out="runs/ab")
        print(res["verdict"], res["ab"]["stopped"])

    Raises:
        ConfigError, WorkloadError, BackendError: as ``ab_async``.
    """
    from kvreplay.api.run import install_loop

    install_loop()
    return asyncio.run(ab_async(workload, arms=arms, target=target, reps=reps, phases=phases, primary=primary,
                                protected=protected, out=out, sim=sim, quiet=quiet, report=report, **options))
