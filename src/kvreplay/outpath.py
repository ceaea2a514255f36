"""Where a command may write its ``--out``: the one check every writing command makes first (issue 44 item 6).

Before, ``import`` and ``export`` replaced whatever was at ``--out``: an unrelated file,
the command's own source, and (as root) a device node (``/dev/full`` replaced by a
regular file through the atomic rename). ``check_out`` refuses, with one line naming
the flag and the path:

- always: a **special file** (character or block device, FIFO, socket; a symlink is
  judged by what it points to), the command's **own input** (the same file, compared by
  device and inode, so a link or another spelling of the path is caught), a path whose
  **parent folder is missing** (unless the command creates it: ``make_parents``) or is
  not a folder (``--out`` under a file), a **folder** where a file is written
  (and a file where a folder is), a non-empty folder where a folder is created;
- unless ``force``: an **existing file** (``--force`` replaces it, the behaviour before
  this check).

The same rules apply to the files written beside ``--out`` (``siblings``: the plan, the
arrivals, the sessions side file). Used by ``kvreplay import``, ``export`` and ``record``
(``api/importing.py``, ``api/exporting.py``, ``workload.capture.CaptureWriter``); a new
command that writes a user-named path calls it the same way.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from kvreplay.errors import ConfigError

__all__ = ["check_out"]

_SPECIAL = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
            (stat.S_ISSOCK, "a socket"))


def _shown(p: Path) -> str:
    return str(p).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _same(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _check_one(p: Path, *, folder: bool, force: bool, inputs: list[os.stat_result], field: str,
               make_parents: bool) -> None:
    def refuse(why: str) -> ConfigError:
        return ConfigError(why, path=_shown(p), field=field)

    parent = p.parent
    if not parent.exists() and not parent.is_symlink():
        if not make_parents:
            raise refuse(f"its folder {_shown(parent)} does not exist (create it first)")
        while not parent.exists() and not parent.is_symlink() and parent != parent.parent:
            parent = parent.parent  # the nearest existing ancestor must be a folder
    if not parent.is_dir():
        raise refuse(f"{_shown(parent)} is not a folder")
    try:
        st = os.stat(p)  # follows a symlink: what a write would reach
    except FileNotFoundError:
        if p.is_symlink() and (folder or not force):  # a dangling link: replaced itself, never followed
            raise refuse("exists (a dangling symlink); give --force to replace it" if not folder
                         else "exists (a dangling symlink); choose a new path") from None
        return
    except OSError as exc:
        raise refuse(f"cannot be examined: {exc.strerror or exc}") from None
    for test, what in _SPECIAL:
        if test(st.st_mode):
            raise refuse(f"is {what}, not a file kvreplay may write")
    if any(_same(st, i) for i in inputs):
        raise refuse("is this command's own input; choose another path")
    if folder:
        if not stat.S_ISDIR(st.st_mode):
            raise refuse("exists and is not a folder; choose a new path")
        with os.scandir(p) as entries:
            if any(entries):
                raise refuse("exists and is not an empty folder; choose a new path")
        return
    if stat.S_ISDIR(st.st_mode):
        raise refuse("is a folder; give a file path")
    if not force:
        raise refuse("exists; give --force to replace it")


def check_out(out: str | os.PathLike[str], *, force: bool = False, inputs: Iterable[str | os.PathLike[str]] = (),
              folder: bool = False, siblings: Iterable[str | os.PathLike[str]] = (), field: str = "--out",
              make_parents: bool = False) -> Path:
    """Refuse an output path (and the files written beside it) that would clobber something (module docstring).

    Args:
        out: The path the command writes: a file, or with ``folder`` a folder it creates.
        force: Replace an existing regular file (``--force``); nothing else is ever replaced.
        inputs: The files the command reads (missing ones are ignored); none may be written.
        folder: ``out`` is a folder to create (an existing empty folder is accepted).
        siblings: Files written beside ``out``, checked as files under the same rules.
        field: The flag named in the error.
        make_parents: The command creates missing parent folders (``import`` and ``record``,
            as their docs show: ``--out runs/mc``); the nearest existing one must still be a
            folder. False: a missing parent folder is refused.

    Returns:
        ``out`` as a ``Path``.

    Raises:
        ConfigError: the first path refused, with ``field`` and the path named.
    """
    seen: list[os.stat_result] = []
    for i in inputs:
        try:
            seen.append(os.stat(i))
        except OSError:
            continue
    p = Path(out)
    _check_one(p, folder=folder, force=force, inputs=seen, field=field, make_parents=make_parents)
    for s in siblings:
        _check_one(Path(s), folder=False, force=force, inputs=seen, field=field, make_parents=make_parents)
    return p
