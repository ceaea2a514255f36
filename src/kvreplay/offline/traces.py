"""Block-hash request traces (Mooncake FAST'25 format) as prefix-block chains.

A trace line is one request::

    {"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, ...]}

``timestamp`` is in ms, lengths in tokens, and ``hash_ids[i]`` names the KV
block ``i`` of the prompt (512 tokens per block in the Mooncake traces; the
last block is partial). Identical ids are reusable blocks, and an id implies its
whole prefix, so a request's ids form a chain from the root of a block tree.
Source: kvcache-ai/Mooncake ``FAST25-release/traces/`` (Apache-2.0), described
in Qin et al., "Mooncake: Trading More Storage for Less Computation", FAST'25.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

from kvreplay.errors import WorkloadError
from kvreplay.workload.importers import read_trace_bytes

__all__ = ["BlockTrace", "MOONCAKE_BLOCK_TOKENS", "is_block_trace", "load_block_trace"]

MOONCAKE_BLOCK_TOKENS = 512
"""Tokens per ``hash_ids`` block in the Mooncake traces."""


@dataclass(frozen=True, slots=True)
class BlockTrace:
    """Requests as chains of block ids, flattened.

    Attributes:
        path: Where it was loaded from.
        block_tokens: Tokens per full block.
        blocks: Block id of every reference, request after request, root
            first within a request; shape ``(n_refs,)``, int64.
        starts: Offset of each request's first reference in ``blocks``, plus
            a final ``n_refs``; shape ``(n_requests + 1,)``, int64.
        input_tokens: Prompt length of each request (tokens); ``(n_requests,)``.
        timestamp_ms: Arrival time of each request (ms); ``(n_requests,)``.
    """

    path: str
    block_tokens: int
    blocks: np.ndarray
    starts: np.ndarray
    input_tokens: np.ndarray
    timestamp_ms: np.ndarray

    def __len__(self) -> int:
        return len(self.input_tokens)

    @property
    def block_tok(self) -> np.ndarray:
        """Tokens in each block reference, shape ``(n_refs,)`` int64.

        ``block_tokens`` except a request's partial last block. Built on each
        call, not kept (8 bytes a reference).
        """
        lengths = np.diff(self.starts)
        toks = np.full(len(self.blocks), self.block_tokens, dtype=np.int64)
        last = lengths > 0  # a request's last block holds what the full ones leave
        toks[self.starts[1:][last] - 1] = self.input_tokens[last] - self.block_tokens * (lengths[last] - 1)
        return toks

    def chains(self) -> list[list[int]]:
        """Each request's block ids, root first (for the brute-force models)."""
        b = self.blocks.tolist()
        s = self.starts.tolist()
        return [b[s[i] : s[i + 1]] for i in range(len(s) - 1)]


def is_block_trace(path: str | Path) -> bool:
    """True when the first non-blank line of a file is a JSON object with ``hash_ids``."""
    p = Path(path)
    if not p.is_file():
        return False
    with p.open("rb") as f:
        for line in f:
            if line.strip():
                try:
                    obj = orjson.loads(line)
                except orjson.JSONDecodeError:
                    return False
                return isinstance(obj, dict) and "hash_ids" in obj
    return False


def load_block_trace(
    path: str | Path, *, block_tokens: int = MOONCAKE_BLOCK_TOKENS, limit: int | None = None
) -> BlockTrace:
    """Load a Mooncake-style trace.

    Args:
        path: A JSONL file, one request per line.
        block_tokens: Tokens per block (512 for Mooncake).
        limit: Keep only the first ``limit`` requests.

    Returns:
        The trace, flattened (see ``BlockTrace``).

    Raises:
        WorkloadError: a line that is not JSON, lacks ``hash_ids`` or
            ``input_length``, repeats a block id within one request, or whose
            ``len(hash_ids) != ceil(input_length / block_tokens)``.
    """
    p, data = read_trace_bytes(path)
    # Block ids packed as they come (8 bytes each, not a Python int per id).
    blocks = array("q")
    starts = [0]
    inputs: list[int] = []
    stamps: list[float] = []
    for lineno, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        if limit is not None and len(inputs) >= limit:
            break
        try:
            row = orjson.loads(line)
            ids = row["hash_ids"]
            n_in = int(row["input_length"])
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            raise WorkloadError(f"not a block-trace row: {exc}", path=p, line=lineno) from exc
        want = -(-n_in // block_tokens)
        if len(ids) != want:
            raise WorkloadError(
                f"{len(ids)} hash_ids for {n_in} tokens;"
                f" expected ceil({n_in}/{block_tokens}) = {want}",
                path=p,
                line=lineno,
                field="hash_ids",
            )
        if len(set(ids)) != len(ids):
            raise WorkloadError(
                "a block id repeats within the request", path=p, line=lineno, field="hash_ids"
            )
        try:
            blocks.extend(ids)
        except TypeError:  # ids that are not Python ints: numpy's conversion, as before
            blocks.extend(np.asarray(ids, dtype=np.int64).tolist())
        starts.append(len(blocks))
        inputs.append(n_in)
        stamps.append(float(row.get("timestamp", 0)))
    if not inputs:
        raise WorkloadError("trace holds no requests", path=p)
    starts_a = np.asarray(starts, dtype=np.int64)
    inputs_a = np.asarray(inputs, dtype=np.int64)
    return BlockTrace(
        path=str(p),
        block_tokens=block_tokens,
        blocks=np.frombuffer(blocks, dtype=np.int64) if len(blocks) else np.zeros(0, dtype=np.int64),
        starts=starts_a,
        input_tokens=inputs_a,
        timestamp_ms=np.asarray(stamps, dtype=np.float64),
    )
