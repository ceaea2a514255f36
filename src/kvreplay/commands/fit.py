"""``kvreplay fit``: will this KV pool and arena fit, or be silently clamped?"""

from __future__ import annotations

import argparse
import json
from fractions import Fraction

from kvreplay.errors import ConfigError
from kvreplay.offline.fit import (
    KIB_PER_GIB,
    FitInputs,
    arena_table,
    fit_pool,
    kv_bytes_per_position,
    parse_printed_need,
    pool_table,
    reserve_table,
    to_fraction,
)

NAME = "fit"
HELP = "KV pool sizing: budget = RAM - weights - reserve vs need = KV + arena + vision (+ margin)."


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``fit`` flags."""
    ram = parser.add_mutually_exclusive_group(required=True)
    ram.add_argument("--host-ram-gib", metavar="GIB", help="host RAM (GiB)")
    ram.add_argument(
        "--memtotal-kb", metavar="KB", help="MemTotal from /proc/meminfo (kB = KiB), exact"
    )
    parser.add_argument(
        "--weights-gib", required=True, metavar="GIB", help="resident weights (GiB)"
    )
    parser.add_argument("--reserve-gib", default="0", metavar="GIB", help="RAM kept back (GiB)")
    parser.add_argument(
        "--positions", type=int, required=True, help="requested KV pool (positions)"
    )
    kv = parser.add_argument_group("KV bytes per position (give one way)")
    kv.add_argument(
        "--kv-bytes-per-position",
        metavar="BYTES",
        help="bytes per position, given or measured by a probe (bytes per token)",
    )
    kv.add_argument(
        "--probe-verdict",
        metavar="VERDICT_JSON",
        help="take bytes per position from a probe verdict's measured bytes_per_token",
    )
    kv.add_argument("--layers", type=int, help="layers with a KV cache")
    kv.add_argument("--kv-heads", type=int, help="KV heads per layer")
    kv.add_argument("--head-dim", type=int, help="elements per head")
    kv.add_argument(
        "--kv-dtype", default="f16", help="cache dtype (f32, f16, bf16, fp8, q8_0, q4_0)"
    )
    parser.add_argument("--max-tok", type=int, default=0, help="tokens the arena is sized for")
    parser.add_argument("--arena-base-gib", default="0", metavar="GIB", help="arena base (GiB)")
    parser.add_argument(
        "--arena-per-16k-gib",
        default="0",
        metavar="GIB",
        help="arena growth per 16384 tokens of --max-tok (GiB)",
    )
    parser.add_argument("--vision-gib", default="0", metavar="GIB", help="vision tower (GiB)")
    parser.add_argument("--margin-gib", default="0", metavar="GIB", help="required margin (GiB)")
    parser.add_argument(
        "--ctx", type=int, default=0, help="context length: the pool's floor (tokens)"
    )
    parser.add_argument(
        "--position-step",
        type=int,
        default=1,
        help="round clamped pools down to a multiple of this (positions)",
    )
    parser.add_argument(
        "--printed-need",
        metavar="GIB@POSITIONS",
        help="the server's own printed need for a pool size; overrides the model",
    )
    parser.add_argument(
        "--reserves",
        metavar="GIB,GIB,...",
        help="reserves for the table (default: 0 to reserve+4 by 1 GiB)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def _probe_bytes(path: str) -> Fraction:
    """``bytes_per_token`` measured by ``kvreplay probe`` (its verdict.json).

    Raises:
        ConfigError: unreadable file, or a verdict without a positive measurement.
    """
    try:
        with open(path, "rb") as f:
            value = json.load(f).get("bytes_per_token")
    except (OSError, ValueError, AttributeError) as exc:
        raise ConfigError(f"cannot read probe verdict: {exc}", path=path) from exc
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        raise ConfigError(
            "the probe measured no bytes per token (the server reports no entry or pool bytes)",
            path=path,
            field="bytes_per_token",
        )
    return to_fraction(repr(value), field="bytes_per_token")


def inputs_from_args(args: argparse.Namespace) -> FitInputs:
    """Build the sizing inputs from parsed flags.

    Raises:
        ConfigError: a value that is not a number, or no way to get KV bytes.
    """
    if args.memtotal_kb is not None:
        host = to_fraction(args.memtotal_kb, field="memtotal-kb") / KIB_PER_GIB
        from_memtotal = True
    else:
        host = to_fraction(args.host_ram_gib, field="host-ram-gib")
        from_memtotal = False
    if args.kv_bytes_per_position is not None:
        kvb = to_fraction(args.kv_bytes_per_position, field="kv-bytes-per-position")
    elif args.probe_verdict is not None:
        kvb = _probe_bytes(args.probe_verdict)
    elif None not in (args.layers, args.kv_heads, args.head_dim):
        kvb = kv_bytes_per_position(
            layers=args.layers, kv_heads=args.kv_heads, head_dim=args.head_dim, dtype=args.kv_dtype
        )
    else:
        raise ConfigError(
            "give --kv-bytes-per-position, --probe-verdict, or --layers, --kv-heads and --head-dim",
            field="kv-bytes-per-position",
        )
    return FitInputs(
        host_ram_gib=host,
        host_ram_from_memtotal=from_memtotal,
        weights_gib=to_fraction(args.weights_gib, field="weights-gib"),
        reserve_gib=to_fraction(args.reserve_gib, field="reserve-gib"),
        positions=args.positions,
        kv_bytes_per_position=kvb,
        max_tok=args.max_tok,
        arena_base_gib=to_fraction(args.arena_base_gib, field="arena-base-gib"),
        arena_per_16k_gib=to_fraction(args.arena_per_16k_gib, field="arena-per-16k-gib"),
        vision_gib=to_fraction(args.vision_gib, field="vision-gib"),
        margin_gib=to_fraction(args.margin_gib, field="margin-gib"),
        ctx=args.ctx,
        printed_need=parse_printed_need(args.printed_need) if args.printed_need else None,
        position_step=args.position_step,
    )


def report(inp: FitInputs, reserves: list[Fraction]) -> dict:
    """The full JSON report: verdict fields, then the tables."""
    res = fit_pool(inp)
    return {
        "budget_gib": float(res.budget_gib),
        "need_gib": float(res.need_gib),
        "margin_gib": float(res.margin_gib),
        "verdict": res.verdict,
        "positions": res.positions,
        "requested_positions": res.requested_positions,
        "host_ram_gib": float(inp.host_ram_gib),
        "kv_bytes_per_position": float(inp.kv_bytes_per_position),
        "kv_gib": float(res.kv_gib),
        "fixed_gib": float(res.fixed_gib),
        "headroom_gib": float(res.headroom_gib),
        "need_source": res.need_source,
        "max_reserve_gib": float(res.max_reserve_gib),
        "warnings": list(res.warnings),
        "pools": pool_table(inp),
        "reserves": reserve_table(inp, reserves),
        "arenas": arena_table(inp),
    }


def _text(rep: dict) -> str:
    verdict = {
        "fits": "fits",
        "clamped": f"clamped to {rep['positions']} positions",
        "no_boot": "will not boot",
    }[rep["verdict"]]
    lines = [
        f"budget   {rep['budget_gib']:10.3f} GiB"
        f"  (host {rep['host_ram_gib']:.3f} - weights - reserve)",
        f"need     {rep['need_gib']:10.3f} GiB"
        f"  (KV {rep['kv_gib']:.3f} + fixed {rep['fixed_gib']:.3f},"
        f" {rep['need_source']})",
        f"margin   {rep['margin_gib']:10.3f} GiB",
        f"headroom {rep['headroom_gib']:10.3f} GiB",
        f"verdict  {verdict} (asked {rep['requested_positions']} positions)",
        (f"largest reserve at which the asked pool fits: {rep['max_reserve_gib']:.3f} GiB"
         if rep["max_reserve_gib"] >= 0 else
         f"no reserve lets the asked pool fit (it is {-rep['max_reserve_gib']:.3f} GiB short at reserve 0)"),
        "",
        f"{'pool (positions)':>16} {'need GiB':>10} {'handed back GiB':>16} fits",
    ]
    lines += [
        f"{r['positions']:>16} {r['need_gib']:>10.3f} {r['handed_back_gib']:>16.3f}"
        f" {'yes' if r['fits'] else 'no'}"
        for r in rep["pools"]
    ]
    lines += ["", f"{'reserve GiB':>12} {'budget GiB':>11} {'verdict':>8} {'positions':>10}"]
    lines += [
        f"{r['reserve_gib']:>12.3f} {r['budget_gib']:>11.3f} {r['verdict']:>8} {r['positions']:>10}"
        for r in rep["reserves"]
    ]
    lines += ["", f"{'max_tok':>8} {'arena GiB':>10} {'handed back GiB':>16}"]
    lines += [
        f"{r['max_tok']:>8} {r['arena_gib']:>10.3f} {r['handed_back_gib']:>16.3f}"
        for r in rep["arenas"]
    ]
    lines += [f"warning: {w}" for w in rep["warnings"]]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Print the verdict and tables; exit 0 whatever the verdict."""
    inp = inputs_from_args(args)
    if args.reserves:
        reserves = [
            to_fraction(x.strip(), field="reserves") for x in args.reserves.split(",") if x.strip()
        ]
    else:
        top = int(inp.reserve_gib) + 4
        reserves = [Fraction(r) for r in range(0, top + 1)]
    rep = report(inp, reserves)
    print(json.dumps(rep, indent=2) if args.json else _text(rep))
    return 0
