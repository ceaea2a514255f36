"""``[snapshot]``: commands whose outputs are frozen before anything is taken down and compared after the restore.

An experiment file may name the commands that describe what a window must give back
(router membership, monitoring targets, GPU state, the rollback artefact, the
configuration)::

    [snapshot]
    commands = [
        {name = "router", cmd = "routerctl show primary", timeout = "30s"},
        {name = "config", cmd = "sha256sum /etc/server/incumbent.yaml"},
    ]

Before the first step, once the incumbent's identity is read (and its pins hold), each
command runs in file order (``runner.usercmd``: its own process group, killed at
``timeout``, default 60 s; written to the process ledger, what it leaves in its process
group stopped, as a restore check's); its output is bounded and redacted as every user
command's (``runner.usercmd.keep_log``: the last 1 MiB, registered secrets and URL
credentials replaced) and kept in ``DIR/snapshot-NAME.log``, and ``snapshot.json``'s
``commands`` holds, per command, ``{"name", "cmd", "rc", "timed_out", "ok", "bytes",
"sha256", "output", "truncated"}``: ``sha256`` and ``bytes`` of that kept output,
``output`` its first ``OUTPUT_BYTES`` (``truncated`` when longer). A command
that fails (non-zero exit or timeout) aborts the window there (``snapshot: command NAME
failed (rc N)``): nothing has been taken down, and nothing can be compared to it later.

After the restore (and its checks) the restore step runs them again, in the restore
step's folder (``snapshot-NAME.log``), and compares each with its frozen record: the
same when the exit status and the SHA-256 of the redacted output are equal. Each is a
cell ``snapshot.NAME`` (value true when the same; else ``failed`` with the first line
that differs) and a difference makes an otherwise measured restore ``failed``
(``snapshot NAME differs after the restore``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from kvreplay.experiments.lifecycle import run_command
from kvreplay.experiments.model import RestoreCheck

__all__ = ["OUTPUT_BYTES", "compare", "first_difference", "freeze_before", "run_snapshot"]

OUTPUT_BYTES = 4096
"""Bytes of a command's redacted output kept in ``snapshot.json`` (the hash covers all of it)."""


async def _one(c: RestoreCheck, cmd: str, log_dir: Path, timeout_s: float, ledger: Any, port: int | None
               ) -> dict[str, Any]:
    from kvreplay.redaction import redact

    got = await run_command(cmd, name=f"snapshot-{c.name}", log_dir=log_dir, timeout_s=timeout_s, ledger=ledger,
                            port=port, reap=True)
    try:  # bounded and redacted by run_command (runner.usercmd.keep_log)
        text = Path(got["log"]).read_bytes().decode("utf-8", "replace")
    except OSError as exc:
        text = f"(log unreadable: {exc.strerror or exc})"
    raw = text.encode("utf-8")
    return {"name": c.name, "cmd": redact(cmd), "rc": got["rc"], "timed_out": got["timed_out"],
            "ok": got["rc"] == 0, "bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest(),
            "output": raw[:OUTPUT_BYTES].decode("utf-8", "ignore"), "truncated": len(raw) > OUTPUT_BYTES}


async def run_snapshot(commands: tuple[RestoreCheck, ...], *, expand: Any, log_dir: Path,
                       left_s: float | None = None, ledger: Any = None, port: int | None = None
                       ) -> list[dict[str, Any]]:
    """Run each snapshot command once, in order (module docstring); one record each.

    Args:
        commands: ``[snapshot] commands`` (``ServerSpec.snapshot``).
        expand: Fills a command's placeholders (``ServerControl.expand``).
        log_dir: Where ``snapshot-NAME.log`` is written.
        left_s: Seconds left to a deadline, bounding each command's timeout (at least 1 s).
        ledger: The window's process ledger (``experiments.ledger``).
        port: The ``{port}`` the commands were given (for the ledger).

    Returns:
        ``[{"name", "cmd", "rc", "timed_out", "ok", "bytes", "sha256", "output", "truncated"}]``.
    """
    out = []
    for c in commands:
        timeout = c.timeout_s if left_s is None else max(1.0, min(c.timeout_s, left_s))
        out.append(await _one(c, expand(c.cmd), log_dir, timeout, ledger, port))
    return out


async def freeze_before(w: Any) -> list[dict[str, Any]] | None:
    """The window's snapshot before its first step: ``snapshot.json``'s ``commands`` (None without ``[snapshot]``).

    ``w`` is the running window (``experiments.window.execute``). A command that fails
    aborts the window (reason ``snapshot``), so nothing is taken down. Not run when the
    window is already aborted (the incumbent's pins did not hold).
    """
    cmds = w.exp.server.snapshot
    if not cmds or w.aborted is not None:
        return None
    got = await run_snapshot(cmds, expand=w.server.expand, log_dir=w.out, left_s=w.left(w.window.hard_deadline_s),
                             ledger=w.server.ledger, port=w.server.port)
    for g in got:
        w.say(f"snapshot {g['name']}: {g['bytes']} bytes, sha256 {g['sha256'][:12]}"
              + ("" if g["ok"] else (" (timed out)" if g["timed_out"] else f" (rc {g['rc']})")))
    bad = [g for g in got if not g["ok"]]
    if bad:
        w.abort("snapshot", f"command {bad[0]['name']} failed (" + (
            "timed out" if bad[0]["timed_out"] else f"rc {bad[0]['rc']}") + "): nothing was taken down")
    return got


def first_difference(before: str, after: str) -> str:
    """The first line that differs, ``line N: 'old' -> 'new'`` (each cut to 80 characters)."""
    a, b = before.splitlines(), after.splitlines()
    for i in range(max(len(a), len(b))):
        x = a[i] if i < len(a) else "(none)"
        y = b[i] if i < len(b) else "(none)"
        if x != y:
            return f"line {i + 1}: {x[:80]!r} -> {y[:80]!r}"
    return "past the kept output (the hashes differ)"


def compare(frozen: list[dict[str, Any]], now: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each frozen command beside its run after the restore.

    Returns:
        ``[{"name", "same", "rc_before", "rc_after", "sha256_before", "sha256_after", "output", "difference"}]``
        in the frozen order: ``same`` when the exit status and the output's SHA-256 are equal;
        ``difference`` names the first differing line (None when the same); ``output`` the
        output after the restore (first ``OUTPUT_BYTES``). A command with no run after the
        restore reads ``same: false``, ``difference: "not run after the restore"``.
    """
    by = {g["name"]: g for g in now}
    out = []
    for f in frozen:
        g = by.get(f["name"])
        if g is None:
            out.append({"name": f["name"], "same": False, "rc_before": f.get("rc"), "rc_after": None,
                        "sha256_before": f.get("sha256"), "sha256_after": None, "output": None,
                        "difference": "not run after the restore"})
            continue
        same = g["rc"] == f.get("rc") and g["sha256"] == f.get("sha256")
        if same:
            diff = None
        elif g["rc"] != f.get("rc"):
            diff = f"exit status {f.get('rc')} -> {g['rc']}" + (" (timed out)" if g["timed_out"] else "")
        else:
            diff = first_difference(f.get("output") or "", g["output"])
        out.append({"name": f["name"], "same": same, "rc_before": f.get("rc"), "rc_after": g["rc"],
                    "sha256_before": f.get("sha256"), "sha256_after": g["sha256"], "output": g["output"],
                    "difference": diff})
    return out
