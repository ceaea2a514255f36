"""``records.jsonl``: the writer (one record a line, flushed as written) and the readers.

The record keys are listed in docs/summary-schema.md ("records.jsonl"). The
writer is the runner's (and each ``--workers`` / ``--ray`` worker's); the
readers serve the reports, ``load_run``, compare and the experiments. A reader
skips a torn last line (the writer was killed in the middle of a ``write``), a
blank line and a line that is not a JSON object.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from kvreplay.redaction import has_secrets, redact_bytes
from kvreplay.safe_io import open_new

__all__ = ["RecordStream", "RecordWriter", "iter_records", "mark_records", "read_records"]


class RecordWriter:
    """Appends one JSON line per record to records.jsonl, flushed as written.

    The file is opened unbuffered, so each record is one ``write`` syscall and a
    kill of kvreplay loses nothing already written. Registered secrets
    (``kvreplay.redaction``) are replaced by the redaction marker in each line
    before it is written. A write that fails or comes back short (disk full, file
    size limit) is undone (the file is cut back to the last whole record),
    ``failed`` holds the error, ``on_error`` is called once and later records are
    dropped (``lost`` counts them): never a half-written record.

    Args:
        path: The file; created, or appended to (never through a symlink:
            ``safe_io.open_new``).
        on_error: Called once with the first write error.

    Raises:
        OSError: the file cannot be created (a symlink at ``path``, no space,
            permission denied).
    """

    def __init__(self, path: Path, on_error: Callable[[OSError], None] | None = None) -> None:
        self.path = path
        self._f = open_new(path, append=True)
        self._pos = self._f.seek(0, os.SEEK_END)
        self.count = 0
        self.lost = 0
        self.failed: OSError | None = None
        self.on_error = on_error

    def write(self, rec: dict[str, Any]) -> None:
        """Append one record (a JSON object) and flush it.

        Raises:
            TypeError / orjson.JSONEncodeError: the record cannot be serialised
                (nothing is written).
        """
        line = orjson.dumps(rec, option=orjson.OPT_APPEND_NEWLINE)
        if has_secrets():
            line = redact_bytes(line)
        if self.failed is not None:
            self.lost += 1
            return
        try:
            n = self._f.write(line)
            if n != len(line):
                raise OSError(errno.ENOSPC, f"short write of a record ({n} of {len(line)} bytes)")
        except OSError as exc:
            self.lost += 1
            self.failed = exc
            with contextlib.suppress(OSError):  # nothing more can be done
                self._f.truncate(self._pos)
            if self.on_error is not None:
                self.on_error(exc)
            return
        self._pos += n
        self.count += 1

    def close(self) -> None:
        """Close the file."""
        self._f.close()


def mark_records(path: Path, keys: set[tuple[str, Any, int]], flag: str) -> int:
    """Set ``flag: true`` on the records whose ``(phase, position, t_sent_ns)`` is in ``keys``; one atomic rewrite.

    For a fact learnt after the records were written (identity drift seen by a later
    read). Every other line is kept byte for byte; a torn last line is dropped.

    Returns:
        How many records were marked.

    Raises:
        OSError: the file cannot be read or replaced (it then keeps its previous content).
    """
    from kvreplay.safe_io import atomic_write_bytes

    out: list[bytes] = []
    marked = 0
    for line in path.read_bytes().splitlines():
        if not line.strip():
            continue
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if (str(rec.get("phase")), rec.get("position"), rec.get("t_sent_ns")) in keys:
            rec[flag] = True
            line = orjson.dumps(rec)
            marked += 1
        out.append(line)
    atomic_write_bytes(path, b"".join(x + b"\n" for x in out))  # lines already redacted when first written
    return marked


def read_records(path: Path) -> list[dict[str, Any]]:
    """records.jsonl as dicts; a torn last line (a killed writer) is skipped; [] when missing."""
    out: list[dict[str, Any]] = []
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return out
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            out.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            continue
    return out


def iter_records(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """records.jsonl one dict at a time (a torn or bad line is skipped; a missing file is empty).

    Reads line by line: memory holds one record at a time.
    """
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed in finally; a generator
    except FileNotFoundError:
        return
    try:
        for line in f:
            if not line.strip():
                continue
            try:
                rec = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(rec, dict):
                yield rec
    finally:
        f.close()


class RecordStream:
    """A re-iterable view of records.jsonl: each ``iter()`` streams the file again.

    Truthy (it stands where ``diagnose`` takes a list of records); ``len`` is not
    defined, so nothing sizes it by loading it.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter_records(self.path)

    def __bool__(self) -> bool:
        return True
