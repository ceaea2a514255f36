"""Requests as the cache models see them, from workloads, plans and traces.

A kvreplay workload is rendered with the simulator's own tokenizer and chat
template (``kvreplay.sim.tokenizer.render_body``), and each body gets the
output the simulator would generate for it (``kvreplay.sim.engine.
generate_output``, deterministic in the body bytes), so an offline simulation
sees the token sequences ``serve-sim`` sees. Radix chains are the content keys
of full blocks (``kvreplay.sim.prefix.PrefixKeys.block_keys``), the same keys
the simulator's ``RadixCache`` uses; a cache reset between plan phases starts a
new *epoch*, which renames every key so nothing from before can hit.

A Mooncake trace already names its blocks; its chain is the request's full
blocks (``input_length // block_tokens``; the partial last block is not cached,
as in vLLM and the simulator), and it looks up ``(input_length - 1) //
block_tokens`` of them. Outputs are not inserted: the trace's ids already say
which later blocks reuse them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kvreplay.offline.entries import SnapshotRequest
from kvreplay.offline.mrc import Curve, block_curve
from kvreplay.offline.traces import BlockTrace
from kvreplay.sim.prefix import PrefixKeys
from kvreplay.workload import Workload

__all__ = [
    "BlockRequests",
    "ModelRequest",
    "block_requests_from_models",
    "block_requests_from_trace",
    "interleave",
    "model_requests",
    "snapshot_requests",
    "trace_tokens",
]


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One request of a workload, rendered.

    Attributes:
        tokens: Prompt token ids.
        output: Output token ids the simulator generates for the body.
        system_end: End of the leading system block (tokens; 0 if none).
        messages_end: End of the rendered messages (tokens).
        counted: False for interleaved foreign traffic.
        epoch: Cache epoch (bumped by a reset between phases).
    """

    tokens: tuple[int, ...]
    output: tuple[int, ...]
    system_end: int
    messages_end: int
    counted: bool = True
    epoch: int = 0


@dataclass(frozen=True, slots=True)
class BlockRequests:
    """Block chains, flattened (input of ``mrc.block_curve``).

    Attributes:
        blocks: Interned block ids, request after request, root first; ``(n,)``.
        starts: Request offsets plus a final ``n``; ``(R + 1,)``.
        lookup_blocks: Blocks each request looks up; ``(R,)``.
        prompt_tokens: Prompt lengths (tokens); ``(R,)``.
        counted: Requests that count; bool ``(R,)``.
        block_tokens: Tokens per block.
    """

    blocks: np.ndarray
    starts: np.ndarray
    lookup_blocks: np.ndarray
    prompt_tokens: np.ndarray
    counted: np.ndarray
    block_tokens: int

    def curve(self) -> Curve:
        """The radix block model's hit curve of these requests (``mrc.block_curve``)."""
        return block_curve(self.blocks, self.starts, self.lookup_blocks, block_tokens=self.block_tokens,
                           prompt_tokens=self.prompt_tokens, counted=self.counted)


def model_requests(
    workload: Workload,
    order: Sequence[int] | None = None,
    *,
    epochs: Sequence[int] | None = None,
    outputs: bool = True,
    output_tokens: int | None = None,
    max_output_tokens: int | None = None,
) -> list[ModelRequest]:
    """Render workload bodies in a given order.

    Args:
        workload: The loaded workload.
        order: Body indices in send order (default: workload order).
        epochs: Cache epoch per position (default all 0).
        outputs: Generate the simulator's outputs (False: none).
        output_tokens: The simulator's ``output_tokens`` setting, None = its default.
        max_output_tokens: The simulator's ``max_output_tokens``, None = its default.

    Returns:
        One request per position.

    Raises:
        WorkloadError: a body the tokenizer cannot render.
    """
    from kvreplay.errors import WorkloadError
    from kvreplay.sim.config import SimConfig
    from kvreplay.sim.engine import generate_output
    from kvreplay.sim.tokenizer import render_body

    cfg_kw: dict = {}
    if output_tokens is not None:
        cfg_kw["output_tokens"] = output_tokens
    if max_output_tokens is not None:
        cfg_kw["max_output_tokens"] = max_output_tokens
    cfg = SimConfig(**cfg_kw)
    idx = list(range(len(workload))) if order is None else list(order)
    rendered: dict[int, tuple] = {}
    out = []
    for pos, bi in enumerate(idx):
        if bi not in rendered:
            body = workload.bodies[bi]
            decoded = body.decoded()
            try:
                prompt = render_body(decoded)
            except ValueError as exc:
                raise WorkloadError(str(exc), path=workload.path, body_index=bi) from exc
            gen = generate_output(body.raw, decoded, cfg).token_ids if outputs else ()
            rendered[bi] = (prompt.tokens, tuple(gen), prompt.system_end, prompt.messages_end)
        toks, gen, se, me = rendered[bi]
        out.append(ModelRequest(toks, gen, se, me, True, 0 if epochs is None else epochs[pos]))
    return out


def interleave(main: Sequence, foreign: Sequence, every: int, burst: int = 1) -> list:
    """Insert ``burst`` foreign requests after every ``every`` main ones (cycling the foreign list).

    Foreign requests are marked ``counted=False``: they occupy the cache but
    their own hits are not reported.

    Args:
        main: The workload under study (ModelRequest or trace request tuples).
        foreign: The unrelated traffic.
        every: ``k`` >= 1.
        burst: Foreign requests per gap, ``b`` >= 1.

    Returns:
        The mixed sequence.

    Raises:
        ValueError: ``every`` or ``burst`` < 1, or an empty foreign list.
    """
    if every < 1:
        raise ValueError("--interleave needs k >= 1")
    if burst < 1:
        raise ValueError("--burst needs b >= 1")
    if not foreign:
        raise ValueError("the interleaved workload is empty")
    out = []
    j = 0
    for i, r in enumerate(main, start=1):
        out.append(r)
        if i % every == 0:
            for _ in range(burst):
                out.append(_uncounted(foreign[j % len(foreign)]))
                j += 1
    return out


def _uncounted(r):
    if isinstance(r, ModelRequest):
        return ModelRequest(r.tokens, r.output, r.system_end, r.messages_end, False, r.epoch)
    return (*r[:-1], False)


def snapshot_requests(reqs: Sequence[ModelRequest], points: Sequence[str]) -> list[SnapshotRequest]:
    """The entries model's view: snapshot offsets at the simulator's points.

    Args:
        reqs: Rendered requests.
        points: ``system`` / ``messages`` / ``prompt`` (the simulator's
            ``snapshot_points``: the first 1 or 2 of ``snapshot_at``).

    Returns:
        One ``SnapshotRequest`` each.
    """
    out = []
    for r in reqs:
        offs = []
        for p in points:
            offs.append(
                r.system_end
                if p == "system"
                else r.messages_end
                if p == "messages"
                else len(r.tokens)
            )
        out.append(SnapshotRequest(r.tokens, tuple(offs), r.counted, r.epoch))
    return out


def block_requests_from_models(reqs: Sequence[ModelRequest], block_size: int) -> BlockRequests:
    """Radix chains of rendered requests, keyed as ``RadixCache`` keys them.

    The chain is the full blocks of the first ``n + m - 1`` tokens of prompt
    and output (``n`` when there is no output); the lookup covers
    ``(n - 1) // block_size`` blocks.

    Args:
        reqs: Rendered requests.
        block_size: Tokens per block.

    Returns:
        The flattened chains.
    """
    ids: dict[tuple[int, bytes], int] = {}
    blocks: list[int] = []
    starts = [0]
    look, prompt, counted = [], [], []
    for r in reqs:
        n, m = len(r.tokens), len(r.output)
        kv_len = n + m - 1 if m else n
        keys = PrefixKeys(r.tokens + r.output).block_keys(block_size, limit=kv_len)
        for k in keys:
            blocks.append(ids.setdefault((r.epoch, k), len(ids)))
        starts.append(len(blocks))
        look.append((n - 1) // block_size if n else 0)
        prompt.append(n)
        counted.append(r.counted)
    return BlockRequests(
        blocks=np.asarray(blocks, dtype=np.int64),
        starts=np.asarray(starts, dtype=np.int64),
        lookup_blocks=np.asarray(look, dtype=np.int64),
        prompt_tokens=np.asarray(prompt, dtype=np.int64),
        counted=np.asarray(counted, dtype=bool),
        block_tokens=block_size,
    )


def block_requests_from_trace(
    trace: BlockTrace, foreign: BlockTrace | None = None, every: int = 0, burst: int = 1
) -> BlockRequests:
    """Radix chains of a block trace, optionally with a second one interleaved.

    Args:
        trace: The trace under study.
        foreign: A second trace whose requests are mixed in (its block ids are
            renamed apart from the first's), or None.
        every: ``burst`` foreign requests after every ``every`` of ``trace``.
        burst: Foreign requests per gap.

    Returns:
        The flattened chains (full blocks only; see the module docstring).
    """
    B = trace.block_tokens
    if foreign is None:
        return _trace_requests(trace)
    items = _trace_items(trace, 0, True)
    if foreign is not None:
        offset = int(trace.blocks.max(initial=-1)) + 1
        items = interleave(items, _trace_items(foreign, offset, True), every, burst)
    blocks: list[np.ndarray] = []
    starts = [0]
    look, prompt, counted = [], [], []
    for chain, n, c in items:
        blocks.append(chain)
        starts.append(starts[-1] + len(chain))
        look.append((n - 1) // B if n else 0)
        prompt.append(n)
        counted.append(c)
    return BlockRequests(
        blocks=np.concatenate(blocks) if blocks else np.zeros(0, dtype=np.int64),
        starts=np.asarray(starts, dtype=np.int64),
        lookup_blocks=np.asarray(look, dtype=np.int64),
        prompt_tokens=np.asarray(prompt, dtype=np.int64),
        counted=np.asarray(counted, dtype=bool),
        block_tokens=B,
    )


def _trace_requests(trace: BlockTrace) -> BlockRequests:
    """``block_requests_from_trace`` of one trace, vectorised (no array per request).

    ``blocks`` is the trace's own array (not a copy) when every block is full.
    """
    B = trace.block_tokens
    n = trace.input_tokens.astype(np.int64)
    full = n // B
    lengths = np.diff(trace.starts)
    if np.array_equal(full, lengths):
        blocks = trace.blocks
    else:
        depth = np.arange(len(trace.blocks), dtype=np.int64) - np.repeat(trace.starts[:-1], lengths)
        blocks = trace.blocks[depth < np.repeat(full, lengths)]
        del depth
    starts = np.zeros(len(n) + 1, dtype=np.int64)
    np.cumsum(full, out=starts[1:])
    return BlockRequests(
        blocks=blocks,
        starts=starts,
        lookup_blocks=np.where(n > 0, (n - 1) // B, 0).astype(np.int64),
        prompt_tokens=n,
        counted=np.ones(len(n), dtype=bool),
        block_tokens=B,
    )


def _trace_items(
    trace: BlockTrace, offset: int, counted: bool
) -> list[tuple[np.ndarray, int, bool]]:
    B = trace.block_tokens
    s = trace.starts
    out = []
    for r in range(len(trace)):
        n = int(trace.input_tokens[r])
        full = n // B
        out.append((trace.blocks[s[r] : s[r] + full] + offset, n, counted))
    return out


def trace_tokens(trace: BlockTrace, r: int, tokens_per_block: int) -> list[int]:
    """Tokens that ``RadixCache(block_size=tokens_per_block)`` treats as trace request ``r``.

    Each full block becomes ``tokens_per_block`` copies of its id and a partial
    last block one copy, so the simulator's class sees the same full blocks
    and the same lookup limit ``(n - 1) // block`` at a fraction of the
    tokens (``tokens_per_block >= 2``). Used for brute-force checks.

    Args:
        trace: The trace.
        r: Request index.
        tokens_per_block: Tokens standing for one trace block (>= 2).

    Returns:
        The token ids.
    """
    if tokens_per_block < 2:
        raise ValueError("tokens_per_block must be >= 2")
    ids = trace.blocks[trace.starts[r] : trace.starts[r + 1]].tolist()
    n = int(trace.input_tokens[r])
    full = n // trace.block_tokens
    toks = [h for h in ids[:full] for _ in range(tokens_per_block)]
    if len(ids) > full:
        toks.append(ids[full])
    return toks
