"""The experiment's one publication: ``result.json``, ``report.md``, ``report.html``.

``result.json`` keys (issue 15): ``experiment_sha256``, ``started``, ``ended``
(ISO 8601 UTC), ``status`` (``complete`` when every step was measured and the
window was not aborted, else ``incomplete``; the exit status is 0 exactly when it is
``complete``), ``step_counts`` (steps by status: ``{"measured": 4, "failed": 0,
"deferred": 3, "aborted": 1}``), ``aborted`` (null or ``{"reason", "message"}``: the
window's own abort — identity drift, auth, an interrupt, the hard deadline — not a
step's: a step cut short at ``stop_new_after`` is ``aborted`` while ``aborted`` stays
null), ``steps``
(``name``, ``kind``, ``status`` in measured | failed | deferred | aborted | skipped,
``reason``, ``run_dir``, ``comparable``, plus ``label``, ``incarnation``,
``started``, ``ended``, ``checks``, ``condition`` for a step with a ``when``
(``experiments.conditions``; a step skipped by its condition keeps the window
``complete``, and ``step_counts`` has ``skipped`` only when one was), and ``report``: the
step's own run report, ``RUN_DIR/report.html`` relative to the experiment folder, when it
exists; the reports link it), ``cells`` (``step``, ``metric``, ``status``, ``value``,
``reason``, and ``caveats`` where one applies: ``invalid_phase``, ``client_bound``,
``absent_counter``, ``unread_series``, ``drain_unchecked``, ``with_caveats``; a probe step's cells come from its
``verdict.json``, ``experiments.probe_step.probe_cells``), ``findings`` (``rule``, ``summary``,
``evidence``, ``next``); also ``identity`` (the snapshot before the first
step), ``compare`` (the side-by-side tables), ``tiers``, ``time``
(``{"sim_time_scale": {step: scale}, "latency": words}``: which steps ran at a simulator
time scale; ``experiments.timescale``) and ``left_running`` (null or a list of what this
window left running: the server at its URL, ``{"url", "port", "pid", "pid_source", "by",
"note", "command", "why"}`` (``experiments.lifecycle.left_running``), then each other live
process of the window's ledger, ``{"pid", "pgid", "port", "command", "why", ...}``
(``experiments.ledger``); a result.json written before the ledger holds one server or null).

``stops`` (every stop of a server the window started, the end of the window's too:
``stop_outcomes``), ``attempts`` (each run of the window, the first and each ``--resume``: start, end, how it
ended, what each step did in it, the partial records of the step a kill cut:
``experiments.history``).

``report.md``/``report.html`` open with the window's history (one line per attempt, when
there was more than one or it did not complete), then ``status`` (``incomplete: 1 step aborted, 3
steps deferred``), the window's abort, the latency convention (model ms at a
simulator time scale, the scale stated; each cell's ``value`` in ``result.json`` stays
as measured, with ``model_ms`` beside it) and the server left running, if any.

``report.html`` is self-contained (inline CSS, no script, no external
resource); every value from a server is escaped.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from kvreplay.evidence.vocab import DEVICE_KEYS, HOST_KEYS
from kvreplay.experiments.findings import PhaseView, compare_tables, load_views, not_run, restore_findings, tiers
from kvreplay.experiments.steps import CellContext, kind_of
from kvreplay.report.html import escape, page
from kvreplay.rundir import write_result
from kvreplay.safe_io import write_html, write_markdown

__all__ = ["build_result", "cells", "left_line", "render_html", "render_markdown", "restate_step_reports",
           "status_line", "write_publication"]


def build_result(out: Path, frozen: dict[str, Any], steps: list[dict[str, Any]], *, started: str, ended: str,
                 aborted: dict[str, str] | None, identity: dict[str, Any] | None,
                 left_running: list[dict[str, Any]] | None = None,
                 unread: dict[str, Any] | None = None, attempts: list[dict[str, Any]] | None = None,
                 final_stops: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The content of ``result.json`` from the step results and the run directories (module docstring).

    ``unread``: the series the server exposes that the backend does not read
    (``experiments.unread``); kept as ``unread_series`` and stated on the cells they touch
    (``cells[].caveats``).
    """
    from kvreplay.experiments.timescale import latency_line

    views = load_views(out, [s for s in steps if kind_of(s["kind"]).phase_views], frozen)
    planned = {s["name"]: s for s in frozen.get("steps", [])}
    findings = restore_findings(views) + [f for st in steps
                                          for f in kind_of(st["kind"]).findings(out, st, planned.get(st["name"], {}))]
    counts = {st: sum(1 for s in steps if s["status"] == st) for st in _STATUSES}
    if not counts["not_run"]:
        del counts["not_run"]  # only a window rebuilt after a kill has steps that never ran
    if not counts["skipped"]:
        del counts["skipped"]  # only steps with a `when` can be skipped
    scales: dict[str, float | None] = {}
    for v in views:
        scales.setdefault(v.step, v.scale)
    for st in steps:
        scales.update(kind_of(st["kind"]).time_scales(out, st))
    is_sim = ((frozen.get("server") or {}).get("target")) == "sim"
    for st in steps:
        if st.get("run_dir") and (out / st["run_dir"] / "report.html").is_file():
            st["report"] = f"{st['run_dir']}/report.html"  # relative: the folder can move
    return {
        "experiment_sha256": frozen["experiment_sha256"],
        "started": started,
        "ended": ended,
        # a step skipped by its own condition ran as planned: it does not make the window incomplete
        "status": ("complete" if counts["measured"] + counts.get("skipped", 0) == len(steps) and aborted is None
                   else "incomplete"),
        "step_counts": counts,
        "aborted": aborted,
        "identity": identity,
        "steps": steps,
        "cells": with_caveats(cells(steps, frozen, views, findings, root=out), frozen, unread, views),
        "findings": findings,
        "compare": compare_caveats(compare_tables(views, frozen.get("compare", [])), views),
        "tiers": tiers(views),
        "time": {"sim_time_scale": {k: v for k, v in scales.items() if v is not None},
                 "latency": latency_line(scales, is_sim, ((frozen.get("server") or {}).get("sim") or {})
                                         .get("time_scale", 1.0) if is_sim else None)},
        "left_running": left_running,
        "unread_series": unread,
        "attempts": attempts or [],
        "stops": stop_outcomes(steps, final_stops, attempts),
    }


def _stop_row(where: str, c: dict[str, Any]) -> dict[str, Any]:
    st = c.get("stop") or {}
    return {"step": where, "pid": c.get("pid"), "port": c.get("port"), "how": st.get("how"),
            "signal": st.get("signal"), "at": st.get("at"), "rc": c.get("rc"), "text": st.get("text")}


def stop_outcomes(steps: list[dict[str, Any]], final: list[dict[str, Any]] | None,
                  attempts: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Every stop of a server the window started, in order (``result.json`` ``stops``).

    Each ``{"step", "pid", "port", "how", "signal", "at", "rc", "text"}``, from each attempt's
    ``stopped`` (what a ``--resume`` stopped first: ``step`` ``"resume (attempt N)"``),
    each step's ``checks.commands`` records that carry a ``stop`` (``background._Background.stop``:
    the previous server stopped by an incarnation or a restore), then ``final`` (the end of the
    window: ``step`` ``"end of window"``). ``how``: ``graceful``, ``killed``, ``already_ended``
    (it had died before the stop; ``signal`` what it died of) or, for a resume's stops,
    ``stop command``/``SIGTERM``/``SIGKILL``; the configured ``[server] stop`` command of an
    incarnation or a restore is a row too (``how`` ``stop command``, its ``rc``).
    """
    out = []
    for a in attempts or []:
        for c in a.get("stopped") or []:
            st = c.get("stop") or {}
            out.append({"step": f"resume (attempt {a.get('n')})", "pid": c.get("pid"), "port": c.get("port"),
                        "how": st.get("how"), "signal": "SIGKILL" if st.get("how") == "SIGKILL" else None,
                        "at": a.get("started"), "rc": None, "text": st.get("text")})
    for s in steps:
        for c in (s.get("checks") or {}).get("commands") or []:
            if c.get("stop"):
                out.append(_stop_row(s["name"], c))
            elif c.get("name") == "stop":  # the configured [server] stop command
                rc = c.get("rc")
                out.append({"step": s["name"], "pid": None, "port": None, "how": "stop command", "signal": None,
                            "at": None, "rc": rc,
                            "text": f"stop command timed out after {c.get('wall_s')} s" if c.get("timed_out")
                            else f"stop command exited {rc} in {c.get('wall_s')} s"})
    out += [_stop_row("end of window", c) for c in final or [] if c.get("stop")]
    return out


_CELL_COMMON = {"hit_tokens": ("hit_tokens", "lookups", "query_tokens"),
                "host_fetched_tokens": ("host_fetched_tokens", "host_lookups", "host_hits", "host_reused_tokens"),
                "host_lookups": ("host_lookups",), "host_hits": ("host_hits", "host_lookups"),
                "host_reused_tokens": ("host_reused_tokens", "host_lookups")}
"""A run step's counter cell -> the common names its value or its absence rests on."""

_CELL_FAMILY = {"hit_tokens": ("device", DEVICE_KEYS), "host_fetched_tokens": ("host", HOST_KEYS),
                "host_lookups": ("host", ("host_lookups",)), "host_hits": ("host", ("host_hits",)),
                "host_reused_tokens": ("host", ("host_reused_tokens",))}
"""A run step's counter cell -> its tier and the restore counters (most preferred first) it needs."""


def with_caveats(cells_: list[dict[str, Any]], frozen: dict[str, Any],
                 unread: dict[str, Any] | None, views: list[PhaseView] | None = None) -> list[dict[str, Any]]:
    """Add ``caveats`` (a list of texts, each starting with its kind) to the cells they touch.

    In this order, each at most once per cell:

    - ``invalid_phase: phase P invalid: REASONS`` on every cell of a phase with ``valid: false``
      that sent something (a phase that never started has its cells' reason instead);
    - ``client_bound: phase P was client-bound (loop lag p99 X ms, client CPU Y%)`` on the
      latency cells (``*_ms``) of a phase the run's client self-check labels client-bound
      (``client_bound: true`` in its summary; ``metrics.selfmeasure``);
    - ``absent_counter: the server exposes none of K1, K2 (TIER tier)`` on a counter cell
      (``hit_tokens``, ``host_fetched_tokens``) of a phase whose counters were read
      (``counter_delta`` not null) but hold none of the tier's restore counters
      (``evidence.vocab.DEVICE_KEYS``/``HOST_KEYS``; a counter read but invalid is not absent);
    - ``unread_series: backend B does not read ...`` on a counter cell whose tier's counters
      the backend does not read, and ``drain_unchecked: ...`` on every cell of a phase with
      ``drain = true`` when the drain's load gauges (retiring, transfers) are among them
      (``unread``: ``experiments.unread``).

    ``views``: the run steps' phase views (``findings.load_views``); a cell of a phase with no
    view gets no phase caveat. Cells with no caveat get no key.
    """
    by = {v.ref: v.summary for v in views or []}
    commons = set((unread or {}).get("common") or [])
    gauges = list((unread or {}).get("drain_gauges") or [])
    how = f" ({unread['profile']} reads them)" if unread and unread.get("profile") else ""
    drained = {(s["name"], p["name"]) for s in frozen.get("steps", [])
               for p in ((s.get("plan") or {}).get("phases") or []) if p.get("drain")}
    for c in cells_:
        phase, _, metric = c["metric"].partition(".")
        notes = []
        ph = by.get(f"{c['step']}/{phase}")
        if ph is not None:
            notes += _phase_caveats(ph, phase, metric)
        touched = [n for n in _CELL_COMMON.get(metric, ()) if n in commons]
        if unread and touched:
            notes.append(f"unread_series: backend {unread['backend']} does not read {', '.join(touched)}{how}")
        if unread and gauges and (c["step"], phase) in drained:
            notes.append(f"drain_unchecked: the drain did not wait for {', '.join(gauges)}{how}")
        if notes:
            c["caveats"] = notes
    return cells_


def compare_caveats(tables: list[dict[str, Any]], views: list[PhaseView]) -> list[dict[str, Any]]:
    """Add ``caveats`` to each compare row whose sides' cells carry one (``with_caveats``' rules).

    A row's ``caveats`` are side a's then side b's ``invalid_phase``, ``client_bound`` and
    ``absent_counter`` caveats for that metric (``_phase_caveats``), each prefixed with the
    side (``A0/replay: client_bound: ...``): a ratio of client-bound latencies reads beside
    the caveat, as its cells do. Rows with none get no key.
    """
    by = {v.ref: v for v in views}
    for t in tables:
        for row in t.get("rows") or []:
            notes = [f"{ref}: {n}" for ref in (t["a"], t["b"]) if (v := by.get(ref)) is not None
                     for n in _phase_caveats(v.summary, v.phase, row["metric"])]
            if notes:
                row["caveats"] = notes
    return tables


def _phase_caveats(ph: dict[str, Any], phase: str, metric: str) -> list[str]:
    """The ``invalid_phase``, ``client_bound`` and ``absent_counter`` caveats of one cell (``with_caveats``)."""
    notes = []
    # a phase that never started is not "invalid ... no reason given": its cells' reason says why
    if ph.get("valid", True) is False and not_run(ph) is None and ph.get("sent") != 0:
        notes.append(f"invalid_phase: phase {phase} invalid: "
                     + "; ".join(ph.get("invalid_reasons") or ["no reason given"]))
    if metric.endswith("_ms") and ph.get("client_bound") is True:
        cl = ph.get("client") or {}
        lag, cpu = cl.get("loop_lag_p99_ms"), cl.get("cpu_utilisation")
        figs = ", ".join(x for x in (f"loop lag p99 {lag:g} ms" if isinstance(lag, (int, float)) else "",
                                     f"client CPU {cpu:.0%}" if isinstance(cpu, (int, float)) else "") if x)
        notes.append(f"client_bound: phase {phase} was client-bound" + (f" ({figs})" if figs else "")
                     + "; its latencies include the client's own delay")
    fam = _CELL_FAMILY.get(metric)
    delta = ph.get("counter_delta")
    if fam is not None and isinstance(delta, dict):
        tier, keys = fam
        read = set(delta) | set(delta.get("invalid") or {})
        if not read & set(keys):
            notes.append(f"absent_counter: the server exposes none of {', '.join(keys)} ({tier} tier)")
    return notes


def cells(steps: list[dict[str, Any]], frozen: dict[str, Any], views: list[PhaseView],
          findings: list[dict[str, Any]], root: Path | None = None) -> list[dict[str, Any]]:
    """Every planned cell, ``{"step", "metric", "status", "value", "reason"}``: each step's kind's ``cells``.

    Run steps: per phase, requests, TTFT/E2E p50, cached tokens, device hit tokens and host
    restores (``experiments.steps.run``); probe steps: the prefill fit, Cmax, bytes per token,
    min flushing k from their ``verdict.json`` under ``root`` (``experiments.steps.probe``);
    ab steps: the verdict and one cell per threshold check; other steps one cell for their
    check (incarnation ``ready_identity_fresh``, restore ``identity_restored``).
    """
    ctx = CellContext({v.ref: v for v in views}, tiers(views), findings, root)
    frozen_steps = {s["name"]: s for s in frozen.get("steps", [])}
    out = []
    for st in steps:
        for c in kind_of(st["kind"]).cells(st, frozen_steps.get(st["name"], {}), ctx):
            if c.get("status") not in ("measured", "absent") and not (c.get("reason") or "").strip():
                # every cell that is not measured says why (issue 27): the step's own reason at least
                c["reason"] = (f"step {st['name']} {st['status']}: {st['reason']}" if st.get("reason")
                               else f"step {st['name']} {st['status']}; no reason given for this cell")
            out.append(c)
    return out


def _v(x: Any) -> str:
    if isinstance(x, _Link):
        return x.markdown()
    if x is None:
        return "—"
    if isinstance(x, float):
        return f"{x:,.0f}" if x.is_integer() and abs(x) >= 100 else f"{x:,.3f}".rstrip("0").rstrip(".")
    if isinstance(x, int) and not isinstance(x, bool):
        return f"{x:,}"
    return str(x)


def _aborted(ab: dict[str, Any] | None) -> str:
    return f"{ab.get('reason')}: {ab.get('message')}" if ab else "no"


def status_line(result: dict[str, Any]) -> str:
    """``complete`` when every step was measured, else ``incomplete: 1 step aborted, 3 deferred``.

    Read from ``step_counts``; a result.json written before it existed is counted from its steps.
    """
    counts = result.get("step_counts") or {
        st: sum(1 for s in result["steps"] if s["status"] == st) for st in _STATUSES
    }
    bad = [f"{counts[st]} step{'s' if counts[st] != 1 else ''} {st}"
           for st in ("aborted", "failed", "deferred", "not_run") if counts.get(st)]
    if bad:
        return "incomplete: " + ", ".join(bad)
    return "incomplete: the window was aborted" if result.get("aborted") else "complete"


def left_line(lr: list[dict[str, Any]] | dict[str, Any] | None) -> str | None:
    """``left running: ...`` naming each process this window left running (URL, port, pid), or None.

    ``lr``: ``result.json``'s ``left_running``: a list (one line each, joined by newlines), or
    one server (a result.json written before the process ledger).
    """
    if not lr:
        return None
    if isinstance(lr, list):
        return "\n".join(x for x in (_left_one(e) for e in lr) if x) or None
    return _left_one(lr)


def _left_one(lr: dict[str, Any]) -> str:
    pid = lr.get("pid")
    if lr.get("url") is None and lr.get("command") is not None:  # a ledger process (experiments.ledger)
        return (f"left running: pid {pid} (port {lr.get('port')}, process group {lr.get('pgid')}, "
                f"command {lr['command']!r}): {lr.get('why')}; kvreplay does not stop it; "
                f"stop it with: kill -TERM -{lr.get('pgid') or pid}")
    who = f"pid {pid}" if pid is not None else "pid unknown"
    if pid is not None and lr.get("pid_source"):
        who += f" ({lr['pid_source']})"
    stop = f"; stop it with: kill {pid}" if pid is not None else ""
    return (f"left running: {lr.get('by') or 'a server'} at {lr.get('url')} (port {lr.get('port')}, {who}); "
            f"kvreplay does not stop it{stop}")


def _latency_line(result: dict[str, Any]) -> str:
    return ((result.get("time") or {}).get("latency")
            or "ms as measured (a result.json written before the time scale was recorded)")


def _ident_line(ident: dict[str, Any] | None) -> str:
    if not ident:
        return "unknown"
    ver = ident.get("version")
    ver_s = ver.get("build") or ver.get("version") if isinstance(ver, dict) else ver
    return f"models {ident.get('models')}, version {ver_s}, backend {ident.get('backend')}"


def _tables(result: dict[str, Any]) -> list[tuple[str, list[str], list[list[Any]]]]:
    out = [("Steps", ["step", "kind", "status", "comparable", "reason", "run_dir"],
            [[s["name"], s["kind"], s["status"], s["comparable"], s.get("reason"),
              _Link(s["run_dir"], s["report"]) if s.get("run_dir") and s.get("report") else s.get("run_dir")]
             for s in result["steps"]])]
    for t in result["compare"]:
        title = f"Compare {t['a']} vs {t['b']}"
        if "rows" in t:
            cav = any(r.get("caveats") for r in t["rows"])  # beside each ratio, where some row has one
            out.append((title, ["metric", t["a"], t["b"], "ratio b/a"] + (["caveats"] if cav else []),
                        [[_metric(r["metric"], "a_model_ms" in r), r.get("a_model_ms", r["a"]),
                          r.get("b_model_ms", r["b"]), r["ratio"]]
                         + (["; ".join(r.get("caveats") or []) or None] if cav else []) for r in t["rows"]]))
        else:
            out.append((title, ["note"], [[t["note"]]]))
    if result.get("stops"):
        out.append(("Stops", ["step", "pid", "port", "outcome", "rc"],
                    [[x["step"], *(None if x.get(k) is None else str(x[k]) for k in ("pid", "port")), x.get("text"),
                      x.get("rc")] for x in result["stops"]]))  # a pid or port reads without a thousands comma
    # a window that ran at a time scale names every latency cell in model time, measured or not
    # (never `ttft_p50_ms` for a deferred cell beside `ttft_p50 (model ms)` for a measured one)
    scaled = bool(((result.get("time") or {}).get("sim_time_scale")) or {})
    caveats = any(c.get("caveats") for c in result["cells"])  # the column only where some cell has one
    out.append(("Cells", ["step", "metric", "status", "value", "reason"] + (["caveats"] if caveats else []),
                [[c["step"], _metric(c["metric"], _model_key(c) is not None or scaled), c["status"],
                  c[k] if (k := _model_key(c)) else c["value"], c.get("reason")]
                 + (["; ".join(c.get("caveats") or []) or None] if caveats else []) for c in result["cells"]]))
    return out


@dataclass(frozen=True, slots=True)
class _Link:
    """A table value that links a file of the experiment directory (relative ``href``)."""

    text: str
    href: str

    def markdown(self) -> str:
        return f"[{self.text}]({quote(self.href)})"

    def html(self) -> str:
        return f'<a href="{escape(quote(self.href))}">{escape(self.text)}</a>'


def _model_key(c: dict[str, Any]) -> str | None:
    return next((k for k in ("model_ms", "model_s", "model_tokens_per_s") if k in c), None)


def _metric(name: str, model: bool) -> str:
    """A label where the report shows model time: ``replay.ttft_p50 (model ms)``, ``prefill_fit.a (model s)``."""
    if not model:
        return name
    for suffix, label in (("_ms", " (model ms)"), ("_tokens_per_s", " (tokens per model s)"), ("_s", " (model s)")):
        if name.endswith(suffix):
            return name[: -len(suffix)] + label
    return name


def _utc_text(stamp: Any) -> str:
    """A ``result.json`` time for the reports, with its zone said once.

    ``2026-12-05T03:10:40Z`` stays as written (``Z`` is UTC); any other text gets `` UTC`` after it.
    """
    text = str(stamp)
    return text if text.endswith("Z") else f"{text} UTC"


def render_markdown(result: dict[str, Any], title: str) -> str:
    """``report.md``."""
    from kvreplay.experiments.history import history_lines

    hist = history_lines(result.get("attempts"))
    lines = [f"# Experiment {title}", ""] + ([f"- history: {h}" for h in hist] if hist else []) + [
             f"- started {_utc_text(result['started'])}, ended {_utc_text(result['ended'])}",
             f"- experiment_sha256 `{result['experiment_sha256']}`",
             f"- server identity: {_ident_line(result.get('identity'))}",
             f"- status: {status_line(result)}",
             f"- window aborted: {_aborted(result['aborted'])}",
             f"- latencies: {_latency_line(result)}"]
    if left := left_line(result.get("left_running")):
        lines += [f"- {x}" for x in left.split("\n")]
    if (unread := result.get("unread_series")) and unread.get("message"):
        lines.append(f"- unread series: {unread['message']}")
    lines += ["", "## Findings", ""]
    for f in result["findings"] or [{"rule": "none", "summary": "no finding: no step gave evidence", "next": "—"}]:
        lines += [f"- **{f['rule']}**: {f['summary']}", f"  - next: {f['next']}"]
    for title_t, head, rows in _tables(result):
        lines += ["", f"## {title_t}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(_v(x).replace("|", "\\|") for x in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


_STATUSES = ("measured", "failed", "deferred", "aborted", "not_run", "skipped")


def _status_attr(x: Any) -> str:
    """`` data-status="..."`` for a cell whose value is a status word (styled by ``report.html.CSS``), else ``""``."""
    return f' data-status="{x}"' if isinstance(x, str) and x in _STATUSES else ""


def render_html(result: dict[str, Any], title: str) -> str:
    """``report.html``: self-contained (``report.html``'s one template and stylesheet), every value escaped."""
    from kvreplay.experiments.history import history_lines

    e = escape
    hist = "".join(f"History: {e(h)}<br>" for h in history_lines(result.get("attempts")))
    parts = [f"<h1>Experiment {e(title)}</h1><p>{hist}Started <b>{e(_utc_text(result['started']))}</b>, ended "
             f"<b>{e(_utc_text(result['ended']))}</b>.<br>Server identity: {e(_ident_line(result.get('identity')))}<br>"
             f"experiment_sha256 <code>{e(result['experiment_sha256'])}</code><br>"
             f"Status: <b>{e(status_line(result))}</b>"
             f"<br>Window aborted: {e(str(result['aborted']['reason'] if result['aborted'] else 'no'))}"
             f"<br>Latencies: {e(_latency_line(result))}"
             + "".join(f"<br><b>{e(x)}</b>" for x in (left_line(result.get("left_running")) or "").split("\n") if x)
             + (f"<br>Unread series: {e(str(u['message']))}"
                if (u := result.get("unread_series")) and u.get("message") else "")
             + "</p><h2>Findings</h2><ul>"]
    for f in result["findings"]:
        parts.append(f"<li><b>{e(f['rule'])}</b>: {e(f['summary'])}<br><i>next:</i> {e(f['next'])}</li>")
    if not result["findings"]:
        parts.append("<li>no finding: no step gave evidence</li>")
    parts.append("</ul>")
    for title_t, head, rows in _tables(result):
        parts.append(f"<h2>{e(title_t)}</h2><table><tr>" + "".join(f"<th>{e(str(h))}</th>" for h in head) + "</tr>")
        for r in rows:
            parts.append("<tr>" + "".join(f"<td{_status_attr(x)}>{x.html() if isinstance(x, _Link) else e(_v(x))}</td>"
                                          for x in r) + "</tr>")
        parts.append("</table>")
    return page(title, parts)


def restate_step_reports(out: Path, steps: list[dict[str, Any]]) -> list[str]:
    """Redraw the reports of each run step that ran at a simulator time scale, and draw each ab step's.

    The runner's own ``report.md`` gives latencies as measured; the run report
    (``kvreplay.report.write.write_reports``, as ``kvreplay report DIR --html``) gives them
    in model ms with the scale stated, from ``plan.json`` ``run.sim_time_scale``. An ab step
    gets the ``report.html`` standalone ``kvreplay ab`` writes (``report.abreport``: the
    simulator's scale and calibration stated; its blocks' reports already give model ms from
    their ``plan.json``). Drawn after the restore, so the window's time is not spent on it.
    Each step's kind draws its own (``StepKind.restate``, ``experiments.steps``).

    Returns:
        One line per step whose reports could not be redrawn (its runner ``report.md`` is kept).
    """
    msgs = []
    for st in steps:
        if st.get("run_dir") and (msg := kind_of(st["kind"]).restate(out, st)):
            msgs.append(msg)
    return msgs


def write_publication(out: Path, result: dict[str, Any], title: str) -> None:
    """Write ``result.json``, ``report.md`` and ``report.html`` into ``out``."""
    write_result(out, result)
    write_markdown(out / "report.md", render_markdown(result, title))
    write_html(out / "report.html", render_html(result, title))
