"""Findings across the steps of an experiment window: phase views, comparisons, the decision tree.

Every rule on evidence is ``kvreplay.evidence.engine``'s, the one the run report
and ``kvreplay compare`` use; this module applies it to a window of steps.

**Evidence of restores.** Only repeats count: a request whose body was already
sent in the same incarnation (an earlier phase or an earlier repetition of the
same phase; ``evidence.engine.SentBodies``). A prime (first sends) is never
evidence. At C1 each record carries its own counter delta, so a phase that mixes
first sends and repeats (the control "last 12 bodies twice") counts only its
repeats; with counters per phase only, a phase counts only when it is a replay
(every body it sent was sent by an earlier phase of the incarnation). A delta
void by a restart (``reset``) is never evidence.

**Tiers.** Host-tier restores (``host_fetched_tokens``: tokens copied host ->
device) are reported apart from device hits (``hit_tokens``). A tier is present
in the window only when it is live in some phase (its lookup counters moved:
``host_lookups``/``host_query_tokens`` for the host tier,
``lookups``/``query_tokens`` for the device, or a llama.cpp device cache's
prompt work): a tier that never moved is *absent*, not zero, and so is a tier
that did not move in a phase's repeats. The decision tree reads every replay on
the one tier live in all the forward and reverse replays (host first, else
device; ``evidence.engine.common_tier``).

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

Each step kind gives its own cells and findings (``experiments.steps``); the
run kind's cells use ``CELL_METRICS`` and the phase views here.

**A/B** (rule ``ab_verdict``, given by the ab kind, ``experiments.steps.ab``): the comparison of ``kvreplay ab``
(``experiments.compare``: at least X % primary benefit with at most Y %
protected regression over matched repetitions, bootstrap intervals; ``no
decision`` otherwise), saying when fewer repetitions than planned were measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvreplay.evidence.engine import (
    RESTARTED,
    PhaseEvidence,
    SentBodies,
    Tier,
    common_tier,
    counter_value,
    delta_evidence,
    figure_on,
    restored_on,
    tiers_present,
    usable_delta,
)
from kvreplay.evidence.vocab import ABSENT, COUNTER_NAMES, RESTORE_KEYS
from kvreplay.rundir import RECORDS, iter_records, read_plan, read_summary

__all__ = ["CELL_METRICS", "PhaseView", "compare_tables", "load_views", "not_run", "partial_reason", "phase_status",
           "restore_findings", "tiers"]

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
        sent_records: Records of sent requests the phase has in ``records.jsonl`` (None:
            not read); a phase whose summary counts sends without records behind them
            is no evidence (``phase_status``).
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
    sent_records: int | None = None

    @property
    def is_prime(self) -> bool:
        """True when the phase sent only first sends (a prime: never evidence of restores)."""
        return self.repeats == 0 and self.first > 0


def _add(acc: dict[str, float], delta: dict[str, Any] | None) -> None:
    for k in COUNTER_NAMES:
        v = (delta or {}).get(k)
        if isinstance(v, (int, float)):
            acc[k] = acc.get(k, 0.0) + float(v)


def load_views(out: Path, steps: list[dict[str, Any]], frozen: dict[str, Any] | None = None) -> list[PhaseView]:
    """Phase views of every given step that ran (measured, failed or aborted), in window order.

    Args:
        out: Experiment directory.
        steps: ``result.json``'s steps (``name``, ``kind``, ``status``, ``run_dir``,
            ``comparable``, ``incarnation``) whose run directory is a plain run (the kinds with
            ``phase_views``, ``experiments.steps``: the caller picks them).
        frozen: ``experiment.json`` (the time scale of step directories that do not record it).
    """
    from kvreplay.experiments.timescale import scale_of_step

    views: list[PhaseView] = []
    ledger = SentBodies()
    for st in steps:
        if not st.get("run_dir"):
            continue
        d = out / st["run_dir"]
        summary = read_summary(d) or {}
        plan = read_plan(d) or {}
        orders = {p["name"]: p.get("order", "forward") for p in plan.get("phases", [])}
        controls = {p["name"] for p in plan.get("phases", []) if p.get("comparable", True) is False}
        recs: dict[str, list[dict[str, Any]]] = {}
        try:
            for r in iter_records(d / RECORDS):
                recs.setdefault(str(r.get("phase")), []).append(r)
        except OSError:
            pass
        scale = scale_of_step(plan, summary, frozen, st.get("incarnation"))
        for ph in summary.get("phases", []):
            comparable = bool(st.get("comparable", True)) and ph["name"] not in controls
            v = PhaseView(f"{st['name']}/{ph['name']}", st["name"], ph["name"], orders.get(ph["name"], "forward"),
                          comparable, st.get("incarnation"), ph, scale=scale)
            rows = [r for r in sorted(recs.get(ph["name"], []), key=lambda r: r.get("position", 0))
                    if r.get("sent")]
            v.sent_records = len(rows)
            sends = ledger.phase(st.get("incarnation"), [r.get("body_sha256") for r in rows])
            per_request = ph.get("attribution") == "per_request"
            ev: dict[str, float] = {}
            void = False
            for r, repeat in zip(rows, sends.repeats, strict=True):
                if r.get("status") != "ok":
                    continue
                d = usable_delta(r.get("counter_delta"))
                void |= d is None and bool((r.get("counter_delta") or {}).get("reset"))
                _add(v.moved, d)
                if repeat:
                    v.repeats += 1
                    if per_request:
                        _add(ev, d)
                else:
                    v.first += 1
            if not per_request:
                v.moved = {}
                d = usable_delta(ph.get("counter_delta"))
                void = d is None and bool((ph.get("counter_delta") or {}).get("reset"))
                _add(v.moved, d)
                ev = {}
                if v.repeats and sends.replay and not void:
                    _add(ev, d)
                elif v.repeats and not sends.replay:
                    v.note = "counters per phase only and the phase mixes first sends with repeats"
            if void and v.repeats:
                ev, v.note = {}, RESTARTED
            v.evidence = ev if (ev or (per_request and not void)) and v.repeats else None
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


def phase_status(ph: dict[str, Any], sent_records: int | None, step_reason: str | None) -> tuple[str, str | None]:
    """The status and reason every cell of one phase takes: measured only when its evidence exists.

    In this order:

    - nothing sent (``deferred``, or every position unsent): ``deferred`` when the runner
      deferred it (an abort came first), else ``failed`` (its check failed, or nothing was
      sent for another reason), with the phase's reasons or ``not run: 0 of N positions sent``;
    - an invalid phase: ``failed`` with its ``invalid_reasons``;
    - sends counted but no record of them (``sent_records`` 0): ``failed``, ``no records``;
    - no request answered ok: ``failed``, ``none of the N sent requests succeeded``
      naming how many failed in transport and in output;
    - cut short (``partial_reason``): ``aborted``, ``partial: 9 of 52 positions sent (REASON)``;
    - else ``measured`` (reason None).

    Every status but ``measured`` comes with a non-empty reason (the step's reason when the
    phase has none of its own).
    """
    sent, ok = ph.get("sent") or 0, ph.get("ok") or 0
    own = "; ".join(ph.get("invalid_reasons") or [])
    if ph.get("deferred"):
        return "deferred", own or step_reason or not_run(ph) or "not run: nothing sent"
    if sent == 0:
        return "failed", own or ph.get("check_failed") or not_run(ph) or "not run: nothing sent"
    if not ph.get("valid", True):
        return "failed", own or step_reason or "invalid phase"
    if sent_records == 0:
        return "failed", f"no records: the summary counts {sent} sent but records.jsonl holds none"
    if ok == 0:
        tr, out = ph.get("failed_transport"), ph.get("failed_output")
        split = f" ({tr} in transport, {out} in output)" if tr is not None and out is not None else ""
        return "failed", f"none of the {sent} sent requests succeeded{split}"
    if partial_reason(ph):
        return "aborted", f"{partial_reason(ph)} ({step_reason or 'step aborted'})"
    return "measured", None


def not_run(ph: dict[str, Any]) -> str | None:
    """``"not run: 0 of 52 positions sent"`` for a phase that sent nothing (deferred), else None."""
    planned, not_sent = ph.get("planned") or 0, ph.get("not_sent") or 0
    if ph.get("deferred") or (planned and not_sent >= planned):
        return f"not run: 0 of {planned} positions sent"
    return None


def tiers(views: list[PhaseView]) -> dict[str, bool]:
    """``{"host": present, "device": present}``: a tier is present when it is live in some phase.

    ``evidence.engine.tiers_present`` over every view's counters (``moved``: all its
    ok requests, first sends included).
    """
    return tiers_present(v.moved for v in views)


def view_evidence(v: PhaseView) -> PhaseEvidence | None:
    """The engine's evidence of a view's repeats (counter tiers); None when it has none."""
    return None if v.evidence is None else delta_evidence(v.ref, v.evidence)


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
    evs = {v.ref: e for v in views if (e := view_evidence(v)) is not None}
    main = [v for v in views if v.comparable and v.order in ("forward", "reverse") and v.ref in evs]
    live = [evs[v.ref] for v in main if evs[v.ref].tiers]
    decide = common_tier(live, ("host", "device")) or ("host" if any(e.tier("host") for e in live) else "device")
    used: list[tuple[PhaseView, Tier]] = []
    dead: list[tuple[PhaseView, str]] = []
    for v in views:
        e = evs.get(v.ref)
        if e is None:
            continue
        t = figure_on(e, decide) if not v.comparable else e.tier(decide)
        if t is not None:
            used.append((v, t))
        elif v.comparable and v.order not in ("forward", "reverse"):
            continue
        else:
            # absent, not zero: a tier that did not move in the repeats reads nothing
            dead.append((v, f"{decide} tier absent in its repeats ({e.absent.get(decide) or e.text()})"))
    fwd = [(v, r) for v, r in used if v.comparable and v.order == "forward"]
    rev = [(v, r) for v, r in used if v.comparable and v.order == "reverse"]
    ctl = [(v, r) for v, r in used if not v.comparable]
    tier_name = "host tier" if decide == "host" else (
        "device (the host tier did not move in every replay)" if tier["host"]
        else "device (no host tier: its lookups never moved)")
    metric = next((r.key for _v, r in fwd + rev if r.tier == decide), RESTORE_KEYS[decide][0])
    evidence = [{"cell": v.ref, "metric": r.key, "value": r.value, "order": v.order, "comparable": v.comparable,
                 "repeats": v.repeats, "role": "control" if not v.comparable else f"{v.order} replay"}
                for v, r in fwd + rev + ctl]
    primes = [v.ref for v in views if v.is_prime]
    # Phases cut short (their step aborted) are never evidence; the finding names them.
    cut = [(v, partial_reason(v.summary)) for v in views if not v.is_prime and partial_reason(v.summary)]
    skipped = [{"cell": v.ref, "reason": why, "order": v.order, "comparable": v.comparable} for v, why in cut]
    skipped += [{"cell": v.ref, "reason": why, "order": v.order, "comparable": v.comparable} for v, why in dead]
    if not evidence and not skipped:
        return []

    def line(group: list[tuple[PhaseView, Tier]]) -> str:
        return ", ".join(f"{v.ref} {_fmt(r.value)}" + (f" ({r.key})" if r.key != metric else "")
                         for v, r in group) or "none measured"

    text = (f"{tier_name} restores ({metric}, repeats only): forward {line(fwd)}; reverse {line(rev)}; "
            f"control {line(ctl)}")
    if primes:
        text += f"; prime phases not counted as evidence: {', '.join(primes)}"
    if cut:
        text += "; cut short, not counted as evidence: " + ", ".join(f"{v.ref} ({why})" for v, why in cut)
    if dead:
        text += "; no restore figure, not counted as evidence: " + ", ".join(f"{v.ref} ({why})" for v, why in dead)
    # restored as the engine reads it on the decided tier (a tier reading 0 never counts)
    got = {v.ref: bool(restored_on(evs[v.ref], decide)) for v, _r in used}
    pos = lambda g: any(got[v.ref] for v, _r in g)  # noqa: E731
    zero = lambda g: bool(g) and not pos(g)  # noqa: E731
    everything = fwd + rev + ctl
    if not fwd or not (rev or ctl):
        missing = "a forward replay" if not fwd else "a reverse replay or a control"
        return [{"rule": "restore_pattern_incomplete", "summary": f"no decision on churn: {missing} was not "
                 f"measured in full. {text}", "evidence": evidence, "skipped": skipped,
                 "next": f"run the missing arm ({missing}) in its own fresh incarnation"}]
    # the heads name only the arms the cells measured (a control that is "none measured" is not cited)
    if rev and ctl:
        restored_in, none_in = "every order and in the control", "any order nor in the control"
    elif rev:
        restored_in, none_in = "both orders (no control measured)", "either order (no control measured)"
    else:
        restored_in, none_in = ("the forward replay and the control (no reverse replay measured)",
                                "the forward replay nor in the control (no reverse replay measured)")
    if zero(fwd) and (pos(rev) or pos(ctl)):
        # the evidence nominates the mechanism; it does not show it: worded as a hypothesis,
        # with the experiment that would confirm it (issue 27)
        rule, head = "row_checkpoint_churn", ("row/checkpoint churn, a hypothesis: the forward replay restores "
                                              "nothing while the reverse replay or the small control restores, as "
                                              "it would if entries were evicted just before they come round; "
                                              "bounded eviction counters and a reproducer of the eviction order "
                                              "would confirm it")
        nxt = ("add bounded row/page/eviction counters (rows used, pages used, evictions by cause) and a CPU "
               "reproducer of the eviction order before any policy change")
    elif zero(everything):
        rule, head = "no_restores", f"no restores in {none_in}"
        nxt = "inspect key and checkpoint eligibility first (which prefixes are offered, hashed and kept)"
    elif all(got[v.ref] for v, _r in everything):
        rule, head = "no_churn", f"restores in {restored_in}: no churn at this working-set size"
        nxt = "grow the working set (more bodies) until the forward replay stops restoring, to find the cliff"
    else:
        rule, head = "order_dependent", "restores depend on the order in a way the decision tree does not cover"
        nxt = "repeat each order in its own fresh incarnation, with per-request counters at C1"
    return [{"rule": rule, "summary": f"{head}. {text}", "evidence": evidence, "skipped": skipped, "next": nxt}]


def _pct(ph: dict[str, Any], metric: str, q: str) -> float | None:
    return ((ph.get(f"{metric}_ms") or {}).get(q)) if ph else None


def _side(v: PhaseView) -> dict[str, Any]:
    ph = v.summary
    d = ph.get("counter_delta") or {}
    ev = delta_evidence(v.ref, d)
    row: dict[str, Any] = {"requests": ph.get("ok")}
    for m, qs in LATENCY:
        for q in qs:
            row[f"{m}_{q}_ms"] = _pct(ph, m, q)
    tok = ph.get("tokens") or {}
    row["cached_tokens"] = None if tok.get("cached_unknown") else tok.get("cached")
    for t in ph.get("by_turn") or ():  # conversations: the reuse of each turn index, side by side
        row[f"turn{t['turn']}_cached_tokens"] = None if t.get("cached_unknown") else t.get("cached_tokens")
    # the counters' own names, as in the cells and findings (whole-phase deltas here); a tier
    # not live in the phase (or a delta void by a restart) is absent, not zero
    row["hit_tokens"] = counter_value(d, "hit_tokens") if ev.tier("device") else ABSENT
    row["host_fetched_tokens"] = counter_value(d, "host_fetched_tokens") if ev.tier("host") else ABSENT
    return row


def compare_tables(views: list[PhaseView], pairs: list[list[str]]) -> list[dict[str, Any]]:
    """The file's ``compare`` pairs side by side, with ratios ``b / a``.

    Refused (a ``note`` instead of ``rows``): a side not measured, a control, a side cut
    short (``partial_reason``) or not run (``not_run``), and sides at different simulator
    time scales. Rows: ``{"metric", "a", "b", "ratio"}`` with latencies as measured (ms);
    at a time scale the table has ``sim_time_scale`` and each latency row ``a_model_ms`` and
    ``b_model_ms`` (``experiments.timescale``). ``hit_tokens`` and ``host_fetched_tokens`` are
    whole-phase counter deltas (``absent`` where the tier is not live in the phase, or its delta is
    void by a restart: ``evidence.engine``).
    """
    from kvreplay.experiments.timescale import model_ms

    def _unusable(ref: str, v: Any) -> str | None:
        """Why one side cannot be compared (not measured, a control, not run, cut short), else None."""
        if v is None:
            return f"{ref} was not measured"
        if not v.comparable:
            return f"{ref} is a control (comparable = false)"
        if not_run(v.summary):
            return f"{ref} was {not_run(v.summary)}"
        if partial_reason(v.summary):
            return f"{ref} is {partial_reason(v.summary)}"
        return None

    by = {v.ref: v for v in views}
    out = []
    for a, b in pairs:
        va, vb = by.get(a), by.get(b)
        t: dict[str, Any] = {"a": a, "b": b}
        why = [r for r in (_unusable(a, va), _unusable(b, vb)) if r]  # every side's reason, a then b
        if why:
            t["note"] = "not compared: " + "; ".join(why)
        elif va is None or vb is None:  # for the type checker: _unusable named the missing side
            continue
        elif va.scale != vb.scale:
            t["note"] = (f"not compared: {a} ran at simulator time scale {va.scale or 1:g}, {b} at "
                         f"{vb.scale or 1:g}")
        else:
            sa, sb = _side(va), _side(vb)
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
"""``(metric, reader of a phase's summary entry)``: the plain cells of each phase of a run step."""
