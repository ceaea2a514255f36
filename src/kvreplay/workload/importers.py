"""Importers: workloads made from other sources. First: Mooncake block-hash traces.

A Mooncake trace (kvcache-ai/Mooncake ``FAST25-release/traces/*.jsonl``) has one
request per line: ``timestamp`` (ms), ``input_length`` and ``output_length``
(tokens) and ``hash_ids``, the ids of the prompt's consecutive blocks of
``block_tokens`` tokens (512 in the published traces; the last block may be
partial). Equal ids are equal prefix blocks, so reuse is in the ids.

``import_mooncake`` turns each line into one request body whose prompt text is
the concatenation of one deterministic text per block id:

- **Block text.** Block id ``h`` becomes ``block_tokens`` words drawn by
  ``random.Random("kvreplay-block:<h>")`` from a fixed vocabulary of
  pseudo-words, each ``" " + word``. Every vocabulary entry is checked to be
  exactly one token of the simulator's tokenizer (``kvreplay.sim.tokenizer``),
  and a space-led letter run never merges with its neighbour, so a block is
  exactly ``block_tokens`` simulator tokens and a prompt of blocks tokenizes
  as the concatenation of its blocks. The last block is cut to what
  ``input_length`` leaves (``input_length - (len(hash_ids) - 1) * block_tokens``
  words), so the prompt has exactly ``input_length`` simulator tokens. Two
  bodies that share their first ``k`` ids therefore share their first ``k``
  blocks of text (the ``k``-th only up to the shorter length when it is the
  last, partial block of one of them). A real model's tokenizer counts these
  pseudo-words differently (BPE: often 2-3 tokens each); the structure of
  the reuse is what is kept.
- **Body.** A completions request (``prompt``, no chat template to shift
  block boundaries) or, with ``chat=True``, one user message; ``max_tokens``
  = ``output_length``, ``stream: true`` with usage. The bytes are written once
  and never re-serialised afterwards (they are the workload).
- **Arrivals.** The selected lines' ``timestamp`` values go, in order, into a
  JSON list of ms offsets (``<out>.arrivals.json``), and a plan
  (``<out>.plan.toml``) names the workload and one open-loop phase with
  ``arrival = "trace:<that file>"`` (``kvreplay run --plan``).

- **Sessions** (``sessions=True``, ``kvreplay import mooncake --sessions``). The published
  traces carry no session id; :func:`infer_sessions` rebuilds conversations from the
  ids, in file order, by this rule: a request *continues* an earlier request P when P's
  *full* blocks (its first ``input_length // block_tokens`` ids: a partial last block
  changes id once the next turn fills it) are a prefix of the request's ids, at least
  ``min_blocks`` long (default 2, so one shared first block, a common system prompt,
  joins nothing), and P is still the tip of its session (each request is continued at
  most once; a session is a chain). Among candidates the longest prefix wins, then the
  latest request. Otherwise the request starts a new session (ids ``mc-0``, ``mc-1``,
  ... in order of their first request). A continuing turn's think time is the gap
  between the two arrivals, ``(timestamp - P.timestamp) / 1000`` s (0 when negative):
  it includes P's own service time, so it is an upper bound on the user's think time.
  The side file is written through ``workload.sessions.write_sessions``.

Source: Mooncake FAST'25 traces, README of ``FAST25-release`` (block size 512,
remapped hash ids); ``fixtures/traces/SOURCES.md``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from kvreplay.errors import ConfigError, WorkloadError
from kvreplay.options.importing import DEFAULT_SESSION_MIN_BLOCKS  # kvreplay import's --session-min-blocks
from kvreplay.safe_io import atomic_write_bytes, atomic_write_chunks, atomic_write_text
from kvreplay.workload._loader import json_line
from kvreplay.workload.capture import IMPORT_CONCURRENCY, toml_comment, toml_str
from kvreplay.workload.conversation import DEFAULT_MODEL
from kvreplay.workload.sessions import MAX_THINK_TIME_S, Turn, sessions_path, write_sessions

if TYPE_CHECKING:
    from kvreplay.workload.token_blocks import TokenBlocks

__all__ = [
    "ImportResult",
    "block_text",
    "import_mooncake",
    "DEFAULT_SESSION_MIN_BLOCKS",
    "MOONCAKE_BLOCK_TOKENS",
    "TraceRow",
    "prompt_text",
    "trace_body",
    "infer_sessions",
    "read_mooncake",
    "read_trace_bytes",
    "reject_csv",
    "vocabulary",
]

MOONCAKE_BLOCK_TOKENS = 512
"""Tokens per ``hash_ids`` block in the published Mooncake traces."""

_CONS = "bcdfghjklmnprstvz"
_VOWELS = "aeiou"
VOCAB_SIZE = 4096


@lru_cache(maxsize=1)
def vocabulary() -> tuple[str, ...]:
    """The fixed pseudo-word vocabulary (4,096 words of 4-6 letters), each one simulator token.

    Raises:
        RuntimeError: a word is not exactly one token with a leading space (the
            tokenizer changed; block sizes would be wrong).
    """
    from kvreplay.sim.tokenizer import count_tokens

    rng = random.Random("kvreplay-vocabulary")
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < VOCAB_SIZE:
        n = rng.choice((2, 3))
        w = "".join(rng.choice(_CONS) + rng.choice(_VOWELS) for _ in range(n))
        if w in seen:
            continue
        seen.add(w)
        words.append(w)
    bad = [w for w in words if count_tokens(" " + w) != 1]
    if bad or count_tokens("".join(" " + w for w in words[:64])) != 64:
        raise RuntimeError(f"vocabulary words are not one simulator token each: {bad[:3]}")
    return tuple(words)


@lru_cache(maxsize=4096)
def block_text(hash_id: int, tokens: int) -> str:
    """The text of block ``hash_id``: ``tokens`` space-led pseudo-words (one simulator token each).

    Deterministic in ``hash_id`` (seeded ``random.Random("kvreplay-block:<id>")``);
    a shorter block is a prefix of the full one.
    """
    vocab = vocabulary()
    rng = random.Random(f"kvreplay-block:{hash_id}")
    bits = rng.getrandbits
    return "".join([" " + vocab[bits(12)] for _ in range(tokens)])


@dataclass(frozen=True, slots=True)
class TraceRow:
    """One Mooncake trace line.

    Attributes:
        timestamp_ms: Arrival (ms from the trace start).
        input_length: Prompt tokens.
        output_length: Output tokens.
        hash_ids: Prefix block ids, in order.
        line: 1-based line number in the trace file.
    """

    timestamp_ms: float
    input_length: int
    output_length: int
    hash_ids: tuple[int, ...]
    line: int


def reject_csv(data: bytes, path: Path) -> None:
    """Refuse a CSV trace (Azure's LLM inference traces are CSV) with a message that says why.

    Block traces are JSON Lines with ``hash_ids`` per request (Mooncake's format); a CSV of
    timestamps and token counts has no prefix identity to rebuild bodies or reuse from.

    Raises:
        WorkloadError: the first non-empty line does not start with ``{`` and has commas.
    """
    first = next((ln.strip() for ln in data.splitlines() if ln.strip()), b"")
    if first and not first.startswith(b"{") and b"," in first:
        raise WorkloadError(
            "looks like a CSV trace (e.g. Azure's): it has no prefix block ids; only JSON Lines "
            "block traces with hash_ids (Mooncake's format) are supported",
            path=path, line=1,
        )


def read_trace_bytes(path: str | Path) -> tuple[Path, bytes]:
    """A block trace's bytes, after :func:`reject_csv`.

    Raises:
        WorkloadError: unreadable file, or a CSV trace.
    """
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise WorkloadError(f"cannot read trace: {exc}", path=p) from exc
    reject_csv(data, p)
    return p, data


def read_mooncake(
    path: str | Path, *, limit: int | None = None, block_tokens: int = MOONCAKE_BLOCK_TOKENS
) -> list[TraceRow]:
    """Read and check a Mooncake trace (JSONL).

    Args:
        path: The trace file.
        limit: Read only the first ``limit`` requests.
        block_tokens: Tokens per block (512 in the published traces).

    Returns:
        The rows, in file order.

    Raises:
        WorkloadError: unreadable file, a line that is not a JSON object with the
            four fields, or ``hash_ids`` that cannot hold ``input_length``
            tokens at ``block_tokens`` per block (file and line named).
    """
    p, data = read_trace_bytes(path)
    rows: list[TraceRow] = []
    for lineno, line in enumerate(data.splitlines(), start=1):
        if limit is not None and len(rows) >= limit:
            break
        if not line.strip():
            continue
        obj = json_line(line, p, lineno)
        try:
            ts = obj["timestamp"]
            n_in, n_out, ids = obj["input_length"], obj["output_length"], obj["hash_ids"]
        except (KeyError, TypeError) as exc:
            raise WorkloadError(f"missing field {exc}", path=p, line=lineno) from exc
        if (
            not isinstance(ts, (int, float))
            or not isinstance(n_in, int)
            or n_in < 1
            or not isinstance(n_out, int)
            or n_out < 1
            or not isinstance(ids, list)
            or not ids
            or not all(isinstance(h, int) for h in ids)
        ):
            raise WorkloadError(
                "needs timestamp (ms), input_length >= 1, output_length >= 1 and "
                "a non-empty list of integer hash_ids",
                path=p,
                line=lineno,
            )
        if not (len(ids) - 1) * block_tokens < n_in <= len(ids) * block_tokens:
            raise WorkloadError(
                f"{len(ids)} blocks of {block_tokens} tokens cannot hold input_length "
                f"{n_in} (wrong --block-tokens?)",
                path=p,
                line=lineno,
                field="hash_ids",
            )
        rows.append(TraceRow(ts, n_in, n_out, tuple(ids), lineno))
    if not rows:
        raise WorkloadError("trace holds no requests", path=p)
    return rows


def trace_body(row: TraceRow, block_tokens: int, model: str, *, chat: bool, ignore_eos: bool,
               blocks: TokenBlocks | None = None) -> bytes:
    """The request body of one block-trace row (Mooncake, Bailian): its prompt text, output length, streamed.

    Args:
        row: The trace row (block hash ids, output length).
        block_tokens: Tokens per block of the trace.
        model: The body's ``model``.
        chat: A chat body (``messages``: one user message) instead of a completions body (``prompt``).
        ignore_eos: Add ``"ignore_eos": true`` (vLLM, SGLang) so the output length is kept.
        blocks: Block texts in a real tokenizer's tokens (``--tokenizer``,
            ``workload.token_blocks``); None: the simulator's pseudo-words.

    Returns:
        The JSON body's bytes (orjson, no trailing newline).

    Raises:
        ConfigError: with ``blocks``, a prompt that is not exactly ``input_length`` tokens.
    """
    if blocks is not None:
        text = blocks.prompt(row.hash_ids, row.input_length)
        blocks.check(text, row.input_length, f"trace line {row.line}")
    else:
        text = prompt_text(row, block_tokens)
    body: dict = {"model": model}
    if chat:
        body["messages"] = [{"role": "user", "content": text}]
    else:
        body["prompt"] = text
    body.update({"max_tokens": row.output_length, "stream": True, "stream_options": {"include_usage": True}})
    if ignore_eos:
        body["ignore_eos"] = True
    return orjson.dumps(body)


def prompt_text(row: TraceRow, block_tokens: int) -> str:
    """The prompt of one row: its blocks' texts, the last cut to ``input_length``."""
    ids = row.hash_ids
    last = row.input_length - (len(ids) - 1) * block_tokens
    parts = [block_text(h, block_tokens) for h in ids[:-1]]
    full_last = block_text(ids[-1], block_tokens)
    parts.append(full_last if last == block_tokens else _cut_words(full_last, last))
    return "".join(parts)


def _cut_words(text: str, words: int) -> str:
    """The first ``words`` space-led words of ``text``."""
    i = -1
    for _ in range(words + 1):
        i = text.find(" ", i + 1)
        if i < 0:
            return text
    return text[:i]


def _chain(ids: tuple[int, ...]) -> list[int]:
    """``h[k]`` identifies ``ids[:k]`` (a running hash; a match is confirmed on the ids themselves)."""
    h, out = 0, [0]
    for x in ids:
        h = hash((h, x))
        out.append(h)
    return out


def infer_sessions(rows: list[TraceRow], block_tokens: int,
                   min_blocks: int = DEFAULT_SESSION_MIN_BLOCKS) -> list[Turn]:
    """Sessions rebuilt from shared ``hash_ids`` prefixes (the rule in the module docstring).

    Args:
        rows: The trace rows, in file order (body ``i`` is ``rows[i]``).
        block_tokens: Tokens per block.
        min_blocks: Shortest shared prefix (blocks) that continues a session (>= 1).

    Returns:
        One ``Turn`` per row, in row order.
    """
    tips: dict[tuple[int, int], tuple[int, str, int]] = {}  # (k, chain) -> (row, session, turn)
    turns: list[Turn] = []
    n_sessions = 0
    for i, row in enumerate(rows):
        ids = row.hash_ids
        chain = _chain(ids)
        found = None
        for k in range(len(ids), min_blocks - 1, -1):
            tip = tips.get((k, chain[k]))
            if tip is not None and rows[tip[0]].hash_ids[:k] == ids[:k]:
                found = tip
                del tips[(k, chain[k])]
                break
        if found is None:
            sid, turn, think = f"mc-{n_sessions}", 0, 0.0
            n_sessions += 1
        else:
            prev, sid, last = found
            turn = last + 1
            think = min(MAX_THINK_TIME_S, max(0.0, (row.timestamp_ms - rows[prev].timestamp_ms) / 1000.0))
        turns.append(Turn(i, sid, turn, think))
        full = min(len(ids), row.input_length // block_tokens)
        if full >= min_blocks:
            tips[(full, chain[full])] = (i, sid, turn)
    return turns


@dataclass(frozen=True, slots=True)
class ImportResult:
    """What ``import_mooncake`` wrote.

    Attributes:
        workload: The JSONL workload (one body per line).
        arrivals: JSON list of arrival offsets (ms), one per body.
        plan: TOML plan with one open-loop phase over the arrivals.
        requests: Bodies written.
        prompt_tokens: Sum of ``input_length`` (simulator tokens).
        sessions: The sessions side file and the number of sessions, or None without ``sessions``.
    """

    workload: Path
    arrivals: Path
    plan: Path
    requests: int
    prompt_tokens: int
    sessions: tuple[Path, int] | None = None


def import_mooncake(
    trace: str | Path,
    out: str | Path,
    *,
    limit: int | None = None,
    block_tokens: int = MOONCAKE_BLOCK_TOKENS,
    model: str = DEFAULT_MODEL,
    chat: bool = False,
    concurrency: int = IMPORT_CONCURRENCY,
    time_scale: float = 1.0,
    ignore_eos: bool = False,
    sessions: bool = False,
    session_min_blocks: int = DEFAULT_SESSION_MIN_BLOCKS,
    blocks: TokenBlocks | None = None,
) -> ImportResult:
    """Write a workload, its arrival offsets and a plan from a Mooncake trace.

    Args:
        trace: Mooncake JSONL trace.
        out: Workload path (``.jsonl``; the suffix is added when missing). The
            arrivals go to ``<stem>.arrivals.json`` and the plan to
            ``<stem>.plan.toml`` beside it.
        limit: First ``limit`` requests only.
        block_tokens: Tokens per hash block (512 for the published traces).
        model: ``model`` field of every body.
        chat: Chat bodies (one user message) instead of completions (``prompt``).
        concurrency: The plan's cap on requests in flight.
        time_scale: The plan's multiplier on trace offsets (0.5 = twice as fast).
        ignore_eos: Add ``"ignore_eos": true`` (vLLM/SGLang) so servers produce
            ``output_length`` tokens.
        sessions: Also write the sessions side file inferred by :func:`infer_sessions`.
        session_min_blocks: ``infer_sessions``'s ``min_blocks``.
        blocks: Block texts in a real tokenizer's tokens (``--tokenizer``); None: simulator pseudo-words.

    Returns:
        The paths written and counts.

    Raises:
        WorkloadError: a bad trace (see ``read_mooncake``).
    """
    rows = read_mooncake(trace, limit=limit, block_tokens=block_tokens)
    wl = Path(out)
    if wl.suffix != ".jsonl":
        wl = wl.with_name(wl.name + ".jsonl")
    try:
        toml_str(str(wl))  # the plan names it
    except ValueError as exc:
        shown = str(wl).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        raise ConfigError(str(exc), path=shown, field="--out") from exc
    wl.parent.mkdir(parents=True, exist_ok=True)
    stem = wl.with_suffix("")
    arrivals = stem.with_name(stem.name + ".arrivals.json")
    plan = stem.with_name(stem.name + ".plan.toml")
    # atomically, never through a symlink at W.jsonl (--force replaces the link, not its target)
    atomic_write_chunks(wl, (trace_body(row, block_tokens, model, chat=chat, ignore_eos=ignore_eos, blocks=blocks)
                             + b"\n" for row in rows))
    atomic_write_bytes(arrivals, orjson.dumps([r.timestamp_ms for r in rows]))
    atomic_write_text(
        plan,
        f"# {toml_comment(f'kvreplay import mooncake {Path(trace).name}')}: {len(rows)} requests, "
        f"{block_tokens}-token blocks.\n"
        f"# Paths are as given on the command line: run from the same directory.\n"
        f"workload = {toml_str(str(wl))}\n\n"
        f"[[phase]]\n"
        f'name = "trace"\n'
        f'order = "forward"\n'
        f"concurrency = {concurrency}\n"
        f"arrival = {toml_str('trace:' + str(arrivals))}\n"
        f"time_scale = {time_scale!r}\n",
    )
    side = None
    if sessions:
        turns = infer_sessions(rows, block_tokens, session_min_blocks)
        side = (write_sessions(wl, turns), sum(1 for t in turns if t.turn == 0))
    elif sessions_path(wl).is_file():
        sessions_path(wl).unlink()  # a side file of an earlier import would not describe these bodies
    return ImportResult(wl, arrivals, plan, len(rows), sum(r.input_length for r in rows), side)

