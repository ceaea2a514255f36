"""``kvreplay simulate``: hit ratio against cache capacity (a miss-ratio curve), offline."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kvreplay.argtypes import integer, number, number_list
from kvreplay.errors import ConfigError
from kvreplay.offline.report import parse_prefill
from kvreplay.offline.simulate import SimulateOptions, simulate
from kvreplay.safe_io import atomic_write_bytes, echo
from kvreplay.sim.routing import ROUTER_POLICIES

NAME = "simulate"
HELP = (
    "Offline cache simulation: hit ratio (requests, tokens) against capacity for a workload, "
    "plan or block trace, by LRU stack distances; prefill seconds saved; recommended size."
)


def _prefill(text: str) -> str:
    """``--prefill a=...,rate=...`` checked when parsed (``parse_prefill``); the text is kept.

    A verdict file is read (and checked) with the other inputs, before any work.
    """
    if "=" not in text:
        return text
    try:
        parse_prefill(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(f"{str(exc).split(': ', 1)[-1]}, got {text!r}") from None
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``simulate`` flags (every number checked when parsed: ``kvreplay.argtypes``)."""
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
    rad.add_argument("--host-evict", choices=("leaf-lru", "ancestor-compact"), default="leaf-lru")
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


def _apply_verdict(args: argparse.Namespace) -> dict | None:
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
        from kvreplay.sim.cache_entries import DEFAULT_BYTES_PER_TOKEN

        bpt = args.bytes_per_token or DEFAULT_BYTES_PER_TOKEN
        if args.max_entry_bytes < bpt:
            # a cap under one token holds nothing: MB or KiB typed as bytes (issue 29)
            raise ConfigError(
                f"an entry cap of {args.max_entry_bytes} bytes holds no token at {bpt} bytes per token:"
                f" in MB? ({args.max_entry_bytes} MB = {args.max_entry_bytes * 10**6} bytes)",
                field="max-entry-bytes",
            )
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


def _by_turn_lines(ses: dict | None, unit: str) -> list[str]:
    """The sessions section: the order simulated and reuse by turn at each capacity."""
    if not ses:
        return []
    think = ses["think_time_s"]
    lines = [f"sessions: {ses['sessions']}, simulated in {ses['order']} order"
             + ("" if ses["in_flight"] is None else
                f" (think time {think if isinstance(think, str) else f'{think:g} s'}, service time "
                f"{ses['service_time_s']:g} s)")]
    for block in ses["by_turn"]:
        lines.append(f"  reuse by turn at {block['capacity']} {'entries' if unit == 'entry' else unit + 's'}:")
        lines.append(f"  {'turn':>6} {'requests':>9} {'prompt tok':>11} {'cached tok':>11} {'hit% tok':>9}")
        lines += [f"  {r['turn']:>6} {r['requests']:>9} {r['prompt_tokens']:>11}"
                  f" {r['cached_tokens']:>11} {100 * r['hit_ratio_tokens']:>9.2f}" for r in block["rows"]]
    return lines


def table(rep: dict) -> str:
    """The report as a text table, the recommended capacity marked ``*``."""
    unit = rep["unit"]
    head = (
        f"{rep['kind']} {rep['source']}: {rep['requests']} requests,"
        f" {rep['prompt_tokens']} prompt tokens; "
        f"model {rep['model']} ({rep['method']}), capacity in {'entries' if unit == 'entry' else unit + 's'}"
        + (f" of {rep['unit_tokens']} tokens" if rep.get("unit_tokens") else "")
    )
    lines = [head]
    if rep.get("interleave"):
        lines.append(
            f"interleaved: {rep['interleave']['source']}, {rep['interleave'].get('burst', 1)}"
            f" after every {rep['interleave']['every']}"
            " (foreign requests take space, their hits are not counted)"
        )
    rec = rep.get("recommended") or {}
    cols = f"{'capacity':>10} {'hit% req':>9} {'hit% tok':>9} {'prefill s saved':>16}"
    if rep.get("unit_tokens"):
        cols += f" {'tokens':>12} {'GiB':>9}"
    elif rep.get("entry_bytes") is not None:
        cols += f" {'GiB':>9}"
    has_loop = any(r.get("loop_s") is not None for r in rep["curve"])
    if has_loop:
        cols += f" {'loop s':>9} {'loop s saved':>12}"
    lines.append(cols)
    rows = list(rep["curve"])
    if rec and all(r["capacity"] != rec["capacity"] for r in rows):
        rows = sorted([*rows, rec], key=lambda r: r["capacity"])
    for r in rows:
        saved = "-" if r["prefill_s_saved"] is None else f"{r['prefill_s_saved']:.1f}"
        line = (
            f"{r['capacity']:>10} {100 * r['hit_ratio_requests']:>9.2f}"
            f" {100 * r['hit_ratio_tokens']:>9.2f}"
            f" {saved:>16}"
        )
        if "capacity_tokens" in r:
            line += f" {r['capacity_tokens']:>12} {r['memory_gib']:>9.3f}"
        elif r.get("memory_gib") is not None:
            line += f" {r['memory_gib']:>9.3f}"
        if has_loop:
            line += f" {r['loop_s']:>9.1f} {r['loop_s_saved']:>12.1f}"
        if rec and r["capacity"] == rec["capacity"]:
            line += "  *"
        lines.append(line)
    if rec:
        if rep.get("entry_bytes") is not None and "memory_gib" in rec:
            mem = f", {rec['memory_gib']:.3f} GiB at {rep['entry_bytes']} B per entry"
        elif "memory_gib" in rec:
            mem = f", {rec['memory_gib']:.3f} GiB at {rep['bytes_per_token']} B/token"
        else:
            mem = ""
        lines.append(
            f"* smallest capacity reaching {rec['share']:.0%} of the best"
            f" {rec['metric']} hit ratio "
            f"({100 * rec['best_hit_ratio']:.2f}%): {rec['capacity']}"
            f" {'entries' if unit == 'entry' else unit + 's'}{mem}"
        )
        chk = rec.get("check")
        if chk:
            below = chk["below"]
            lines.append(
                f"  checked with {chk['method']}: at {chk['at']['capacity']}"
                f" {chk['at']['hit_' + rec['metric']]} hit {rec['metric']}"
                f" (target {chk['target_hits']:.0f}), at {below['capacity']}"
                f" {below['hit_' + rec['metric']]}"
                + ("" if chk["holds"] else " -- the boundary does NOT hold")
            )
    lines += _by_turn_lines(rep.get("sessions"), unit)
    if rep.get("prefill_s_cold") is not None:
        from kvreplay.offline.sizing import prefill_text

        lines.append(
            f"prefill with no cache: {rep['prefill_s_cold']:.1f} s (model {prefill_text(rep['prefill'])})"
        )
    if rep.get("answer"):
        lines.append(f"answer: {rep['answer']}")
    for note in (rep.get("calibration") or {}).get("notes", []):
        lines.append(f"calibration: {note}")
    return "\n".join(lines)


def fleet_table(rep: dict) -> str:
    """The routing-loss table of ``simulate --replicas`` (one line per policy, then the sentence)."""
    cache = rep["cache"]
    lines = [
        f"{rep['kind']} {rep['source']}: {rep['requests']} requests, {rep['prompt_tokens']} prompt tokens;"
        f" {rep['replicas']} replicas, {cache['model']} cache of {cache['per_replica'][0]} {cache['unit']} each"
        f" (merged {cache['merged']})",
        f"{'policy':<22} {'cached tokens':>14} {'hit% tok':>9} {'kept%':>7}  per replica (cached tokens)",
    ]
    for name, fig in rep["policies"].items():
        kept = "-" if fig["kept_pct"] is None else f"{fig['kept_pct']:.1f}"
        label = f"observed ({rep['router']})" if name == "observed" and rep.get("router") else name
        lines.append(
            f"{label:<22} {fig['cached_tokens']:>14,} {100 * fig['hit_rate']:>9.2f} {kept:>7}"
            f"  {' '.join(f'{c:,}' for c in fig['per_replica_cached_tokens'])}"
        )
    lines += [f"  {name}: {fig['method']}" for name, fig in rep["policies"].items()]
    lines.append(rep["sentence"])
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Print the curve (table or ``--json``), or with ``--replicas`` the routing-loss table."""
    calibration = _apply_verdict(args)
    if getattr(args, "replicas", None) is not None:
        from kvreplay.offline.routing import simulate_fleet

        rep = simulate_fleet(options_from_args(args), args.replicas, router=args.router, seed=args.router_seed)
        echo(json.dumps(rep, indent=2) if args.json else fleet_table(rep))
        return 0
    if getattr(args, "router", None) is not None:
        raise ConfigError("--router needs --replicas N", field="router")
    rep = simulate(options_from_args(args))
    if calibration is not None:
        rep["calibration"] = calibration
    if args.today is not None or rep.get("interleave"):
        from kvreplay.offline.sizing import answer_line

        rep["answer"] = answer_line(rep, args.today)
    if args.plot:
        from kvreplay.report.plots import curve_png

        rec = rep.get("recommended")
        atomic_write_bytes(Path(args.plot), curve_png(rep["curve"], None if rec is None else float(rec["capacity"])))
    if args.json:
        print(json.dumps(rep, indent=2))  # ASCII: control characters come out as \u escapes
    else:
        echo(table(rep))
    return 0
