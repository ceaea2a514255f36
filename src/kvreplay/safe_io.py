r"""The output sink: every file and stream kvreplay writes that can carry bytes from a server or a user.

One place, the way a template engine routes every page through one autoescape
(issue 26, item 3). What passes through here:

- **redacted**: every secret registered in ``kvreplay.redaction`` (the API key,
  URL credentials) is replaced by its marker, in text, Markdown, HTML, JSON and
  JSON Lines alike (JSON: in every string and key, whatever JSON escaping the
  secret would need);
- **escaped**: Markdown, HTML and terminal text get their control characters
  (C0 but tab and LF, DEL, C1; so also every ESC sequence) shown as ``\xNN``
  (``redaction.escape_controls``); JSON escapes C0 itself and the sink writes
  DEL and C1 as ``\u00NN``, so a JSON file is inert when printed and still
  decodes to the same strings;
- **written atomically and without following a symlink**: a file is written to
  ``<path>.tmp`` created with ``O_EXCL | O_NOFOLLOW`` in the same directory (a
  stale or planted entry at that name makes the open fail: it is removed, never
  followed, and the open tried once more),
  flushed with ``fsync``, then renamed over ``<path>`` (``rename`` replaces a
  symlink at ``<path>`` itself, never its target) and the directory is synced.

Entry points:

=========================  ==============================================================
``atomic_write_text``      UTF-8 text, redacted.
``write_markdown``         ``report.md``/``compare.md``: redacted, controls escaped.
``write_html``             ``report.html``: redacted, controls escaped.
``atomic_write_json``      JSON (2-space indent, final newline); see ``dumps_json``.
``open_jsonl``             an append-only JSON Lines file (one ``dumps_json`` line per write).
``echo``                   a line on stdout/stderr: redacted, controls escaped.
``atomic_write_bytes``     bytes the caller vouches for (PNG, a captured body): atomic only.
``open_new``               the no-symlink open under all of the above.
=========================  ==============================================================

JSON numbers: orjson refuses integers outside 64 bits; the sink writes an
integer below ``-(2**63)`` or above ``2**64 - 1`` as its decimal string
(``2**70`` -> ``"1180591620717411303424"``), so no value is lost or rounded and
the file stays JSON any reader decodes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any, BinaryIO, TextIO

import orjson

from kvreplay.redaction import MARKER, escape_controls, redact, secrets

__all__ = ["INT_MAX", "INT_MIN", "JsonlAppender", "atomic_write_bytes", "atomic_write_chunks", "atomic_write_json",
           "atomic_write_text",
           "clean_text", "dumps_json", "echo", "open_jsonl", "open_new", "write_html", "write_markdown"]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)

INT_MIN = -(2**63)
"""Smallest integer written as a JSON number (orjson's range); smaller ones become decimal strings."""
INT_MAX = 2**64 - 1
"""Largest integer written as a JSON number (orjson's range); larger ones become decimal strings."""


def open_new(path: str | os.PathLike[str], *, append: bool = False) -> BinaryIO:
    """Open ``path`` for unbuffered binary writing without following a symlink.

    Args:
        path: The file.
        append: Append (``O_APPEND``, created when missing; several processes may
            share it); else create exclusively (``O_EXCL``).

    Raises:
        OSError: a symlink at ``path`` (``ELOOP``), an existing file without
            ``append`` (``EEXIST``), or any other open failure.
    """
    flags = os.O_WRONLY | os.O_CREAT | _NOFOLLOW | _CLOEXEC
    flags |= os.O_APPEND if append else os.O_EXCL
    fd = os.open(path, flags, 0o644)
    return open(fd, "ab" if append else "wb", buffering=0)  # noqa: SIM115 - the caller closes it


def _write_all(f: BinaryIO, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = f.write(view)
        if not n:
            raise OSError(f"short write: {len(view)} bytes not written")
        view = view[n:]


def _sync_dir(path: Path) -> None:
    """Sync (fsync) the directory holding ``path`` (the rename itself), where the platform allows it."""
    try:
        fd = os.open(path.parent, os.O_RDONLY | _CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes, *, fsync: bool = True) -> None:
    """Write ``data`` to ``path`` through an exclusively created ``<path>.tmp`` and a rename.

    No redaction: for bytes the caller vouches for (a PNG, a captured request
    body); text goes through ``atomic_write_text`` and the other entry points.

    Args:
        path: The target file.
        data: Its whole new content.
        fsync: Sync the file before the rename and the directory after it (a
            crash leaves the old or the new content). False for a hot path that
            keeps its own durability record (the capture proxy's body files).

    Raises:
        OSError: the directory is not writable, or the disk is full (the target
            keeps its previous content; the partial temporary file is removed).
    """
    atomic_write_chunks(path, (data,), fsync=fsync)


def atomic_write_chunks(path: str | os.PathLike[str], chunks: Iterable[bytes], *, fsync: bool = True) -> None:
    """``atomic_write_bytes`` of the concatenation of ``chunks``, written as they come (never joined in memory).

    No redaction: the caller vouches for the bytes (``rundir.planfile`` streams a
    plan.json whose parts went through ``dumps_json``).

    Raises:
        OSError: as ``atomic_write_bytes``; any error raised by ``chunks`` itself passes through
            (the temporary file removed, the target unchanged).
    """
    path = os.fspath(Path(path))  # "a/b/" is "a/b", as a Path says
    tmp = path + ".tmp"
    try:
        f = open_new(tmp)
    except FileExistsError:  # a stale or planted entry (a symlink is removed, not followed); then once more
        with contextlib.suppress(FileNotFoundError):  # gone meanwhile (another writer of this file renamed it)
            os.unlink(tmp)
        f = open_new(tmp)
    try:
        with f:
            for data in chunks:
                _write_all(f, data)
            if fsync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:  # also a producer's own error mid-stream: no partial .tmp is left behind
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if fsync:
        _sync_dir(Path(path))


def atomic_write_text(path: Path, text: str) -> None:
    """``atomic_write_bytes`` of ``text`` in UTF-8, registered secrets redacted (``redaction.redact``).

    Raises:
        OSError: as ``atomic_write_bytes``.
    """
    atomic_write_bytes(path, redact(text).encode("utf-8"))


def clean_text(text: str) -> str:
    r"""``text`` as the sink writes Markdown, HTML and terminal lines: secrets redacted, controls as ``\xNN``.

    Tab and LF are kept; every other C0 character, DEL and C1 (so ESC, and with
    it every terminal escape sequence, and CR) is shown as ``\xNN``.
    """
    return escape_controls(redact(text))


def write_markdown(path: Path, text: str) -> None:
    """Write a Markdown file (``report.md``, ``compare.md``) through the sink (``clean_text``, atomic).

    Raises:
        OSError: as ``atomic_write_bytes``.
    """
    atomic_write_bytes(path, clean_text(text).encode("utf-8"))


def write_html(path: Path, text: str) -> None:
    """Write an HTML page (``report.html``) through the sink (``clean_text``, atomic).

    The page's values must already be HTML-escaped (``kvreplay.report.html``);
    the sink adds redaction and control escaping.

    Raises:
        OSError: as ``atomic_write_bytes``.
    """
    atomic_write_bytes(path, clean_text(text).encode("utf-8"))


# ------------------------------------------------------------------ JSON

_C1_DEL = re.compile(rb"\x7f|\xc2[\x80-\x9f]")  # DEL, and U+0080..U+009F in UTF-8 (0xC2 is only a lead byte)


def _u_escape(m: re.Match[bytes]) -> bytes:
    return b"\\u%04x" % ord(m.group().decode("utf-8"))


def _strip_secrets(s: str, found: tuple[str, ...]) -> str:
    for sec in found:
        if sec in s:
            s = s.replace(sec, MARKER)
    return s


def _prepare(obj: Any, found: tuple[str, ...]) -> Any:
    """``obj`` with secrets replaced in every string and key, and integers outside 64 bits as strings."""
    if isinstance(obj, str):
        return _strip_secrets(obj, found) if found else obj
    if obj is None or isinstance(obj, bool | float):
        return obj
    if isinstance(obj, int):
        return obj if INT_MIN <= obj <= INT_MAX else str(int(obj))
    if isinstance(obj, dict):
        return {_prepare(k, found): _prepare(v, found) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_prepare(v, found) for v in obj]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _prepare(getattr(obj, f.name), found) for f in dataclasses.fields(obj)}
    return obj  # left to orjson (enum, datetime, ...), or refused by it


def dumps_json(obj: Any, *, indent: bool = True) -> bytes:
    r"""The sink's JSON encoding of ``obj`` (no final newline).

    orjson with ``OPT_NON_STR_KEYS`` (int and enum keys written as strings) and,
    when ``indent``, ``OPT_INDENT_2``. Registered secrets are replaced by the
    marker in every string and key before encoding; integers outside
    ``[INT_MIN, INT_MAX]`` are written as their decimal string; DEL and C1
    characters as ``\u007f``..``\u009f`` (C0 is escaped by JSON itself).

    Raises:
        TypeError: ``obj`` holds a value orjson cannot serialize (a set, an
            arbitrary object, a string with a lone surrogate).
    """
    option = orjson.OPT_NON_STR_KEYS | (orjson.OPT_INDENT_2 if indent else 0)
    found = secrets()
    if found:
        obj = _prepare(obj, found)
    try:
        data = orjson.dumps(obj, option=option)
    except TypeError:
        if found:
            raise
        data = orjson.dumps(_prepare(obj, found), option=option)  # integers over 64 bits; else raises again
    return _C1_DEL.sub(_u_escape, data)


def atomic_write_json(path: Path, obj: Any) -> None:
    """Write ``obj`` as indented JSON and a final newline (``dumps_json``), atomically.

    Raises:
        TypeError: ``obj`` holds a value orjson cannot serialize (nothing is written).
        OSError: as ``atomic_write_bytes``.
    """
    atomic_write_bytes(path, dumps_json(obj) + b"\n")


class JsonlAppender:
    """An append-only JSON Lines file: one ``dumps_json`` line per ``write``, written whole, unbuffered.

    Opened with ``open_new(path, append=True)`` (created when missing, a symlink
    refused). Lines are not synced one by one; a line is written with one
    ``write`` call per chunk until all of it is out (a short write is retried,
    a zero-byte write raises ``OSError``).
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._f = open_new(self.path, append=True)

    def write(self, obj: Any) -> None:
        """Append ``obj`` as one compact JSON line.

        Raises:
            TypeError: ``obj`` is not serializable (nothing is written).
            OSError: the write failed.
        """
        _write_all(self._f, dumps_json(obj, indent=False) + b"\n")

    def close(self) -> None:
        """Close the file (idempotent)."""
        self._f.close()

    def __enter__(self) -> JsonlAppender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_jsonl(path: Path) -> JsonlAppender:
    """A ``JsonlAppender`` on ``path`` (``requests.jsonl`` of a probe).

    Raises:
        OSError: a symlink at ``path`` or any other open failure.
    """
    return JsonlAppender(path)


# ------------------------------------------------------------------ terminal


def echo(*parts: object, err: bool = False, file: TextIO | None = None, sep: str = " ", end: str = "\n",
         flush: bool = True) -> None:
    """Print a line as ``print`` does, through the sink: secrets redacted, controls escaped (``clean_text``).

    For every terminal line that may carry server or user bytes (an error from
    the server, a file's content, a progress message). JSON for a terminal goes
    through ``dumps_json``; the live display writes its own escape codes and
    does not come here.

    Args:
        parts: Values joined as ``print`` would (``str`` of each).
        err: stderr instead of stdout.
        file: Another text stream (a log), instead of either.
        sep: Between parts.
        end: After the line.
        flush: Flush the stream.
    """
    stream: TextIO = file if file is not None else sys.stderr if err else sys.stdout
    stream.write(clean_text(sep.join(str(p) for p in parts)) + end)
    if flush:
        stream.flush()
