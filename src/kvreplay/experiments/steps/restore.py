"""``kind = "restore"``: bring the incumbent server back; it always runs.

No TOML keys. Needs ``[server.restore]`` (a command) unless the target is the
simulator (the incumbent simulator, ``[server.sim]`` alone, is started again). It runs
after an abort, after an interrupt (which does not cancel it), after a failed step and
past ``stop_new_after``; its command is bounded by ``hard_deadline``. Measured when the
server is ready and its identity equals the snapshot taken before the first step (or,
without a snapshot, the pins hold). One cell, ``identity_restored``.

``[server.restore] checks = [{name, cmd, timeout}]`` (containment, monitoring, direct and
routed preflight, readmission...) run after it, whatever its outcome, in file order: each
one's output captured in the step's folder (``check-NAME.log``, redacted through
``safe_io``; its last 2 KiB in ``checks.restore_checks[].output``) and its status a cell
``restore_check.NAME`` (value true when it exited 0 in time). A check that fails makes
an otherwise measured restore ``failed`` (reason ``restore check NAME failed (rc N): LAST
LINE OF ITS OUTPUT; the restored incumbent is left running``, the last clause not for the
embedded simulator, which ends with the window) and never stops the
incumbent: ``checks.server_restored`` is true, the window leaves it running and names it in
``left_running`` ("...; check NAME failed (...); left running for a person to decide"). What
a check leaves in its process group after it exits is stopped (``experiments.ledger``).

``[snapshot] commands`` (``experiments.snapshot``) run again after the checks and are
compared with their outputs frozen in ``snapshot.json`` before the first step: one cell
``snapshot.NAME`` each (value true when the same), and a difference makes an otherwise
measured restore ``failed`` (``snapshot NAME differs after the restore``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kvreplay.errors import ConfigError
from kvreplay.experiments.fields import Where
from kvreplay.experiments.lifecycle import identity_mismatches, run_check
from kvreplay.experiments.model import ServerSpec, StepResult, StepSpec
from kvreplay.experiments.steps.base import CellContext, StepKind, Window, check_cells
from kvreplay.experiments.steps.incarnation import replace_commands

__all__ = ["KIND"]


def _parse(rest: dict[str, Any], where: Where, common: dict[str, Any]) -> dict[str, Any]:
    return {}


def _check(step: StepSpec, server: ServerSpec, where: Where) -> None:
    if server.restore is None and not server.is_sim:
        raise ConfigError("a restore step needs [server.restore]", path=where.path, line=where.line,
                          field="server.restore")


async def _execute(w: Window, st: StepSpec, res: StepResult) -> None:
    await _restore(w, st, res)
    await _checks(w, st, res)
    if w.exp.server.snapshot:
        await _compare_snapshot(w, st, res)


async def _compare_snapshot(w: Window, st: StepSpec, res: StepResult) -> None:
    """``[snapshot]``: each command run again and compared with ``snapshot.json`` (``experiments.snapshot``)."""
    import json

    from kvreplay.experiments.snapshot import compare, run_snapshot

    try:
        frozen = json.loads((w.out / "snapshot.json").read_text(encoding="utf-8")).get("commands")
    except (OSError, ValueError):
        frozen = None
    if frozen is None:  # the window aborted before the snapshot was taken: nothing to compare with
        res.checks["snapshot"] = None
        return
    now = await run_snapshot(w.exp.server.snapshot, expand=w.server.expand, log_dir=w.out / st.dir,
                             left_s=w.left(w.window.hard_deadline_s), ledger=w.server.ledger, port=w.server.port)
    got = res.checks["snapshot"] = compare(frozen, now)
    for g in got:
        w.say(f"step {st.name}: snapshot {g['name']}: " + ("the same" if g["same"] else f"differs ({g['difference']})"))
    bad = [g for g in got if not g["same"]]
    if bad and res.status == "measured":
        res.status, res.reason = "failed", f"snapshot {bad[0]['name']} differs after the restore"


async def _checks(w: Window, st: StepSpec, res: StepResult) -> None:
    checks = w.exp.server.restore_checks
    if not checks:
        return
    done = res.checks["restore_checks"] = []
    for c in checks:
        hard = w.left(w.window.hard_deadline_s)
        timeout = c.timeout_s if hard is None else max(1.0, min(c.timeout_s, hard))
        got = await run_check(w.server.expand(c.cmd), name=c.name, log_dir=w.out / st.dir, timeout_s=timeout,
                              ledger=w.server.ledger, port=w.server.port)
        done.append(got)
        w.say(f"step {st.name}: restore check {c.name}: " + ("ok" if got["ok"] else
              ("timed out" if got["timed_out"] else f"failed (rc {got['rc']})")))
    bad = [g for g in done if not g["ok"]]
    if bad and res.status == "measured":
        said = ((bad[0].get("output") or "").strip().splitlines() or [""])[-1][:200]
        res.status = "failed"
        res.reason = f"restore check {bad[0]['name']} failed (" + (
            f"timed out after {bad[0]['wall_s']} s" if bad[0]["timed_out"] else f"rc {bad[0]['rc']}") + ")" + (
            f": {said}" if said else "") + ("" if w.exp.server.is_sim else "; the restored incumbent is left running")


def _commands(fs: dict[str, Any], server: dict[str, Any]) -> list[tuple[str, str]]:
    """The candidate stopped and the incumbent brought back, then each check of ``[server.restore]``."""
    if server.get("target") == "sim":
        out = [("simulator", f"the incumbent simulator started again: [server.sim] {server.get('sim') or {}}")]
    else:
        out = replace_commands(server, "restore")
    return out + [(f"check {c['name']}", f"{c['cmd']}  (timeout {c['timeout_s']:g} s)")
                  for c in server.get("restore_checks") or []] + [
        (f"snapshot {c['name']} (compared)", f"{c['cmd']}  (timeout {c['timeout_s']:g} s)")
        for c in server.get("snapshot") or []]


_identity_cell = check_cells("identity_restored")


def _cells(step: dict[str, Any], frozen_step: dict[str, Any], ctx: CellContext) -> list[dict[str, Any]]:
    """``identity_restored``, then one ``restore_check.NAME`` cell per check run."""
    out = _identity_cell(step, frozen_step, ctx)
    if out and step.get("status") == "failed" and (step.get("reason") or "").startswith(("restore check ",
                                                                                          "snapshot ")):
        out[0] = {**out[0], "status": "measured", "value": True, "reason": None}  # the identity came back
    for g in (step.get("checks") or {}).get("restore_checks") or []:
        out.append({"step": step["name"], "metric": f"restore_check.{g['name']}",
                    "status": "measured" if g.get("ok") else "failed", "value": bool(g.get("ok")),
                    "reason": None if g.get("ok") else (
                        f"timed out after {g.get('wall_s')} s" if g.get("timed_out") else
                        f"rc {g.get('rc')}: " + ((g.get("output") or "").strip().splitlines() or [""])[-1][:200])})
    for g in (step.get("checks") or {}).get("snapshot") or []:
        out.append({"step": step["name"], "metric": f"snapshot.{g['name']}",
                    "status": "measured" if g.get("same") else "failed", "value": bool(g.get("same")),
                    "reason": None if g.get("same") else f"differs after the restore: {g.get('difference')}"})
    return out


async def _restore(w: Window, st: StepSpec, res: StepResult) -> None:
    logs = w.out / st.dir
    hard = w.left(w.window.hard_deadline_s)
    if w.exp.server.is_sim:
        res.checks["start"] = await w.server.start_sim(None)
    else:
        cmd = w.exp.server.restore
        assert cmd is not None
        if hard is not None:
            cmd = replace(cmd, timeout_s=max(1.0, min(cmd.timeout_s, hard)))
        res.checks["commands"] = await w.server.start_with(cmd, "restore", logs)
        w.say_stops(st, res.checks["commands"])
        failed = [c for c in res.checks["commands"] if c.get("name") == "restore" and not c.get("background")
                  and c.get("rc") != 0]
        if failed:
            res.status, res.reason = "failed", f"restore command failed (rc {failed[0].get('rc')})"
            return
    ready = await w.server.wait_ready(None if hard is None else max(1.0, min(hard, 600.0)))
    res.checks["ready"] = ready
    if not ready["ready"]:
        res.status, res.reason = "failed", f"not ready after {ready['waited_s']} s: {ready['last_error']}"
        return
    ident, _snap, err = await w.server.read()
    res.checks["identity"] = ident
    if w.snapshot_identity is None:  # no incumbent and no incarnation was ever up
        bad = identity_mismatches(ident, w.exp.server.identity)
        res.checks["note"] = (w.snapshot_note or "") + "; checked against the pins only"
        if bad or err:
            res.status, res.reason = "failed", err or "; ".join(bad)
            return
    elif ident != w.snapshot_identity:
        diff = sorted(k for k in set(ident or {}) | set(w.snapshot_identity)
                      if (ident or {}).get(k) != w.snapshot_identity.get(k))
        res.status = "failed"
        res.reason = "identity differs from the snapshot before the first step: " + ", ".join(
            f"{k}: {w.snapshot_identity.get(k)!r} -> {(ident or {}).get(k)!r}" for k in diff)
        return
    res.status = "measured"
    res.checks["server_restored"] = True  # the incumbent is back: a failed check after this never stops it


KIND = StepKind(
    name="restore",
    keys=frozenset(),
    parse=_parse,
    execute=_execute,
    restores=True,
    check=_check,
    cells=_cells,
    commands=_commands,
)
"""The restore kind (module docstring)."""
