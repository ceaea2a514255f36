"""``kind = "quiesce"``: take the primary out of service (a user command), then wait until it is drained.

TOML keys: ``cmd`` (a shell command, ``{port}``/``{dir}``/``{here}``/``{python}``/``{kvreplay}``
placeholders, as the lifecycle commands; optional: without one the step only drains),
``timeout`` (the command's bound, default ``60s``), ``drain_timeout`` (how long to wait
for the drain, default ``60s``), ``label``.

Run: the command to completion (output in the step's folder, ``quiesce.log``: the
user-command contract, ``experiments.lifecycle.run_command``), then the drain: two
counter reads 0.2 s apart with every load gauge zero and no counter moving
(``runner.counters.wait_drained``). ``measured`` when the command exits 0 and the
server drained (or there is no counters adapter to check it with: ``checks.drain.passed``
null); ``failed`` otherwise. Its end is the deadline origin of a window with
``[window] deadline_from = "quiesce"``: ``stop_new_after``, ``hard_deadline`` and
``restore_reserve`` count from it (``experiments.window.execute``). The window cancels
it at ``hard_deadline - restore_reserve``. One cell, ``quiesced``.
"""

from __future__ import annotations

from typing import Any

from kvreplay.experiments.fields import Where
from kvreplay.experiments.lifecycle import run_command
from kvreplay.experiments.model import StepResult, StepSpec
from kvreplay.experiments.steps.base import COMMON_KEYS, StepKind, Window, check_cells
from kvreplay.plan import Plan
from kvreplay.workload import Workload

__all__ = ["KIND"]

DRAIN_TIMEOUT_S = 60.0
"""``drain_timeout`` when not given (s)."""


def _parse(rest: dict[str, Any], where: Where, common: dict[str, Any]) -> dict[str, Any]:
    cmd = rest.get("cmd")
    if cmd is not None and (not isinstance(cmd, str) or not cmd.strip()):
        raise where.error("cmd is a shell command", "cmd")
    return {"cmd": cmd, "timeout_s": where.duration(rest.get("timeout", 60), "timeout"),
            "drain_timeout_s": where.duration(rest.get("drain_timeout", DRAIN_TIMEOUT_S), "drain_timeout")}


def _freeze(step: StepSpec, workload: Workload | None) -> tuple[dict[str, Any], Plan | None]:
    s = step.settings
    return {"cmd": s["cmd"], "timeout_s": s["timeout_s"], "drain_timeout_s": s["drain_timeout_s"]}, None


async def _execute(w: Window, st: StepSpec, res: StepResult) -> None:
    s = st.settings
    if s["cmd"] is not None:
        text = w.server.expand(s["cmd"])
        done = await run_command(text, name="quiesce", log_dir=w.out / st.dir, timeout_s=s["timeout_s"],
                                 ledger=w.server.ledger, port=w.server.port, reap=True)
        res.checks["command"] = done
        if done["rc"] != 0:
            res.status = "failed"
            res.reason = ("quiesce command timed out after " + f"{s['timeout_s']:g} s" if done["timed_out"]
                          else f"quiesce command failed (rc {done['rc']})")
            return
    drain = await w.server.drain(s["drain_timeout_s"])
    res.checks["drain"] = drain
    if drain["passed"] is False:
        res.status, res.reason = "failed", f"not drained after {drain['waited_s']} s: {drain['reason']}"
        return
    res.status = "measured"


def _schedule(frozen_step: dict[str, Any]) -> str:
    cmd = frozen_step.get("cmd")
    return (f"  cmd: {cmd} (timeout {frozen_step['timeout_s']:g} s)" if cmd else "  no command") + (
        f"; drain up to {frozen_step['drain_timeout_s']:g} s")


KIND = StepKind(
    name="quiesce",
    keys=frozenset({"cmd", "timeout", "drain_timeout"}) | (COMMON_KEYS - {"comparable"}),
    parse=_parse,
    execute=_execute,
    freeze=_freeze,
    cancel_at_deadline=True,
    deadline_origin=True,
    runs_commands=lambda st: st.settings.get("cmd") is not None,
    cells=check_cells("quiesced"),
    schedule=_schedule,
    commands=lambda fs, server: [("quiesce", fs["cmd"])] if fs.get("cmd") else [],
)
"""The quiesce kind (module docstring)."""
