"""What the conversation importers share: chat bodies, a streamed JSON array, a sessions workload writer.

The conversation importers (``sharegpt``, ``bailian``, ``aiperf``, ``vllm`` and the
sessions of ``mooncake``) write a JSONL workload ``W.jsonl`` (one body per line) and
its sessions side file ``W.sessions.jsonl`` (``workload.sessions``, written through
``write_sessions``). The bodies are chat requests built by :func:`chat_body`:

    {"model": M, "messages": [...], "max_tokens": N, "stream": true,
     "stream_options": {"include_usage": true}}

in that key order, serialised once with orjson (message text kept exactly: orjson
escapes only what JSON requires and writes non-ASCII text as UTF-8).

Memory: a JSON-array source is read through :func:`iter_json_array`, which reads the
file in chunks and parses one element at a time (memory: a few times the largest
element); the workload is written line by line to ``W.jsonl.tmp`` and renamed
only when the whole source was read, so a bad source leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from kvreplay.errors import ConfigError, WorkloadError
from kvreplay.options.importing import DEFAULT_MAX_TOKENS, IMPORT_MODEL
from kvreplay.safe_io import open_new
from kvreplay.workload.jsonscan import value_end, ws
from kvreplay.workload.sessions import Turn, sessions_path, write_sessions

__all__ = ["DEFAULT_MAX_TOKENS", "DEFAULT_MODEL", "ConversationImport", "SessionWorkloadWriter", "amplification_line",
           "chat_body",
           "iter_json_array", "jsonl_out"]

DEFAULT_MODEL = IMPORT_MODEL
"""``model`` of every imported body when the source has none and ``--model`` is not given (the simulator's).

``DEFAULT_MAX_TOKENS`` (``max_tokens`` where the source has none) is declared with ``kvreplay import``'s
options, ``kvreplay.options.importing``."""


def chat_body(model: str, messages: list[dict[str, str]], max_tokens: int) -> bytes:
    """A streamed chat request's bytes (the key order of the module docstring), no trailing newline."""
    return orjson.dumps({"model": model, "messages": messages, "max_tokens": max_tokens, "stream": True,
                         "stream_options": {"include_usage": True}})


def iter_json_array(path: Path, *, chunk_bytes: int = 1 << 20) -> Iterator[tuple[int, Any]]:
    """The elements of a file holding one JSON array, parsed one at a time: ``(0-based index, value)``.

    A file whose first value is an object (not an array) yields that one object as
    element 0. The file is read in chunks of ``chunk_bytes`` (more while an element is
    longer); the buffer holds the unread rest of one chunk and the element being read,
    so memory is bounded by a few times the largest element, not the file.

    Raises:
        WorkloadError: unreadable or empty file, not an array or object, an element
            that is not JSON (its index named as ``field="[i]"``), trailing bytes.
    """
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError as exc:
        raise WorkloadError(f"cannot read: {exc}", path=path) from exc
    with f:
        yield from _ArrayReader(f, path, chunk_bytes).elements()


class _ArrayReader:
    """Scans one JSON array from a binary file, refilling its buffer as elements need."""

    def __init__(self, f: Any, path: Path, chunk_bytes: int) -> None:
        self.f, self.path, self.chunk = f, path, chunk_bytes
        self.buf, self.pos, self.eof = b"", 0, False
        self.largest_buffer = 0

    def _more(self) -> bool:
        """Append a chunk (at least as long as what is held); False at the end of the file."""
        if self.eof:
            return False
        try:
            data = self.f.read(max(self.chunk, len(self.buf) - self.pos))
        except OSError as exc:
            raise WorkloadError(f"cannot read: {exc}", path=self.path) from exc
        if not data:
            self.eof = True
            return False
        self.buf, self.pos = self.buf[self.pos:] + data, 0
        self.largest_buffer = max(self.largest_buffer, len(self.buf))
        return True

    def _ws(self) -> bytes:
        """Skip whitespace; the next byte (b"" at the end of the file)."""
        while True:
            self.pos = ws(self.buf, self.pos)
            if self.pos < len(self.buf) or not self._more():
                return self.buf[self.pos: self.pos + 1]

    def _value(self, where: str | None) -> Any:
        """Parse the value at ``pos`` (an object or array: its end is found before parsing)."""
        while True:
            try:
                end = value_end(self.buf, self.pos)
            except (ValueError, IndexError) as exc:
                if self._more():
                    continue
                raise WorkloadError(f"not JSON: {exc}", path=self.path, field=where) from exc
            if end == len(self.buf) and self._more():
                continue  # a scalar may go on in the next chunk
            try:
                obj = orjson.loads(self.buf[self.pos: end])
            except orjson.JSONDecodeError as exc:
                raise WorkloadError(f"not JSON: {exc}", path=self.path, field=where) from exc
            self.pos = end
            return obj

    def elements(self) -> Iterator[tuple[int, Any]]:
        first = self._ws()
        if not first:
            raise WorkloadError("empty file", path=self.path)
        if first == b"{":
            obj = self._value(None)
            self._end()
            yield 0, obj
            return
        if first != b"[":
            raise WorkloadError("not a JSON array (or object)", path=self.path)
        self.pos += 1
        if self._ws() == b"]":
            self.pos += 1
            self._end()
            return
        idx = 0
        while True:
            if not self._ws():
                raise WorkloadError("the array is not closed", path=self.path, field=f"[{idx}]")
            yield idx, self._value(f"[{idx}]")
            sep = self._ws()
            if sep == b"]":
                self.pos += 1
                self._end()
                return
            if sep != b",":
                raise WorkloadError("expected ',' or ']' after the element", path=self.path, field=f"[{idx}]")
            self.pos += 1
            idx += 1

    def _end(self) -> None:
        if self._ws():
            raise WorkloadError("bytes after the JSON value", path=self.path)


def jsonl_out(out: str | Path) -> Path:
    """The workload file ``--out`` names: ``out`` with ``.jsonl`` added when it has another suffix.

    Raises:
        ConfigError: ``out`` is an existing directory.
    """
    wl = Path(out)
    if wl.suffix != ".jsonl":
        wl = wl.with_name(wl.name + ".jsonl")
    if wl.is_dir():
        raise ConfigError("is a directory; give a .jsonl workload file", path=str(wl), field="--out")
    return wl


@dataclass(frozen=True, slots=True)
class ConversationImport:
    """What a conversation importer wrote.

    Attributes:
        workload: The JSONL workload.
        sessions_file: Its sessions side file (None for a flat workload).
        sessions: Sessions written.
        bodies: Bodies (turns) written.
        skipped: Source records skipped, by reason.
        source: The file imported (its size is compared with the workload's), or None.
    """

    workload: Path
    sessions_file: Path | None
    sessions: int
    bodies: int
    skipped: dict[str, int]
    source: Path | None = None

    def lines(self) -> list[str]:
        """What ``kvreplay import`` prints (with :func:`amplification_line` when the source is known)."""
        skipped = "".join(f", {n} skipped ({why})" for why, n in sorted(self.skipped.items()))
        grew = [amplification_line(self.source, self.workload)] if self.source is not None else []
        if self.sessions_file is None:
            return [f"{self.bodies} bodies{skipped} -> {self.workload}", *grew,
                    f"  replay:  kvreplay run {self.workload} --target URL --phase replay:forward:c4"]
        return [f"{self.sessions} sessions, {self.bodies} bodies{skipped} -> {self.workload}", *grew,
                f"sessions -> {self.sessions_file}",
                f"  replay:  kvreplay run {self.workload} --target URL --phase replay:forward:c4"]


def amplification_line(source: Path, workload: Path) -> str:
    """How much larger the workload is than its source, one line (``kvreplay import`` prints it).

    A conversation import writes each turn as a complete request, its history included, so
    a session of ``n`` turns holds its first message ``n`` times: a ShareGPT file of long
    conversations becomes a workload hundreds of times its size, which the run then sends.
    Block traces (Mooncake, Bailian) become text from ids, far larger again.

    Returns:
        ``"amplification: 200.0x the source (61,234 -> 12,246,800 bytes): ..."``; sizes from
        ``stat`` (bytes), the factor ``workload / source`` (``inf`` for an empty source).
    """
    src, out = source.stat().st_size, workload.stat().st_size
    factor = f"{out / src:.1f}x" if src else "inf"
    return (f"amplification: {factor} the source ({src:,} -> {out:,} bytes): every body is sent whole, "
            "history included")


class SessionWorkloadWriter:
    """Writes a JSONL workload body by body, with each body's session turn, then its side file.

    Use as a context manager; ``commit()`` renames the workload into place and writes
    the sessions side file; leaving the block without ``commit()`` (an error) removes
    the partial file.

    Attributes:
        path: The workload file (``.jsonl``).
        turns: One ``Turn`` per body written, in body order.
        sessions: Number of sessions opened.
    """

    def __init__(self, out: str | Path, source: str | Path | None = None) -> None:
        """Open ``out`` (a ``.jsonl`` path; ``source``: the file imported, named when it holds no request)."""
        self.path = jsonl_out(out)
        self.source = Path(source) if source is not None else None
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = self.path.with_name(self.path.name + ".tmp")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._tmp)
        self._f = open_new(self._tmp)
        self.turns: list[Turn] = []
        self.sessions = 0
        self._ids: set[str] = set()
        self._committed = False

    def new_session(self, sid: str, path: Path, where: str) -> None:
        """Open session ``sid`` (ids must be unique).

        Raises:
            WorkloadError: ``sid`` was already used (``where`` names the source field).
        """
        if sid in self._ids:
            raise WorkloadError(f"session id {sid!r} is used twice", path=path, field=where)
        self._ids.add(sid)
        self.sessions += 1

    def add(self, body: bytes, session: str, turn: int, think_time_s: float = 0.0) -> int:
        """Write one body (its bytes, no newline) as ``turn`` of ``session``; returns its body index."""
        i = len(self.turns)
        self._f.write(body + b"\n")
        self.turns.append(Turn(i, session, turn, think_time_s))
        return i

    def commit(self, turns: list[Turn] | None = None, *, sessions: bool = True) -> Path | None:
        """Put the workload in place and write its sessions side file; returns the side file's path.

        Args:
            turns: The turns to write instead of those given to ``add`` (an importer that
                knows a body's session only once the whole source is read).
            sessions: False for a flat workload: no side file (a stale one is removed).

        Raises:
            WorkloadError: no body was written.
        """
        self._f.close()
        if not self.turns:
            raise WorkloadError("no request to import", path=self.source or self.path)
        os.replace(self._tmp, self.path)
        self._committed = True
        if not sessions:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(sessions_path(self.path))  # it would describe other bodies
            return None
        return write_sessions(self.path, self.turns if turns is None else turns)

    def __enter__(self) -> SessionWorkloadWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._committed:
            self._f.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._tmp)

    @property
    def sessions_file(self) -> Path:
        """Where the side file is (or will be) written."""
        return sessions_path(self.path)
