"""``kvreplay inspect WORKLOAD``: the prefix structure of a workload, before sending anything.

What it prints and how it is measured: ``kvreplay.api.inspection``'s docstring.

A thin layer over ``kvreplay.api.inspection`` (``kvreplay.inspect_workload``), which
declares the options and computes the structure; this module prints it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from typing import Any

from kvreplay.api.inspection import analyse, inspect_args
from kvreplay.argtypes import add_declared
from kvreplay.options.declare import from_dests
from kvreplay.options.inspect import InspectConfig
from kvreplay.safe_io import dumps_json, echo

__all__ = ["add_arguments", "analyse", "render", "run"]

NAME = "inspect"
HELP = "Show which bodies of a workload share a prefix (message-level prefix chains) and the reuse a cache could give."


def _ranges(idx: list[int]) -> str:
    out, i = [], 0
    while i < len(idx):
        j = i
        while j + 1 < len(idx) and idx[j + 1] == idx[j] + 1:
            j += 1
        out.append(str(idx[i]) if i == j else f"{idx[i]}-{idx[j]}")
        i = j + 1
    return ",".join(out)


def render(a: Mapping[str, Any], *, max_groups: int = 40) -> str:
    """The text report of ``analyse``'s result (one screen for the usual workload)."""
    kinds = ", ".join(f"{n} {k}" for k, n in sorted(a["kinds"].items()))
    r = a["expected_reuse"]
    lines = [
        f"workload   {a['workload']}  ({a['bodies']} bodies: {kinds}; chains: {a['implementation']})",
        f"bytes      {a['body_bytes']:,} in bodies, {a['prefix_bytes']:,} hashed (messages / prompt blocks)",
        f"unique     {len(a['unique_bodies'])} bodies share no first link: {_ranges(a['unique_bodies']) or '-'}",
        f"identical  {sum(len(g) for g in a['identical_bodies'])} bodies in {len(a['identical_bodies'])} groups"
        + (": " + "; ".join(_ranges(g) for g in a["identical_bodies"]) if a["identical_bodies"] else ""),
        f"reuse      {r['bytes']:,} of {a['prefix_bytes']:,} bytes ({100 * r['fraction']:.1f}%) already seen "
        "earlier in workload order (unbounded cache, message/block granularity)",
        "",
        f"shared prefixes ({len(a['groups'])} groups of >= 2 bodies, at their deepest shared link)",
        f"  {'links':>5}  {'bytes':>10}  {'bodies':>6}  members",
    ]
    for g in a["groups"][:max_groups]:
        lines.append(f"  {g['links']:>5}  {g['bytes']:>10,}  {len(g['bodies']):>6}  {_ranges(g['bodies'])}")
    if len(a["groups"]) > max_groups:
        lines.append(f"  ... {len(a['groups']) - max_groups} more (--max-groups, or --json for all)")
    if "sessions" in a:
        s = a["sessions"]
        lines += ["", f"sessions   {s['sessions']} sessions, {s['turns']} turns (at most {s['max_turns']} per session)",
                  "reuse by turn (bytes shared with the session's previous turn)",
                  f"  {'turn':>4}  {'bodies':>6}  {'shared':>10}  {'of bytes':>10}  {'share':>6}"]
        for t in s["by_turn"]:
            lines.append(f"  {t['turn']:>4}  {t['bodies']:>6}  {t['shared_bytes']:>10,}  {t['prefix_bytes']:>10,}  "
                         f"{100 * t['fraction']:>5.1f}%")
        lines += [f"warning    {w}" for w in s["warnings"]]
    return "\n".join(lines)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register ``inspect``'s arguments: ``InspectConfig``'s fields."""
    add_declared(p, InspectConfig, ("inspect",))


def run(args: argparse.Namespace) -> int:
    """Load the workload, print its prefix structure; 0 on success."""
    a = inspect_args(from_dests(InspectConfig, vars(args)))
    if args.json:
        sys.stdout.write(dumps_json(a).decode() + "\n")  # the sink's JSON: redacted, DEL/C1 as \u escapes
    else:
        echo(render(a, max_groups=args.max_groups))
    return 0
