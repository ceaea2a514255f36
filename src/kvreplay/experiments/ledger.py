"""The process ledger of an experiment window (issue 42 item 1): every process it starts, on disk.

Each process the window starts (``start``, ``stop``, ``restore``, ``quiesce`` and check
commands, background or not) is appended to ``processes.jsonl`` in the experiment folder
the moment it is spawned, one JSON line (``safe_io.JsonlAppender``)::

    {"pid": 4242, "pgid": 4242, "start_ticks": 1234567, "started": "2026-12-04T23:50:01Z",
     "name": "start", "dir": "steps/00-A0", "port": 40123, "attempt": 1,
     "command": "/usr/bin/python -m kvreplay serve-sim --port 40123"}

``start_ticks`` is field 22 of ``/proc/PID/stat`` (the process's start time in clock ticks
since boot, proc(5)): a pid the kernel has since given to another process reads another
start time, so it is never mistaken for the ledger's. ``command`` is redacted
(``redaction.redact``; ``safe_io`` strips registered secrets again when it writes).

A ledger entry is *alive* while its leader (same pid, same start time, not a zombie) or any
process of its process group lives (Linux gives no new process a pid still in use as a
process group id, so the group's members are the entry's). ``kvreplay report EXP`` names
every live entry (``left_running``); ``kvreplay experiment --resume`` stops them first
(``stop_entry``: the configured ``stop`` with the entry's own ``{port}``, then SIGTERM to
the whole group, ``stop_grace``, SIGKILL). What a quiesce or check command leaves in its
process group after it exits is stopped at once (``reap_group``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kvreplay.clock import now_ns
from kvreplay.redaction import redact

__all__ = ["LEDGER", "Ledger", "alive_pids", "group_members", "group_roots", "live_entries", "proc_stat",
           "left_entry", "read_ledger", "reap_group", "signal_name", "stop_entry"]

LEDGER = "processes.jsonl"
"""The ledger's file name in the experiment folder."""


def _utc() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def proc_stat(pid: int) -> tuple[str, int, int, int] | None:
    """``(state, ppid, pgid, start_ticks)`` of ``pid`` from ``/proc/PID/stat``; None when it is gone or unreadable.

    Source: proc(5): field 3 is the state, 4 the parent pid, 5 the process group, 22 the
    start time (clock ticks after boot); fields are counted after the command name's closing
    parenthesis (a name may hold spaces and parentheses).
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read(4096)
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()
    try:
        return fields[0].decode("ascii", "replace"), int(fields[1]), int(fields[2]), int(fields[19])
    except (IndexError, ValueError):
        return None


def _group_stat(pgid: int) -> dict[int, tuple[int, int]]:
    """``{pid: (ppid, start_ticks)}`` of the live (not zombie) processes of process group ``pgid`` (proc(5))."""
    out: dict[int, tuple[int, int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for d in names:
        if d.isdigit() and (st := proc_stat(int(d))) is not None and st[0] != "Z" and st[2] == pgid:
            out[int(d)] = (st[1], st[3])
    return out


def group_members(pgid: int) -> list[int]:
    """Pids of the live (not zombie) processes whose process group is ``pgid``, read from ``/proc`` (proc(5))."""
    return sorted(_group_stat(pgid))


def group_roots(pgid: int) -> list[int]:
    """The members of process group ``pgid`` whose parent is not in the group: the ones to ask to stop.

    A server stops its own workers when asked (vLLM's API server its engine core); a
    SIGTERM to every process of the group at once makes a worker die under a server
    that is still shutting down (vLLM logs ``EngineDeadError``). A shell wrapper that
    exits on SIGTERM leaves its child with a parent outside the group: the child is a
    root then, and is asked in turn.
    """
    members = _group_stat(pgid)
    return sorted(pid for pid, (ppid, _t) in members.items() if ppid not in members)


def signal_name(rc: int | None) -> str | None:
    """``"SIGKILL"`` for an exit status ``-9`` (killed by that signal), else None."""
    if rc is None or rc >= 0:
        return None
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


class Ledger:
    """The append-only ``processes.jsonl`` of one experiment folder (module docstring).

    Args:
        out: The experiment folder.
        attempt: This attempt's number (1, then 2 after the first ``--resume``...).
    """

    def __init__(self, out: Path, attempt: int = 1) -> None:
        self.out, self.attempt = out, attempt

    def record(self, pid: int, *, name: str, cmd: str, port: int | None, log_dir: Path | None = None) -> dict[str, Any]:
        """Append the process ``pid`` just spawned (its own process group) and return its entry.

        A ledger that cannot be written (full disk) does not stop the window: the entry is returned.
        """
        from kvreplay.safe_io import open_jsonl

        st = proc_stat(pid)
        where = None
        if log_dir is not None:
            with contextlib.suppress(ValueError):
                where = str(Path(log_dir).resolve().relative_to(self.out.resolve()))
        entry = {"pid": pid, "pgid": st[2] if st else pid, "start_ticks": st[3] if st else None,
                 "started": _utc(), "name": name, "dir": where, "port": port, "attempt": self.attempt,
                 "command": redact(cmd)}
        with contextlib.suppress(OSError):
            self.out.mkdir(parents=True, exist_ok=True)
            with open_jsonl(self.out / LEDGER) as f:
                f.write(entry)
        return entry


def read_ledger(out: Path) -> list[dict[str, Any]]:
    """The entries of ``out/processes.jsonl`` in the order written; a torn or bad line is skipped."""
    import orjson

    try:
        raw = (out / LEDGER).read_bytes()
    except OSError:
        return []
    got = []
    for line in raw.splitlines():
        with contextlib.suppress(ValueError):
            d = orjson.loads(line)
            if isinstance(d, dict) and isinstance(d.get("pid"), int):
                got.append(d)
    return got


def alive_pids(entry: dict[str, Any]) -> list[int]:
    """The live processes of a ledger entry: its leader when the pid still has its start time, and its group.

    A group member started before the entry's leader cannot be the entry's and is not counted.
    """
    pid, pgid, ticks = entry["pid"], entry.get("pgid") or entry["pid"], entry.get("start_ticks")
    st = proc_stat(pid)
    if st is not None and ticks is not None and st[3] != ticks and st[2] == pgid:
        return []  # the pid leads a new process group now: that group is another process's
    members = _group_stat(pgid)
    out = {p for p, (_pp, t) in members.items() if ticks is None or t >= ticks}
    if st is not None and st[0] != "Z" and (ticks is None or st[3] == ticks):
        out.add(pid)
    return sorted(out)


def live_entries(out: Path) -> list[dict[str, Any]]:
    """The ledger entries of ``out`` that are alive now, each with ``alive``: their live pids (``alive_pids``)."""
    seen: set[tuple[int, Any]] = set()
    got = []
    for e in read_ledger(out):
        key = (e["pid"], e.get("start_ticks"))
        if key in seen:
            continue
        seen.add(key)
        if pids := alive_pids(e):
            got.append({**e, "alive": pids})
    return got


async def _wait_gone(entry: dict[str, Any], seconds: float, port_open: Callable[[], bool] | None) -> bool:
    """Poll (20 ms) until the entry has no live process and, with ``port_open``, its port refuses; bounded."""
    t_end = now_ns() + int(seconds * 1e9)
    while True:
        if not alive_pids(entry) and (port_open is None or not port_open()):
            return True
        if now_ns() >= t_end:
            return False
        await asyncio.sleep(0.02)


async def stop_entry(entry: dict[str, Any], *, grace_s: float,
                     stop_cmd: Callable[[int | None], Awaitable[dict[str, Any]]] | None = None,
                     port_open: Callable[[], bool] | None = None) -> dict[str, Any]:
    """Stop a live ledger entry that is not this process's child (an orphan of a killed window).

    First ``stop_cmd(port)`` (the configured ``[server] stop`` with the entry's own ``{port}``),
    then SIGTERM to the whole process group, up to ``grace_s`` for every process of it to end
    and, with ``port_open``, its port to refuse connections, then SIGKILL to the group and up
    to 5 s more for the port.

    Returns:
        ``{"pid", "pgid", "port", "command", "stop"}`` with ``stop``: ``{"how"`` (``"stop command"``,
        ``"SIGTERM"``, ``"SIGKILL"``), ``"after_s"``, ``"grace_s"``, ``"text"``, ``"stop_command"``
        (its record or None), ``"gone"`` (nothing of it left)``}``.
    """
    t0 = now_ns()
    pgid = entry.get("pgid") or entry["pid"]
    ran = None
    how = "stop command"
    if stop_cmd is not None:
        ran = await stop_cmd(entry.get("port"))
    if not await _wait_gone(entry, 0.5 if ran is not None else 0.0, port_open):
        how = await _term_then_kill(entry, pgid, grace_s, port_open)
    after = (now_ns() - t0) / 1e9
    gone = not alive_pids(entry)
    text = {"stop command": f"ended by the stop command in {after:.1f} s",
            "SIGTERM": f"stopped by SIGTERM to its process group in {after:.1f} s",
            "SIGKILL": f"killed (SIGKILL to its process group) after {grace_s:g} s grace"}[how]
    if not gone:
        text += "; still alive (not ours to signal?)"
    return {"pid": entry["pid"], "pgid": pgid, "port": entry.get("port"), "command": entry.get("command"),
            "stop": {"how": how, "after_s": round(after, 3), "grace_s": grace_s, "text": text,
                     "stop_command": ran, "gone": gone}}


async def reap_group(pgid: int, grace_s: float = 2.0) -> dict[str, Any] | None:
    """Stop what a finished command left running in its process group: SIGTERM, ``grace_s``, SIGKILL.

    Returns:
        None when nothing was left, else ``{"pids", "how", "after_s"}`` (``how``: ``"SIGTERM"``
        or ``"SIGKILL"``).
    """
    left = group_members(pgid)
    if not left:
        return None
    t0 = now_ns()
    entry = {"pid": pgid, "pgid": pgid, "start_ticks": None}
    how = await _term_then_kill(entry, pgid, grace_s, None)
    return {"pids": left, "how": how, "after_s": round((now_ns() - t0) / 1e9, 3)}


async def _term_then_kill(entry: dict[str, Any], pgid: int, grace_s: float,
                          port_open: Callable[[], bool] | None) -> str:
    """SIGTERM to the group, ``grace_s`` for it to go, then SIGKILL and 5 s more; which signal ended it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    if await _wait_gone(entry, grace_s, port_open):
        return "SIGTERM"
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    await _wait_gone(entry, 5.0, port_open)
    return "SIGKILL"


def left_entry(entry: dict[str, Any], why: str) -> dict[str, Any]:
    """A ``left_running`` item for a live ledger entry (``live_entries``): ``{"pid", "port", "command", "why"}``.

    The keys of ``lifecycle.ServerControl.left_running`` are kept (``url`` None, ``by`` = ``why``,
    ``pid_source`` the ledger) so one renderer reads both.
    """
    return {"pid": entry["pid"], "pgid": entry.get("pgid"), "port": entry.get("port"), "url": None,
            "command": entry.get("command"), "why": why, "by": why, "alive": entry.get("alive"),
            "pid_source": f"process ledger ({LEDGER}): {entry.get('name')} started {entry.get('started')}"
                          f" in {entry.get('dir') or 'the window'}, attempt {entry.get('attempt')}",
            "note": None}
