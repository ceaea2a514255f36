"""``kind = "incarnation"``: bring up a new server (or simulator) and check it before anything is sent.

TOML keys: ``fresh`` (false; true: the counters must read zero and the cache be
empty), ``sim`` (simulator settings overlaid on ``[server.sim]``; target ``sim`` only).

Run (``experiments.lifecycle``): against the simulator, a new one with the
overlay; else the ``stop`` then ``start`` commands on a new port. Then readiness,
identity (``[server.identity]`` pins must hold), the fresh check, and the ready
completion. A failure blocks the steps after it (``deferred``) until the next
incarnation; the window cancels it at ``hard_deadline - restore_reserve``.
One cell, ``ready_identity_fresh``.
"""

from __future__ import annotations

from typing import Any

from kvreplay.errors import ConfigError
from kvreplay.experiments.fields import Where
from kvreplay.experiments.lifecycle import identity_mismatches
from kvreplay.experiments.model import STOP_GRACE_S, ServerSpec, StepResult, StepSpec
from kvreplay.experiments.steps.base import StepKind, Window, check_cells
from kvreplay.plan import Plan
from kvreplay.workload import Workload

__all__ = ["KIND", "completion_failure", "replace_commands"]


def _parse(rest: dict[str, Any], where: Where, common: dict[str, Any]) -> dict[str, Any]:
    st: dict[str, Any] = {}
    if "fresh" in rest:
        if not isinstance(rest["fresh"], bool):
            raise where.error("must be true or false", "fresh")
        st["fresh"] = rest["fresh"]
    sim = rest.get("sim", {})
    if not isinstance(sim, dict):
        raise where.error("must be a table of simulator settings", "sim")
    st["sim"] = dict(sim)
    st.setdefault("fresh", False)
    return st


def _check(step: StepSpec, server: ServerSpec, where: Where) -> None:
    """Refuse an incarnation that could not start anything, or not as written.

    That is a URL target with no ``[server] start``, and a ``sim`` overlay the simulator would
    refuse over ``[server.sim]`` (``step[N].sim.KEY``).
    """
    if not server.is_sim and server.start is None:
        raise where.error("an incarnation starts a fresh server: give [server] a start command "
                          "(or target = \"sim\")", "kind")
    if server.is_sim and step.settings.get("sim"):
        from kvreplay.sim import SimConfig

        try:
            SimConfig.from_mapping(dict(step.settings["sim"]), base=SimConfig.from_mapping(dict(server.sim)))
        except ConfigError as exc:
            raise where.error(exc.message, f"sim.{exc.field}" if exc.field else "sim") from None


def _freeze(step: StepSpec, workload: Workload | None) -> tuple[dict[str, Any], Plan | None]:
    return {"fresh": step.settings.get("fresh", False), "sim": step.settings.get("sim", {})}, None


def _commands(fs: dict[str, Any], server: dict[str, Any]) -> list[tuple[str, str]]:
    """Stop the current server, start the next (or a new embedded simulator with the step's overlay)."""
    if server.get("target") == "sim":
        return [("simulator", f"a new embedded simulator: [server.sim] {server.get('sim') or {}} "
                              f"+ step sim {fs.get('sim') or {}}")]
    return replace_commands(server, "start")


def replace_commands(server: dict[str, Any], name: str) -> list[tuple[str, str]]:
    """The previous server stopped (SIGTERM to a background start's group, the stop command), then ``name``."""
    out = [("stop", f"SIGTERM to the running start command's process group, SIGKILL after "
                    f"{server.get('stop_grace_s', STOP_GRACE_S):g} s (when it runs in the background)")]
    if server.get("stop"):
        out.append(("stop", server["stop"]["cmd"]))
    cmd = server.get(name)
    if cmd:
        out.append((name, cmd["cmd"] + ("  (background)" if cmd.get("background") else "")
                    + f"  (timeout {cmd['timeout_s']:g} s)"))
    return out


def _fail(w: Window, res: StepResult, why: str) -> None:
    res.status, res.reason = "failed", why
    w.blocked = f"incarnation {res.name} failed: {why}"


async def _execute(w: Window, st: StepSpec, res: StepResult) -> None:
    logs = w.out / st.dir
    w.incarnation = st.name
    res.incarnation = st.name
    w.blocked = None
    if w.exp.server.is_sim:
        res.checks["start"] = await w.server.start_sim(st.settings.get("sim"))
    else:
        assert w.exp.server.start is not None
        cmds = await w.server.start_with(w.exp.server.start, "start", logs)
        res.checks["commands"] = cmds
        w.say_stops(st, cmds)
        bad_cmd = [c for c in cmds if not c.get("background") and c.get("rc") != 0 and c.get("name") == "start"]
        if bad_cmd:
            return _fail(w, res, f"start command failed (rc {bad_cmd[0].get('rc')}, "
                                 f"{'timed out' if bad_cmd[0].get('timed_out') else 'exited'})")
    ready = await w.server.wait_ready()
    res.checks["ready"] = ready
    if not ready["ready"]:
        return _fail(w, res, f"not ready after {ready['waited_s']} s: {ready['last_error']}")
    ident, snap, err = await w.server.read()
    res.checks["identity"] = ident
    if err:
        return _fail(w, res, f"identity unreadable: {err}")
    bad = identity_mismatches(ident, w.exp.server.identity)
    if bad:
        res.checks["pins"] = bad
        return _fail(w, res, "identity pins do not hold: " + "; ".join(bad))
    w.inc_identity = ident
    if w.snapshot_identity is None:
        w.snapshot_identity = ident
        w.snapshot_note = (w.snapshot_note or "") + f"; snapshot taken at the first incarnation ({st.name})"
    if st.settings.get("fresh"):
        from kvreplay.runner.counters import check_fresh

        if snap is None:
            return _fail(w, res, "fresh required but the backend reports no counters")
        ok, why = check_fresh(snap)
        res.checks["fresh"] = {"passed": ok, "reason": why,
                               "counters": {k: v for k, v in snap.common.items() if v}}
        if not ok:
            return _fail(w, res, f"fresh check failed: {why}")
    comp = await w.server.completion_check()
    if comp is not None:
        res.checks["completion"] = comp
        if not comp["passed"]:
            return _fail(w, res, completion_failure(comp))
    res.status = "measured"


def completion_failure(comp: dict[str, Any]) -> str:
    """Why a ready completion failed, in words (``lifecycle.ServerControl.completion_check``'s result).

    ``ready completion: no answer (ClientConnectorError: ...); want HTTP 200 with finish_reason 'stop'``,
    ``ready completion: HTTP 500 (body...); want HTTP 200 with finish_reason 'stop'`` or
    ``ready completion: HTTP 200 with finish_reason 'length'; want 'stop'``.
    """
    status, err = comp.get("http_status"), comp.get("error")
    if status is None:
        return f"ready completion: no answer ({err or 'no response'}); want HTTP 200 with finish_reason 'stop'"
    if status != 200:
        return f"ready completion: HTTP {status} ({err or 'no body'}); want HTTP 200 with finish_reason 'stop'"
    return f"ready completion: HTTP 200 with finish_reason {comp.get('finish_reason')!r}; want 'stop'"


KIND = StepKind(
    name="incarnation",
    keys=frozenset({"fresh", "sim"}),
    parse=_parse,
    check=_check,
    execute=_execute,
    starts_server=True,
    cancel_at_deadline=True,
    freeze=_freeze,
    cells=check_cells("ready_identity_fresh"),
    commands=_commands,
)
"""The incarnation kind (module docstring)."""
