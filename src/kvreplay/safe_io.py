"""Run-directory files created without following symlinks (issue 17, output safety).

A run directory may be shared or pre-created by someone else; a symlink planted
at ``records.jsonl`` or ``summary.json.tmp`` must not make kvreplay overwrite a
file elsewhere. Files are opened with ``O_NOFOLLOW`` (a symlink at the name is
an error, ``ELOOP``); temporary files are created exclusively (``O_EXCL``) after
removing whatever sits at their name, then renamed over the target (``rename``
replaces a symlink itself, never its target).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, BinaryIO

import orjson

__all__ = ["atomic_write_bytes", "atomic_write_json", "atomic_write_text", "open_new"]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


def open_new(path: Path, *, append: bool = False) -> BinaryIO:
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


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through an exclusively created ``<path>.tmp`` and a rename.

    Raises:
        OSError: the directory is not writable, or the disk is full (the target
            keeps its previous content; the partial temporary file is removed).
    """
    tmp = path.with_name(path.name + ".tmp")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)  # a stale or planted entry (a symlink is removed, not followed)
    try:
        with open_new(tmp) as f:
            view = memoryview(data)
            while view:
                n = f.write(view)
                view = view[n:]
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    """``atomic_write_bytes`` of ``text`` in UTF-8."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any) -> None:
    """``atomic_write_bytes`` of ``obj`` as indented JSON (orjson, 2 spaces) and a final newline.

    Non-string dict keys (ints, enums) are written as strings (``OPT_NON_STR_KEYS``);
    registered secrets (``kvreplay.redaction``) are replaced by its marker.

    Raises:
        TypeError: ``obj`` holds a value orjson cannot serialize (nothing is written).
        OSError: as ``atomic_write_bytes``.
    """
    from kvreplay.redaction import redact_bytes  # registered secrets never reach a JSON artifact

    atomic_write_bytes(path, redact_bytes(orjson.dumps(obj, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
                                          + b"\n"))
