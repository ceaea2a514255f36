"""Background servers of an experiment window: spawned by pid, stopped through their process group.

``_Background`` is a ``start`` (or ``restore``) command kept running as the server
(``background = true``), a bare pid in its own session and process group (``_Child``);
its ``stop`` asks the group to end (SIGTERM, ``stop_grace``, SIGKILL) and says how it
ended. ``experiments.lifecycle`` drives them; ``experiments.ledger`` records them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
from pathlib import Path
from typing import Any

from kvreplay.clock import now_ns
from kvreplay.experiments.ledger import Ledger, group_members, group_roots
from kvreplay.experiments.model import STOP_GRACE_S
from kvreplay.runner.usercmd import log_tail

__all__ = ["port_answers"]


def _utc() -> str:
    from datetime import UTC, datetime

    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")



def port_answers(url: str, timeout_s: float = 0.5) -> bool:
    """Whether anything accepts a TCP connection at ``url``'s host and port (True: the server is still up)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


class _Child:
    """A process this one spawned, known by its pid only (no ``subprocess.Popen``).

    A server the window leaves running on purpose outlives this process; a ``Popen``
    of it would warn "subprocess N is still running" (``ResourceWarning``) when
    collected at interpreter exit. A bare pid has nothing to collect: the process is
    reaped here (``waitpid``) when it ends while this process lives, else by init.

    Attributes:
        pid: Process id (also its process group and session: ``spawn`` calls setsid).
        returncode: Exit status once reaped (negative: killed by that signal), else None.
    """

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    @classmethod
    def spawn(cls, argv: list[str], log: Path) -> _Child:
        """Start ``argv`` in its own session, stdin from /dev/null, stdout and stderr appended to ``log``.

        Raises:
            OSError: ``log`` cannot be opened or ``argv[0]`` cannot be executed.
        """
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)  # not inherited (PEP 446)
        try:
            pid = os.posix_spawn(argv[0], argv, os.environ, setsid=True, file_actions=[
                (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                (os.POSIX_SPAWN_DUP2, fd, 1), (os.POSIX_SPAWN_DUP2, fd, 2)])
        finally:
            os.close(fd)
        return cls(pid)

    def poll(self) -> int | None:
        """The exit status once the process has ended (reaping it), else None."""
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped by someone else: its status is lost
                self.returncode = -1
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


class _Background:
    """A ``start`` command kept running as the server.

    Its own session and process group, stdin from /dev/null, output to
    ``<log_dir>/<name>.log``. A bare pid (``_Child``, not an event-loop child nor a
    ``Popen``), so an incumbent left running never holds the event loop's shutdown
    nor warns at interpreter exit.
    """

    def __init__(self, proc: _Child, info: dict[str, Any]) -> None:
        self.proc, self.info = proc, info

    @classmethod
    def spawn(cls, cmd: str, *, name: str, log_dir: Path, ledger: Ledger | None = None,
              port: int | None = None) -> _Background:
        """Start ``cmd``; with ``ledger``, write it there at once (pid, group, start time, port)."""
        log_dir.mkdir(parents=True, exist_ok=True)
        log = log_dir / f"{name}.log"
        proc = _Child.spawn(["/bin/sh", "-c", cmd], log)
        if ledger is not None:
            ledger.record(proc.pid, name=name, cmd=cmd, port=port, log_dir=log_dir)
        return cls(proc, {"name": name, "cmd": cmd, "background": True, "pid": proc.pid, "log": str(log),
                          "port": port})

    @property
    def exited(self) -> int | None:
        """The exit status once the process has ended, else None."""
        return self.proc.poll()

    async def stop(self, grace_s: float = STOP_GRACE_S, url: str | None = None) -> dict[str, Any]:
        """Stop the server gracefully: SIGTERM through its process group, SIGKILL only after ``grace_s``.

        SIGTERM goes first to the group's roots (``group_roots``: members whose parent is not in
        the group), and to each process that becomes a root while the group shuts down (the
        child of a shell wrapper that exited): the server stops its own workers. When the group
        still lives ``min(grace_s / 2, 2 s)`` after that (a wrapper that traps SIGTERM and never
        passes it on), SIGTERM goes to the whole group, once. The wait is for every process of
        the group (``group_members``), not only the ``sh -c`` wrapper this process started, and,
        with ``url``, for the server's port to stop answering (``port_answers``), both within
        ``grace_s``. What is left then gets SIGKILL, the whole group, and the same wait (5 s
        more at most) for the members and the port.

        A server that had already ended before the stop (a crash, an OOM kill) is reported as
        such with its exit status or signal, never as a graceful stop.

        Args:
            grace_s: Seconds from SIGTERM to SIGKILL (``[server] stop_grace``).
            url: The server's base URL, checked to refuse connections before the stop is called done.

        Returns:
            The exit record: the start record's keys, ``name`` ``stop-<name>``, ``rc``, ``wall_s``,
            ``tail``, and ``stop``: ``{"graceful", "how", "signal", "at", "after_s", "grace_s",
            "term_to_group", "port_closed", "text"}``; ``how`` is ``graceful``, ``killed`` (SIGKILL
            after the grace) or ``already_ended``; ``signal`` the signal that ended the server
            (``SIGKILL`` after a kill; the one it died of before the stop) or None; ``at`` the UTC
            time of the kill or of the stop; ``text`` ``"stopped gracefully in 0.8 s"``, ``"killed
            (SIGKILL to its process group) after 30 s grace at 2026-12-04T23:50:01Z"`` or ``"had
            already ended before the stop (SIGKILL, rc -9)"``.
        """
        from kvreplay.experiments.ledger import signal_name

        t0 = now_ns()
        pgid = self.proc.pid
        already = self.proc.poll()
        if already is not None and not group_members(pgid):
            sig = signal_name(already)
            text = f"had already ended before the stop ({sig}, rc {already})" if sig else (
                f"had already exited before the stop (rc {already})")
            return {**self.info, "name": f"stop-{self.info['name']}", "rc": already, "wall_s": 0.0,
                    "tail": log_tail(Path(self.info["log"]), 2048),
                    "stop": {"graceful": False, "how": "already_ended", "signal": sig, "at": _utc(), "after_s": 0.0,
                             "grace_s": grace_s, "term_to_group": False,
                             "port_closed": None if url is None else not port_answers(url), "text": text}}
        graceful, to_group = True, False
        asked: set[int] = set()
        while now_ns() - t0 < grace_s * 1e9:
            for pid in group_roots(pgid):
                if pid not in asked:
                    asked.add(pid)
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGTERM)
            self.proc.poll()  # reap the wrapper when it exits
            if not group_members(pgid) and self.proc.returncode is not None \
                    and (url is None or not port_answers(url)):
                break
            if not to_group and now_ns() - t0 >= min(grace_s / 2, 2.0) * 1e9 and group_members(pgid):
                to_group = True  # a wrapper that keeps SIGTERM to itself: ask every process of the group
                _kill_group(pgid, signal.SIGTERM)
            await asyncio.sleep(0.05)
        else:
            graceful = False
        after_s = (now_ns() - t0) / 1e9
        killed_at = None
        if group_members(pgid) or self.proc.poll() is None:
            graceful = False
            killed_at = _utc()
            _kill_group(pgid)  # the group, also children that ignored SIGTERM
            while self.proc.poll() is None:
                await asyncio.sleep(0.02)
            for _ in range(250):  # members reparented to init exit after SIGKILL; bounded (5 s)
                if not group_members(pgid) and (url is None or not port_answers(url)):
                    break  # and the port closes (~0.3 s after the group is gone), as on the graceful path
                await asyncio.sleep(0.02)
        if graceful:
            text, how, sig = f"stopped gracefully in {after_s:.1f} s", "graceful", None
        elif killed_at is not None:
            text, how, sig = f"killed (SIGKILL to its process group) after {grace_s:g} s grace at {killed_at}", \
                "killed", "SIGKILL"
        else:  # the grace ran out as the last member exited: nothing was left to kill
            text, how, sig = f"ended at the end of its {grace_s:g} s grace (no SIGKILL needed)", "graceful", None
        return {**self.info, "name": f"stop-{self.info['name']}", "rc": self.proc.returncode,
                "wall_s": round((now_ns() - t0) / 1e9, 3), "tail": log_tail(Path(self.info["log"]), 2048),
                "stop": {"graceful": graceful, "how": how, "signal": sig, "at": killed_at or _utc(),
                         "after_s": round(after_s, 3), "grace_s": grace_s, "term_to_group": to_group,
                         "port_closed": None if url is None else not port_answers(url), "text": text}}
