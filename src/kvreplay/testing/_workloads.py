"""Scaled-down workloads that fit the tiny models' context.

``scale_down`` keeps a real workload's shape (the same bodies, the same shared
system block, the same message turns) but cuts every message to a few hundred
characters, so that a body fits a 4k-token context with the tiny tokenizers,
and makes decoding short and greedy. The shared system block is cut at the
same character count in every body, so the bodies still share one prefix.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["scale_down"]


def scale_down(
    src_dir: Path,
    out_dir: Path,
    *,
    n_bodies: int = 12,
    system_chars: int = 2400,
    message_chars: int = 400,
    max_tokens: int = 8,
) -> list[Path]:
    """Write the first ``n_bodies`` bodies of a folder workload, scaled down.

    Args:
        src_dir: A folder workload (``*.json`` chat bodies, sorted by name).
        out_dir: Folder to write (created; existing ``*.json`` there are removed).
        n_bodies: How many bodies to keep, from the first.
        system_chars: Characters kept of each ``system`` message (the shared prefix).
        message_chars: Characters kept of every other message.
        max_tokens: The bodies' new ``max_tokens``; ``temperature`` becomes 0.

    Returns:
        The written files, in workload order.

    Raises:
        ValueError: the source has fewer than ``n_bodies`` bodies.
    """
    src = sorted(Path(src_dir).glob("*.json"))
    if len(src) < n_bodies:
        raise ValueError(f"{src_dir}: {len(src)} bodies, {n_bodies} wanted")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("*.json"):
        old.unlink()
    written = []
    for path in src[:n_bodies]:
        body = json.loads(path.read_bytes())
        for msg in body["messages"]:
            if isinstance(msg.get("content"), str):
                cut = system_chars if msg.get("role") == "system" else message_chars
                msg["content"] = msg["content"][:cut]
        body["max_tokens"] = max_tokens
        body["temperature"] = 0
        body.pop("top_p", None)
        dest = out_dir / path.name
        dest.write_bytes(json.dumps(body, ensure_ascii=False).encode("utf-8"))
        written.append(dest)
    return written
