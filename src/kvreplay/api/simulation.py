"""Offline cache simulation: the behaviour of ``kvreplay simulate`` and ``kvreplay.simulate``.

``kvreplay simulate`` (``commands/simulate.py``) prints the table or the JSON; its options are
``kvreplay.options.simulate.SimulateConfig`` (the flags derive from it, ``kvreplay.simulate``'s
keywords build it); this module applies a probe verdict's calibration, builds
the ``SimulateOptions`` of ``kvreplay.offline.simulate`` and runs it (``simulate_args``),
writing the ``--plot`` PNG. ``simulate`` and ``simulate_fleet`` are the typed entry points.
Nothing here imports numpy or the simulator until it is called. Examples::

    kvreplay simulate fixtures/workloads/mtbench-52 --capacities 1,2,4 --json
    kvreplay simulate fixtures/workloads/mtbench-52 --replicas 4 --capacities 8 --router round-robin
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from kvreplay.api._keywords import config_for
from kvreplay.argtypes import number, number_list
from kvreplay.errors import ConfigError
from kvreplay.options.simulate import SimulateConfig

if TYPE_CHECKING:
    from kvreplay.offline.simulate import SimulateOptions

__all__ = [
    "CurvePoint",
    "FleetReport",
    "SimulateConfig",
    "SimulateReport",
    "check_prefill",
    "options_from_args",
    "simulate",
    "simulate_args",
    "simulate_fleet",
]


class CurvePoint(TypedDict, total=False):
    """One capacity of the curve (``simulate --json``'s ``curve[]``).

    ``capacity`` is in the report's ``unit`` (entries, blocks); the ratios are in [0, 1]
    (hits over requests, cached over prompt tokens); ``prefill_s_saved`` is seconds under
    the prefill model (None without one); ``capacity_tokens`` and ``memory_gib`` (GiB of KV)
    appear where the unit has a size; ``loop_s`` / ``loop_s_saved`` with ``--sessions``.
    """

    capacity: int
    hit_ratio_requests: float
    hit_ratio_tokens: float
    prefill_s_saved: float | None
    hit_requests: int
    hit_tokens: int
    capacity_tokens: int
    memory_gib: float
    loop_s: float
    loop_s_saved: float


class SimulateReport(TypedDict, total=False):
    """The miss-ratio curve as ``kvreplay simulate --json`` prints it.

    ``kind`` is ``workload``, ``plan`` or ``trace``; ``model`` ``entries`` or ``radix``;
    ``method`` says how the curve was computed (``one-pass``, ``per-capacity``);
    ``unit`` is ``entry`` or ``block`` (of ``unit_tokens`` tokens); ``recommended`` is the
    smallest capacity reaching ``share`` of the best hit ratio (with its ``check``);
    ``answer`` the sentence comparing ``--today``; ``calibration`` the probe verdict's
    (``--sim-from-verdict``); ``sessions`` the reuse by turn of a conversation workload.
    """

    source: str
    kind: str
    model: str
    unit: str
    unit_tokens: int | None
    method: str
    requests: int
    prompt_tokens: int
    bytes_per_token: int
    entry_bytes: int | None
    prefill: dict[str, Any] | None
    prefill_s_cold: float | None
    curve: list[CurvePoint]
    recommended: dict[str, Any]
    interleave: dict[str, Any]
    sessions: dict[str, Any]
    answer: str
    calibration: dict[str, Any]


class FleetReport(TypedDict, total=False):
    """The routing-loss report of ``kvreplay simulate --replicas N --json``.

    ``policies`` maps ``merged`` (one cache of every replica's capacity: the bound),
    ``prefix_affinity``, ``round_robin``, ``random`` (and ``observed`` with a router) to
    their figures: ``cached_tokens``, ``hit_rate`` in [0, 1], ``kept_pct`` (percent of the
    merged bound kept), ``per_replica_cached_tokens``, ``method``; ``cache`` gives the model,
    ``unit``, ``per_replica`` capacities and the ``merged`` one; ``sentence`` the reading.
    """

    source: str
    kind: str
    router: str | None
    replicas: int
    requests: int
    prompt_tokens: int
    seed: int
    cache: dict[str, Any]
    policies: dict[str, dict[str, Any]]
    observed: dict[str, Any] | None
    measured_cached_tokens: int | None
    observed_vs_measured_pct: float | None
    kept_pct: float | None
    sentence: str


PathLike = str | os.PathLike[str]


def _fspath(value: PathLike | None) -> str | None:
    return None if value is None else os.fspath(value)


def check_prefill(text: str) -> str:
    """``--prefill a=...,rate=...`` checked (``parse_prefill``); the text is kept (a verdict path unchecked here).

    A verdict file is read (and checked) with the other inputs, before any work.

    Raises:
        kvreplay.argtypes.CheckError: a malformed cost model (its message and the text given).
    """
    if "=" not in text:
        return text
    from kvreplay.argtypes import CheckError
    from kvreplay.offline.report import parse_prefill

    try:
        parse_prefill(text)
    except ConfigError as exc:
        raise CheckError(f"{str(exc).split(': ', 1)[-1]}, got {text!r}") from None
    return text


def _apply_verdict(args: SimulateConfig) -> dict[str, Any] | None:
    """Fill unset flags from ``--sim-from-verdict`` (kvreplay.sim.calibrate); returns its JSON."""
    if not args.sim_from_verdict:
        return None
    from kvreplay.sim.calibrate import calibrate_from_verdict

    cal = calibrate_from_verdict(args.sim_from_verdict)
    ch = cal.changes
    if args.model is None:
        args.model = ch["cache"]
    if args.prefill is None:
        args.prefill = f"a={ch['prefill_base_s']!r},rate={ch['prefill_tokens_per_s']!r}"
    if args.bytes_per_token is None and "bytes_per_token" in ch:
        args.bytes_per_token = ch["bytes_per_token"]
    if args.block_size is None and "block_size" in ch:
        args.block_size = ch["block_size"]
    if args.max_entry_bytes is None and "max_entry_bytes" in ch:
        args.max_entry_bytes = ch["max_entry_bytes"]
    if "snapshots" in ch:
        args.snapshots = ch["snapshots"]
    if args.today is None and isinstance(cal.capacity, int):
        args.today = cal.capacity
    args.restore_s_per_token = ch.get("restore_s_per_token")
    return cal.to_json()


def options_from_args(args: SimulateConfig) -> SimulateOptions:
    """Build the options.

    Raises:
        ConfigError: a malformed list or an out-of-range value.
    """
    from kvreplay.offline.report import parse_prefill
    from kvreplay.offline.simulate import SimulateOptions

    caps: list[Any] | None = None
    if args.capacities:
        caps = list(args.capacities)
        if isinstance(args.capacities, str):  # a caller that did not parse the flags
            caps = list(number_list(number(0, strict=True))(args.capacities))
        if args.capacity_unit in ("units", "tokens"):
            if any(c != int(c) for c in caps):
                raise ConfigError(
                    f"whole {args.capacity_unit} expected, got {','.join(f'{c:g}' for c in caps)}",
                    field="capacities",
                )
            caps = [int(c) for c in caps]
    if args.max_entry_bytes is not None:
        from kvreplay.sim.cache_entries import check_entry_cap

        check_entry_cap(args.max_entry_bytes, args.bytes_per_token, field="max-entry-bytes")
    if not 0 < args.share <= 1:
        raise ConfigError("must be in (0, 1]", field="share")
    for flag in ("every", "burst"):
        value = getattr(args, flag)
        if value is not None and not args.interleave:
            raise ConfigError(f"--{flag} needs --interleave (it spaces the foreign requests)", field=flag)
        if value is not None and value < 1:
            raise ConfigError("must be >= 1", field=flag)
    if args.today is not None and args.today < 1:
        raise ConfigError("must be >= 1", field="today")
    points = tuple(p.strip() for p in args.snapshot_at.split(",") if p.strip())
    if any(p not in ("system", "messages", "prompt") for p in points) or not points:
        raise ConfigError("points among system, messages, prompt", field="snapshot-at")
    host = None
    if args.host_rows:
        from kvreplay.sim.cache_host import HostTier

        kw: dict[str, Any] = {
            "rows": args.host_rows,
            "pages": args.host_pages,
            "page_tokens": args.page_tokens,
            "evict": args.host_evict,
        }
        if args.bytes_per_token:
            kw["bytes_per_token"] = args.bytes_per_token

        def host() -> HostTier:
            return HostTier(**kw)

    return SimulateOptions(
        source=args.source,
        model=args.model,
        capacities=caps,
        capacity_unit=args.capacity_unit,
        points=args.points,
        block_size=args.block_size,
        trace_block_tokens=args.trace_block_tokens,
        limit=args.limit,
        snapshot_points=points[: args.snapshots],
        recency=args.recency,
        max_entry_bytes=args.max_entry_bytes,
        refuse_over_bytes=args.refuse_over_bytes,
        bytes_per_token=args.bytes_per_token,
        host=host,
        phases=tuple(args.phase),
        outputs=not args.no_outputs,
        output_tokens=args.output_tokens,
        max_output_tokens=args.max_output_tokens,
        interleave_path=args.interleave,
        interleave_every=args.every or 1,
        interleave_burst=args.burst or 1,
        restore_s_per_token=getattr(args, "restore_s_per_token", None),
        today=args.today,
        prefill=parse_prefill(args.prefill) if args.prefill else None,
        share=args.share,
        metric=args.metric,
        sessions=getattr(args, "sessions", None),
        think_time=getattr(args, "think_time", None),
        service_time=getattr(args, "service_time", 0.0),
    )


def simulate_args(args: SimulateConfig | object) -> dict[str, Any]:
    """Run ``kvreplay simulate`` on parsed options: the curve, or with ``args.replicas`` the routing loss.

    Applies ``--sim-from-verdict`` first (flags given win), adds the calibration and the
    ``--today`` answer line to the curve, and writes the ``--plot`` PNG.

    Returns:
        A ``SimulateReport``, or a ``FleetReport`` when ``args.replicas`` is set.

    Raises:
        ConfigError: a bad option (``--router`` without ``--replicas``...), an unreadable source.
        WorkloadError: a malformed workload.
    """
    if not isinstance(args, SimulateConfig):  # an older caller's object of parsed flags by their dest
        from kvreplay.options.declare import from_dests

        args = from_dests(SimulateConfig, vars(args))
    calibration = _apply_verdict(args)
    if args.replicas is not None:
        from kvreplay.offline.routing import simulate_fleet as run_fleet

        return run_fleet(options_from_args(args), args.replicas, router=args.router, seed=args.router_seed)
    if getattr(args, "router", None) is not None:
        raise ConfigError("--router needs --replicas N", field="router")
    from kvreplay.offline.simulate import simulate as run_curve

    rep = run_curve(options_from_args(args))
    if calibration is not None:
        rep["calibration"] = calibration
    if args.today is not None or rep.get("interleave"):
        from kvreplay.offline.sizing import answer_line

        rep["answer"] = answer_line(rep, args.today)
    if args.plot:
        from kvreplay.report.plots import curve_png
        from kvreplay.safe_io import atomic_write_bytes

        rec = rep.get("recommended")
        atomic_write_bytes(Path(args.plot), curve_png(rep["curve"], None if rec is None else float(rec["capacity"])))
    return rep


def _values(source: PathLike, phases: Iterable[str], options: dict[str, Any], **named: Any) -> dict[str, Any]:
    if isinstance(phases, str):
        raise ConfigError("phases is a list of phase strings, e.g. ['prime:forward:c1']", field="phases")
    for key in ("source", "phase", "json"):
        if key in options:
            raise ConfigError(f"unknown option {key!r}", field=key)
    values = {"source": _fspath(source), "phase": list(phases),
              **{k: (_fspath(v) if k in ("interleave", "sim_from_verdict", "plot") else v)
                 for k, v in named.items() if v is not None}, **options}
    if isinstance(values.get("capacities"), (list, tuple)):
        values["capacities"] = list(values["capacities"])
    return values


def simulate(source: PathLike, *, capacities: Sequence[float] | None = None, model: str | None = None,
             phases: Iterable[str] = (), today: int | None = None, prefill: str | None = None,
             sim_from_verdict: PathLike | None = None, interleave: PathLike | None = None,
             plot: PathLike | None = None, **options: Any) -> SimulateReport:
    """Hit ratio against cache capacity for a workload, plan or block trace (``kvreplay simulate``).

    Offline: nothing is sent. Options have the command line's names and defaults
    (``--capacity-unit tokens`` is ``capacity_unit="tokens"``, ``--max-entry-bytes`` is
    ``max_entry_bytes=``); those not named below go in ``**options``.

    Args:
        source: A workload (folder of ``*.json`` or ``.jsonl``), a plan.json or a block trace (``hash_ids``).
        capacities: Capacities to report, in ``capacity_unit`` (entries/blocks by default);
            default: ``points`` geometric capacities.
        model: ``"entries"`` or ``"radix"`` (default: radix for traces, entries for workloads).
        phases: ``--phase`` strings for a workload, in serial order.
        today: The capacity run today: always reported, and the ``answer`` compares it.
        prefill: The prefill cost model, ``"a=S,rate=TOK_PER_S"`` or a probe verdict.json.
        sim_from_verdict: Calibrate from a probe verdict.json (model, prefill fit, block size...).
        interleave: A second workload or trace mixed in (``every=``, ``burst=`` space it).
        plot: Also write the curve as a PNG to this path.
        **options: Any other option of ``kvreplay simulate`` by its Python name.

    Returns:
        The report as ``kvreplay simulate --json`` prints it (``SimulateReport``).

    Raises:
        ConfigError: an unknown or bad option, an unreadable source or verdict.
        WorkloadError: a malformed workload.

    Example::

        rep = kvreplay.simulate(kvreplay.DEMO_WORKLOAD, capacities=[1, 2, 4])
        print([(p["capacity"], p["hit_ratio_tokens"]) for p in rep["curve"]], rep["recommended"]["capacity"])
    """
    if "replicas" in options:
        raise ConfigError("replicas: use kvreplay.simulate_fleet", field="replicas")
    values = _values(source, phases, options, capacities=capacities, model=model, today=today, prefill=prefill,
                     sim_from_verdict=sim_from_verdict, interleave=interleave, plot=plot)
    rep: SimulateReport = simulate_args(config_for(SimulateConfig, values))  # type: ignore[assignment]
    return rep


def simulate_fleet(source: PathLike, replicas: int, *, capacities: Sequence[float] | None = None,
                   model: str | None = None, phases: Iterable[str] = (), router: str | None = None,
                   router_seed: int = 0, **options: Any) -> FleetReport:
    """The routing loss over ``replicas`` caches (``kvreplay simulate --replicas N``).

    Each replica has the cache model of ``simulate``; ``capacities`` gives one capacity per
    replica. The policies compared are the merged-cache bound, greedy prefix affinity,
    round-robin and random (seeded by ``router_seed``); ``router`` names the one taken as observed.

    Args:
        source: A workload, plan.json or block trace, as for ``simulate``.
        replicas: Number of replicas (>= 1).
        capacities: The capacity of each replica, in the model's unit.
        model: ``"entries"`` or ``"radix"``.
        phases: ``--phase`` strings for a workload.
        router: A policy of ``kvreplay.sim.routing.ROUTER_POLICIES`` taken as the observed routing.
        router_seed: Seed of the random policy.
        **options: Any other option of ``kvreplay simulate`` by its Python name.

    Returns:
        The report as ``kvreplay simulate --replicas N --json`` prints it (``FleetReport``).

    Raises:
        ConfigError, WorkloadError: as ``simulate``.

    Example::

        rep = kvreplay.simulate_fleet(kvreplay.DEMO_WORKLOAD, 2, capacities=[4])
        print(rep["policies"]["round_robin"]["kept_pct"], rep["sentence"])
    """
    values = _values(source, phases, options, capacities=capacities, model=model, router=router)
    values["replicas"], values["router_seed"] = replicas, router_seed
    rep: FleetReport = simulate_args(config_for(SimulateConfig, values))  # type: ignore[assignment]
    return rep
