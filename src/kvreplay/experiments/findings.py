"""Findings across the steps of an experiment window: cells, comparisons, the decision tree.

**Evidence of restores.** Only repeats count: a request whose body was already
sent in the same incarnation (an earlier phase or an earlier repetition of the
same phase). A prime (first sends) is never evidence. At C1 each record carries
its own counter delta, so a phase that mixes first sends and repeats (the
control "last 12 bodies twice") counts only its repeats; with counters per
phase only, a phase counts only when every position is a repeat.

**Tiers.** Host-tier restores (``host_fetched_tokens``: tokens copied host ->
device) are reported apart from device hits (``hit_tokens``). A tier is present
only when its lookup counters moved somewhere in the window
(``host_lookups``/``host_query_tokens`` for the host tier,
``lookups``/``query_tokens`` for the device): a tier that never moved is
*absent*, not zero. The decision tree reads the host tier where it is present,
else device hit tokens.

**Decision tree** (rule ``restore_pattern``; forward/reverse are the replays of
comparable steps, the control is every ``comparable = false`` step; a control
is never pooled with, or compared as, a main arm):

- restores in the reverse order or in the control, none in the forward order
  -> ``row_checkpoint_churn``: next, bounded row/page/eviction counters and a CPU
  reproducer before any policy change;
- no restores anywhere -> ``no_restores``: inspect key and checkpoint
  eligibility first;
- restores everywhere -> ``no_churn`` at this working-set size;
- anything else -> ``order_dependent`` (no rule of the tree matches);
- without a measured forward replay, or with neither a reverse replay nor a
  control -> ``restore_pattern_incomplete`` (no decision; next: the missing arm).

**A/B** (rule ``ab_verdict``): the comparison of ``kvreplay ab``
(``experiments.compare``: at least X % primary benefit with at most Y %
protected regression over matched repetitions, bootstrap intervals; ``no
decision`` otherwise), saying when fewer repetitions than planned were measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from kvreplay.report.load import read_json

__all__ = ["PhaseView", "ab_findings", "cells", "compare_tables", "load_views", "restore_findings", "tiers"]

HOST_LOOKUP_KEYS = ("host_lookups", "host_query_tokens")
DEVICE_LOOKUP_KEYS = ("lookups", "query_tokens")
EVIDENCE_KEYS = ("host_fetched_tokens", "hit_tokens", "host_lookups", "host_query_tokens", "lookups", "query_tokens")
LATENCY = (("ttft", ("p50", "p90", "p99")), ("itl", ("p50", "p90")), ("tpot", ("p50", "p90")),
           ("e2e", ("p50", "p90", "p99")))


@dataclass(slots=True)
class PhaseView:
    """One phase of one run step, with the counters of its repeats.

    Attributes:
        ref: ``STEP/PHASE``.
        order: The phase's body order.
        comparable: False for a control step.
        incarnation: The incarnation step it ran in (None: the incumbent).
        summary: The phase's entry in the step's summary.json.
        repeats: Requests that were repeats (ok); first: requests that were first sends.
        evidence: Summed counter deltas of the repeats (None: not attributable).
        moved: Summed counter deltas of every request (for tier presence).
        note: Why the evidence is None, where it is.
        scale: The simulator time scale the step ran at (``experiments.timescale``), None for real time.
    """

    ref: str
    step: str
    phase: str
    order: str
    comparable: bool
    incarnation: str | None
    summary: dict[str, Any]
    repeats: int = 0
    first: int = 0
    evidence: dict[str, float] | None = None
    moved: dict[str, float] = field(default_factory=dict)
    note: str | None = None
    scale: float | None = None

    @property
    def is_prime(self) -> bool:
        """True when the phase sent only first sends (a prime: never evidence of restores)."""
        return self.repeats == 0 and self.first > 0


def _add(acc: dict[str, float], delta: dict[str, Any] | None) -> None:
    for k in EVIDENCE_KEYS:
        v = (delta or {}).get(k)
        if isinstance(v, (int, float)):
            acc[k] = acc.get(k, 0.0) + float(v)


def load_views(out: Path, steps: list[dict[str, Any]], frozen: dict[str, Any] | None = None) -> list[PhaseView]:
    """Phase views of every measured (or failed/aborted) run step, in window order.

    Args:
        out: Experiment directory.
        steps: ``result.json``'s steps (``name``, ``kind``, ``status``, ``run_dir``,
            ``comparable``, ``incarnation``).
        frozen: ``experiment.json`` (the time scale of step directories that do not record it).
    """
    from kvreplay.experiments.timescale import scale_of_step

    views: list[PhaseView] = []
    seen: dict[str | None, set[str | None]] = {}  # body sha256s sent per incarnation
    for st in steps:
        if st["kind"] != "run" or not st.get("run_dir"):
            continue
        d = out / st["run_dir"]
        summary = read_json(d / "summary.json") or {}
        plan = read_json(d / "plan.json") or {}
        orders = {p["name"]: p.get("order", "forward") for p in plan.get("phases", [])}
        controls = {p["name"] for p in plan.get("phases", []) if p.get("comparable", True) is False}
        recs: dict[str, list[dict[str, Any]]] = {}
        try:
            with (d / "records.jsonl").open("rb") as f:
                for line in f:
                    try:
                        r = orjson.loads(line)
                    except ValueError:
                        continue
                    recs.setdefault(r.get("phase"), []).append(r)
        except OSError:
            pass
        inc_seen = seen.setdefault(st.get("incarnation"), set())
        scale = scale_of_step(plan, summary, frozen, st.get("incarnation"))
        for ph in summary.get("phases", []):
            comparable = bool(st.get("comparable", True)) and ph["name"] not in controls
            v = PhaseView(f"{st['name']}/{ph['name']}", st["name"], ph["name"], orders.get(ph["name"], "forward"),
                          comparable, st.get("incarnation"), ph, scale=scale)
            rows = sorted(recs.get(ph["name"], []), key=lambda r: r.get("position", 0))
            before = set(inc_seen)
            per_request = ph.get("attribution") == "per_request"
            ev: dict[str, float] = {}
            all_repeat = True
            for r in rows:
                if not r.get("sent"):
                    continue
                sha = r.get("body_sha256")
                repeat = sha in inc_seen
                inc_seen.add(sha)
                all_repeat &= repeat and sha in before
                if r.get("status") != "ok":
                    continue
                _add(v.moved, r.get("counter_delta"))
                if repeat:
                    v.repeats += 1
                    if per_request:
                        _add(ev, r.get("counter_delta"))
                else:
                    v.first += 1
            if not per_request:
                v.moved = {}
                _add(v.moved, ph.get("counter_delta"))
                if v.repeats and all_repeat and not (ph.get("counter_delta") or {}).get("reset"):
                    _add(ev, ph.get("counter_delta"))
                elif v.repeats:
                    ev = {}
                    v.note = "counters per phase only and the phase mixes first sends with repeats"
            v.evidence = ev if (ev or per_request) and v.repeats else None
            if v.repeats and v.evidence is None and v.note is None:
                v.note = "no counters"
            if partial_reason(ph):
                # A phase cut short (its step aborted) is no evidence: "0 restored" over 9 of 52
                # bodies says nothing about the 52-body working set.
                v.evidence, v.note = None, partial_reason(ph)
            views.append(v)
    return views


def partial_reason(ph: dict[str, Any]) -> str | None:
    """``"partial: 9 of 52 positions sent"`` for a phase cut short after it started.

    None when every position was sent, when none was (a phase not run: ``not_run``) and
    for a failed drain/fresh check (the phase's own failure).
    """
    planned, not_sent = ph.get("planned") or 0, ph.get("not_sent") or 0
    if not_sent and planned and not ph.get("check_failed") and planned - not_sent > 0:
        return f"partial: {planned - not_sent} of {planned} positions sent"
    return None


def not_run(ph: dict[str, Any]) -> str | None:
    """``"not run: 0 of 52 positions sent"`` for a phase that sent nothing (deferred), else None."""
    planned, not_sent = ph.get("planned") or 0, ph.get("not_sent") or 0
    if ph.get("deferred") or (planned and not_sent >= planned):
        return f"not run: 0 of {planned} positions sent"
    return None


def tiers(views: list[PhaseView]) -> dict[str, bool]:
    """``{"host": present, "device": present}``: a tier is present when its lookups moved."""
    host = any(v.moved.get(k, 0) > 0 for v in views for k in HOST_LOOKUP_KEYS)
    dev = any(v.moved.get(k, 0) > 0 for v in views for k in DEVICE_LOOKUP_KEYS)
    return {"host": host, "device": dev}


def _restores(v: PhaseView, tier: dict[str, bool]) -> tuple[str, float] | None:
    if v.evidence is None:
        return None
    key = "host_fetched_tokens" if tier["host"] else "hit_tokens"
    if key not in v.evidence:
        return None
    return key, v.evidence[key]


def _fmt(x: float | None) -> str:
    if x is None:
        return "n/a"
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:,.3f}"


def restore_findings(views: list[PhaseView]) -> list[dict[str, Any]]:
    """The decision tree on restores (module docstring); [] when no phase is evidence."""
    tier = tiers(views)
    if not tier["host"] and not tier["device"]:
        ev = [v for v in views if v.repeats]
        if not ev:
            return []
        return [{"rule": "no_counters", "summary": "no cache tier's lookup counters moved in any step: both tiers "
                 "are absent from the counters (not zero); restores cannot be read",
                 "evidence": [], "next": "run with a counters adapter (--backend / [server] backend) whose lookup "
                 "series this server exports"}]
    used = [(v, r) for v in views if (r := _restores(v, tier)) is not None]
    fwd = [(v, r) for v, r in used if v.comparable and v.order == "forward"]
    rev = [(v, r) for v, r in used if v.comparable and v.order == "reverse"]
    ctl = [(v, r) for v, r in used if not v.comparable]
    tier_name = "host tier" if tier["host"] else "device (no host tier: its lookups never moved)"
    metric = used[0][1][0] if used else ("host_fetched_tokens" if tier["host"] else "hit_tokens")
    evidence = [{"cell": v.ref, "metric": metric, "value": r[1], "order": v.order, "comparable": v.comparable,
                 "repeats": v.repeats, "role": "control" if not v.comparable else f"{v.order} replay"}
                for v, r in fwd + rev + ctl]
    primes = [v.ref for v in views if v.is_prime]
    # Phases cut short (their step aborted) are never evidence; the finding names them.
    cut = [(v, partial_reason(v.summary)) for v in views if not v.is_prime and partial_reason(v.summary)]
    skipped = [{"cell": v.ref, "reason": why, "order": v.order, "comparable": v.comparable} for v, why in cut]
    if not evidence and not skipped:
        return []

    def line(group: list[tuple[PhaseView, tuple[str, float]]]) -> str:
        return ", ".join(f"{v.ref} {_fmt(r[1])}" for v, r in group) or "none measured"

    text = (f"{tier_name} restores ({metric}, repeats only): forward {line(fwd)}; reverse {line(rev)}; "
            f"control {line(ctl)}")
    if primes:
        text += f"; prime phases not counted as evidence: {', '.join(primes)}"
    if skipped:
        text += "; cut short, not counted as evidence: " + ", ".join(f"{k['cell']} ({k['reason']})" for k in skipped)
    pos = lambda g: any(r[1] > 0 for _v, r in g)  # noqa: E731
    zero = lambda g: bool(g) and all(r[1] == 0 for _v, r in g)  # noqa: E731
    everything = fwd + rev + ctl
    if not fwd or not (rev or ctl):
        missing = "a forward replay" if not fwd else "a reverse replay or a control"
        return [{"rule": "restore_pattern_incomplete", "summary": f"no decision on churn: {missing} was not "
                 f"measured in full. {text}", "evidence": evidence, "skipped": skipped,
                 "next": f"run the missing arm ({missing}) in its own fresh incarnation"}]
    if zero(fwd) and (pos(rev) or pos(ctl)):
        rule, head = "row_checkpoint_churn", "row/checkpoint churn: the forward replay restores nothing while "
        head += "the reverse replay or the small control restores: entries are evicted just before they come round"
        nxt = ("add bounded row/page/eviction counters (rows used, pages used, evictions by cause) and a CPU "
               "reproducer of the eviction order before any policy change")
    elif zero(everything):
        rule, head = "no_restores", "no restores in any order nor in the control"
        nxt = "inspect key and checkpoint eligibility first (which prefixes are offered, hashed and kept)"
    elif all(r[1] > 0 for _v, r in everything):
        rule, head = "no_churn", "restores in every order and in the control: no churn at this working-set size"
        nxt = "grow the working set (more bodies) until the forward replay stops restoring, to find the cliff"
    else:
        rule, head = "order_dependent", "restores depend on the order in a way the decision tree does not cover"
        nxt = "repeat each order in its own fresh incarnation, with per-request counters at C1"
    return [{"rule": rule, "summary": f"{head}. {text}", "evidence": evidence, "skipped": skipped, "next": nxt}]


def ab_findings(out: Path, steps: list[dict[str, Any]], frozen: dict[str, Any]) -> list[dict[str, Any]]:
    """One ``ab_verdict`` finding per ab step that ran (its compare.json)."""
    found = []
    planned = {s["name"]: s for s in frozen.get("steps", [])}
    for st in steps:
        if st["kind"] != "ab" or not st.get("run_dir"):
            continue
        comp = read_json(out / st["run_dir"] / "compare.json")
        if comp is None:
            continue
        reps = planned.get(st["name"], {}).get("ab", {}).get("reps")
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
        found.append({"rule": "ab_verdict", "summary": f"{st['name']}: verdict {verdict} over {measured} matched "
                      f"repetition(s){short}: {checks}", "evidence": ev, "next": nxt,
                      "verdict": verdict, "reps_planned": reps, "reps_measured": measured})
    return found


def _pct(ph: dict[str, Any], metric: str, q: str) -> float | None:
    return ((ph.get(f"{metric}_ms") or {}).get(q)) if ph else None


def _side(v: PhaseView, tier: dict[str, bool]) -> dict[str, Any]:
    ph = v.summary
    d = ph.get("counter_delta") or {}
    row: dict[str, Any] = {"requests": ph.get("ok")}
    for m, qs in LATENCY:
        for q in qs:
            row[f"{m}_{q}_ms"] = _pct(ph, m, q)
    tok = ph.get("tokens") or {}
    row["cached_tokens"] = None if tok.get("cached_unknown") else tok.get("cached")
    # the counters' own names, as in the cells and findings (whole-phase deltas here)
    row["hit_tokens"] = d.get("hit_tokens") if tier["device"] else "absent"
    row["host_fetched_tokens"] = d.get("host_fetched_tokens") if tier["host"] else "absent"
    return row


def compare_tables(views: list[PhaseView], pairs: list[list[str]]) -> list[dict[str, Any]]:
    """The file's ``compare`` pairs side by side, with ratios ``b / a``.

    Refused (a ``note`` instead of ``rows``): a side not measured, a control, a side cut
    short (``partial_reason``) or not run (``not_run``), and sides at different simulator
    time scales. Rows: ``{"metric", "a", "b", "ratio"}`` with latencies as measured (ms);
    at a time scale the table has ``sim_time_scale`` and each latency row ``a_model_ms`` and
    ``b_model_ms`` (``experiments.timescale``). ``hit_tokens`` and ``host_fetched_tokens`` are
    whole-phase counter deltas (``absent`` where the tier never moved in the window).
    """
    from kvreplay.experiments.timescale import model_ms

    by = {v.ref: v for v in views}
    tier = tiers(views)
    out = []
    for a, b in pairs:
        va, vb = by.get(a), by.get(b)
        t: dict[str, Any] = {"a": a, "b": b}
        if va is None or vb is None:
            t["note"] = f"not compared: {a if va is None else b} was not measured"
        elif not va.comparable or not vb.comparable:
            t["note"] = f"not compared: {a if not va.comparable else b} is a control (comparable = false)"
        elif not_run(va.summary) or not_run(vb.summary):
            side, v = (a, va) if not_run(va.summary) else (b, vb)
            t["note"] = f"not compared: {side} was {not_run(v.summary)}"
        elif partial_reason(va.summary) or partial_reason(vb.summary):
            side, v = (a, va) if partial_reason(va.summary) else (b, vb)
            t["note"] = f"not compared: {side} is {partial_reason(v.summary)}"
        elif va.scale != vb.scale:
            t["note"] = (f"not compared: {a} ran at simulator time scale {va.scale or 1:g}, {b} at "
                         f"{vb.scale or 1:g}")
        else:
            sa, sb = _side(va, tier), _side(vb, tier)
            rows = []
            if va.scale is not None:
                t["sim_time_scale"] = va.scale
            for k in sa:
                x, y = sa[k], sb[k]
                ratio = (round(y / x, 4) if isinstance(x, (int, float)) and isinstance(y, (int, float)) and x
                         else None)
                row = {"metric": k, "a": x, "b": y, "ratio": ratio}
                if va.scale is not None and k.endswith("_ms"):
                    row.update(a_model_ms=model_ms(x, va.scale), b_model_ms=model_ms(y, vb.scale))
                rows.append(row)
            t["rows"] = rows
        out.append(t)
    return out


CELL_METRICS = (("requests_ok", lambda ph: ph.get("ok")), ("ttft_p50_ms", lambda ph: _pct(ph, "ttft", "p50")),
                ("e2e_p50_ms", lambda ph: _pct(ph, "e2e", "p50")),
                ("cached_tokens", lambda ph: (ph.get("tokens") or {}).get("cached")))


def cells(steps: list[dict[str, Any]], frozen: dict[str, Any], views: list[PhaseView],
          findings: list[dict[str, Any]], root: Path | None = None) -> list[dict[str, Any]]:
    """Every planned cell: ``{"step", "metric", "status", "value", "reason"}``.

    ``root`` is the experiment directory (probe steps read their ``verdict.json`` there:
    ``experiments.probe_step.probe_cells``; without it their cells carry the step's status).

    Run steps: per phase, requests, TTFT/E2E p50 (ms as measured; ``model_ms`` beside the
    value at a simulator time scale, ``experiments.timescale``), usage cached tokens, device
    hit tokens and host restores (repeats only; ``absent`` where the tier never moved, and
    for a prime: first sends are no evidence). A phase cut short is ``aborted`` with
    ``"partial: 9 of 52 positions sent (STEP REASON)"`` on every cell of it (never
    ``measured``); a phase that sent nothing takes ``deferred``.
    Probe steps: prefill fit a and rate, r2, cmax tokens, bytes per token, min flushing k
    (against the simulator with a time scale the fit's ``value`` is in scaled seconds, with
    ``model_s`` / ``model_tokens_per_s`` beside it: ``experiments.timescale.model_fit``).
    Other steps: one cell for their check (incarnation ``ready_fresh``, restore
    ``identity_restored``, ab one per threshold check).
    """
    from kvreplay.experiments.timescale import model_fit, model_ms, probe_scale

    tier = tiers(views)
    by = {v.ref: v for v in views}
    frozen_steps = {s["name"]: s for s in frozen.get("steps", [])}
    ab_ev = {f["summary"].split(":")[0]: f for f in findings if f["rule"] == "ab_verdict"}
    out: list[dict[str, Any]] = []
    for st in steps:
        name, status, reason = st["name"], st["status"], st.get("reason")
        fs = frozen_steps.get(name, {})
        if st["kind"] == "run":
            for ph in (fs.get("plan") or {}).get("phases", []):
                v = by.get(f"{name}/{ph['name']}")
                if v is None:
                    for m, _f in CELL_METRICS:
                        out.append({"step": name, "metric": f"{ph['name']}.{m}", "status": status if status in (
                            "deferred", "aborted", "failed") else "failed", "value": None, "reason": reason})
                    continue
                pst = "measured" if v.summary.get("valid", True) and not v.summary.get("deferred") else (
                    "deferred" if v.summary.get("deferred") else "failed")
                pre = None if pst == "measured" else "; ".join(v.summary.get("invalid_reasons") or []) or reason
                if pst == "measured" and partial_reason(v.summary):
                    pst, pre = "aborted", f"{partial_reason(v.summary)} ({reason or 'step aborted'})"
                for m, f in CELL_METRICS:
                    c = {"step": name, "metric": f"{v.phase}.{m}", "status": pst,
                         "value": None if pst == "deferred" else f(v.summary), "reason": pre}
                    if v.scale is not None and m.endswith("_ms"):
                        c["model_ms"] = model_ms(c["value"], v.scale)
                    out.append(c)
                for key, present in (("hit_tokens", tier["device"]), ("host_fetched_tokens", tier["host"])):
                    if not present:
                        out.append({"step": name, "metric": f"{v.phase}.{key}", "status": "absent", "value": None,
                                    "reason": "the tier's lookup counters never moved in this window"})
                    elif v.evidence is None and pst == "measured" and v.is_prime:
                        # nothing failed and nothing was measured: a prime holds no restores by design
                        out.append({"step": name, "metric": f"{v.phase}.{key}", "status": "absent", "value": None,
                                    "reason": "not evidence: a prime (first sends only) restores nothing"})
                    elif v.evidence is None:
                        # a phase cut short, not run or invalid keeps its own status; else no counters
                        kept = pst != "measured"
                        out.append({"step": name, "metric": f"{v.phase}.{key}", "status": pst if kept else "failed",
                                    "value": None, "reason": pre if kept else v.note})
                    else:
                        out.append({"step": name, "metric": f"{v.phase}.{key}", "status": pst,
                                    "value": v.evidence.get(key, 0.0), "reason": pre})
        elif st["kind"] == "ab":
            ab_f = ab_ev.get(name)
            if ab_f is None:
                out.append({"step": name, "metric": "verdict", "status": status if status != "measured" else
                            "failed", "value": None, "reason": reason or "no comparison"})
            else:
                out.append({"step": name, "metric": "verdict", "status": status, "value": ab_f["verdict"],
                            "reason": reason})
                for e in ab_f["evidence"]:
                    out.append({"step": name, "metric": e["cell"].split("/", 1)[1], "status": status,
                                "value": e["value"], "reason": e["decision"]})
        elif st["kind"] == "probe":
            from kvreplay.experiments.probe.step import probe_cells

            verdict = (read_json(root / st["run_dir"] / "verdict.json") if root is not None and st.get("run_dir")
                       else None)
            verdict = verdict if isinstance(verdict, dict) else None
            out.extend(model_fit(probe_cells(name, status, reason, fs.get("probe") or {}, verdict),
                                 probe_scale(verdict)))
        else:
            metric = {"incarnation": "ready_identity_fresh", "restore": "identity_restored"}.get(st["kind"], "check")
            out.append({"step": name, "metric": metric, "status": status, "value": status == "measured",
                        "reason": reason})
    return out
