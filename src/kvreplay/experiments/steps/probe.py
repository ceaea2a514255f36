"""``kind = "probe"``: ``kvreplay probe`` against the current incarnation, inside the window.

TOML keys, settings, output directory and cells: ``experiments.probe.step`` (the
options of ``kvreplay probe``; defaults from ``experiments.probe.legs.ProbeConfig``).
The window cancels it at ``hard_deadline - restore_reserve``; it sends no new leg after
``stop_new_after`` (the step is then ``aborted``, its cut cells partial, the window goes
on). A leg answered 401/403 aborts the window (``auth``), as identity drift against the
incarnation and pins that no longer hold do; other failed legs make the step ``failed``.
A file with a ``[fleet]`` takes no probe step (refused at load: a router spreads its legs).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvreplay.experiments.fields import Where
from kvreplay.experiments.lifecycle import identity_mismatches
from kvreplay.experiments.model import ServerSpec, StepResult, StepSpec
from kvreplay.experiments.probe.step import PROBE_KEYS, probe_cells, probe_settings
from kvreplay.experiments.steps.base import CellContext, StepKind, Window
from kvreplay.plan import Plan
from kvreplay.rundir import read_json
from kvreplay.workload import Workload

__all__ = ["KIND"]


def _parse(rest: dict[str, Any], where: Where, common: dict[str, Any]) -> dict[str, Any]:
    return probe_settings(rest, path=where.path, line=where.line, fld=where.fld)


def _check(step: StepSpec, server: ServerSpec, where: Where) -> None:
    """Refuse a probe against a ``[fleet]``: its legs measure one server's cache, and a router spreads them."""
    if server.replicas:
        raise where.error("a probe measures one server's cache, and the [fleet] router would spread its legs "
                          "over the replicas: probe a replica in an experiment without [fleet]", "kind")


def _freeze(step: StepSpec, workload: Workload | None) -> tuple[dict[str, Any], Plan | None]:
    return {"probe": {k: v for k, v in step.settings.items() if k not in ("label", "comparable")}}, None


async def _execute(w: Window, st: StepSpec, res: StepResult) -> None:
    from kvreplay.experiments.probe.step import run_probe_step

    assert w.server.url is not None
    is_sim = w.exp.server.is_sim
    verdict = await run_probe_step(
        url=w.server.url, backend_name=w.server.backend_name, profile=w.exp.server.profile,
        headers=w.headers, settings=st.settings, out_dir=w.out / st.dir,
        sim_time_scale=w.server.sim_config.time_scale if is_sim and w.server.sim_config else None,
        say=lambda m: w.say(f"  {st.name}: {m}"), stop_new_after_s=w.left(w.window.stop_new_after_s))
    ident = verdict["identity"]
    res.checks.update(identity_after=ident["after"], legs=verdict["requests"],
                      legs_failed=len(verdict["legs_failed"]), plain=verdict.get("plain"),
                      stopped=verdict.get("stopped"))
    auth = [f for f in verdict["legs_failed"] if f.get("http_status") in (401, 403)]
    bad = identity_mismatches(ident["after"], w.exp.server.identity) if ident["after"] is not None else []
    if auth:
        res.status, res.reason = "aborted", f"auth: HTTP {auth[0]['http_status']} from the server"
        w.abort("auth", f"step {st.name}: {res.reason}")
    elif ident["drift"] or (ident["after"] is not None and w.inc_identity is not None
                            and verdict["backend"] == w.server.backend_name  # same adapter, same shape
                            and ident["after"] != w.inc_identity):
        res.status, res.reason = "aborted", "identity drift against the incarnation's identity"
        w.abort("identity_drift", f"step {st.name}: identity changed since incarnation {w.incarnation}")
    elif bad:
        res.status, res.reason = "aborted", "identity pins do not hold: " + "; ".join(bad)
        w.abort("identity_pins", res.reason)
    elif verdict.get("stopped"):
        # as a run step cut at stop_new_after (the runner's "deadline"): the step is aborted,
        # the window is not; its cut cells are partial (experiments.probe.cut)
        res.status = "aborted"
        res.reason = f"deadline: no new probe requests after {w.window.stop_new_after_s:g} s"
    elif verdict["legs_failed"]:
        f = verdict["legs_failed"][0]
        res.status = "failed"
        res.reason = (f"{len(verdict['legs_failed'])} of {verdict['requests']} probe requests failed "
                      f"(first: leg {f['leg']}, {f['status']}, HTTP {f['http_status']}, {f['error']})")
    else:
        res.status = "measured"


def _verdict(root: Path | None, st: dict[str, Any]) -> dict[str, Any] | None:
    verdict = read_json(root / st["run_dir"] / "verdict.json") if root is not None and st.get("run_dir") else None
    return verdict if isinstance(verdict, dict) else None


def _cells(st: dict[str, Any], fs: dict[str, Any], ctx: CellContext) -> list[dict[str, Any]]:
    """``probe_cells`` of its ``verdict.json``, the fit in model time beside it at a time scale."""
    from kvreplay.experiments.timescale import model_fit, probe_scale

    verdict = _verdict(ctx.root, st)
    return model_fit(probe_cells(st["name"], st["status"], st.get("reason"), fs.get("probe") or {}, verdict),
                     probe_scale(verdict))


def _time_scales(out: Path, st: dict[str, Any]) -> dict[str, float | None]:
    """The simulator time scale of its ``verdict.json``, when it can be read."""
    import orjson

    from kvreplay.experiments.timescale import probe_scale

    if not st.get("run_dir"):
        return {}
    try:
        verdict = orjson.loads((out / st["run_dir"] / "verdict.json").read_bytes())
    except (OSError, ValueError):
        return {}
    return {st["name"]: probe_scale(verdict if isinstance(verdict, dict) else None)}


def _schedule(fs: dict[str, Any]) -> str:
    pr = fs["probe"]
    return (f"  sizes {','.join(str(x) for x in pr['sizes'])} x{pr['cold_repeats']} fit_on {pr['fit_on']}"
            + (f", flush k<={pr['flush_max']} x{pr['flush_repeats']} ({pr['flush_prefix_tokens']}-token "
               f"prefix, {pr['foreign_tokens']}-token foreign)" if pr["flush_max"] else ", no flush legs"))


KIND = StepKind(
    name="probe",
    keys=PROBE_KEYS,
    parse=_parse,
    execute=_execute,
    sends=True,
    cancel_at_deadline=True,
    check=_check,
    freeze=_freeze,
    cells=_cells,
    time_scales=_time_scales,
    schedule=_schedule,
)
"""The probe kind (module docstring)."""
