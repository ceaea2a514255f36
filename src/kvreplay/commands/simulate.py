"""``kvreplay simulate``: hit ratio against cache capacity (a miss-ratio curve), offline.

A thin layer over ``kvreplay.api.simulation`` (``kvreplay.simulate``,
``kvreplay.simulate_fleet``), which runs the simulation; the flags derive from
``kvreplay.options.simulate.SimulateConfig``; this module prints the table or the JSON.
"""

from __future__ import annotations

import argparse
import json

from kvreplay.api.simulation import options_from_args, simulate_args
from kvreplay.safe_io import echo

__all__ = ["add_arguments", "fleet_table", "options_from_args", "run", "table"]

NAME = "simulate"
HELP = (
    "Offline cache simulation: hit ratio (requests, tokens) against capacity for a workload, "
    "plan or block trace, by LRU stack distances; prefill seconds saved; recommended size."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register the ``simulate`` flags: ``SimulateConfig``'s fields, one help section at a time.

    Every number is checked when parsed (``kvreplay.argtypes``); ``--prefill`` by the offline
    model's grammar (``api.simulation.check_prefill``), which only this layer may name.
    """
    from kvreplay.api.simulation import check_prefill
    from kvreplay.argtypes import add_declared
    from kvreplay.options.simulate import SIMULATE_GROUPS, SimulateConfig

    for group, title in SIMULATE_GROUPS:
        add_declared(parser if title is None else parser.add_argument_group(title), SimulateConfig, (group,))
    for action in parser._actions:  # argparse has no public view of its actions
        if action.dest == "prefill":
            action.type = check_prefill


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
    if any(r["prefill_s_saved"] is None for r in rows):
        lines.append("prefill s saved: - = no prefill cost model to convert hit tokens into seconds; give "
                     "--prefill a=S,rate=TOKENS_PER_S or --sim-from-verdict VERDICT.json")
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
    rep = simulate_args(args)
    if getattr(args, "replicas", None) is not None:
        echo(json.dumps(rep, indent=2) if args.json else fleet_table(rep))
        return 0
    if args.json:
        print(json.dumps(rep, indent=2))  # ASCII: control characters come out as \u escapes
    else:
        echo(table(rep))
    return 0
