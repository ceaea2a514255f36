"""Sessions of a workload: which bodies are turns of one conversation, in what order, after what think time.

Session metadata is kept *outside* the body bytes (the bytes sent stay exactly the
bytes retained), in a side file beside the workload:

- a folder workload ``W/`` (one ``*.json`` body per file) keeps it in ``W/sessions.jsonl``;
- a JSONL workload ``W.jsonl`` keeps it in ``W.sessions.jsonl`` beside it.

The side file is JSONL, one line per body, in any order::

    {"body": 0, "session": "conv-1", "turn": 0, "think_time_s": 0.0}
    {"body": 1, "session": "conv-1", "turn": 1, "think_time_s": 2.5}

- ``body``: 0-based index of the body in the workload (file-name order or line order);
- ``session``: the session's id (a non-empty string);
- ``turn``: 0-based index of the turn within its session;
- ``think_time_s``: seconds to wait after the previous turn's last byte before sending
  this one (0 for a first turn; 0 <= value <= ``MAX_THINK_TIME_S``).

When the side file exists, every body appears in it exactly once and the turns of
each session are contiguous from 0 (0, 1, 2, ...). A workload without a side file
has no sessions (every body stands alone, as before).
"""

from __future__ import annotations

import hashlib
import math
import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import orjson

from kvreplay.errors import WorkloadError
from kvreplay.options.importing import MAX_THINK_TIME_S  # declared with kvreplay import's --think-time
from kvreplay.safe_io import atomic_write_bytes

__all__ = ["MAX_THINK_TIME_S", "SIDE_FILE_NAME", "Sessions", "Turn", "load_sessions", "sessions_path",
           "write_sessions"]

SIDE_FILE_NAME = "sessions.jsonl"
"""Name of the side file inside a folder workload."""


_MAX_SIDE_FILE_BYTES = 1 << 30
_FIELDS = ("body", "session", "turn", "think_time_s")


@dataclass(frozen=True, slots=True)
class Turn:
    """One body's place in its session.

    Attributes:
        body: 0-based index of the body in the workload.
        session: The session's id.
        turn: 0-based index of the turn within the session.
        think_time_s: Delay after the previous turn's last byte (s); 0 for a first turn.
    """

    body: int
    session: str
    turn: int
    think_time_s: float = 0.0

    def to_json(self) -> dict[str, object]:
        """The side file's line for this turn (a dict with the four fields)."""
        return {"body": self.body, "session": self.session, "turn": self.turn, "think_time_s": self.think_time_s}


@dataclass(frozen=True, slots=True)
class Sessions:
    """The sessions of one workload.

    Attributes:
        path: The side file they were read from.
        turns: One ``Turn`` per body, indexed by body index.
        order: Session ids in order of their first body's index (the workload's session order).
        bodies: Session id -> the body indices of its turns, in turn order.
        sha256: Hex SHA-256 of the side file's bytes (hashed into a plan with the bodies).
    """

    path: str
    turns: tuple[Turn, ...]
    order: tuple[str, ...]
    bodies: dict[str, tuple[int, ...]]
    sha256: str

    def __len__(self) -> int:
        """Number of sessions."""
        return len(self.order)


def sessions_path(workload: str | Path) -> Path:
    """Where the side file of a workload lives (whether or not it exists).

    Args:
        workload: A folder of ``*.json`` bodies, or a ``.jsonl`` file.

    Returns:
        ``W/sessions.jsonl`` for a folder, ``W.sessions.jsonl`` beside ``W.jsonl`` for a file.
    """
    p = Path(workload)
    if p.is_dir():
        return p / SIDE_FILE_NAME
    return p.with_name(p.stem + ".sessions.jsonl")


def _check_line(obj: object, path: Path, lineno: int, n_bodies: int) -> Turn:
    if not isinstance(obj, dict):
        raise WorkloadError("a session line must be a JSON object", path=path, line=lineno)
    for key in _FIELDS:
        if key not in obj and key != "think_time_s":
            raise WorkloadError("missing", path=path, line=lineno, field=key)
    body, session, turn = obj["body"], obj["session"], obj["turn"]
    think = obj.get("think_time_s", 0.0)
    if type(body) is not int or not 0 <= body < n_bodies:
        raise WorkloadError(f"must be a body index in [0, {n_bodies})", path=path, line=lineno, field="body")
    if not isinstance(session, str) or not session:
        raise WorkloadError("must be a non-empty string", path=path, line=lineno, field="session")
    if type(turn) is not int or turn < 0:
        raise WorkloadError("must be an integer >= 0", path=path, line=lineno, field="turn")
    if isinstance(think, bool) or not isinstance(think, (int, float)) or not math.isfinite(think):
        raise WorkloadError("must be a number of seconds", path=path, line=lineno, field="think_time_s")
    if think < 0:
        raise WorkloadError(f"negative think time {think}", path=path, line=lineno, field="think_time_s")
    if think > MAX_THINK_TIME_S:
        raise WorkloadError(f"think time {think} s is over {MAX_THINK_TIME_S:.0f} s (a unit error?)",
                            path=path, line=lineno, field="think_time_s")
    return Turn(body, session, turn, float(think))


def load_sessions(workload: str | Path, n_bodies: int) -> Sessions | None:
    """Read and check a workload's side file.

    Args:
        workload: The workload's path (folder or ``.jsonl``).
        n_bodies: Number of bodies in the workload.

    Returns:
        The sessions, or None when the workload has no side file (nothing at its path).

    Raises:
        WorkloadError: a side file that cannot be read (a FIFO, a device, a folder, a
            symlink loop or to nothing: never taken for "no sessions"); a line that is not
            JSON or misses a field; a body index out of range or listed twice; a body not
            listed; a session whose turns are not 0, 1, 2, ... (file, line and field named).
    """
    path = sessions_path(workload)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):  # a dangling link is a side file that cannot be read, not an absent one
            raise WorkloadError("session file is a symlink to nothing; remove it for a run without sessions",
                                path=path) from None
        return None
    except OSError as exc:  # a symlink loop (ELOOP), a component that is not a folder...
        raise WorkloadError(f"session file cannot be read: {exc.strerror or exc}; remove it for a run without "
                            "sessions", path=path) from None
    if not stat.S_ISREG(st.st_mode):  # a FIFO (read would block), a device (/dev/urandom: endless), a folder
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) else \
            "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "not a regular file"
        raise WorkloadError(f"session file is {kind}, not a regular file; remove it for a run without sessions",
                            path=path)
    if (size := st.st_size) > _MAX_SIDE_FILE_BYTES:
        raise WorkloadError(f"session file is {size} bytes, over {_MAX_SIDE_FILE_BYTES}", path=path)
    data = path.read_bytes()
    by_body: list[Turn | None] = [None] * n_bodies
    line_of: dict[int, int] = {}
    seen: dict[tuple[str, int], int] = {}
    for lineno, line in enumerate(data.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise WorkloadError(f"not JSON: {exc}", path=path, line=lineno) from exc
        t = _check_line(obj, path, lineno, n_bodies)
        if by_body[t.body] is not None:
            raise WorkloadError(f"body {t.body} is listed twice (lines {line_of[t.body]} and {lineno})",
                                path=path, line=lineno, field="body")
        if (t.session, t.turn) in seen:
            raise WorkloadError(f"session {t.session!r} has turn {t.turn} twice (lines {seen[t.session, t.turn]} "
                                f"and {lineno})", path=path, line=lineno, field="turn")
        by_body[t.body], line_of[t.body], seen[t.session, t.turn] = t, lineno, lineno
    missing = [i for i, t in enumerate(by_body) if t is None]
    if missing:
        raise WorkloadError(f"{len(missing)} bodies have no session line (first: body {missing[0]})", path=path,
                            field="body")
    turns = tuple(t for t in by_body if t is not None)
    members: dict[str, list[Turn]] = {}
    for t in turns:
        members.setdefault(t.session, []).append(t)
    bodies: dict[str, tuple[int, ...]] = {}
    for sid, ts in members.items():
        ts.sort(key=lambda t: t.turn)
        for want, t in enumerate(ts):
            if t.turn != want:
                raise WorkloadError(f"session {sid!r} has turns {[x.turn for x in ts]}, not contiguous from 0 "
                                    f"(turn {want} missing)", path=path, line=line_of[t.body], field="turn")
        bodies[sid] = tuple(t.body for t in ts)
    order = tuple(sorted(bodies, key=lambda s: bodies[s][0]))
    return Sessions(str(path), turns, order, bodies, hashlib.sha256(data).hexdigest())


def write_sessions(workload: str | Path, turns: Iterable[Turn]) -> Path:
    """Write a workload's side file atomically, one line per turn in body order.

    Args:
        workload: The workload's path (folder or ``.jsonl``), which must exist.
        turns: One ``Turn`` per body.

    Returns:
        The side file's path.
    """
    lines = b"".join(orjson.dumps(t.to_json()) + b"\n" for t in sorted(turns, key=lambda t: t.body))
    path = sessions_path(workload)
    atomic_write_bytes(path, lines)
    return path
