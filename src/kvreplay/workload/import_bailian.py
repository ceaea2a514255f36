"""``kvreplay import bailian``: Alibaba Bailian usage traces (``chat_id``, ``parent_chat_id``, ``turn``, ``hash_ids``).

Source format (alibaba-edu/qwen-bailian-usagetraces-anon, ``qwen_traceA_blksz_16.jsonl``
and its siblings; field list as documented by AIPerf, ``docs/tutorials/bailian-trace.md``,
and read by its ``BailianTraceDatasetLoader``): JSONL, one request per line::

    {"chat_id": 159, "parent_chat_id": -1, "timestamp": 61.114, "input_length": 521,
     "output_length": 132, "type": "text", "turn": 1, "hash_ids": [1089, 1090, ...]}

- ``chat_id`` (integer, unique), ``parent_chat_id`` (integer, ``-1`` or absent for the
  first turn of a chat), ``timestamp`` (**seconds** from the trace start),
  ``input_length`` / ``output_length`` (tokens), ``type`` (``text``, ``search``, ``image``,
  ``file``; not used), ``turn`` (1-based, default 1), ``hash_ids`` (salted
  block ids of **16** tokens each; the last block may be partial).

Sessions: a request's session is the root of its ``parent_chat_id`` chain (the request
reached by following parents until ``-1`` or a parent absent from the file, as AIPerf's
loader does); the session id is that root's ``chat_id`` in decimal. Within a session the
requests are ordered by ``turn`` (file order on ties) and numbered 0, 1, 2, ... (the
file's ``turn`` may skip values). Think time of a later turn is the gap between the two
arrivals, ``timestamp - previous turn's timestamp`` s (0 when negative): an upper bound,
since it includes the previous turn's service time.

Bodies: each row is a complete request (its ``hash_ids`` cover the whole context,
history included), so each body is built from its own blocks exactly as ``kvreplay import
mooncake`` builds one (``workload.importers.prompt_text``: one deterministic text per
block id, 16 simulator tokens per block by default), a completions body or, with
``--chat``, one user message. A parent chain that loops, a repeated ``chat_id`` or a
missing field is refused with file, line and field.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from kvreplay.errors import WorkloadError
from kvreplay.workload._loader import json_line
from kvreplay.workload.conversation import DEFAULT_MODEL, ConversationImport, SessionWorkloadWriter
from kvreplay.workload.importers import TraceRow, trace_body
from kvreplay.workload.importers_capture import _lines
from kvreplay.workload.sessions import MAX_THINK_TIME_S, Turn

if TYPE_CHECKING:
    from kvreplay.workload.token_blocks import TokenBlocks

__all__ = ["BAILIAN_BLOCK_TOKENS", "import_bailian"]

BAILIAN_BLOCK_TOKENS = 16
"""Tokens per ``hash_ids`` block in the published Bailian traces (``_blksz_16``)."""


def _int(obj: dict, key: str, p: Path, lineno: int, *, minimum: int | None = None, default: int | None = None) -> int:
    v = obj.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or (minimum is not None and v < minimum):
        raise WorkloadError("missing or not an integer" + (f" >= {minimum}" if minimum is not None else ""),
                            path=p, line=lineno, field=key)
    return v


def _row(obj: object, p: Path, lineno: int, block_tokens: int) -> tuple[TraceRow, int, int, int]:
    """``(row, chat_id, parent, turn)`` of one line (its timestamp in ms in the row; ``type`` is not used)."""
    if not isinstance(obj, dict):
        raise WorkloadError("not a JSON object", path=p, line=lineno)
    chat_id = _int(obj, "chat_id", p, lineno)
    parent = _int(obj, "parent_chat_id", p, lineno, default=-1)
    turn = _int(obj, "turn", p, lineno, minimum=1, default=1)
    n_in = _int(obj, "input_length", p, lineno, minimum=1)
    n_out = _int(obj, "output_length", p, lineno, minimum=1)
    ts = obj.get("timestamp")
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or ts < 0:
        raise WorkloadError("missing or not a number of seconds >= 0", path=p, line=lineno, field="timestamp")
    ids = obj.get("hash_ids")
    if not isinstance(ids, list) or not ids or not all(type(h) is int for h in ids):
        raise WorkloadError("missing or not a non-empty list of integers", path=p, line=lineno, field="hash_ids")
    if not (len(ids) - 1) * block_tokens < n_in <= len(ids) * block_tokens:
        raise WorkloadError(f"{len(ids)} blocks of {block_tokens} tokens cannot hold input_length {n_in} "
                            "(wrong --block-tokens?)", path=p, line=lineno, field="hash_ids")
    return TraceRow(ts * 1000.0, n_in, n_out, tuple(ids), lineno), chat_id, parent, turn


def _roots(parent: dict[int, int], line_of: dict[int, int], p: Path) -> dict[int, int]:
    """``chat_id -> root chat_id``; a loop is refused.

    Linear in the number of chats whatever the file order: each walk stops at the first
    chat whose root is known, and every chat it passed is given that root (a chain listed
    children first was quadratic while the walk's loop check searched a list: 17.7 s
    against 3.1 s parents first, issue 44).
    """
    root: dict[int, int] = {}
    for start in parent:
        path: list[int] = []
        on_path: set[int] = set()
        cur = start
        while cur not in root and parent[cur] != -1 and parent[cur] in parent:
            path.append(cur)
            on_path.add(cur)
            cur = parent[cur]
            if cur in on_path:
                raise WorkloadError(f"parent_chat_id chain of chat {start} loops", path=p, line=line_of[start],
                                    field="parent_chat_id")
        r = root.get(cur, cur)
        for c in (*path, cur):
            root[c] = r
    return root


def import_bailian(src: str | Path, out: str | Path, *, block_tokens: int = BAILIAN_BLOCK_TOKENS,
                   model: str = DEFAULT_MODEL, chat: bool = False, ignore_eos: bool = False,
                   limit: int | None = None, blocks: TokenBlocks | None = None) -> ConversationImport:
    """Write a sessions workload from a Bailian trace (see module docstring).

    Args:
        src: The JSONL trace.
        out: The workload file (``.jsonl`` added when missing); the side file goes beside it.
        block_tokens: Tokens per ``hash_ids`` block (16 in the published traces).
        model: ``model`` of every body.
        chat: Chat bodies (one user message) instead of completions (``prompt``).
        ignore_eos: Add ``"ignore_eos": true`` so servers produce ``output_length`` tokens.
        limit: First ``limit`` requests only.
        blocks: Block texts in a real tokenizer's tokens (``--tokenizer``); None: simulator pseudo-words.

    Returns:
        What was written.

    Raises:
        WorkloadError: a line that is not a JSON object; a missing or mistyped field; hash_ids
            that cannot hold input_length; a repeated chat_id; a parent chain that loops
            (file, line and field named). Nothing is left at ``out``.
    """
    p = Path(src)
    meta: list[tuple[int, int, int, float]] = []  # (chat_id, parent, turn, timestamp ms) per body
    line_of: dict[int, int] = {}
    with SessionWorkloadWriter(out, src) as w:
        for lineno, line in _lines(p):
            if limit is not None and len(meta) >= limit:
                break
            row, chat_id, parent, turn = _row(json_line(line, p, lineno), p, lineno, block_tokens)
            if chat_id in line_of:
                raise WorkloadError(f"chat_id {chat_id} is used twice (lines {line_of[chat_id]} and {lineno})",
                                    path=p, line=lineno, field="chat_id")
            line_of[chat_id] = lineno
            w.add(trace_body(row, block_tokens, model, chat=chat, ignore_eos=ignore_eos, blocks=blocks), "", 0)
            meta.append((chat_id, parent, turn, row.timestamp_ms))
        if not meta:
            raise WorkloadError("trace holds no requests", path=p)
        root = _roots({m[0]: m[1] for m in meta}, line_of, p)
        members: dict[int, list[int]] = {}
        for i, m in enumerate(meta):
            members.setdefault(root[m[0]], []).append(i)
        turns: list[Turn] = []
        for r, bodies in members.items():
            bodies.sort(key=lambda i: (meta[i][2], i))
            for k, i in enumerate(bodies):
                think = 0.0 if k == 0 else (meta[i][3] - meta[bodies[k - 1]][3]) / 1000.0
                turns.append(Turn(i, str(r), k, min(MAX_THINK_TIME_S, max(0.0, think))))
        side = w.commit(turns)
        assert side is not None
        return ConversationImport(w.path, side, len(members), len(meta), {}, p)
