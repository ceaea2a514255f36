"""The prefix structure of a workload: the behaviour of ``kvreplay inspect`` and ``kvreplay.inspect_workload``.

``kvreplay inspect`` (``commands/inspect.py``) prints the text or the JSON; its options are
``kvreplay.options.inspect.InspectConfig``; this module computes the structure (``analyse``,
``inspect_args``), as the command's page describes:

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

import os
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict

from kvreplay.options.inspect import InspectConfig
from kvreplay.workload import DEFAULT_BLOCK_BYTES, Workload, load_workload

__all__ = ["InspectConfig", "InspectReport", "analyse", "inspect_args", "inspect_workload"]

PathLike = str | os.PathLike[str]


class InspectReport(TypedDict):
    """The prefix structure of a workload, as ``kvreplay inspect --json`` prints it (sizes in bytes).

    ``bodies`` and ``kinds`` (bodies by chain kind: chat, completions); ``body_bytes`` the raw
    bodies, ``prefix_bytes`` the bytes hashed into chains; ``unique_bodies`` (indices sharing
    no first link) and ``identical_bodies`` (groups of byte-identical bodies);
    ``expected_reuse`` the bytes (and fraction of ``prefix_bytes``) already seen earlier in
    workload order by an unbounded cache at message/block granularity; ``groups`` the
    bodies sharing a chain prefix at their deepest shared link (``links``, ``bytes``,
    ``bodies``); ``per_body`` one row per body; ``sessions`` for a conversation workload.
    """

    workload: str
    workload_sha256: str
    implementation: str
    block_bytes: int
    bodies: int
    kinds: dict[str, int]
    body_bytes: int
    prefix_bytes: int
    unique_bodies: list[int]
    identical_bodies: list[list[int]]
    expected_reuse: dict[str, Any]
    groups: list[dict[str, Any]]
    per_body: list[dict[str, Any]]
    sessions: NotRequired[dict[str, Any]]


@dataclass
class _Node:
    depth: int
    prefix_bytes: int
    bodies: list[int] = field(default_factory=list)
    children: dict[bytes, _Node] = field(default_factory=dict)


def analyse(workload: Workload, *, block_bytes: int = DEFAULT_BLOCK_BYTES) -> InspectReport:
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
    from kvreplay.workload import chain as chain_mod

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
    rep: InspectReport = {
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
        **({"sessions": _sessions(workload, block_bytes)} if workload.sessions is not None else {}),  # type: ignore[typeddict-item]
    }
    return rep


def _sessions(workload: Workload, block_bytes: int) -> dict[str, Any]:
    """``analyse``'s ``sessions`` block: counts, reuse by turn, warnings and one row per turn."""
    from kvreplay.workload import conversations

    rows = conversations.turn_reuse(workload, block_bytes=block_bytes)
    ss = workload.sessions
    assert ss is not None
    return {"sessions": len(ss), "turns": len(rows), "max_turns": max(len(b) for b in ss.bodies.values()),
            "by_turn": conversations.by_turn(rows), "warnings": conversations.session_warnings(workload, rows=rows),
            "per_turn": rows}


def inspect_args(args: InspectConfig) -> InspectReport:
    """Load ``args.workload`` and compute its prefix structure with ``args.block_bytes``.

    Args:
        args: The options (``kvreplay inspect``'s flags).

    Raises:
        WorkloadError: an unreadable workload, a body with neither messages nor a prompt.
    """
    return analyse(load_workload(args.workload), block_bytes=args.block_bytes)


def inspect_workload(workload: PathLike, *, block_bytes: int = DEFAULT_BLOCK_BYTES) -> InspectReport:
    """Which bodies of a workload share a prefix, and the reuse a cache could give (``kvreplay inspect``).

    Nothing is sent and no tokenizer is applied: sizes are bytes of the raw bodies.

    Args:
        workload: A folder of ``*.json`` bodies or a ``.jsonl`` file (with its sessions side file, if any).
        block_bytes: Block size for completions prompts (bytes).

    Returns:
        The structure as ``kvreplay inspect --json`` prints it (``InspectReport``).

    Raises:
        WorkloadError: an unreadable workload, a body with neither messages nor a prompt.

    Example::

        rep = kvreplay.inspect_workload(kvreplay.DEMO_WORKLOAD)
        print(rep["bodies"], rep["expected_reuse"]["fraction"], len(rep["groups"]))
    """
    return inspect_args(InspectConfig(workload=os.fspath(workload), block_bytes=block_bytes))
