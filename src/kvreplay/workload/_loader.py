"""Load a workload: retained request bodies as the exact bytes they were captured with.

A workload is a folder of ``*.json`` files (one body each, sorted by name) or a
JSONL file (one body per non-blank line). Bodies are never re-serialised: the
bytes read are the bytes sent. Every body is checked before any request is sent;
a bad one raises ``WorkloadError`` naming file, line and field.

``load_workload`` indexes the workload (``kvreplay.workload.index``: offset,
length, SHA-256, kind per body, cached beside it) and holds no body: its
``bodies`` read each body from disk when indexed, checking its SHA-256 (issue 32).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

import orjson

from kvreplay.bundled import resolve as resolve_bundled
from kvreplay.errors import WorkloadError
from kvreplay.workload.index import CACHE_MIN_BYTES, IndexedBodies, load_index, sha_of, size_of
from kvreplay.workload.jsonscan import TooLargeToParse, loads_bounded
from kvreplay.workload.sessions import Sessions, load_sessions

__all__ = ["DEFAULT_MAX_BODY_BYTES", "Body", "Workload", "load_workload"]

DEFAULT_MAX_BODY_BYTES = 64 << 20
"""Largest body accepted by default (bytes); a 64k-token prompt is well under 1 MiB."""


@dataclass(frozen=True, slots=True)
class Body:
    """One retained request body.

    Attributes:
        index: 0-based position in the workload.
        raw: The exact bytes to send.
        sha256: Hex SHA-256 of ``raw`` (the body's identity).
        source: ``file.json`` or ``file.jsonl:LINE`` it came from.
        kind: ``"chat"`` (has ``messages``) or ``"completions"`` (has ``prompt``).
        stream: The body's own ``stream`` flag.
    """

    index: int
    raw: bytes
    sha256: str
    source: str
    kind: str
    stream: bool

    @property
    def body_bytes(self) -> int:
        """Size of the body (bytes)."""
        return len(self.raw)

    @property
    def path(self) -> str:
        """The OpenAI-compatible route this body is sent to."""
        return "/v1/chat/completions" if self.kind == "chat" else "/v1/completions"

    def decoded(self) -> dict:
        """The body parsed as JSON (for inspection only; never re-sent)."""
        return orjson.loads(self.raw)


@dataclass(frozen=True, slots=True)
class Workload:
    """An ordered list of bodies.

    Attributes:
        path: Where it was loaded from.
        bodies: The bodies, in workload order: a tuple of ``Body`` in memory, or (from
            ``load_workload``) an ``index.IndexedBodies`` that reads each body from disk
            when it is indexed (``bodies[i]``; ``index.BodyChanged`` when it changed).
        sha256: Hex SHA-256 over the bodies' hex digests joined by LF (order matters).
        sessions: The conversations its side file declares (``kvreplay.workload.sessions``),
            or None when it has none (every body stands alone).
    """

    path: str
    bodies: Sequence[Body]
    sha256: str
    sessions: Sessions | None = None

    def __len__(self) -> int:
        return len(self.bodies)

    def sha_of(self, i: int) -> str:
        """Hex SHA-256 of body ``i`` (read from the index, not from disk, where indexed)."""
        return sha_of(self.bodies, i)

    def size_of(self, i: int) -> int:
        """Bytes of body ``i`` (from the index, not from disk, where indexed)."""
        return size_of(self.bodies, i)

    def readahead(self, i: int | Sequence[int]) -> None:
        """Hint that body ``i`` (or bodies ``i``) is sent soon (indexed bodies: the kernel starts reading)."""
        ra = getattr(self.bodies, "readahead", None)
        if ra is not None:
            ra(i)

    def in_memory(self) -> Workload:
        """This workload with every body read into memory (for a copy sent to another host)."""
        if isinstance(self.bodies, tuple):
            return self
        return Workload(self.path, tuple(self.bodies), self.sha256)

    def duplicates(self) -> dict[str, list[int]]:
        """Bodies whose bytes are identical: sha256 -> indices (allowed, reported)."""
        seen: dict[str, list[int]] = {}
        for i in range(len(self.bodies)):
            seen.setdefault(self.sha_of(i), []).append(i)
        return {k: v for k, v in seen.items() if len(v) > 1}


def json_line(line: bytes, path: Path, lineno: int) -> Any:
    """One JSONL line decoded (any JSON value): ``jsonscan.loads_bounded``, so a huge line never crashes.

    Raises:
        WorkloadError: the line is not JSON ("not JSON: ...", file and 1-based line named), or
            its parsed form does not fit in the memory this process may allocate.
    """
    try:
        return loads_bounded(line)
    except orjson.JSONDecodeError as exc:
        raise WorkloadError(f"not JSON: {exc}", path=path, line=lineno) from exc
    except TooLargeToParse as exc:
        raise WorkloadError(f"line too large to parse: {exc}", path=path, line=lineno) from None


class _Where(TypedDict):
    """Where a body came from, as ``WorkloadError``'s keyword arguments."""

    path: Path
    line: int | None
    body_index: int


def check_body(raw: bytes, index: int, path: Path, line: int | None, max_bytes: int, *,
               doc: object = None) -> Body:
    """Validate one request body and describe it (its sha256, source and kind).

    Args:
        raw: The body's bytes as they will be sent.
        index: 0-based index of the body in the workload.
        path: The file it came from.
        line: Its 1-based JSONL line, or None.
        max_bytes: Largest body accepted.
        doc: ``orjson.loads(raw)`` when the caller parsed it already (the capture proxy
            parses each body once for these checks and its secret scan); None: parsed here.

    Returns:
        The ``Body`` (kind ``"chat"`` or ``"completions"``, ``stream`` as the body sets it).

    Raises:
        WorkloadError: over ``max_bytes``, not UTF-8, not a JSON object, or not a generation
            request (no ``messages`` list of objects with a string ``role``, no string or list
            ``prompt``), or ``stream`` not a bool; the location is named.
    """
    where: _Where = {"path": path, "line": line, "body_index": index}
    if len(raw) > max_bytes:
        raise WorkloadError(f"body is {len(raw)} bytes, over the limit of {max_bytes}", **where)
    obj = doc
    if obj is None:  # (a body of JSON null is parsed again: the same verdict)
        try:
            obj = loads_bounded(raw)  # orjson refuses bytes that are not UTF-8; the decode below names the byte
        except TooLargeToParse as exc:
            raise WorkloadError(f"body too large to parse: {exc}", **where) from None
        except orjson.JSONDecodeError as exc:
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as bad:
                raise WorkloadError(f"body is not UTF-8 (byte {bad.start})", **where) from bad
            raise WorkloadError(f"body is not valid JSON: {exc}", **where) from exc
    if not isinstance(obj, dict):
        raise WorkloadError(f"body is a JSON {type(obj).__name__}, not an object", **where)
    if "messages" in obj:
        kind = "chat"
        msgs = obj["messages"]
        if not isinstance(msgs, list) or not msgs:
            raise WorkloadError("must be a non-empty list of messages", field="messages", **where)
        for i, m in enumerate(msgs):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise WorkloadError("each message needs a string 'role'", field=f"messages[{i}]", **where)
    elif "prompt" in obj:
        kind = "completions"
        if not isinstance(obj["prompt"], (str, list)):
            raise WorkloadError("must be a string or a list", field="prompt", **where)
    else:
        raise WorkloadError(
            "neither 'messages' (chat) nor 'prompt' (completions): not a generation request",
            field="messages",
            **where,
        )
    stream = obj.get("stream", False)
    if not isinstance(stream, bool):
        raise WorkloadError("must be true or false", field="stream", **where)
    src = path.name if line is None else f"{path.name}:{line}"
    return Body(index, raw, hashlib.sha256(raw).hexdigest(), src, kind, stream)


MAX_WORKLOAD_BYTES = 1 << 40
"""Largest .jsonl workload file indexed (bytes); it is read in chunks, never whole (issue 32)."""


def load_workload(path: str | Path, *, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
                  cache_min_bytes: int = CACHE_MIN_BYTES) -> Workload:
    """Index and check every body of a workload; hold none of them.

    Args:
        path: A folder of ``*.json`` bodies, or a ``.jsonl`` file; ``bundled:NAME`` names a bundled
            workload (``kvreplay.bundled.resolve``: ``bundled:mtbench-52``).
        max_body_bytes: Largest body accepted (bytes).
        cache_min_bytes: Smallest workload (bytes of bodies) whose index is cached
            on disk (``kvreplay.workload.index``).

    Returns:
        The workload, bodies in order (file names sorted, or line order), read from
        disk when indexed (``index.IndexedBodies``), with its sessions when a side file
        exists (``kvreplay.workload.sessions.sessions_path``).

    Raises:
        WorkloadError: missing path, empty workload, or a body that is not UTF-8,
            not JSON, not an object, or not a chat/completions request (file, line
            and field named); a malformed sessions side file; an unknown ``bundled:`` name.
    """
    try:
        p = Path(resolve_bundled(path))
    except FileNotFoundError as exc:
        raise WorkloadError(str(exc), path=Path(path)) from None
    if p.is_file() and (size := p.stat().st_size) > MAX_WORKLOAD_BYTES:  # checked before reading (issue 17)
        raise WorkloadError(f"workload file is {size} bytes, over {MAX_WORKLOAD_BYTES} "
                            "(split it, or give a folder of *.json)", path=p)
    if not p.is_dir() and not p.is_file():
        raise WorkloadError("no such workload (a folder of *.json or a .jsonl file)", path=p)
    ix = load_index(p, max_body_bytes, check_body, cache_min_bytes=cache_min_bytes)
    if not len(ix):
        raise WorkloadError("workload holds no bodies", path=p)
    return Workload(str(p), IndexedBodies(ix, Body), ix.sha256, load_sessions(p, len(ix)))

