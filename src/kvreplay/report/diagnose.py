"""Diagnosis: findings read off a run's own figures, each with the next causal experiment.

Only valid phases with at least one ok request take part. A phase is a
*replay* when every body it sends was already sent by an earlier phase of the
same plan (plan.json ``sequence`` hashes); its order is the plan's ``order``
(``forward``, ``reverse``, ``shuffle:SEED``). A phase with ``comparable = false``
(a control) or labelled ``prime`` is never a replay: it is not pooled with, or
compared as, a main arm, and a prime is never evidence of restores.

The *restore signal* of a phase is, in this order of preference, the first one
available: host-tier restores from the native counters (``host_fetched_tokens``,
else ``host_reused_tokens``, else ``host_hits``), else device-tier hits
(``hit_tokens``, else ``hits``), else the usage ``cached_tokens`` total (only
when every ok answer reported it).

Rules (``Finding.rule``):

``churn``
    A forward replay restores zero while a reverse replay of the same bodies
    restores some. LRU-like eviction replays in the order it evicted, so a
    forward replay of a working set larger than the cache finds each entry
    already gone, while a reverse replay reads the most recent ones first.
    Next: the small-working-set control, a replay of only the last few bodies
    (``--phase control:forward:c1:x2:lastN`` with N well under the capacity):
    restores there confirm churn.

``no_restores``
    Forward and reverse replays both restore zero. Order does not matter, so
    eviction is not the cause: the entries are never stored, never keyed to
    match, or not eligible. Next: inspect key and checkpoint eligibility with
    ``kvreplay inspect`` on one body of the replay.

``one_order_zero``
    Every replay runs in one order and restores zero. Next: add a reverse
    replay (``--phase replay-rev:reverse:c1``) to tell churn from ineligibility.

``usage_vs_counters``
    A phase's usage ``cached_tokens`` total and its native ``hit_tokens``
    delta differ by more than ``max(1, 1% of the phase's prompt tokens)``, or
    the counters show hit tokens while no answer reported ``cached_tokens``.
    The finding names both values and the gap (and, at C1, the requests that
    disagree: from the summary's ``cross_check`` when present, else from the
    records). Next: replay one disagreeing body alone at C1 and compare the
    two per request; a constant gap per request points to block rounding, a
    gap on some requests only to a tier the usage field does not count.

``client_bound``
    The summary labels the phase client-bound (``client_bound: true``, from the
    runner's self-measurement: loop lag or CPU over its thresholds), or an
    open-loop phase did not keep its schedule (``schedule.kept_schedule:
    false``: sends later than intended) while slots were free, or — in a closed-loop phase whose
    summary says neither — the client kept fewer than half of the concurrency in
    flight on average (sum of E2E / phase wall time < 0.5 x C) in a phase
    without per-request counter reads (those pause the client on purpose).
    Its latencies are then the client's, not the server's. Next: rerun the
    phase with fewer workers per process, or spread the load over processes,
    and compare. With ``--target sim`` the finding says that the simulator
    shares the client's process (``client_includes_server``).

``schedule_cap``
    An open-loop phase did not keep its schedule and every slot was busy
    (``peak_in_flight`` reached cN): the server's latency times the rate needs
    more than cN requests in flight, so the cap held the sends back, not the
    client. Next: raise the cap or lower the rate, and compare
    ``e2e_from_intended`` (with the backlog) with ``e2e``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Finding", "diagnose", "restore_signal"]

HOST_KEYS = ("host_fetched_tokens", "host_reused_tokens", "host_hits")
DEVICE_KEYS = ("hit_tokens", "hits")
OCCUPANCY_LIMIT = 0.5
"""Mean in-flight / concurrency below which a phase counts as client-bound (fallback rule)."""


@dataclass(frozen=True, slots=True)
class Finding:
    """One diagnosis line.

    Attributes:
        rule: Rule id (see module docstring).
        finding: What the figures show, with the figures.
        next_experiment: The next causal experiment to run.
        phases: Phases the finding is about.
    """

    rule: str
    finding: str
    next_experiment: str
    phases: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self) -> dict[str, Any]:
        """JSON form (for tools and tests)."""
        return {
            "rule": self.rule,
            "finding": self.finding,
            "next": self.next_experiment,
            "phases": list(self.phases),
        }


def _usable(ph: dict[str, Any]) -> bool:
    return bool(ph.get("valid", True)) and not ph.get("deferred") and ph.get("ok", 0) > 0


def restore_signal(ph: dict[str, Any]) -> tuple[str, float] | None:
    """The phase's restore signal: ``(name, value)`` or None (see module docstring)."""
    d = ph.get("counter_delta") or {}
    if d and not d.get("reset"):
        for k in HOST_KEYS + DEVICE_KEYS:
            if k in d:
                return k, float(d[k])
    tok = ph.get("tokens") or {}
    if tok and not tok.get("cached_unknown"):
        return "usage cached_tokens", float(tok.get("cached", 0))
    return None


def _replays(plan: dict[str, Any] | None) -> dict[str, str]:
    """Replay phase name -> order."""
    out: dict[str, str] = {}
    seen: set[str] = set()
    for spec in (plan or {}).get("phases") or []:
        hashes = {s["body_sha256"] for s in spec.get("sequence") or []}
        main_arm = spec.get("comparable", True) is not False and spec.get("label") != "prime"
        if hashes and hashes <= seen and main_arm:
            out[spec["name"]] = str(spec.get("order", "forward"))
        seen |= hashes
    return out


def _order_rules(summary: dict[str, Any], plan: dict[str, Any] | None) -> list[Finding]:
    replays = _replays(plan)
    phases = {
        p["name"]: p for p in summary.get("phases", []) if p["name"] in replays and _usable(p)
    }
    sig = {n: restore_signal(p) for n, p in phases.items()}
    sig = {n: s for n, s in sig.items() if s is not None}
    if not sig:
        return []
    # Compare like with like: the most preferred signal every replay has.
    names = [s[0] for s in sig.values()]
    key = next(k for k in HOST_KEYS + DEVICE_KEYS + ("usage cached_tokens",) if k in names)
    vals = {n: s[1] for n, s in sig.items() if s[0] == key}
    fwd = {n: v for n, v in vals.items() if replays[n] == "forward"}
    rev = {n: v for n, v in vals.items() if replays[n] == "reverse"}
    out = []
    fz = [n for n, v in fwd.items() if v == 0]
    rp = [n for n, v in rev.items() if v > 0]
    if fz and rp:
        out.append(
            Finding(
                "churn",
                f"{key}: 0 in forward replay {', '.join(fz)} but "
                + ", ".join(f"{fmt_num(rev[n])} in reverse replay {n}" for n in rp)
                + ": consistent with churn (entries evicted in the order the replay asks"
                " for them).",
                "run the small-working-set control: replay only the last few bodies, e.g. "
                "--phase control:forward:c1:x2:lastN with N well under the cache capacity; "
                "restores there confirm churn.",
                tuple(fz + rp),
            )
        )
    elif fwd and rev and all(v == 0 for v in fwd.values()) and all(v == 0 for v in rev.values()):
        ph = tuple(list(fwd) + list(rev))
        out.append(
            Finding(
                "no_restores",
                f"{key}: 0 in both forward ({', '.join(fwd)}) and reverse ({', '.join(rev)})"
                " replays: "
                "order does not matter, so eviction is not the cause.",
                "inspect key and checkpoint eligibility with `kvreplay inspect` on one"
                " replayed body "
                "(is a checkpoint stored, and does the replay's key match it?).",
                ph,
            )
        )
    elif vals and all(v == 0 for v in vals.values()) and (not fwd or not rev):
        order = "forward" if fwd else ("reverse" if rev else "shuffled")
        out.append(
            Finding(
                "one_order_zero",
                f"{key}: 0 in every replay ({', '.join(vals)}), all {order}.",
                "add a replay in the other order (e.g. --phase replay-rev:reverse:c1) to"
                " tell churn "
                "from ineligibility.",
                tuple(vals),
            )
        )
    return out


def fmt_num(v: float) -> str:
    """A count without a trailing ``.0``."""
    return str(int(v)) if float(v).is_integer() else f"{v:.1f}"


def _usage_rule(summary: dict[str, Any], records: list[dict[str, Any]]) -> list[Finding]:
    out = []
    for ph in summary.get("phases", []):
        if not _usable(ph):
            continue
        d = ph.get("counter_delta") or {}
        if d.get("reset") or "hit_tokens" not in d:
            continue
        tok = ph["tokens"]
        hit = float(d["hit_tokens"])
        if tok.get("cached_unknown", 0) >= ph["ok"]:
            if hit > 0:
                out.append(
                    Finding(
                        "usage_vs_counters",
                        f"phase {ph['name']}: counters show hit_tokens {fmt_num(hit)} but no"
                        " answer reported "
                        "usage cached_tokens.",
                        "rely on the counters for this server, or enable its cached-token"
                        " usage reporting "
                        "and replay one body at C1 to compare.",
                        (ph["name"],),
                    )
                )
            continue
        cached = float(tok["cached"])
        gap = cached - hit
        if abs(gap) <= max(1.0, 0.01 * float(tok.get("prompt") or 0)):
            continue
        detail = ""
        xc = ph.get("cross_check") if isinstance(ph.get("cross_check"), dict) else {}
        if xc.get("requests_disagreeing"):
            # The summary's own per-request cross-check (exact count, first few listed).
            n = int(xc["requests_disagreeing"])
            pos = [str(d.get("position")) for d in xc.get("disagreements") or []]
            shown = ", ".join(pos) + (" ..." if n > len(pos) else "")
            detail = f" At C1, {n} requests disagree" + (f" (positions {shown})." if pos else ".")
        elif ph.get("attribution") == "per_request":
            bad = []
            for r in records:
                if r.get("phase") != ph["name"] or r.get("status") != "ok":
                    continue
                rd = r.get("counter_delta") or {}
                uc = (r.get("usage") or {}).get("cached_tokens")
                if uc is not None and "hit_tokens" in rd and uc != rd["hit_tokens"]:
                    bad.append(r["position"])
            if bad:
                shown = ", ".join(str(p) for p in bad[:8]) + (" ..." if len(bad) > 8 else "")
                detail = f" At C1, {len(bad)} requests disagree (positions {shown})."
        out.append(
            Finding(
                "usage_vs_counters",
                f"phase {ph['name']}: usage cached_tokens {fmt_num(cached)} vs counter hit_tokens "
                f"{fmt_num(hit)}: gap {fmt_num(gap)} tokens ({abs(gap) / max(cached, hit, 1):.0%})."
                + detail,
                "replay one disagreeing body alone at C1 and compare the two per request:"
                " a constant gap per request points to block rounding, a gap on some"
                " requests only to a tier the usage "
                "field does not count.",
                (ph["name"],),
            )
        )
    return out


def _client_rule(summary: dict[str, Any], records: list[dict[str, Any]]) -> list[Finding]:
    out = []
    for ph in summary.get("phases", []):
        if not _usable(ph):
            continue
        client = ph.get("client") if isinstance(ph.get("client"), dict) else {}
        flagged = ph.get("client_bound") is True or client.get("bound") is True
        why = "the runner labelled it client-bound"
        if client:
            figs = ", ".join(
                f"{k} {v}" for k, v in client.items() if k != "bound" and v is not None
            )
            why += f" ({figs})" if figs else ""
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
                    f"phase {ph['name']}: {why}; its latencies are the client's, not the server's.",
                    "rerun the phase with fewer workers per process or over several processes, "
                    "and compare the TTFT and ITL percentiles.",
                    (ph["name"],),
                )
            )
    return out


def diagnose(
    summary: dict[str, Any],
    plan: dict[str, Any] | None,
    records: list[dict[str, Any]] | None = None,
) -> list[Finding]:
    """All findings for a run (rules in the module docstring), in rule order.

    Args:
        summary: summary.json.
        plan: plan.json (replay detection needs it; without it the order rules are skipped).
        records: records.jsonl as dicts (per-request detail; optional).

    Returns:
        The findings; empty when no rule fires.
    """
    recs = records or []
    return _order_rules(summary, plan) + _usage_rule(summary, recs) + _client_rule(summary, recs)
