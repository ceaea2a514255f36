"""``kind = "ab"``: an A/B of two server arms, as ``kvreplay ab`` does, inside the window.

TOML keys: ``arms`` (two ``{name, cmd}``, baseline first; ``cmd`` starts the arm's
server, ``{port}`` etc. expanded by ``experiments.lifecycle.expand``), ``reps``
(3), ``phases`` (concurrencies, ``"c1,c4"``), ``order`` (forward), ``select`` (all),
``primary``/``protected`` (``METRIC:±X%`` thresholds), ``seed`` (0), ``ready_timeout``
(60 s), ``cmd_timeout`` (120 s), ``drain_timeout`` (10 s), ``correctness`` (``"valid"`` or
``"exact"``: the arms' outputs compared after the A/B, ``experiments.ab.correctness``; a
failure makes the step ``failed`` and is its ``correctness`` cell).

Frozen: the block plan (``plan``, ``plan_sha256``), the block order (``ab_order``: A B,
B A, ...) and the settings (``ab``). Run: ``experiments.ab.arms.run_ab`` (with a ``[fleet]``,
every block as ``kvreplay run --replica``: the replicas' adapters, records naming their replica). Published:
the ``ab_verdict`` finding from its ``compare.json``, a ``verdict`` cell and one cell
per threshold check (and, for simulator arms that run fleets, ``sim:replicas=N,router=P``,
the per-replica and routing-loss cells of ``experiments.ab.fleet``), the arms' common
time scale, and its standalone ``report.html``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from kvreplay.errors import ConfigError
from kvreplay.experiments.ab.arms import Arm, block_order, block_phase_specs
from kvreplay.experiments.fields import NAME_RE, Where
from kvreplay.experiments.lifecycle import expand, free_port
from kvreplay.experiments.model import StepResult, StepSpec
from kvreplay.experiments.steps.base import CellContext, StepKind, Window, plan_schedule
from kvreplay.plan import PhaseSpec, Plan, build_plan
from kvreplay.rundir import read_json
from kvreplay.workload import Workload

__all__ = ["KIND", "ab_phase_specs"]


def _parse(rest: dict[str, Any], where: Where, common: dict[str, Any]) -> dict[str, Any]:
    path, line, fld = where.path, where.line, where.fld
    arms = rest.get("arms")
    if (not isinstance(arms, list) or len(arms) != 2
            or not all(isinstance(a, dict) and set(a) <= {"name", "cmd"} and isinstance(a.get("name"), str)
                       and isinstance(a.get("cmd", ""), str) for a in arms)):
        raise ConfigError("arms is a list of two {name = ..., cmd = ...} (baseline first)", path=path, line=line,
                          field=f"{fld}.arms")
    for a in arms:
        if not NAME_RE.match(a["name"]):
            raise ConfigError(f"bad arm name {a['name']!r}", path=path, line=line, field=f"{fld}.arms")
    reps = rest.get("reps", 3)
    if not isinstance(reps, int) or isinstance(reps, bool) or reps < 1:
        raise ConfigError("must be an integer >= 1", path=path, line=line, field=f"{fld}.reps")
    out: dict[str, Any] = {"arms": [{"name": a["name"], "cmd": a.get("cmd", "")} for a in arms], "reps": reps}
    phases = rest.get("phases", "c1,c4")
    if not isinstance(phases, str) or not re.fullmatch(r"c\d+(,c\d+)*", phases.replace(" ", "")):
        raise ConfigError("phases is a list of concurrencies like \"c1,c4\"", path=path, line=line,
                          field=f"{fld}.phases")
    out["phases"] = phases.replace(" ", "")
    out["order"] = rest.get("order", "forward")
    out["select"] = rest.get("select", "all")
    for role in ("primary", "protected"):
        v = rest.get(role, [])
        if not isinstance(v, list) or not all(isinstance(t, str) for t in v):
            raise ConfigError(f"{role} is a list of METRIC:±X% strings", path=path, line=line, field=f"{fld}.{role}")
        out[role] = list(v)
    out["seed"] = rest.get("seed", 0)
    if "correctness" in rest:  # the outputs gate (experiments.ab.correctness)
        from kvreplay.experiments.ab.correctness import MODES

        if rest["correctness"] not in MODES:
            raise ConfigError(f"correctness is one of {', '.join(map(repr, MODES))}", path=path, line=line,
                              field=f"{fld}.correctness")
        out["correctness"] = rest["correctness"]
    for key, default in (("ready_timeout", 60.0), ("cmd_timeout", 120.0), ("drain_timeout", 10.0)):
        out[f"{key}_s"] = where.duration(rest.get(key, default), key)
    return out


def ab_phase_specs(step: StepSpec) -> list[PhaseSpec]:
    """An ab step's block phases: one per concurrency (``c1,c4``), each after a drain, as ``kvreplay ab``."""
    st = step.settings
    return block_phase_specs(st["phases"], st["order"], st["select"], field=f"step[{step.index}].phases")


def _freeze(step: StepSpec, workload: Workload | None) -> tuple[dict[str, Any], Plan | None]:
    assert workload is not None
    plan = build_plan(workload, ab_phase_specs(step))
    arms = [Arm(a["name"], a["cmd"]) for a in step.settings["arms"]]
    return {"plan": plan.content(), "plan_sha256": plan.sha256, "ab_order": block_order(arms, step.settings["reps"]),
            "ab": {k: v for k, v in step.settings.items() if k not in ("label", "comparable")}}, plan


async def _execute(w: Window, st: StepSpec, res: StepResult) -> None:
    from kvreplay.experiments.ab.arms import run_ab
    from kvreplay.experiments.ab.compare import parse_threshold
    from kvreplay.runner.fleet import fleet_run_fields

    s = st.settings
    srv = w.server
    if srv.port is None and not w.exp.server.is_sim:
        srv.port = free_port()
        srv.url = expand(w.exp.server.target, port=srv.port, out_dir=w.out)
    here = w.exp.path.parent
    arms = [Arm(a["name"], expand(a["cmd"], port=srv.port, out_dir=w.out, here=here) if a["cmd"] else "")
            for a in s["arms"]]
    thresholds = [parse_threshold(t, "primary") for t in s["primary"]]
    thresholds += [parse_threshold(t, "protected") for t in s["protected"]]
    result = await run_ab(
        workload=w.workload_for(st), plan=w.plans[st.name], arms=arms, reps=s["reps"], out=w.out / st.dir,
        target="sim" if w.exp.server.is_sim else str(srv.url), backend_name=srv.backend_name,
        thresholds=thresholds, sim_base=srv.sim_config if w.exp.server.is_sim else None,
        profile=w.exp.server.profile, headers=w.headers, seed=int(s.get("seed", 0)),
        ready_timeout_s=s["ready_timeout_s"], cmd_timeout_s=s["cmd_timeout_s"],
        drain_timeout_s=s["drain_timeout_s"], progress=lambda m: w.say(f"  {st.name}: {m}"),
        stop_new_after_s=w.left(w.window.stop_new_after_s),
        hard_deadline_s=w.left(w.window.cancel_at_s),
        abort_if=w.window.abort_if,
        contract={"identity_pins": w.pins, "abort_on_malformed": w.window.abort_on_malformed},
        replicas=w.exp.server.replicas, fleet_options=fleet_run_fields(str(srv.url), w.exp.server.replicas),
        # each arm command in the window's process ledger (what it leaves running is named at the end)
        on_spawn=lambda pid, name, cmd: srv.ledger.record(pid, name=f"arm-{name}", cmd=cmd, port=srv.port,
                                                          log_dir=w.out / st.dir / "commands"))
    stopped = result["ab"].get("stopped")
    res.checks["verdict"] = result.get("verdict")
    if stopped:
        res.status, res.reason = "aborted", stopped
        if stopped.startswith("hard deadline") or stopped.endswith("aborted: hard_deadline"):
            w.abort("hard_deadline", f"step {st.name}: {stopped}")
        elif not (stopped.startswith("deadline") or stopped.endswith("aborted: deadline")):
            w.abort("ab_stopped", f"step {st.name}: {stopped}")
    else:
        res.status = "measured"
    if s.get("correctness") and res.status == "measured":
        from kvreplay.experiments.ab.correctness import check_outputs

        gate = res.checks["correctness"] = check_outputs(w.out / st.dir, result["ab"].get("blocks") or [],
                                                         s["arms"][0]["name"], s["correctness"])
        w.say(f"  {st.name}: correctness ({gate['mode']}): " + (
            f"{gate['checked']} outputs agree" if gate["ok"] else f"{gate['failures']} failed: {gate['first']}"))
        if not gate["ok"]:
            res.status, res.reason = "failed", f"correctness: {gate['first']}"


def _runs_commands(step: StepSpec) -> bool:
    return any(a.get("cmd") for a in step.settings.get("arms", []))


def _findings(out: Path, st: dict[str, Any], fs: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``ab_verdict`` finding of a step that ran (its ``compare.json``), else none."""
    if not st.get("run_dir"):
        return []
    comp = read_json(out / st["run_dir"] / "compare.json")
    if comp is None:
        return []
    reps = fs.get("ab", {}).get("reps")
    n_pairs = len(comp.get("pairs", []))
    usable = [c.get("n", 0) for c in comp.get("checks", [])]
    measured = min(usable) if usable else n_pairs
    ev = [{"cell": f"{st['name']}/{c['phase']}.{c['metric']}", "metric": c["check"], "value": c.get("change_pct"),
           "ci_change_pct": c.get("ci_change_pct"), "decision": c["decision"], "role": c["role"], "n": c.get("n")}
          for c in comp.get("checks", [])]
    short = f"; only {measured} of {reps} planned repetitions measured" if reps and measured < reps else ""
    verdict = comp.get("verdict")
    checks = ", ".join(f"{e['cell']} {'n/a' if e['value'] is None else format(e['value'], '+.2f') + '%'} "
                       f"({e['role']}: {e['decision']})" for e in ev) or "no thresholds"
    nxt = {"benefit": "confirm on the production concurrency and a second workload before adopting",
           "regression": "locate the cost: repeat with the candidate's change split in two arms",
           "no change": "stop here: the candidate neither helps nor hurts at these thresholds"}.get(
        str(verdict), f"add repetitions (at least {max(2, (reps or 3) * 2)}) or narrow the thresholds' noise "
                      "before deciding")
    return [{"rule": "ab_verdict", "summary": f"{st['name']}: verdict {verdict} over {measured} matched "
             f"repetition(s){short}: {checks}", "evidence": ev, "next": nxt,
             "verdict": verdict, "reps_planned": reps, "reps_measured": measured}]


def _cells(st: dict[str, Any], fs: dict[str, Any], ctx: CellContext) -> list[dict[str, Any]]:
    """A ``verdict`` cell and one cell per threshold check (from the step's ``ab_verdict`` finding)."""
    name, status, reason = st["name"], st["status"], st.get("reason")
    f = next((f for f in ctx.findings if f["rule"] == "ab_verdict" and f["summary"].split(":")[0] == name), None)
    if f is None:
        return [{"step": name, "metric": "verdict", "status": status if status != "measured" else "failed",
                 "value": None, "reason": reason or "no comparison"}]
    out = [{"step": name, "metric": "verdict", "status": status, "value": f["verdict"], "reason": reason}]
    for e in f["evidence"]:
        out.append({"step": name, "metric": e["cell"].split("/", 1)[1], "status": status,
                    "value": e["value"], "reason": e["decision"]})
    gate = (st.get("checks") or {}).get("correctness")
    if gate is not None:  # the outputs gate: its own cell, beside the timings
        out.append({"step": name, "metric": "correctness", "status": "measured" if gate["ok"] else "failed",
                    "value": gate["ok"], "reason": None if gate["ok"] else gate["first"]})
    if ctx.root is not None and st.get("run_dir"):  # arms that ran fleets: per replica and routing loss
        from kvreplay.experiments.ab.fleet import fleet_cells

        out += fleet_cells(name, ctx.root / st["run_dir"], status)
    return out


def _time_scales(out: Path, st: dict[str, Any]) -> dict[str, float | None]:
    """The arms' common simulator time scale (``ab.json``), when it can be read."""
    import orjson

    from kvreplay.experiments.timescale import ab_scale

    if not st.get("run_dir"):
        return {}
    try:
        ab = orjson.loads((out / st["run_dir"] / "ab.json").read_bytes())
    except (OSError, ValueError):
        return {}
    return {st["name"]: ab_scale(ab if isinstance(ab, dict) else None)}


def _restate(out: Path, st: dict[str, Any]) -> str | None:
    """Draw the ``report.html`` that standalone ``kvreplay ab`` writes (``report.abreport``)."""
    if not (out / st["run_dir"] / "ab.json").exists():
        return None
    from kvreplay.report.abreport import write_ab_report

    try:
        write_ab_report(out / st["run_dir"])
    except Exception as exc:  # noqa: BLE001 - a figure must not cost the publication
        return (f"step {st['name']}: report.html not written ({type(exc).__name__}: {exc}); "
                f"draw it with: kvreplay report {out / st['run_dir']}")
    return None


def _schedule(fs: dict[str, Any]) -> str:
    return plan_schedule(fs) + "  order " + " ".join(b["arm"] for b in fs["ab_order"])


KIND = StepKind(
    name="ab",
    keys=frozenset({"arms", "reps", "phases", "order", "select", "primary", "protected", "seed",
                    "ready_timeout", "cmd_timeout", "drain_timeout", "correctness"}),
    parse=_parse,
    execute=_execute,
    sends=True,
    needs_workload=True,
    freeze=_freeze,
    runs_commands=_runs_commands,
    cells=_cells,
    findings=_findings,
    time_scales=_time_scales,
    restate=_restate,
    schedule=_schedule,
    commands=lambda fs, server: [(f"arm {a['name']}", a["cmd"] or "(no command: the current server)")
                                 for a in fs["ab"]["arms"]],
)
"""The ab kind (module docstring)."""
