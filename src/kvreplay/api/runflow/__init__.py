"""The run's orchestration (``kvreplay run`` / ``kvreplay.replay``): typed options in, a summary out.

``run_async(RunConfig)`` resolves the inputs (workload, plan, phases, target, fleet, API key,
simulator), checks every value before the run directory is made (exit 2, nothing sent),
starts the embedded simulator or fleet when asked, and hands the frozen plan to the runner
(one process, ``--workers`` or ``--ray``). It knows nothing of the command line: the
options arrive as a ``kvreplay.options.RunConfig``, which ``commands/run.py`` builds from its
parsed flags and ``kvreplay.replay`` from its keywords. The checks it calls are in ``checks``
(and the fleet's in ``kvreplay.api.fleet``); ``kvreplay.api.run`` re-exports both for the
commands that share them.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from kvreplay.api.fleet import (
    check_replicas_answer,
    finish_routing_loss,
    fleet_of,
    no_backend,
    open_fleet_backend,
    replica_cache_extra,
    start_sim_fleet,
)
from kvreplay.api.runflow.checks import (
    check_backend,
    check_ca_file,
    check_out_dir,
    check_target,
    contract_options,
    default_out,
    make_observer,
    open_backend,
    read_api_key,
    sim_run_extra,
    split_credentials,
)
from kvreplay.errors import ConfigError
from kvreplay.options import RunConfig
from kvreplay.plan import PLAN_FORMAT, PhaseSpec, build_plan, load_plan_toml, parse_phase, plan_from_json
from kvreplay.report.markdown import render_markdown
from kvreplay.rundir import RECORDS, read_plan_file
from kvreplay.runner import RunOptions, execute_plan
from kvreplay.runner.resources import ensure_open_files
from kvreplay.workload import load_workload
from kvreplay.workload.conversations import session_warnings

__all__ = ["run_async"]


def _sim_fleet_size(args: RunConfig) -> tuple[int, str] | None:
    """``(replicas, policy)`` of ``sim={"replicas", "router"}`` (``--sim-replicas`` / ``--sim-router``), or None."""
    n = args.sim_value("replicas", 1) or 1
    policy = args.sim_value("router")
    if n <= 1 and policy is None:
        return None
    return n, policy or "round_robin"


async def run_async(args: RunConfig | object, specs: list[PhaseSpec] | None = None) -> dict[str, Any]:
    """Resolve inputs, start the simulator if asked, execute, return the summary (``_out``: the run directory).

    Args:
        args: The run's options (``kvreplay.options.RunConfig``: built by ``kvreplay run`` from its
            flags and by ``kvreplay.replay`` from its keywords); an object holding ``kvreplay run``'s
            parsed flags as attributes (an older caller's) is read into one (``RunConfig.from_dests``).
        specs: Phases given as objects, before ``args.phase`` (the API's and tests' way).

    Raises:
        ConfigError, WorkloadError: bad input, before any request is sent.
    """
    if not isinstance(args, RunConfig):
        args = RunConfig.from_dests(vars(args))
    settings: dict[str, Any] = {}
    if args.plan:
        specs_f, settings = load_plan_toml(args.plan)
        specs = (specs or []) + specs_f
    specs = (specs or []) + [parse_phase(s) for s in args.phase]
    wl_path = args.workload or settings.get("workload")
    if args.from_plan:
        plan_path_data = read_plan_file(args.from_plan)
        if not isinstance(plan_path_data, dict) or plan_path_data.get("format") != PLAN_FORMAT:
            # before the workload it names: a summary.json read "plan names no workload; give it"
            raise ConfigError(f"not a {PLAN_FORMAT} file (give a run directory's plan.json)", path=args.from_plan,
                              field="format")
        wl_info = plan_path_data.get("workload") if isinstance(plan_path_data, dict) else None
        wl_path = wl_path or (wl_info.get("path") if isinstance(wl_info, dict) else None)
        if wl_path is not None and not isinstance(wl_path, str):
            raise ConfigError("workload.path must be a string", path=args.from_plan, field="workload.path")
        if not wl_path:
            raise ConfigError("plan names no workload; give it", path=args.from_plan)
        workload = load_workload(wl_path, max_body_bytes=args.max_body_bytes)
        plan, _ = plan_from_json(plan_path_data, workload, path=args.from_plan)
        if specs:
            raise ConfigError("--from-plan replays a frozen plan; do not add phases", field="--phase")
    else:
        if not wl_path:
            raise ConfigError("give a workload (folder of *.json or a .jsonl file)", field="workload")
        workload = load_workload(wl_path, max_body_bytes=args.max_body_bytes)
        plan = build_plan(workload, specs)
    if args.history == "live" and workload.sessions is None:
        raise ConfigError("--history live needs a conversation workload (a sessions side file beside it)",
                          field="--history")
    if workload.sessions is not None and (args.ray or args.workers > 1):
        raise ConfigError("a conversation workload (sessions side file) runs in one process: drop --workers / --ray",
                          field="--workers")
    api_key = read_api_key(args)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    contract = contract_options(args, settings, args.plan)
    if contract["identity_pins"] and args.backend == "none":
        raise ConfigError("identity pins need a backend that reads the server's identity, not --backend none",
                          field="--expect-identity")
    target = args.target or settings.get("target", "sim")
    target, replicas = fleet_of(args, settings, target)
    if replicas:
        check_target(target, sim=False)
    if replicas:  # before the run directory is made: a replica that does not answer is exit 2, nothing made
        await check_replicas_answer(replicas, args.connect_timeout)
    replica_cache = replica_cache_extra(args, replicas)  # --replica-cache-from: checked before anything is made
    sim_cfg: Any = None
    calibration: dict[str, Any] | None = None
    if target == "sim":  # every simulator value checked before the run directory is made (exit 2)
        from kvreplay.sim.config import config_and_calibration_of

        sim_cfg, calibration = config_and_calibration_of(args.sim, flag_prefix="--sim-")
    sim_fleet = _sim_fleet_size(args)
    if sim_fleet is not None and target != "sim":
        raise ConfigError("--sim-replicas / --sim-router run the embedded fleet: give --target sim",
                          field="--sim-replicas")
    check_ca_file(args.ca_file)
    if not replicas:  # a fleet's adapters were checked by fleet_of
        check_backend(args.backend, args.profile)
    out = Path(args.out) if args.out else default_out()
    if (out / RECORDS).exists():
        raise ConfigError(f"run directory already holds {RECORDS}; choose a new --out", path=out)
    check_out_dir(out, Path(workload.path))
    ensure_open_files(max(ph.spec.concurrency for ph in plan.phases))
    check_target(target, sim=True)
    target, target_label = split_credentials(target, headers) if target != "sim" else (target, target)
    backend_name = args.backend
    sim: Any = None
    sim_extra: dict[str, Any] = {}
    if sim_cfg is not None and sim_fleet is not None:  # the embedded fleet: a fleet target on this loop
        sim, replicas, sim_extra = await start_sim_fleet(sim_fleet, sim_cfg, calibration)
        url = sim.router_url
        if backend_name == "auto":
            backend_name = "halogen"
    elif sim_cfg is not None:
        from kvreplay.sim import SimServer

        sim = SimServer(sim_cfg, calibration=calibration)
        await sim.start(host="127.0.0.1", port=0)
        url = sim.base_url
        if backend_name == "auto":
            backend_name = "halogen"
    else:
        url = target
    observer = make_observer(args)
    progress = observer.on_message
    if workload.sessions is not None:  # conversations: warned before anything is sent
        deadlines = [d for d in (args.stop_new_after, args.hard_deadline) if d]
        for line in session_warnings(workload, deadline_s=min(deadlines) if deadlines else None):
            progress(f"warning: {line}")

    async def factory(session):  # noqa: ANN001, ANN202 - aiohttp session in, Backend out
        nonlocal backend_name
        if backend_name == "none":
            return None
        try:
            from kvreplay.backends import detect, make_backend
        except ImportError:
            progress("backend adapters not available; running without counters")
            backend_name = "none"
            return None
        if backend_name == "auto":
            backend_name = await detect(url, session)
        return make_backend(backend_name, url, session, profile=args.profile)

    # --workers / --ray: worker 0 builds the adapter in its own process (a factory that pickles).
    worker_factory = None if backend_name == "none" else partial(open_backend, backend_name, url, args.profile)
    if replicas:
        worker_factory = (None if backend_name == "none"
                          else partial(open_fleet_backend, replicas, backend_name, args.profile))
    run_factory: Any = (worker_factory or no_backend) if replicas else factory
    # report.md at the end of the run (the runner never imports kvreplay.report); _finish redraws it.
    render_report = None if args.report == "none" else render_markdown
    from kvreplay.runner.fleet import fleet_run_fields

    opts = RunOptions(
        target_url=url,
        target_label="sim" if sim else target_label,
        out_dir=out,
        backend_name=backend_name,
        headers=headers,
        head_chars=0 if args.no_text else 256,
        connect_timeout_s=args.connect_timeout,
        read_idle_timeout_s=args.read_timeout,
        total_timeout_s=args.total_timeout,
        per_request_counters=not args.no_per_request_counters,
        drain_timeout_s=args.drain_timeout,
        stop_new_after_s=args.stop_new_after,
        hard_deadline_s=args.hard_deadline,
        max_error_rate=args.max_error_rate,
        max_output_error_rate=args.max_output_error_rate,
        max_transport_failures=args.max_transport_failures or None,
        abort_if=tuple(args.abort_if),
        abort_on_restart=args.abort_on_restart,
        keepalive_timeout_s=args.keepalive_timeout,
        quiet=args.quiet,
        run_extra=({**sim_run_extra(sim_cfg.time_scale, calibration), **sim_extra} if sim is not None
                   else replica_cache),
        **contract,
        ca_file=args.ca_file,
        history=args.history,
        **fleet_run_fields("sim" if sim else target_label, replicas, args.replica_header),
    )
    try:
        # plan.bind appends the bodies of interleaved workloads (a no-op without interleave)
        if args.ray:
            from kvreplay.runner.rayrun import execute_plan_ray, require_ray

            require_ray()
            if args.workers < 1:
                raise ConfigError("--workers must be at least 1", field="--workers")
            summary = await execute_plan_ray(
                plan, workload, opts, workers=args.workers, address=args.ray,
                backend_factory=worker_factory, observer=observer, render_report=render_report)
        elif args.workers > 1:
            from kvreplay.runner.multiproc import execute_plan_workers

            summary = await execute_plan_workers(
                plan, workload, opts, workers=args.workers, backend_factory=worker_factory,
                observer=observer, max_body_bytes=args.max_body_bytes, render_report=render_report)
        else:
            summary = await execute_plan(plan, plan.bind(workload), opts, backend_factory=run_factory,
                                         observer=observer, render_report=render_report)
    finally:
        if sim is not None:
            await sim.stop()
    if replicas:  # phases[].routing_loss (offline.runloss), beside the summary the runner wrote
        finish_routing_loss(out, summary, plan, workload, render_report)
    summary["_out"] = str(out)
    return summary
