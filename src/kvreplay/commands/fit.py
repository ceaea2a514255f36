"""``kvreplay fit``: will this KV pool and arena fit, or be silently clamped?

A thin layer over ``kvreplay.api.fitting`` (``kvreplay.fit``), which declares the
options and makes the report; this module prints the verdict and the tables.
"""

from __future__ import annotations

import argparse
import json

from kvreplay.api.fitting import (
    ARENA_BASE_GIB,
    ARENA_PER_16K_GIB,
    HOST_RAM_GIB_RANGE,
    MAX_TOK_NOTE,
    VISION_GIB,
    fit_args,
    inputs_from_args,
    report,
)
from kvreplay.argtypes import add_declared
from kvreplay.options.declare import from_dests
from kvreplay.options.fit import FIT_GROUPS, FitConfig
from kvreplay.safe_io import echo

__all__ = [
    "ARENA_BASE_GIB",
    "ARENA_PER_16K_GIB",
    "HOST_RAM_GIB_RANGE",
    "MAX_TOK_NOTE",
    "VISION_GIB",
    "add_arguments",
    "inputs_from_args",
    "report",
    "run",
    "verdict_words",
]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``fit`` flags (every number checked when parsed: ``kvreplay.argtypes``): ``FitConfig``'s."""
    for group, kind in FIT_GROUPS:
        if kind == "exclusive":  # both given: exit 2, naming both
            add_declared(parser.add_mutually_exclusive_group(), FitConfig, (group,))
        else:
            add_declared(parser.add_argument_group(kind) if kind else parser, FitConfig, (group,))


NAME = "fit"
HELP = "KV pool sizing: budget = RAM - weights - reserve vs need = KV + arena + vision (+ margin)."


def verdict_words(rep: dict) -> str:
    """The verdict as shown: ``fits (knife edge: headroom +0.016 GiB, noise 0.25)``."""
    if rep["verdict"] == "floor" and not rep["positions"]:
        # a floor of 0 positions (no context given) holds nothing: say it as plainly as no_boot
        words = "will not boot with the margin kept: not one position fits the budget"
    else:
        words = {
            "fits": "fits",
            "clamped": f"clamped to {rep['positions']} positions",
            "floor": f"floor: the pool stays at the context, {rep['positions']} positions"
            " (nothing left to lower; the margin is eaten)",
            "no_boot": "will not boot",
        }[rep["verdict"]]
    if rep.get("knife_edge"):
        words += (
            f" (knife edge: headroom {rep['headroom_gib']:+.3f} GiB is within"
            f" {rep['noise_gib']:g} GiB of noise)"
        )
    return words


def _log_text(log: dict) -> list[str]:
    lines = [f"boot log {log['path']}: {log['outcome']}"]
    for key, label in (
        ("pool_positions", "pool (positions)"),
        ("requested_positions", "asked (positions)"),
        ("pool_gib", "pool GiB"),
        ("weights_gib", "weights GiB"),
        ("device_gib", "for the device GiB"),
        ("left_gib", "host memory left GiB"),
        ("footprint_gib", "held footprint GiB"),
    ):
        if log[key] is not None:
            lines.append(f"  {label:<22} {log[key]}")
    if log["carveout_gib"] is not None:
        lines.append(f"  firmware carve-out     {log['carveout_gib']} GiB (reported; not free memory)")
    if log["oom"]:
        o = log["oom"]
        lines.append(
            f"  OOM: {o['requested_gib']} GiB refused after {o['allocated_gib']} GiB in"
            f" {o['allocations']} allocations"
        )
    lines += [f"  hint (not a clamp): {h}" for h in log["hints"]]
    lines += [f"  unrecognised line {u['line']}: {u['text']}" for u in log["unrecognised"]]
    return lines


def _text(rep: dict) -> str:
    verdict = verdict_words(rep)
    first = [w for w in rep["warnings"] if w.startswith(MAX_TOK_NOTE)]
    lines = [f"note: {w}" for w in first] + [
        f"budget   {rep['budget_gib']:10.3f} GiB"
        f"  (host {rep['host_ram_gib']:.3f} - weights - reserve)",
        f"need     {rep['need_gib']:10.3f} GiB"
        f"  (KV {rep['kv_gib']:.3f} + fixed {rep['fixed_gib']:.3f},"
        f" {rep['need_source']})",
        f"margin   {rep['margin_gib']:10.3f} GiB",
        f"headroom {rep['headroom_gib']:10.3f} GiB",
        f"verdict  {verdict} (asked {rep['requested_positions']} positions)",
        (f"largest reserve at which the asked pool fits: {rep['max_reserve_gib']:.3f} GiB"
         + (f" (knife edge: {rep['headroom_gib']:+.3f} GiB from the reserve given, within the"
            f" {rep['noise_gib']:g} GiB noise)" if rep.get("knife_edge") else "")
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
        + (f"  knife edge (within {rep['noise_gib']:g} GiB of the ceiling)" if r.get("knife_edge") else "")
        for r in rep["reserves"]
    ]
    lines += ["", f"{'max_tok':>8} {'arena GiB':>10} {'handed back GiB':>16}"]
    lines += [
        f"{r['max_tok']:>8} {r['arena_gib']:>10.3f} {r['handed_back_gib']:>16.3f}"
        for r in rep["arenas"]
    ]
    lines += [f"warning: {w}" for w in rep["warnings"] if w not in first]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Print the verdict and tables; exit 0 whatever the verdict.

    With ``--from-log`` only (no host RAM or KV bytes), print what the log(s)
    say; with two logs, the footprint comparison too.
    """
    rep = fit_args(from_dests(FitConfig, vars(args)))
    if "verdict" not in rep:
        _print_logs_only(rep, as_json=args.json)
        return 0
    if args.json:
        print(json.dumps(rep, indent=2))
    else:
        text = _text(rep)
        if "logs" in rep:
            text += "\n\n" + _logs_text(rep)
        echo(text)
    return 0


def _logs_text(log_part: dict) -> str:
    lines: list[str] = []
    for lg in log_part["logs"]:
        lines += _log_text(lg)
    if "footprint" in log_part:
        lines.append(f"footprint: {log_part['footprint']['sentence']}")
    return "\n".join(lines)


def _print_logs_only(log_part: dict, *, as_json: bool) -> None:
    if as_json:
        print(json.dumps(log_part, indent=2))  # ASCII: control characters come out as \u escapes
    else:
        echo(_logs_text(log_part))
