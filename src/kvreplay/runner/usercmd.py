"""Commands kvreplay runs for the user (``ab`` arm switches, lifecycle commands).

A user command is a shell line (``/bin/sh -c COMMAND``) that kvreplay runs but
does not own: it may restart a server and leave it running in the background.
Every such command:

- runs in its **own session and process group** (``setsid``), so a terminal
  interrupt aimed at kvreplay does not reach a server it started, and a timeout
  can kill everything it spawned at once;
- reads **stdin from /dev/null** (a command that prompts fails instead of hanging);
- writes **stdout and stderr to one log file** ``<log_dir>/<name>.log`` (both
  streams interleaved in arrival order), never to a pipe: a background child
  that inherits a pipe would hold it open, and waiting for its EOF is what hung
  ``kvreplay ab`` for the whole timeout under uvloop (issue 14);
- is **waited for by process id**, so it returns as soon as the shell itself
  exits, even when it left a background process (which keeps running);
- is **bounded by a timeout**: past it the whole process group gets SIGTERM,
  then SIGKILL after ``kill_grace_s``; a group that is already gone is fine.

Once the shell has exited its log is **bounded and redacted** (``keep_log``): a log
over ``LOG_KEEP_BYTES`` keeps only its last ``LOG_KEEP_BYTES`` (a note says how many
bytes went), read from the end, never whole (a 300 MB output costs 1 MiB), and it is
rewritten through ``safe_io`` (registered secrets redacted, as every file kvreplay writes).
A background child still writing keeps writing to the replaced file, unseen.

Its exit status, duration, log path and the log's last 4 KiB are returned
(``UserCommandResult``) for the caller to record. Example::

    res = await run_user_command("./switch.sh on", name="block-00-on",
                                 log_dir=out / "commands", timeout_s=600)
    if not res.ok:
        print(res.log_tail)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvreplay.clock import now_ns
from kvreplay.errors import ConfigError

__all__ = ["LOG_KEEP_BYTES", "LOG_TAIL_BYTES", "UserCommandResult", "keep_log", "log_tail", "run_user_command",
           "run_user_command_sync", "spawn_logged"]

LOG_TAIL_BYTES = 4096
"""How much of the end of a command's log is kept in its result (bytes)."""
LOG_KEEP_BYTES = 1 << 20
"""How much of the end of a command's log is kept on disk once it has exited (bytes)."""

_POLL_FIRST_S = 0.005
_POLL_MAX_S = 0.05


@dataclass(frozen=True, slots=True, kw_only=True)
class UserCommandResult:
    """What one user command did.

    Attributes:
        name: The caller's name for it (also the log file's stem).
        command: The shell line as run (``/bin/sh -c command``).
        exit_status: The shell's exit status; negative ``-N`` when killed by
            signal N; None when it timed out (the group was killed).
        duration_s: From spawn to the shell's exit, or to the kill on a timeout (s).
        timed_out: True when ``timeout_s`` ran out.
        log_path: ``<log_dir>/<name>.log``: stdout and stderr, interleaved.
        log_tail: The last ``LOG_TAIL_BYTES`` bytes of the log at the shell's
            exit, decoded as UTF-8 (undecodable bytes replaced).
        pid: The shell's process id (also its process group and session id).
    """

    name: str
    command: str
    exit_status: int | None
    duration_s: float
    timed_out: bool
    log_path: Path
    log_tail: str
    pid: int | None = None

    @property
    def ok(self) -> bool:
        """Exited with status 0 within the timeout."""
        return self.exit_status == 0 and not self.timed_out

    def to_json(self) -> dict[str, Any]:
        """JSON form recorded in ``ab.json`` and run directories."""
        return {
            "name": self.name,
            "command": self.command,
            "exit_status": self.exit_status,
            "duration_s": self.duration_s,
            "timed_out": self.timed_out,
            "log_path": str(self.log_path),
            "log_tail": self.log_tail,
            "pid": self.pid,
        }


def _check_name(name: str) -> None:
    if not name or not all(c.isalnum() or c in "_.-" for c in name) or name.startswith("."):
        raise ConfigError(
            f"command name {name!r}: use letters, digits, '_', '.', '-' (it names the log file)",
            field="name",
        )


def spawn_logged(command: str, log_path: Path, env: Mapping[str, str] | None = None, *,
                 append: bool = False) -> subprocess.Popen:
    """Start ``/bin/sh -c command`` in a session and process group of its own, output to ``log_path``.

    stdin is /dev/null; stdout and stderr go to the log, truncated (``append``: added
    to); no other descriptor is inherited. A plain ``Popen``, not an event-loop child.

    Args:
        command: Shell line.
        log_path: The log file (its directory must exist).
        env: Variables added to kvreplay's own environment; None or empty = inherit.
        append: Add to an existing log instead of truncating it.

    Raises:
        OSError: the log cannot be opened or ``/bin/sh`` cannot be started.
    """
    full_env = None
    if env:
        full_env = {**os.environ, **{str(k): str(v) for k, v in env.items()}}
    with open(log_path, "ab" if append else "wb", buffering=0) as log:  # the child keeps its own descriptor
        return subprocess.Popen(  # noqa: S603 - running the user's own command is the point
            ["/bin/sh", "-c", command],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            env=full_env,
        )


def _kill_group(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM the command's process group, then SIGKILL it after ``grace_s`` (s).

    Reaps the shell. A group or shell already gone (``ProcessLookupError``) is not an error.
    """
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        if sig == signal.SIGTERM:
            deadline = time.monotonic() + grace_s
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.01)
            # Children that ignore SIGTERM get SIGKILL with the group anyway.
    with contextlib.suppress(subprocess.TimeoutExpired):  # pragma: no cover - SIGKILL cannot be ignored
        proc.wait(timeout=5.0)


def log_tail(path: Path, n: int = LOG_TAIL_BYTES) -> str:
    """The last ``n`` bytes of a command's log, decoded as UTF-8 (bad bytes replaced); ``""`` when unreadable."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - n))
            return f.read(n).decode("utf-8", "replace")
    except OSError:
        return ""


def keep_log(path: Path, keep: int = LOG_KEEP_BYTES) -> str:
    """Rewrite a finished command's log as its last ``keep`` bytes, redacted (module docstring).

    Only the last ``keep`` bytes are read. When the log is longer, the kept part starts
    after the first line break in it (a cut line could hold the end of a secret that
    redaction no longer recognises), under a line saying how many bytes were dropped.

    Returns:
        The text kept (redacted), or ``""`` when the log cannot be read or rewritten.
    """
    from kvreplay.safe_io import atomic_write_text

    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            start = max(0, size - keep)
            f.seek(start)
            data = f.read(keep)
        if start:
            nl = data.find(b"\n")
            data = data[nl + 1:] if nl >= 0 else b""
            note = (f"[kvreplay: the first {size - len(data)} bytes of this output were dropped; "
                    f"the last {len(data)} are kept]\n")
            data = note.encode() + data
        text = data.decode("utf-8", "replace")
        atomic_write_text(path, text)  # registered secrets redacted on the way (safe_io)
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def _result(name: str, command: str, proc: subprocess.Popen, t0: int, log_path: Path,
            timed_out: bool) -> UserCommandResult:
    kept = keep_log(log_path)
    return UserCommandResult(
        name=name,
        command=command,
        exit_status=None if timed_out else proc.returncode,
        duration_s=round((now_ns() - t0) / 1e9, 3),
        timed_out=timed_out,
        log_path=log_path,
        log_tail=kept.encode("utf-8")[-LOG_TAIL_BYTES:].decode("utf-8", "ignore"),
        pid=proc.pid,
    )


def _prepare(name: str, timeout_s: float, log_dir: Path) -> Path:
    _check_name(name)
    if not timeout_s > 0:
        raise ConfigError(f"command timeout must be > 0 s, got {timeout_s}", field="timeout_s")
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    return log_dir / f"{name}.log"


async def run_user_command(
    command: str,
    *,
    name: str,
    log_dir: Path,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    kill_grace_s: float = 2.0,
    on_spawn: Callable[[int], object] | None = None,
) -> UserCommandResult:
    """Run ``/bin/sh -c command`` as described in the module docstring; never hangs past the timeout.

    The wait polls the shell's pid (5 ms, backing off to 50 ms) instead of using
    the event loop's child watcher, so it behaves the same under asyncio and
    uvloop and never waits on a pipe. Cancelling the awaiting task kills the
    command's process group (as a timeout does) and re-raises.

    Args:
        command: Shell line (may be empty: exits 0 at once).
        name: Log file stem, letters/digits/``_.-`` (``block-00-on``); an
            existing log of that name is overwritten.
        log_dir: Directory of the log (created).
        timeout_s: Bound from spawn to the shell's exit (s, > 0).
        env: Variables added to kvreplay's own environment for the command; None = inherit.
        kill_grace_s: Between SIGTERM and SIGKILL of the group on timeout (s).
        on_spawn: Called with the shell's pid (its process group) right after the spawn
            (an experiment's process ledger, ``experiments.ledger``).

    Returns:
        The ``UserCommandResult`` (a failing or timed-out command is a result, not an error).

    Raises:
        ConfigError: a bad name or a timeout <= 0.
        OSError: ``/bin/sh`` could not be started or the log could not be created.
    """
    log_path = _prepare(name, timeout_s, log_dir)
    t0 = now_ns()
    proc = spawn_logged(command, log_path, env)
    if on_spawn is not None:
        on_spawn(proc.pid)
    deadline = t0 + int(timeout_s * 1e9)
    pause = _POLL_FIRST_S
    try:
        while proc.poll() is None:
            left = (deadline - now_ns()) / 1e9
            if left <= 0:
                await asyncio.to_thread(_kill_group, proc, kill_grace_s)
                return _result(name, command, proc, t0, log_path, timed_out=True)
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, _POLL_MAX_S)
    except asyncio.CancelledError:
        _kill_group(proc, 0.2)
        raise
    return _result(name, command, proc, t0, log_path, timed_out=False)


def run_user_command_sync(
    command: str,
    *,
    name: str,
    log_dir: Path,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    kill_grace_s: float = 2.0,
) -> UserCommandResult:
    """Blocking twin of ``run_user_command`` (same arguments, result and errors), for code without a loop."""
    log_path = _prepare(name, timeout_s, log_dir)
    t0 = now_ns()
    proc = spawn_logged(command, log_path, env)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        _kill_group(proc, kill_grace_s)
        return _result(name, command, proc, t0, log_path, timed_out=True)
    except BaseException:
        _kill_group(proc, 0.2)
        raise
    return _result(name, command, proc, t0, log_path, timed_out=False)
