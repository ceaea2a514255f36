"""``kvreplay inspect WORKLOAD``: the prefix structure of a workload, before sending anything.

Every body gets a prefix chain (``kvreplay.workload.chain``: one link per chat
message, or per block of a completions prompt). Bodies whose chains start
with the same links share that prefix byte for byte, so a prefix cache could
serve it. The command prints:

* groups of bodies sharing a chain prefix (each group at its deepest shared
  link), with the size of that prefix in bytes;
* unique bodies (whose very first link no other body has) and byte-identical
  bodies (same SHA-256);
* the expected reuse: replaying the bodies in workload order through an
  unbounded cache that keeps every prefix it has seen, the bytes of each body
  already covered by an earlier body, over all hashed bytes. It is an upper
  bound at message (or block) granularity: real servers reuse in tokens or
  blocks of tokens and evict.
* for a conversation workload (a sessions side file): its sessions and turns, and
  by turn index the bytes each turn shares with its session's previous turn (the
  reuse that turn could get), with the named warnings of
  ``kvreplay.workload.conversations`` (``history_not_prefix``).

Sizes are bytes of the raw body as sent; no tokenizer is applied.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field

from kvreplay.safe_io import dumps_json, echo
from kvreplay.workload import DEFAULT_BLOCK_BYTES, Workload, conversations, load_workload
from kvreplay.workload import chain as chain_mod

NAME = "inspect"
HELP = "Show which bodies of a workload share a prefix (message-level prefix chains) and the reuse a cache could give."


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register ``inspect``'s arguments."""
    p.add_argument("workload", metavar="WORKLOAD", help="folder of *.json bodies or a .jsonl file")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument(
        "--block-bytes",
        type=int,
        default=DEFAULT_BLOCK_BYTES,
        metavar="N",
        help=f"block size for completions prompts (bytes, default {DEFAULT_BLOCK_BYTES})",
    )
    p.add_argument(
        "--max-groups", type=int, default=40, metavar="N", help="groups listed in the text output (default 40)"
    )


@dataclass
class _Node:
    depth: int
    prefix_bytes: int
    bodies: list[int] = field(default_factory=list)
    children: dict[bytes, _Node] = field(default_factory=dict)


def analyse(workload: Workload, *, block_bytes: int = DEFAULT_BLOCK_BYTES) -> dict:
    """Compute the prefix structure of a workload.

    Args:
        workload: The loaded workload.
        block_bytes: Block size for completions prompts (bytes).

    Returns:
        A JSON-ready dict: ``bodies``, ``kinds``, ``body_bytes``,
        ``prefix_bytes``, ``unique_bodies``, ``identical_bodies``,
        ``expected_reuse`` {``bytes``, ``fraction``}, ``groups`` [{``links``,
        ``bytes``, ``bodies``}] and ``per_body`` rows.

    Raises:
        WorkloadError: a body has neither messages nor a prompt.
    """
    chains = [chain_mod.prefix_chain(b.raw, block_bytes=block_bytes) for b in workload.bodies]
    root = _Node(0, 0)
    for i, c in enumerate(chains):
        node = root
        node.bodies.append(i)
        for link, end in zip(c.links, c.ends, strict=False):
            nxt = node.children.get(link)
            if nxt is None:
                nxt = node.children[link] = _Node(node.depth + 1, end)
            nxt.bodies.append(i)
            node = nxt

    groups: list[dict] = []
    stack = list(reversed(root.children.values()))
    while stack:
        node = stack.pop()
        if len(node.bodies) < 2:
            continue
        if not any(len(ch.bodies) == len(node.bodies) for ch in node.children.values()):
            groups.append({"links": node.depth, "bytes": node.prefix_bytes, "bodies": node.bodies})
        stack.extend(reversed(node.children.values()))

    seen: set[bytes] = set()
    per_body = []
    reused_total = prefix_total = 0
    for b, c in zip(workload.bodies, chains, strict=False):
        m = 0
        while m < len(c.links) and c.links[m] in seen:
            m += 1
        reused = c.ends[m - 1] if m else 0
        total = c.ends[-1] if c.ends else 0
        seen.update(c.links)
        reused_total += reused
        prefix_total += total
        per_body.append({
            "index": b.index, "source": b.source, "sha256": b.sha256, "kind": c.kind,
            "body_bytes": b.body_bytes, "links": len(c.links), "prefix_bytes": total,
            "reused_links": m, "reused_bytes": reused,
        })

    kinds: dict[str, int] = {}
    for c in chains:
        kinds[c.kind] = kinds.get(c.kind, 0) + 1
    first = {link: node for link, node in root.children.items()}
    unique = sorted(i for node in first.values() if len(node.bodies) == 1 for i in node.bodies)
    unique += [i for i, c in enumerate(chains) if not c.links]
    return {
        "workload": workload.path,
        "workload_sha256": workload.sha256,
        "implementation": chain_mod.IMPLEMENTATION,
        "block_bytes": block_bytes,
        "bodies": len(workload),
        "kinds": kinds,
        "body_bytes": sum(b.body_bytes for b in workload.bodies),
        "prefix_bytes": prefix_total,
        "unique_bodies": sorted(unique),
        "identical_bodies": sorted(workload.duplicates().values()),
        "expected_reuse": {
            "bytes": reused_total,
            "fraction": reused_total / prefix_total if prefix_total else 0.0,
        },
        "groups": groups,
        "per_body": per_body,
        **({"sessions": _sessions(workload, block_bytes)} if workload.sessions is not None else {}),
    }


def _sessions(workload: Workload, block_bytes: int) -> dict:
    """``analyse``'s ``sessions`` block: counts, reuse by turn, warnings and one row per turn."""
    rows = conversations.turn_reuse(workload, block_bytes=block_bytes)
    ss = workload.sessions
    assert ss is not None
    return {"sessions": len(ss), "turns": len(rows), "max_turns": max(len(b) for b in ss.bodies.values()),
            "by_turn": conversations.by_turn(rows), "warnings": conversations.session_warnings(workload, rows=rows),
            "per_turn": rows}


def _ranges(idx: list[int]) -> str:
    out, i = [], 0
    while i < len(idx):
        j = i
        while j + 1 < len(idx) and idx[j + 1] == idx[j] + 1:
            j += 1
        out.append(str(idx[i]) if i == j else f"{idx[i]}-{idx[j]}")
        i = j + 1
    return ",".join(out)


def render(a: dict, *, max_groups: int = 40) -> str:
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


def run(args: argparse.Namespace) -> int:
    """Load the workload, print its prefix structure; 0 on success."""
    workload = load_workload(args.workload)
    a = analyse(workload, block_bytes=args.block_bytes)
    if args.json:
        sys.stdout.write(dumps_json(a).decode() + "\n")  # the sink's JSON: redacted, DEL/C1 as \u escapes
    else:
        echo(render(a, max_groups=args.max_groups))
    return 0
