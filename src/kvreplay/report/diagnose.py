"""Diagnosis: findings read off a run's own figures, each with the next causal experiment.

Every finding follows the evidence rules of ``kvreplay.evidence.engine``: a
counter family whose lookup counter did not move in a phase is *absent* there,
not zero (so host-tier findings need ``host_lookups`` > 0, and on a server
without a host tier the restore findings reason on device hit tokens); prime
phases and phases marked ``comparable: false`` are never evidence of restores;
only valid phases with at least one ok request take part. Each finding carries
the numbers it rests on (``Finding.evidence``: phase -> figures) and the records
(positions) they came from, and its "Next" is computed from what the run already
has: a replay order or control that already ran is not asked for again.

Rules (``Finding.rule``):

``churn``
    A forward replay restored nothing while a reverse replay of the same bodies
    restored some, compared on the one tier live in every replay (host, else
    device, else usage; ``kvreplay.evidence.engine``). LRU-like eviction replays in the order it
    evicted, so a forward replay of a working set larger than the cache finds
    each entry already gone, while a reverse replay reads the most recent ones
    first. Next: the small-working-set control (a replay of only the last few
    bodies, ``--phase control:forward:c1:x2:lastN``); when a control already ran,
    the finding states what it restored instead of asking for it.

``no_restores``
    Forward and reverse replays both restored nothing. Order does not matter,
    so eviction is not the cause: the entries are never stored, never keyed to
    match, or not eligible. Next: ``kvreplay inspect`` on the first body of a replay.

``one_order_zero``
    Every replay runs in one order and restores nothing. Next: a replay in the
    order the run lacks (forward for an all-reverse run, reverse for an
    all-forward one, both for shuffled ones).

``usage_vs_counters``
    A phase's usage ``cached_tokens`` total and the counters' cached tokens
    (device ``hit_tokens`` plus host tokens the usage field counts,
    ``evidence.engine.counter_cached``) differ by more than
    ``max(1, 1% of the phase's prompt tokens)`` once the records without usage
    (timeouts, cuts, errors) are accounted for, or the counters show hit tokens
    while no answer reported ``cached_tokens``. The gap is counters − usage, the
    sign and count the summary's ``cross_check`` uses. Next: replay one
    disagreeing body alone at C1; when the phase ran above C1, replay it at C1 so
    per-request counters attribute the gap.

``usage_missing``
    The counters counted more cached tokens than usage reported, and the
    requests that returned no usage (they failed) account for the whole gap at
    C1. Not a disagreement: the server counted hits of requests whose answer
    never arrived.

``cache_invariant``
    A halogen ``/cache`` snapshot broke strict-LRU accounting
    (``stores - evicted = entries``) or ``hit_rate = hits / (hits + misses)``
    (checked at each counter read, ``kvreplay.rundir.counterlog``). Next: read the
    server's cache code for the path that skips the count.

``client_bound``
    The summary labels the phase client-bound (``client_bound: true``, from the
    runner's self-measurement: loop lag or CPU over its thresholds), or an
    open-loop phase did not keep its schedule (``schedule.kept_schedule:
    false``: sends later than intended) while slots were free, or — in a closed-loop phase whose
    summary says neither — the client kept fewer than half of the concurrency in
    flight on average (sum of E2E / phase wall time < 0.5 x C) in a phase
    without per-request counter reads (those pause the client on purpose).
    Its latencies are then the client's, not the server's (with the runner's
    ``client.verdict``, the words say what it measured and that the client *may*
    have added up to the loop lag). Next (``client_advice``, fitted to the run's
    shape): at C1 in one process a quieter host or a pinned core (and a run
    without per-request counter reads); above C1 the same concurrency over more
    processes (``--workers``). With ``--target sim`` the finding says that the
    simulator shares the client's process (``client_includes_server``) and the
    advice is a simulator of its own.

``host_stalls``
    The runner's ``client.verdict`` is ``host_stalls``: the event loop ran late
    (loop-lag p99 over its threshold) while neither the client's CPU nor its
    wait for a CPU was over theirs (``metrics.selfmeasure``); reported with the
    figures, not as client-bound. Next: rerun on a quieter host and compare.

``schedule_cap``
    An open-loop phase did not keep its schedule and every slot was busy
    (``peak_in_flight`` reached cN): the server's latency times the rate needs
    more than cN requests in flight, so the cap held the sends back, not the
    client. Next: raise the cap or lower the rate, and compare
    ``e2e_from_intended`` (with the backlog) with ``e2e``.

The rules read summary.json version 1 as every earlier version wrote it;
plan.json, records.jsonl and counters.jsonl add detail when present.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kvreplay.evidence.engine import (
    PhaseEvidence,
    common_tier,
    counter_cached,
    phase_evidence,
    replay_orders,
    restored_on,
    usable,
)
from kvreplay.evidence.vocab import USAGE_HOST_KEYS
from kvreplay.metrics.selfmeasure import describe
from kvreplay.report.cells import fmt

__all__ = ["CACHE_RULES", "Finding", "client_advice", "diagnose", "restore_signal"]

OCCUPANCY_LIMIT = 0.5
"""Mean in-flight / concurrency below which a phase counts as client-bound (fallback rule)."""
CACHE_RULES = frozenset(
    {"churn", "no_restores", "one_order_zero", "usage_vs_counters", "usage_missing", "cache_invariant"}
)
"""Rules about the cache (the others are about the client)."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One diagnosis line.

    Attributes:
        rule: Rule id (see module docstring).
        finding: What the figures show, with the figures.
        next_experiment: The next causal experiment to run.
        phases: Phases the finding is about.
        evidence: Phase -> the figures the finding rests on (name -> value; the
            unit is the name's: ``*_tokens`` tokens, ``host_hits`` lookups).
        records: Positions of the records the figures came from (first few).
    """

    rule: str
    finding: str
    next_experiment: str
    phases: tuple[str, ...] = field(default_factory=tuple)
    evidence: dict[str, dict[str, float]] = field(default_factory=dict)
    records: tuple[int, ...] = ()

    def sources(self) -> str:
        """Where the figures came from (``From phases fwd, rev; records at positions 1, 3.``)."""
        if not self.phases and not self.records:
            return ""
        out = "From phase" + ("s " if len(self.phases) != 1 else " ") + ", ".join(self.phases)
        if self.records:
            out += "; records at position" + ("s " if len(self.records) != 1 else " ")
            out += ", ".join(map(str, self.records))
        return out + "."

    def to_json(self) -> dict[str, Any]:
        """JSON form (for tools and tests)."""
        return {
            "rule": self.rule,
            "finding": self.finding,
            "next": self.next_experiment,
            "phases": list(self.phases),
            "evidence": {k: dict(v) for k, v in self.evidence.items()},
            "records": list(self.records),
        }


def restore_signal(ph: dict[str, Any]) -> tuple[str, float] | None:
    """The phase's first live restore figure: ``(name, value)``, or None without evidence.

    Host tier first (only when its lookups moved), then device, then usage
    ``cached_tokens`` (``kvreplay.evidence.engine``).
    """
    ev = phase_evidence(ph)
    return (ev.tiers[0].key, ev.tiers[0].value) if ev.tiers else None


def _ev_text(evs: dict[str, PhaseEvidence], names: list[str], orders: dict[str, str]) -> str:
    return "; ".join(f"{orders.get(n, '')} replay {n}: {evs[n].text()}" for n in names)


def _first_body(plan: dict[str, Any] | None, phase: str) -> str:
    for spec in (plan or {}).get("phases") or []:
        if spec.get("name") == phase and spec.get("sequence"):
            return f" (e.g. body #{spec['sequence'][0]['body_index']})"
    return ""


def _controls(plan: dict[str, Any] | None, replays: dict[str, str]) -> list[str]:
    """Replays of a subset (``last:N``, ``first:N`` or an explicit list): controls."""
    out = []
    for spec in (plan or {}).get("phases") or []:
        sel = spec.get("select", "all")
        if spec.get("name") in replays and sel != "all":
            out.append(spec["name"])
    return out


def _phase_conc(summary: dict[str, Any], name: str) -> int:
    for ph in summary.get("phases") or []:
        if ph.get("name") == name:
            return int(ph.get("concurrency") or 1)
    return 1


def _order_rules(
    summary: dict[str, Any], plan: dict[str, Any] | None, records: list[dict[str, Any]]
) -> list[Finding]:
    replays = replay_orders(summary, plan, records)
    phases = {p["name"]: p for p in summary.get("phases", []) if p.get("name") in replays and usable(p)}
    evs = {n: phase_evidence(p) for n, p in phases.items()}
    evs = {n: e for n, e in evs.items() if e.restored is not None}
    if not evs:
        return []
    controls = [n for n in _controls(plan, replays) if n in evs]
    main = {n: e for n, e in evs.items() if n not in controls}
    tier = common_tier(main.values())
    if tier is None:
        return []

    def restored(n: str) -> bool:
        return bool(restored_on(evs[n], tier))

    fwd = [n for n in main if replays[n] == "forward"]
    rev = [n for n in main if replays[n] == "reverse"]
    evidence = {n: e.numbers() for n, e in evs.items()}
    on = f" on the {tier} tier" if tier != "usage" else " (usage cached_tokens)"
    fz = [n for n in fwd if not restored(n)]
    rp = [n for n in rev if restored(n)]
    out = []
    if fz and rp:
        ctl_text = ""
        nxt = (
            "run the small-working-set control: replay only the last few bodies, e.g. "
            f"--phase control:forward:c{_phase_conc(summary, fz[0])}:x2:lastN with N well under "
            "the cache capacity; restores there confirm churn."
        )
        if controls:
            got = [n for n in controls if restored(n)]
            ctl_text = " Control " + "; ".join(
                f"{n} already ran: {evs[n].text()}" for n in controls
            ) + "."
            if got:
                ctl_text += " It restored: churn confirmed."
                nxt = (
                    "size the cache against the working set: `kvreplay simulate` on this "
                    "workload gives the capacity at which the forward replay would restore."
                )
            else:
                ctl_text += " It restored nothing either: churn is not confirmed."
                nxt = (
                    "inspect key and checkpoint eligibility with `kvreplay inspect` on one "
                    f"control body{_first_body(plan, controls[0])}."
                )
        out.append(
            Finding(
                "churn",
                f"forward replay restored nothing{on} while reverse restored some: "
                + _ev_text(evs, fz + rp, replays)
                + ". Consistent with churn (entries evicted in the order the replay asks"
                " for them)." + ctl_text,
                nxt,
                tuple(fz + rp + controls),
                {n: evidence[n] for n in fz + rp + controls},
            )
        )
    elif fwd and rev and not any(restored(n) for n in fwd + rev):
        ph = fwd + rev
        out.append(
            Finding(
                "no_restores",
                f"both forward and reverse replays restored nothing{on}: "
                + _ev_text(evs, ph, replays)
                + ". Order does not matter, so eviction is not the cause.",
                "inspect key and checkpoint eligibility with `kvreplay inspect` on one"
                f" replayed body{_first_body(plan, ph[0])} "
                "(is a checkpoint stored, and does the replay's key match it?).",
                tuple(ph),
                {n: evidence[n] for n in ph},
            )
        )
    elif not any(restored(n) for n in main) and (not fwd or not rev):
        names = list(main)
        orders = sorted({replays[n] for n in names})
        c = _phase_conc(summary, names[0])
        if orders == ["forward"]:
            nxt = f"add a reverse replay (e.g. --phase replay-rev:reverse:c{c})"
        elif orders == ["reverse"]:
            nxt = f"add a forward replay (e.g. --phase replay-fwd:forward:c{c})"
        else:
            nxt = (
                f"add a forward and a reverse replay (e.g. --phase replay-fwd:forward:c{c} "
                f"--phase replay-rev:reverse:c{c})"
            )
        out.append(
            Finding(
                "one_order_zero",
                f"every replay ({', '.join(orders)}) restored nothing{on}: "
                + _ev_text(evs, names, replays) + ".",
                nxt + " to tell churn from ineligibility.",
                tuple(names),
                {n: evidence[n] for n in names},
            )
        )
    return out


def _no_usage_records(
    records: Iterable[dict[str, Any]],
) -> dict[str, tuple[list[dict[str, Any]], float | None]]:
    """Per phase: sent, failed records (no usage) and their counted tokens (None if unknown).

    One pass over the records (they may be streamed, ``report.stream.RecordStream``).
    """
    bad: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if r.get("sent", True) and r.get("status") != "ok":
            bad.setdefault(str(r.get("phase")), []).append(r)
    out: dict[str, tuple[list[dict[str, Any]], float | None]] = {}
    for phase, rs in bad.items():
        tokens = 0.0
        for r in rs:
            d = r.get("counter_delta") or {}
            if "hit_tokens" not in d or d.get("reset"):
                out[phase] = (rs, None)
                break
            tokens += counter_cached(d)
        else:
            out[phase] = (rs, tokens)
    return out


def _usage_rule(summary: dict[str, Any], records: list[dict[str, Any]]) -> list[Finding]:
    out = []
    failed = _no_usage_records(records) if records else {}
    for ph in summary.get("phases", []):
        if not usable(ph):
            continue
        d = ph.get("counter_delta") or {}
        if d.get("reset") or "hit_tokens" not in d:
            continue
        name = ph["name"]
        tok = ph.get("tokens") or {}
        counted = float(counter_cached(d))
        how = "hit_tokens" + next(
            (f" + {k}" for k in USAGE_HOST_KEYS if k in d), ""
        )
        if tok.get("cached_unknown", 0) >= ph["ok"]:
            if counted > 0:
                out.append(
                    Finding(
                        "usage_vs_counters",
                        f"phase {name}: counters show {how} {fmt(counted)} but no"
                        " answer reported usage cached_tokens.",
                        "rely on the counters for this server, or enable its cached-token"
                        " usage reporting and replay one body at C1 to compare.",
                        (name,),
                        {name: {"counter_cached_tokens": counted, "ok": float(ph["ok"])}},
                    )
                )
            continue
        if tok.get("cached_unknown"):
            continue  # a partial usage total cannot be compared
        cached = float(tok.get("cached") or 0)
        gap = counted - cached  # counters - usage, as summary cross_check
        xc = ph.get("cross_check") if isinstance(ph.get("cross_check"), dict) else {}
        if records:
            bad, bad_tokens = failed.get(name, ([], 0.0))
        else:
            wu = xc.get("requests_without_usage") or {}
            n = int(wu.get("n") or sum((ph.get("failed") or {}).values()))
            bad = [{"position": p, "status": "?"} for p in wu.get("positions") or []]
            bad += [{"position": None, "status": "?"}] * max(0, n - len(bad))
            bad_tokens = wu.get("counter_tokens") if wu else (0.0 if not n else None)
        tol = max(1.0, 0.01 * float(tok.get("prompt") or 0))
        n_dis = int(xc.get("requests_disagreeing") or 0)
        dis_pos = [int(x["position"]) for x in xc.get("disagreements") or [] if "position" in x]
        if not xc and ph.get("attribution") == "per_request":
            for r in records:
                if r.get("phase") != name or r.get("status") != "ok":
                    continue
                rd = r.get("counter_delta") or {}
                uc = (r.get("usage") or {}).get("cached_tokens")
                if uc is not None and "hit_tokens" in rd and not rd.get("reset") and uc != counter_cached(rd):
                    dis_pos.append(int(r["position"]))
            n_dis = len(dis_pos)
        numbers = {"usage_cached_tokens": cached, "counter_cached_tokens": counted,
                   "gap_tokens": gap, "requests_disagreeing": float(n_dis)}
        statuses: dict[str, int] = {}
        for r in bad:
            statuses[str(r.get("status"))] = statuses.get(str(r.get("status")), 0) + 1
        bad_pos = tuple(int(r["position"]) for r in bad if r.get("position") is not None)
        if bad:
            numbers["requests_without_usage"] = float(len(bad))
            if bad_tokens is not None:
                numbers["tokens_without_usage"] = float(bad_tokens)
        unexplained = gap - (bad_tokens or 0.0) if bad_tokens is not None else gap
        if abs(gap) <= tol and not n_dis:
            continue
        head = (
            f"phase {name}: counters {how} {fmt(counted)} vs usage cached_tokens "
            f"{fmt(cached)}: gap {gap:+g} tokens (counters − usage)"
        )
        why = ", ".join(f"{k} {v}" for k, v in sorted(statuses.items()))
        if bad and bad_tokens is not None and abs(unexplained) <= tol and not n_dis:
            out.append(
                Finding(
                    "usage_missing",
                    head + f"; {len(bad)} requests without usage ({why}, positions "
                    f"{', '.join(map(str, bad_pos))}) account for {fmt(bad_tokens)} of it: "
                    "the server counted hits of requests whose answer never arrived.",
                    "nothing to reconcile for the cache; see the failed records in the"
                    " error table.",
                    (name,),
                    {name: numbers},
                    bad_pos,
                )
            )
            continue
        detail = ""
        if bad:
            detail += f"; {len(bad)} requests without usage ({why})"
            detail += (
                f" account for {fmt(bad_tokens)} of it, leaving {unexplained:+g}"
                if bad_tokens is not None
                else " may account for part of it (no per-request counters)"
            )
        if n_dis:
            shown = ", ".join(map(str, dis_pos[:8])) + (" ..." if n_dis > min(8, len(dis_pos)) else "")
            detail += f"; at C1, {n_dis} requests disagree" + (f" (positions {shown})" if dis_pos else "")
        if ph.get("attribution") == "per_request":
            nxt = (
                "replay one disagreeing body alone at C1 and compare the two per request:"
                " a constant gap per request points to block rounding, a gap on some"
                " requests only to a tier the usage field does not count."
            )
        else:
            nxt = (
                f"replay phase {name} at C1 (per-request counters) to attribute the gap to"
                " requests: a constant gap per request points to block rounding, a gap on"
                " some requests only to a tier the usage field does not count."
            )
        out.append(
            Finding(
                "usage_vs_counters",
                head + detail + ".",
                nxt,
                (name,),
                {name: numbers},
                tuple(dis_pos[:20]) + bad_pos,
            )
        )
    return out


def _figures(d: dict[str, Any]) -> dict[str, float]:
    """The numeric entries of ``d`` (the figures a finding rests on)."""
    return {k: float(v) for k, v in d.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


def client_advice(summary: dict[str, Any], ph: dict[str, Any]) -> str:
    """The ``client_bound`` next step that fits the run's shape (processes, concurrency, counter reads).

    One process at C1 cannot be spread: a quieter host or a pinned core, and (with
    per-request counter reads) a run without them to see their share. One process
    above C1: the same concurrency over several processes (``--workers``). Several
    processes: more of them for the same concurrency. The in-process simulator: a
    simulator of its own (``kvreplay serve-sim``).
    """
    c = ph.get("concurrency", 1)
    workers = summary.get("workers") or 1
    compare = "and compare the TTFT and ITL percentiles."
    if summary.get("client_includes_server"):
        return f"run the simulator as its own process (kvreplay serve-sim, then --target URL) {compare}"
    if workers == 1 and c == 1:
        text = "rerun the phase on a quieter host (or with the client pinned to an idle core)"
        if ph.get("attribution") == "per_request":
            text += (", and once with --no-per-request-counters to see what the counter reads cost "
                     "(phases[].counter_reads)")
        return f"{text}, {compare}"
    if workers == 1:
        return f"spread the C{c} over several processes (--workers N) or run on a quieter host, {compare}"
    return (f"spread the C{c} over more processes (--workers {2 * workers}) or run on a quieter host, "
            f"{compare}")


def _client_rule(summary: dict[str, Any], records: list[dict[str, Any]]) -> list[Finding]:
    out = []
    for ph in summary.get("phases", []):
        if not usable(ph):
            continue
        client = ph.get("client") if isinstance(ph.get("client"), dict) else {}
        flagged = ph.get("client_bound") is True or client.get("bound") is True
        why = "the runner labelled it client-bound"
        if client:
            figs = ", ".join(
                f"{k} {v}" for k, v in client.items() if k != "bound" and v is not None
            )
            why += f" ({figs})" if figs else ""
        tail = "; its latencies are the client's, not the server's."
        words = describe(client, ph.get("wall_s")) if client else ""
        if words and client.get("verdict") == "host_stalls":
            out.append(Finding("host_stalls", f"phase {ph['name']}: {words}.",
                               "rerun the phase on a quieter host (or with the client pinned to an idle core) "
                               "and compare the TTFT and ITL percentiles; a blocking call on the loop stalls "
                               "an idle host too.", (ph["name"],)))
        elif words and flagged:
            why, tail = words, "."
        sched = ph.get("schedule") if isinstance(ph.get("schedule"), dict) else {}
        if not flagged and sched.get("open_loop") and sched.get("kept_schedule") is False:
            c = ph.get("concurrency", 1)
            if (ph.get("peak_in_flight") or 0) >= c:
                # Every slot was busy: the server's latency times the rate needs more
                # than cN in flight. The cap, not the client, held the sends back.
                out.append(
                    Finding(
                        "schedule_cap",
                        f"phase {ph['name']}: the open loop could not keep its schedule with at most "
                        f"{c} requests in flight ({sched.get('note') or 'sends were late'}); its "
                        "*_from_intended latencies include that backlog.",
                        f"raise the in-flight cap above c{c} or lower the rate, and compare e2e_from_intended "
                        "with e2e.",
                        (ph["name"],),
                        {ph["name"]: _figures({"concurrency": c, "peak_in_flight": ph.get("peak_in_flight"),
                                               **(sched.get("dispatch_delay_ms") or {})})},
                    )
                )
                continue
            flagged = True
            why = f"open loop and {sched.get('note') or 'the client could not keep the schedule'}"
        if (
            not flagged
            and ph.get("client_bound") is None
            and not client
            and not sched.get("open_loop")
            and ph.get("attribution") != "per_request"
        ):
            wall = ph.get("wall_s")
            c = ph.get("concurrency", 1)
            e2e = [
                r["e2e_ns"]
                for r in records
                if r.get("phase") == ph["name"]
                and r.get("status") == "ok"
                and r.get("e2e_ns") is not None
            ]
            if wall and e2e and len(e2e) >= 2 * c:
                occ = sum(e2e) / 1e9 / wall
                if occ < OCCUPANCY_LIMIT * c:
                    flagged = True
                    why = (
                        f"the client kept {occ:.2f} requests in flight on average at C{c} "
                        f"(below {OCCUPANCY_LIMIT:.0%} of C)"
                    )
        if flagged and summary.get("client_includes_server"):
            why += " — the in-process simulator (--target sim) runs in the client's process, so its work counts here"
        if flagged:
            out.append(
                Finding(
                    "client_bound",
                    f"phase {ph['name']}: {why}{tail}",
                    client_advice(summary, ph),
                    (ph["name"],),
                    {ph["name"]: _figures({"concurrency": ph.get("concurrency", 1),
                                           "wall_s": ph.get("wall_s"), **client})},
                )
            )
    return out


def _invariant_rule(violations: list[dict[str, Any]]) -> list[Finding]:
    """One finding per broken identity, with the first snapshot's numbers and the count."""
    by: dict[str, list[dict[str, Any]]] = {}
    for v in violations:
        by.setdefault(str(v.get("identity")), []).append(v)
    out = []
    for ident, vs in by.items():
        first = vs[0]
        nums = {k: float(x) for k, x in (first.get("numbers") or {}).items()
                if isinstance(x, (int, float))}
        where = f"phase {first.get('phase')} at {first.get('at')}"
        phases = tuple(dict.fromkeys(str(v.get("phase")) for v in vs))
        out.append(
            Finding(
                "cache_invariant",
                f"/cache broke {ident} in {len(vs)} snapshot(s); first {where}: "
                + ", ".join(f"{k} {fmt(x)}" for k, x in nums.items()) + ".",
                "read the server's cache accounting for the path that skips a count "
                "(an entry replaced without an eviction, a lookup counted twice); the raw "
                "snapshots are in counters.jsonl.",
                phases,
                {str(first.get("phase")): nums},
                tuple(int(v["at"]) for v in vs if isinstance(v.get("at"), int))[:20],
            )
        )
    return out


def diagnose(
    summary: dict[str, Any],
    plan: dict[str, Any] | None,
    records: list[dict[str, Any]] | None = None,
    violations: list[dict[str, Any]] | None = None,
) -> list[Finding]:
    """All findings for a run (rules in the module docstring), in rule order.

    Args:
        summary: summary.json (any version 1 summary; nothing newer is required).
        plan: plan.json (replay orders; without it replays come from the records'
            body hashes, order ``unknown``).
        records: records.jsonl as dicts (per-request detail; optional).
        violations: Cache-invariant violations from counters.jsonl
            (``kvreplay.rundir.read_violations``; optional).

    Returns:
        The findings; empty when no rule fires.
    """
    recs = records or []
    return (
        _order_rules(summary, plan, recs)
        + _usage_rule(summary, recs)
        + _invariant_rule(violations or [])
        + _client_rule(summary, recs)
    )
