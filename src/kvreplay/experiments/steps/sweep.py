"""``kind = "sweep"``: a load sweep against the current incarnation, as ``kvreplay sweep`` runs it.

TOML keys (``kvreplay sweep``'s options, ``_`` for ``-``): ``concurrency`` (a list of
whole numbers) or ``rate`` (a list of requests/s; ``arrivals`` = ``"constant"``,
``"poisson[:SEED]"`` or ``"gamma:CV[:SEED]"``, ``max_in_flight``), ``select``
(``"firstN"``/``"lastN"``), ``requests``, ``warmup``, ``cache`` (``"cold"``, the
default, ``"warm"``, ``"as-is"``), ``warm_min``, ``slo`` and ``until`` (lists of
strings), ``drain_timeout``. The loads are explicit: a window freezes every sequence
before its first request, so ``auto`` (a search that picks its next load from the last
one measured) is ``kvreplay sweep``'s alone.

Frozen: each point's plan and ``plan_sha256`` (``points``). Run: one ordinary run
directory per point under the step's folder (``points/NN-c4/``) with the runner and
the window's deadlines and abort rules, then the point's sweep.json entry read back
from it (``kvreplay.sweeps.points``: goodput, the proof of its cache state);
``sweep.json`` in the step's folder. A point that breaks an ``until`` limit ends the
step; a point the runner aborted ends it too, with the run step's rules
(``steps.run.judge_run``). Cells per point: ``LOAD.throughput_rps``,
``LOAD.goodput_rps``, ``LOAD.slo_attainment`` and ``LOAD.cache_verified`` (a point
whose cache state is not proved has that cell ``failed`` with the reason).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvreplay.errors import ConfigError
from kvreplay.experiments.fields import Where
from kvreplay.experiments.model import StepResult, StepSpec
from kvreplay.experiments.steps.base import COMMON_KEYS, CellContext, StepKind, Window
from kvreplay.plan import Plan, build_plan
from kvreplay.rundir import read_json
from kvreplay.workload import Workload

__all__ = ["KIND"]

_KEYS = frozenset({"concurrency", "rate", "arrivals", "max_in_flight", "select", "requests", "warmup", "cache",
                   "warm_min", "slo", "until", "drain_timeout"})


def _parse(rest: dict[str, Any], where: Where, common: dict[str, Any]) -> dict[str, Any]:
    from kvreplay.sweeps import CACHE_STATES, arrival_spec, parse_loads, parse_slo, parse_until

    def bad(key: str, msg: str) -> ConfigError:
        return ConfigError(msg, path=where.path, line=where.line, field=f"{where.fld}.{key}")

    def text_of(key: str) -> str | None:
        v = rest.get(key)
        if v is None:
            return None
        if v == "auto":
            raise bad(key, "a window freezes every sequence before its first request: give the loads "
                           "(auto is kvreplay sweep's)")
        if not isinstance(v, list) or not v or not all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                        for x in v):
            raise bad(key, f"a list of loads, e.g. [1, 2, 4], not {v!r}")
        return ",".join(str(x) for x in v)

    try:
        loads = parse_loads(text_of("concurrency"), text_of("rate"))
        arrival = arrival_spec(str(rest.get("arrivals", "poisson"))) if loads.kind == "rate" else None
        slos = [parse_slo(str(s)) for s in _strings(rest, "slo", bad)]
        until = [parse_until(str(u)) for u in _strings(rest, "until", bad)]
    except ConfigError as exc:
        if exc.path is not None:
            raise
        raise bad(str(exc.field or "").lstrip("-").replace("-", "_"), exc.message) from None
    ints = {}
    for key, low, default in (("requests", 1, None), ("warmup", 0, 0), ("max_in_flight", 1, 256)):
        v = rest.get(key, default)
        if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < low):
            raise bad(key, f"a whole number >= {low}, not {v!r}")
        ints[key] = v
    cache = rest.get("cache", "cold")
    if cache not in CACHE_STATES:
        raise bad("cache", f"one of {', '.join(CACHE_STATES)}, not {cache!r}")
    warm_min = rest.get("warm_min")
    if warm_min is not None and (isinstance(warm_min, bool) or not isinstance(warm_min, (int, float))
                                 or not 0 < warm_min <= 1):
        raise bad("warm_min", f"a fraction in (0, 1], not {warm_min!r}")
    select = rest.get("select")
    if select is not None and not isinstance(select, str):
        raise bad("select", f"firstN or lastN, not {select!r}")
    st: dict[str, Any] = {"kind": loads.kind, "loads": list(loads.values), "arrival": arrival, "select": select,
                          "cache": cache, "warm_min": warm_min, "slo": [str(s) for s in slos],
                          "until": [str(u) for u in until], **ints}
    if "drain_timeout" in rest:
        st["drain_timeout_s"] = where.duration(rest["drain_timeout"], "drain_timeout")
    return st


def _strings(rest: dict[str, Any], key: str, bad: Any) -> list[str]:
    v = rest.get(key, [])
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise bad(key, f"a list of strings, not {v!r}")
    return v


def _points(settings: dict[str, Any], workload: Workload) -> list[Any]:
    """The ``PointSpec`` of every load, in order."""
    from kvreplay.sweeps.points import PointSpec, selection

    try:
        chosen = selection(settings.get("select"), len(workload.bodies))
    except ValueError as exc:
        raise ConfigError(str(exc), field="select") from None
    n = settings.get("requests")
    bodies = tuple(chosen) if n is None else tuple(chosen[i % len(chosen)] for i in range(n))
    return [PointSpec(kind=settings["kind"], load=load, bodies=bodies, cache=settings["cache"],
                      warmup=settings.get("warmup", 0), arrival=settings.get("arrival"),
                      max_in_flight=settings.get("max_in_flight", 256)) for load in settings["loads"]]


def _freeze(step: StepSpec, workload: Workload | None) -> tuple[dict[str, Any], Plan | None]:
    from kvreplay.sweeps.points import load_label, point_phases

    assert workload is not None
    if workload.sessions is not None:
        raise ConfigError(f"step {step.name!r}: a conversation workload is not swept", field="workload")
    frozen = []
    for p in _points(step.settings, workload):
        plan = build_plan(workload, point_phases(p))
        frozen.append({step.settings["kind"]: p.load, "phase": load_label(p.kind, p.load), "plan": plan.content(),
                       "plan_sha256": plan.sha256})
    keep = {k: v for k, v in step.settings.items() if k not in ("label", "comparable")}
    return {"sweep": keep, "points": frozen}, None


async def _execute(w: Window, st: StepSpec, res: StepResult) -> None:
    from kvreplay.experiments.steps.run import _factory, judge_run
    from kvreplay.report.markdown import render_markdown
    from kvreplay.runner import RunOptions, execute_plan
    from kvreplay.runner.fleet import fleet_run_fields
    from kvreplay.sweeps import parse_slo, parse_until, point_entry, write_sweep
    from kvreplay.sweeps.points import load_label, point_phases

    workload = w.workload_for(st)
    assert workload is not None and w.server.url is not None
    url, is_sim = w.server.url, w.exp.server.is_sim
    step_dir = w.out / st.dir
    settings = st.settings
    slos = [parse_slo(s) for s in settings["slo"]]
    until = [parse_until(u) for u in settings["until"]]
    frozen_step: dict[str, Any] = next((s for s in w.frozen["steps"] if s["name"] == st.name), {})
    doc: dict[str, Any] = {"target": "sim" if is_sim else url, "workload": str(workload.path),
                           "kind": settings["kind"], "loads": settings["loads"], "arrivals": settings["arrival"],
                           "select": settings["select"] or "all", "requests": settings["requests"],
                           "warmup": settings["warmup"], "cache": settings["cache"],
                           "warm_min": settings["warm_min"], "slos": [s.to_json() for s in slos],
                           "until": settings["until"], "points": [], "stopped": None}
    res.status = "measured"
    for index, p in enumerate(_points(settings, workload), start=1):
        plan = build_plan(workload, point_phases(p))
        want = (frozen_step.get("points") or [{}] * index)[index - 1].get("plan_sha256")
        if want is not None and plan.sha256 != want:
            res.status, res.reason = "failed", f"point {index}: its plan is not the frozen one"
            break
        run_dir = step_dir / "points" / f"{index:02d}-{load_label(p.kind, p.load)}"
        now = w.elapsed()

        def left(at: float | None, now: float = now) -> float | None:
            return None if at is None else max(0.0, at - now)

        opts = RunOptions(
            target_url=url, target_label="sim" if is_sim else url, out_dir=run_dir,
            backend_name=w.server.backend_name, headers=w.headers,
            drain_timeout_s=settings.get("drain_timeout_s", 10.0), drain_interval_s=0.1,
            stop_new_after_s=left(w.window.stop_new_after_s), hard_deadline_s=left(w.window.cancel_at_s),
            elapsed_before_s=now, quiet=True, identity_pins=w.pins, abort_if=w.window.abort_if,
            max_error_rate=w.window.max_error_rate, abort_on_malformed=w.window.abort_on_malformed,
            max_output_error_rate=w.window.max_output_error_rate,
            max_transport_failures=w.window.max_transport_failures or None,
            run_extra=({"sim_time_scale": w.server.sim_config.time_scale}
                       if is_sim and w.server.sim_config is not None else {}),
            **fleet_run_fields(url, w.exp.server.replicas),
        )
        summary = await execute_plan(plan, plan.bind(workload), opts, backend_factory=_factory(w, url),
                                     render_report=render_markdown)
        entry = point_entry(run_dir, step_dir, p, slos=slos, until=until, warm_min=settings["warm_min"])
        doc["points"].append(entry)
        write_sweep(step_dir, doc)
        gp = entry["goodput_rps"]
        w.say(f"  {st.name}: {entry['phase']}: {entry['throughput_rps']} req/s, goodput "
              f"{'–' if gp is None else f'{gp:.4g}'} req/s, cache {p.cache} "
              + ("verified" if entry["cache"]["verified"] else f"unverified ({entry['cache']['reason']})"))
        point = StepResult(name=st.name, kind=st.kind)
        judge_run(w, point, summary)
        if point.status != "measured":
            res.status, res.reason = point.status, f"point {index} ({entry['phase']}): {point.reason}"
            break
        if entry["limit_broken"] is not None:
            doc["stopped"] = f"point {index} ({entry['phase']}) crossed a limit: {entry['limit_broken']}"
            break
    res.checks["points"] = len(doc["points"])
    res.checks["cache_unverified"] = [p["phase"] for p in doc["points"] if not p["cache"]["verified"]]
    write_sweep(step_dir, doc)


_CELL_KEYS = ("throughput_rps", "goodput_rps", "slo_attainment")


def _cells(st: dict[str, Any], fs: dict[str, Any], ctx: CellContext) -> list[dict[str, Any]]:
    """Per frozen point: throughput, goodput, SLO attainment and whether its cache state is proved."""
    from kvreplay.sweeps.document import SWEEP_JSON

    doc = read_json(ctx.root / st["run_dir"] / SWEEP_JSON) if ctx.root is not None and st.get("run_dir") else None
    measured = {p.get("phase"): p for p in (doc or {}).get("points") or []} if isinstance(doc, dict) else {}
    out: list[dict[str, Any]] = []
    for fp in fs.get("points") or []:
        name = fp["phase"]
        p = measured.get(name)
        if p is None:
            status = st["status"] if st["status"] != "measured" else "deferred"
            why = st.get("reason") or "not run: an earlier point ended the sweep"
            out += [{"step": st["name"], "metric": f"{name}.{k}", "status": status, "value": None, "reason": why}
                    for k in (*_CELL_KEYS, "cache_verified")]
            continue
        for k in _CELL_KEYS:
            v = p.get(k)
            out.append({"step": st["name"], "metric": f"{name}.{k}", "status": "measured" if v is not None else
                        "failed", "value": v, "reason": None if v is not None else f"no {k}"})
        cache = p.get("cache") or {}
        out.append({"step": st["name"], "metric": f"{name}.cache_verified",
                    "status": "measured" if cache.get("verified") else "failed",
                    "value": bool(cache.get("verified")), "reason": cache.get("reason")})
    return out


def _restate(out: Path, st: dict[str, Any]) -> str | None:
    """Draw the sweep's ``report.html`` in the step's folder (the experiment report links it)."""
    from kvreplay.sweeps.document import read_sweep
    from kvreplay.sweeps.report import write_sweep_report

    if not st.get("run_dir"):
        return None
    d = out / st["run_dir"]
    try:
        write_sweep_report(d, read_sweep(d))
    except ConfigError:
        return None  # no sweep.json: nothing was measured (its cells say why)
    except Exception as exc:  # noqa: BLE001 - a figure must not cost the publication
        return f"step {st['name']}: sweep report not drawn ({type(exc).__name__}: {exc})"
    return None


def _schedule(fs: dict[str, Any]) -> str:
    sw = fs.get("sweep") or {}
    pts = fs.get("points") or []
    return ("  " + ", ".join(f"{p['phase']} ({len(p['plan']['phases'][-1]['sequence'])} req)" for p in pts)
            + f", cache {sw.get('cache')}")


KIND = StepKind(
    name="sweep",
    keys=_KEYS | COMMON_KEYS,
    parse=_parse,
    execute=_execute,
    sends=True,
    needs_workload=True,
    freeze=_freeze,
    cells=_cells,
    restate=_restate,
    schedule=_schedule,
)
"""The sweep kind (module docstring)."""
