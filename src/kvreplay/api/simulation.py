"""Offline cache simulation: the behaviour of ``kvreplay simulate`` and ``kvreplay.simulate``.

``kvreplay simulate`` (``commands/simulate.py``) prints the table or the JSON; this module
declares the options (``add_arguments``), applies a probe verdict's calibration, builds
the ``SimulateOptions`` of ``kvreplay.offline.simulate`` and runs it (``simulate_args``),
writing the ``--plot`` PNG. ``simulate`` and ``simulate_fleet`` are the typed entry points.
Nothing here imports numpy or the simulator until it is called. Examples::

    kvreplay simulate fixtures/workloads/mtbench-52 --capacities 1,2,4 --json
    kvreplay simulate fixtures/workloads/mtbench-52 --replicas 4 --capacities 8 --router round-robin
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from kvreplay.api._options import PathLike, fspath, namespace_for
from kvreplay.argtypes import integer, number, number_list
from kvreplay.errors import ConfigError

if TYPE_CHECKING:
    from kvreplay.offline.simulate import SimulateOptions

__all__ = [
    "CurvePoint",
    "FleetReport",
    "SimulateReport",
    "add_arguments",
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


def _prefill(text: str) -> str:
    """``--prefill a=...,rate=...`` checked when parsed (``parse_prefill``); the text is kept.

    A verdict file is read (and checked) with the other inputs, before any work.
    """
    if "=" not in text:
        return text
    from kvreplay.offline.report import parse_prefill

    try:
        parse_prefill(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(f"{str(exc).split(': ', 1)[-1]}, got {text!r}") from None
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``simulate`` flags (every number checked when parsed: ``kvreplay.argtypes``)."""
    from kvreplay.sim.routing import ROUTER_POLICIES

    parser.add_argument(
        "source",
        metavar="WORKLOAD_OR_TRACE",
        help="workload (folder of *.json or .jsonl), plan.json, or block trace (hash_ids)",
    )
    parser.add_argument(
        "--model",
        choices=("radix", "entries"),
        help="cache model (default: radix for traces, entries for workloads)",
    )
    parser.add_argument(
        "--capacities",
        type=number_list(number(0, strict=True)),
        metavar="N,N,...",
        help="capacities to report (see --capacity-unit)"
    )
    parser.add_argument(
        "--capacity-unit",
        choices=("units", "tokens", "gib"),
        default="units",
        help="unit of --capacities: entries/blocks, or for radix tokens or GiB (whole blocks)",
    )
    parser.add_argument(
        "--points", type=integer(1), default=40, help="geometric capacities when none are given"
    )
    parser.add_argument(
        "--phase",
        action="append",
        default=[],
        metavar="SPEC",
        help="plan phases for a workload, e.g. prime:forward:c1 (repeatable; serial order)",
    )
    parser.add_argument("--interleave", metavar="PATH", help="second workload or trace mixed in")
    parser.add_argument(
        "--every",
        type=integer(1),
        default=None,
        metavar="K",
        help="with --interleave: foreign requests after every K (default 1)",
    )
    parser.add_argument(
        "--burst",
        type=integer(1),
        default=None,
        metavar="B",
        help="with --interleave: B foreign requests per gap (default 1)",
    )
    parser.add_argument(
        "--today",
        type=integer(1),
        default=None,
        metavar="N",
        help="the capacity run today: always reported, and the answer line compares it",
    )
    parser.add_argument(
        "--sim-from-verdict",
        metavar="VERDICT_JSON",
        help="calibrate from a probe verdict: model, prefill fit, restore cost, block size,"
        " bytes per token, entry cap; its capacity becomes --today (flags given win)",
    )
    parser.add_argument(
        "--prefill",
        type=_prefill,
        metavar="a=S,rate=TOK_PER_S|verdict.json",
        help="prefill cost model (prefill_s = a + tokens / rate)",
    )
    parser.add_argument(
        "--share",
        type=number(0, strict=True, maximum=1),
        default=0.95,
        help="recommend the smallest capacity reaching this share of the best hit ratio",
    )
    parser.add_argument(
        "--metric",
        choices=("tokens", "requests"),
        default="tokens",
        help="hit ratio the recommendation uses",
    )
    parser.add_argument(
        "--bytes-per-token", type=integer(1, unit="bytes"), help="KV bytes per token (default: the simulator's)"
    )
    ent = parser.add_argument_group("entries model (as serve-sim --sim-cache entries)")
    ent.add_argument(
        "--snapshots", type=int, choices=(1, 2), default=2, help="snapshots per request"
    )
    ent.add_argument(
        "--snapshot-at",
        default="system,messages",
        help="snapshot points in order (system, messages, prompt)",
    )
    ent.add_argument(
        "--recency",
        choices=("use", "offer"),
        default="use",
        help="what refreshes a snapshot: use (simulator default; per-capacity runs) "
        "or offer (one pass)",
    )
    ent.add_argument(
        "--max-entry-bytes",
        type=integer(1, unit="bytes"),
        help="per-snapshot cap (bytes): larger snapshots keep their first tokens that fit",
    )
    ent.add_argument(
        "--refuse-over-bytes",
        action="store_true",
        help="refuse snapshots over --max-entry-bytes instead of truncating them",
    )
    rad = parser.add_argument_group("radix model")
    rad.add_argument("--block-size", type=integer(1), help="tokens per block for workloads (default 16)")
    rad.add_argument(
        "--trace-block-tokens",
        type=integer(1),
        default=512,
        help="tokens per hash_ids block of a trace (Mooncake: 512)",
    )
    rad.add_argument("--limit", type=integer(1), help="first N trace requests only")
    rad.add_argument("--host-rows", type=integer(0), default=0, help="host tier rows (0: no host tier)")
    rad.add_argument("--host-pages", type=integer(1), default=4096, help="host tier pages")
    rad.add_argument("--page-tokens", type=integer(1), default=256, help="tokens per host page")
    rad.add_argument("--host-evict", choices=("leaf-lru", "ancestor-compact"), default="leaf-lru",
                     help="host tier eviction: leaf-lru (default) or ancestor-compact")
    out = parser.add_argument_group(
        "outputs (radix inserts the output's blocks, as serve-sim does)"
    )
    out.add_argument("--no-outputs", action="store_true", help="insert no output tokens")
    out.add_argument("--output-tokens", type=integer(0), help="serve-sim's output_tokens")
    out.add_argument("--max-output-tokens", type=integer(1), help="serve-sim's max_output_tokens")
    fl = parser.add_argument_group(
        "fleet: the routing loss over N replicas (docs/fleets.md); --capacities gives one capacity per replica"
    )
    fl.add_argument("--replicas", type=integer(1), default=None, metavar="N",
                    help="simulate N replicas, each with the cache model above, and print the routing-loss"
                    " table (merged-cache bound, greedy prefix affinity, round-robin, random)")
    fl.add_argument("--router", choices=ROUTER_POLICIES, default=None,
                    help="with --replicas: the policy taken as the observed routing (its kept %%)")
    fl.add_argument("--router-seed", type=integer(0), default=0, metavar="S", help="seed of the random policy")
    ses = parser.add_argument_group("sessions (a workload with a sessions side file: reuse by turn is reported)")
    ses.add_argument("--sessions", type=integer(1), metavar="N",
                     help="simulate N conversations in flight (closed loop) instead of the workload's order: the "
                          "recommended capacity keeps N conversations warm")
    ses.add_argument("--think-time", type=number(0.0, unit="s"), metavar="S",
                     help="with --sessions: think time before every later turn (default: the side file's)")
    ses.add_argument("--service-time", type=number(0.0, unit="s"), default=0.0, metavar="S",
                     help="with --sessions: seconds from a turn's send to its last byte (default 0)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--plot", metavar="FILE.png", help="also write the curve as a PNG plot")


def _apply_verdict(args: argparse.Namespace) -> dict[str, Any] | None:
    """Fill unset flags from ``--sim-from-verdict`` (kvreplay.sim.calibrate); returns its JSON."""
    if not getattr(args, "sim_from_verdict", None):
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


def options_from_args(args: argparse.Namespace) -> SimulateOptions:
    """Build the options.

    Raises:
        ConfigError: a malformed list or an out-of-range value.
    """
    from kvreplay.offline.report import parse_prefill
    from kvreplay.offline.simulate import SimulateOptions

    caps = None
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

        kw = {
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


def simulate_args(args: argparse.Namespace) -> dict[str, Any]:
    """Run ``kvreplay simulate`` on parsed options: the curve, or with ``args.replicas`` the routing loss.

    Applies ``--sim-from-verdict`` first (flags given win), adds the calibration and the
    ``--today`` answer line to the curve, and writes the ``--plot`` PNG.

    Returns:
        A ``SimulateReport``, or a ``FleetReport`` when ``args.replicas`` is set.

    Raises:
        ConfigError: a bad option (``--router`` without ``--replicas``...), an unreadable source.
        WorkloadError: a malformed workload.
    """
    calibration = _apply_verdict(args)
    if getattr(args, "replicas", None) is not None:
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
    if getattr(args, "plot", None):
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
    values = {"source": fspath(source), "phase": list(phases),
              **{k: (fspath(v) if k in ("interleave", "sim_from_verdict", "plot") else v)
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
    rep: SimulateReport = simulate_args(namespace_for(add_arguments, values, None))  # type: ignore[assignment]
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
    rep: FleetReport = simulate_args(namespace_for(add_arguments, values, None))  # type: ignore[assignment]
    return rep
