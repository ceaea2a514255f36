"""``kind = "run"``: replay phases of the workload, as ``kvreplay run`` does.

TOML keys: ``phases`` (shorthand strings ``NAME:ORDER:cN...``) and/or ``[[step.phase]]``
tables (as in a plan TOML, ``kvreplay.plan``), ``label``, ``comparable`` (false: a
control, never pooled with or compared as a main arm), ``drain_timeout``,
``max_transport_failures`` (this step's own: consecutive sends that never reached
the server before the step is ``failed``, reason ``transport: ...``; default the
window's; 0 = never), ``history`` (a conversation workload's history: ``"captured"``,
the default, or ``"live"``, as ``kvreplay run --history``; frozen only when live).

With a ``[fleet]`` the run is ``kvreplay run --target ROUTER --replica ...``'s: every
replica's adapter (``backends.fleet``), records naming their replica, ``phases[].replicas``,
``phases[].fleet`` and ``phases[].routing_loss`` (``runner.fleet.fleet_run_fields``).

Frozen: the exact plan (``plan``, ``plan_sha256``) and ``drain_timeout_s``. Run: the
runner against the current incarnation, under the window's deadlines and abort rules;
identity drift against the incarnation or pins that no longer hold abort the window.
Cells per phase: requests, TTFT/E2E p50, cached tokens, device hit tokens and the host
tier's fetched tokens, lookups, hits and reused tokens (``HOST_CELLS``;
``experiments.findings``: repeats only, absent tiers are absent).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp

from kvreplay.errors import ConfigError
from kvreplay.evidence.vocab import ABSENT
from kvreplay.experiments.fields import Where, transport_failures
from kvreplay.experiments.findings import CELL_METRICS, phase_status, view_evidence
from kvreplay.experiments.lifecycle import identity_mismatches
from kvreplay.experiments.model import StepResult, StepSpec
from kvreplay.experiments.steps.base import COMMON_KEYS, CellContext, StepKind, Window, plan_schedule
from kvreplay.plan import PhaseSpec, Plan, build_plan, parse_phase
from kvreplay.workload import Workload

__all__ = ["HOST_CELLS", "KIND", "judge_run"]


def _phase_label(text: str | None) -> str | None:
    """A step label as a phase label (1-64 of letters, digits, ``_.-``; other characters -> ``-``)."""
    if not text:
        return None
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")[:64] or None


def _phases(raw: dict[str, Any], where: Where) -> tuple[PhaseSpec, ...]:
    path, line, fld = where.path, where.line, where.fld
    out: list[PhaseSpec] = []
    short = raw.get("phases", [])
    if not isinstance(short, list) or not all(isinstance(s, str) for s in short):
        raise ConfigError("phases is a list of shorthand strings (NAME:ORDER:cN...)", path=path, line=line,
                          field=f"{fld}.phases")
    for s in short:
        try:
            out.append(parse_phase(s))
        except ConfigError as exc:
            raise ConfigError(str(exc), path=path, line=line, field=f"{fld}.phases") from exc
    tables = raw.get("phase", [])
    if not isinstance(tables, list):
        raise ConfigError("[[step.phase]] tables", path=path, line=line, field=f"{fld}.phase")
    for i, t in enumerate(tables):
        out.append(PhaseSpec.from_mapping(t, where={"path": path, "line": line, "field": f"{fld}.phase[{i}]"}))
    if not out:
        raise ConfigError("a run step needs phases", path=path, line=line, field=f"{fld}.phases")
    names = [p.name for p in out]
    for n in names:
        if names.count(n) > 1:
            raise ConfigError(f"phase name {n!r} used twice", path=path, line=line, field=f"{fld}.phases")
    return tuple(out)


def _parse(rest: dict[str, Any], where: Where, common: dict[str, Any]) -> dict[str, Any]:
    phases = _phases(rest, where)
    # A control step makes every phase a control (plan.json, summary.json, records carry it);
    # the step's label names phases that have none of their own.
    st: dict[str, Any] = {
        "phases": tuple(replace(ph, comparable=ph.comparable and common.get("comparable", True),
                                label=ph.label if ph.label is not None else _phase_label(common.get("label")))
                        for ph in phases)}
    if "drain_timeout" in rest:
        st["drain_timeout_s"] = where.duration(rest["drain_timeout"], "drain_timeout")
    if "history" in rest:
        if rest["history"] not in ("captured", "live"):
            raise ConfigError("history is \"captured\" or \"live\"", path=where.path, line=where.line,
                              field=f"{where.fld}.history")
        st["history"] = rest["history"]
    n = transport_failures(rest, where.path, where.line, where.fld)
    if n is not None:
        st["max_transport_failures"] = n
    return st


def _freeze(step: StepSpec, workload: Workload | None) -> tuple[dict[str, Any], Plan | None]:
    assert workload is not None
    plan = build_plan(workload, list(step.settings["phases"]))
    live = step.settings.get("history") == "live"
    if live and workload.sessions is None:
        raise ConfigError(f"step {step.name!r}: history = \"live\" needs a conversation workload "
                          "(a sessions side file beside it)", field="history")
    return {"plan": plan.content(), "plan_sha256": plan.sha256, **({"history": "live"} if live else {}),
            "drain_timeout_s": step.settings.get("drain_timeout_s", 10.0),
            **({"max_transport_failures": step.settings["max_transport_failures"]}
               if "max_transport_failures" in step.settings else {})}, plan


def _factory(w: Window, url: str) -> Callable[[aiohttp.ClientSession], Any]:
    name, profile = w.server.backend_name, w.exp.server.profile
    if w.exp.server.replicas and name != "none":  # [fleet]: every replica's adapter (backends.fleet)
        from functools import partial

        from kvreplay.backends.fleet import open_fleet_backend

        return partial(open_fleet_backend, w.exp.server.replicas, name, profile)

    async def factory(session: aiohttp.ClientSession) -> Any:
        if name == "none":
            return None
        from kvreplay.backends import detect, make_backend

        chosen = await detect(url, session) if name == "auto" else name
        return make_backend(chosen, url, session, profile=profile)

    return factory


async def _execute(w: Window, st: StepSpec, res: StepResult) -> None:
    from kvreplay.report.markdown import render_markdown
    from kvreplay.runner import RunOptions, execute_plan
    from kvreplay.runner.fleet import fleet_run_fields

    plan = w.plans[st.name]
    workload = w.workload_for(st)
    assert workload is not None and w.server.url is not None
    url, is_sim = w.server.url, w.exp.server.is_sim
    now = w.elapsed()  # one reading: the runner adds it back to name the window's deadlines exactly

    def left(at: float | None) -> float | None:
        return None if at is None else max(0.0, at - now)

    opts = RunOptions(
        target_url=url, target_label="sim" if is_sim else url, out_dir=w.out / st.dir,
        backend_name=w.server.backend_name, headers=w.headers,
        drain_timeout_s=st.settings.get("drain_timeout_s", 10.0), drain_interval_s=0.1,
        stop_new_after_s=left(w.window.stop_new_after_s),
        hard_deadline_s=left(w.window.cancel_at_s),
        elapsed_before_s=now, quiet=True, identity_pins=w.pins,
        abort_if=w.window.abort_if, max_error_rate=w.window.max_error_rate,
        abort_on_malformed=w.window.abort_on_malformed,
        max_output_error_rate=w.window.max_output_error_rate,
        max_transport_failures=st.settings.get("max_transport_failures", w.window.max_transport_failures) or None,
        history=st.settings.get("history", "captured"),
        # plan.json records the simulator's time scale, as `kvreplay run --target sim` does, so
        # the step's reports give model ms with the scale stated (experiments.timescale)
        run_extra=({"sim_time_scale": w.server.sim_config.time_scale}
                   if is_sim and w.server.sim_config is not None else {}),
        **fleet_run_fields(url, w.exp.server.replicas),  # [fleet]: as `kvreplay run --replica ...`
    )
    summary = await execute_plan(plan, plan.bind(workload), opts, backend_factory=_factory(w, url),
                                 render_report=render_markdown)
    if w.exp.server.replicas:  # phases[].routing_loss, as `kvreplay run` gives a fleet run
        from kvreplay.offline.runloss import finish_routing_loss

        finish_routing_loss(w.out / st.dir, summary, plan, workload, render_markdown)
    judge_run(w, res, summary)


def judge_run(w: Window, res: StepResult, summary: dict[str, Any]) -> None:
    """A run's status from its ``summary.json``: the runner's abort, identity drift or pins, invalid phases.

    An abort other than the window's own ``deadline`` aborts the window, as identity drift
    against the incarnation and pins that no longer hold do.
    """
    ab = summary.get("aborted")
    ident = (summary.get("identity") or {}).get("after")
    res.checks["identity_after"] = ident
    bad = identity_mismatches(ident, w.exp.server.identity) if ident is not None else []
    if ab and ab.get("reason") == "transport":
        # the server stopped answering: the step failed (not cut by the window); the window stops
        res.status, res.reason = "failed", f"transport: {ab.get('message')}"
        w.abort("transport", f"step {res.name}: {ab.get('message')}")
        return
    if ab:
        res.status, res.reason = "aborted", f"{ab.get('reason')}: {ab.get('message')}"
        if ab.get("reason") == "interrupt":
            w.interrupted = True
        if ab.get("reason") not in ("deadline",):
            w.abort(str(ab.get("reason")), f"step {res.name}: {ab.get('message')}")
        return
    if ident is not None and w.inc_identity is not None and ident != w.inc_identity:
        res.status, res.reason = "aborted", "identity drift against the incarnation's identity"
        w.abort("identity_drift", f"step {res.name}: identity changed since incarnation {w.incarnation}")
        return
    if bad:
        res.status, res.reason = "aborted", "identity pins do not hold: " + "; ".join(bad)
        w.abort("identity_pins", res.reason)
        return
    invalid = [f"{p['name']}: {'; '.join(p.get('invalid_reasons') or ['invalid'])}"
               for p in summary.get("phases", []) if not p.get("valid", True)]
    res.checks["phases_invalid"] = invalid
    if invalid:
        res.status, res.reason = "failed", " | ".join(invalid)
    else:
        res.status = "measured"


HOST_CELLS = (("hit_tokens", "device"), ("host_fetched_tokens", "host"), ("host_lookups", "host"),
              ("host_hits", "host"), ("host_reused_tokens", "host"))
"""``(counter cell, its tier)`` of each phase: device hit tokens, then the host tier's fetched tokens,
lookups, hits (lookups that found a checkpoint) and reused tokens (prompt tokens a checkpoint
covered), summed over the phase's repeats (``experiments.findings``)."""


def _cells(st: dict[str, Any], fs: dict[str, Any], ctx: CellContext) -> list[dict[str, Any]]:
    """Per phase: requests, TTFT/E2E p50 (``model_ms`` beside at a time scale), cached, hit and host tokens.

    A cell is ``measured`` only when its evidence exists (``findings.phase_status``): a
    phase that sent nothing is ``deferred`` (an abort came first) or ``failed``; one whose
    sends have no records, or whose requests all failed (in transport or in output), is
    ``failed`` with the reason; a phase cut short is ``aborted`` with ``"partial: 9 of 52
    positions sent (STEP REASON)"`` on every cell of it; a phase the step's run directory
    does not hold takes the step's status (``skipped`` with the condition for a step its
    ``when`` skipped; ``failed`` when the step reads measured). A tier
    that never moved in the window, or did not move in the phase's repeats
    (``evidence.engine``), is ``absent``, and so is a prime's restore cell. Every cell that
    is not ``measured`` or ``absent`` carries a non-empty reason.
    """
    from kvreplay.experiments.timescale import model_ms

    name, status, reason = st["name"], st["status"], st.get("reason")
    tier, by = ctx.tier, ctx.views
    out: list[dict[str, Any]] = []
    for ph in (fs.get("plan") or {}).get("phases", []):
        v = by.get(f"{name}/{ph['name']}")
        if v is None:
            kept = status if status in ("deferred", "aborted", "failed", "not_run", "skipped") else "failed"
            why = reason or (f"not run: {status}" if kept == status else "no summary: the phase left no record")
            for m, _f in CELL_METRICS:
                out.append({"step": name, "metric": f"{ph['name']}.{m}", "status": kept, "value": None, "reason": why})
            continue
        pst, pre = phase_status(v.summary, v.sent_records, reason)
        for m, f in CELL_METRICS:
            val = None if pst == "deferred" else f(v.summary)
            c = {"step": name, "metric": f"{v.phase}.{m}", "status": pst, "value": val, "reason": pre}
            if pst == "measured" and val is None:
                c["status"], c["reason"] = "failed", f"no value: the phase's summary has no {m}"
            if v.scale is not None and m.endswith("_ms"):
                c["model_ms"] = model_ms(c["value"], v.scale)
            out.append(c)
        ve = view_evidence(v)
        for key, t in HOST_CELLS:
            if pst not in ("measured", "aborted"):
                # nothing behind it: the phase's own status and reason, before any tier rule
                out.append({"step": name, "metric": f"{v.phase}.{key}", "status": pst, "value": None, "reason": pre})
            elif not tier[t]:
                out.append({"step": name, "metric": f"{v.phase}.{key}", "status": ABSENT, "value": None,
                            "reason": "the tier's lookup counters never moved in this window"})
            elif v.evidence is None and pst == "measured" and v.is_prime:
                # nothing failed and nothing was measured: a prime holds no restores by design
                out.append({"step": name, "metric": f"{v.phase}.{key}", "status": "absent", "value": None,
                            "reason": "not evidence: a prime (first sends only) restores nothing"})
            elif v.evidence is None:
                # a phase cut short keeps its own status; else no counters
                kept = pst != "measured"
                out.append({"step": name, "metric": f"{v.phase}.{key}", "status": pst if kept else "failed",
                            "value": None, "reason": pre if kept else (v.note or "no counters for its repeats")})
            elif ve is not None and (ve.tier(t) is None or key not in v.evidence):
                # absent, not zero: the tier did not take part in this phase's repeats
                why = ve.absent.get(t) or f"no {key} counter"
                out.append({"step": name, "metric": f"{v.phase}.{key}", "status": ABSENT, "value": None,
                            "reason": f"not evidence: the {t} tier did not move in the repeats ({why})"})
            else:
                out.append({"step": name, "metric": f"{v.phase}.{key}", "status": pst,
                            "value": v.evidence[key], "reason": pre})
    return out


def _restate(out: Path, st: dict[str, Any]) -> str | None:
    """Draw the run's ``report.html`` (the experiment report links it); in model ms at a time scale.

    At a simulator time scale both reports are redrawn (``report.write``: model ms, the scale
    stated); in real time the runner's ``report.md`` is kept and only ``report.html`` is drawn.
    """
    from kvreplay.report.document import build, to_html
    from kvreplay.report.units import sim_time_scale
    from kvreplay.report.write import write_reports
    from kvreplay.rundir import open_run, read_plan
    from kvreplay.safe_io import write_html

    d = out / st["run_dir"]
    try:
        if sim_time_scale(read_plan(d)) is not None:  # unreadable: None
            write_reports(d, html=True)
        elif d.is_dir():
            write_html(d / "report.html", to_html(build(open_run(d))))
    except FileNotFoundError:
        return None  # a step folder holding no run: nothing to draw (its cells say why)
    except Exception as exc:  # noqa: BLE001 - a figure must not cost the publication
        return (f"step {st['name']}: reports not redrawn ({type(exc).__name__}: {exc}); "
                f"redraw with: kvreplay report {d} --html")
    return None


KIND = StepKind(
    name="run",
    keys=frozenset({"phases", "phase", "drain_timeout", "max_transport_failures", "history"}) | COMMON_KEYS,
    parse=_parse,
    execute=_execute,
    sends=True,
    needs_workload=True,
    phase_views=True,
    freeze=_freeze,
    cells=_cells,
    restate=_restate,
    schedule=plan_schedule,
)
"""The run kind (module docstring)."""
