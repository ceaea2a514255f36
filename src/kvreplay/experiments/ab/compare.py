"""Compare matched blocks of two arms: paired ratios, bootstrap intervals, a verdict.

Input is one or more ``kvreplay ab`` directories (their ``ab.json`` names the
blocks and the arm of each) or plain run directories taken in pairs (baseline,
candidate, baseline, candidate, ...). A *pair* is the baseline block and the
candidate block of one repetition; for every phase and metric the pair gives
the ratio candidate / baseline.

Per metric: the median of the paired ratios and its percentile-bootstrap
interval (``stats.bootstrap_median_ci``; Efron 1979), reported as the relative
change ``ratio - 1`` in percent.

Thresholds (``--primary ttft_p50:-5%``, ``--protected itl_p50:+3%``; a metric
may be qualified by phase, ``c4.ttft_p50:-5%``, else it applies to every
phase). Metrics are the keys of ``METRICS`` (TTFT, ITL, TPOT and E2E
percentiles, throughput, output tokens/s, cached tokens) and counter ratios
``ratio:NUM/DEN`` (``kvreplay.experiments.ab.ratios``), e.g.
``--primary ratio:hit_tokens/query_tokens:+5%``. For a primary check the sign says which way is better and the size how
much counts (``-5%``: lower by at least 5%); with the interval ``[lo, hi]`` of
the change:

=============  ================================================================
benefit        the whole interval is at least the threshold in the good direction
regression     the whole interval is at least as far in the bad direction
no change      the whole interval is strictly inside (-t, +t)
no decision    the interval crosses a threshold
=============  ================================================================

A protected check (``+3%``: must not rise by more than 3%) is ``regression``
when the whole interval is beyond the threshold, ``ok`` when the whole interval
is within it and no wider than the bound (an interval of [-40%, +2%] cannot show a
change stays within 3%), else ``no decision`` with the interval and why. The verdict is ``regression`` if any check
is, ``benefit`` if every primary check is and every protected check is ``ok``,
``no change`` if every primary check is and every protected check is ``ok``,
else ``no decision``. Fewer than two pairs is always ``no decision``: never a
verdict from one pair. A check whose figures sit near the latency histogram's
resolution, whose timing figures come from a block whose client self-check was not
quiet, whose effect is not over twice the arms' spread, or whose split halves
disagree is ``no decision`` with the reason (``experiments.ab.resolution``); every
check states its split-half agreement (``split_half``).

A block that ran the simulator at time scale 0 (plan.json ``run.sim_time_scale``)
modelled no time: its timing metrics (latencies, throughput, output tokens/s) are
``not computed`` and so are the checks on them; only counted metrics decide, and the
verdict carries the caveat ``timing_not_computed`` (``untimed_reason``).

Comparability (``comparability``): before any ratio means anything, both blocks
of a pair, and the baselines of all pairs, must have run the same experiment.
From each block's plan.json (summary.json where plan.json is missing) it
compares the workload sha256 and, per phase of the same name, the concurrency,
the arrival (closed loop, or open loop with its process and rate) and the
sequence (body order). A differing workload, concurrency or arrival is a
different load: the verdict is ``not comparable`` and every check says so. A
differing body order, a phase present in one block only, or a missing
plan.json is a warning beside the verdict. ``kvreplay ab`` blocks share one
plan, so they never warn.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvreplay.errors import ConfigError
from kvreplay.experiments.ab.comparability import BLOCKING_FIELDS, comparability
from kvreplay.experiments.ab.ratios import RATIO_PREFIX, check_ratio_metric, missing_counter, ratio_value
from kvreplay.experiments.ab.resolution import (
    NOT_COMPUTED,
    busy_acceptance,
    busy_caveat,
    client_noise,
    protected_width,
    resolution_gate,
    split_half,
    untimed_reason,
)
from kvreplay.experiments.stats import bootstrap_median_ci, median
from kvreplay.report.abreport import change_pct_text, ci_pct_range_text
from kvreplay.rundir import PLAN, SUMMARY, read_json_checked

__all__ = [
    "BLOCKING_FIELDS",
    "METRICS",
    "NOT_COMPUTED",
    "Threshold",
    "ci_pct_text",
    "compare_blocks",
    "comparability",
    "load_pairs",
    "parse_threshold",
    "render_compare",
]

METRICS: dict[str, tuple[str, ...]] = {
    "ttft_p50": ("ttft_ms", "p50"),
    "ttft_p90": ("ttft_ms", "p90"),
    "ttft_p99": ("ttft_ms", "p99"),
    "itl_p50": ("itl_ms", "p50"),
    "itl_p90": ("itl_ms", "p90"),
    "itl_p99": ("itl_ms", "p99"),
    "tpot_p50": ("tpot_ms", "p50"),
    "tpot_p90": ("tpot_ms", "p90"),
    "tpot_p99": ("tpot_ms", "p99"),
    "e2e_p50": ("e2e_ms", "p50"),
    "e2e_p90": ("e2e_ms", "p90"),
    "e2e_p99": ("e2e_ms", "p99"),
    "throughput": ("throughput_rps",),
    "output_tps": ("output_tokens_per_s",),
    "cached_tokens": ("tokens", "cached"),
}
"""Metric name -> path into a phase of summary.json."""

_TIMING = frozenset(m for m, path in METRICS.items() if path[0] != "tokens")
"""The metrics the client's own speed moves (latencies, throughput, output tokens/s): the
client self-check gate applies to them (``resolution.client_noise``)."""

_THRESHOLD_RE = re.compile(
    r"^(?:([A-Za-z0-9_.-]+)\.)?(ratio:[a-z_.]+/[a-z_.]+|[a-z0-9_]+):([+-]?\d+(?:\.\d+)?)%$"
)


@dataclass(frozen=True, slots=True)
class Threshold:
    """One check.

    Attributes:
        phase: Phase name, or None for every phase.
        metric: A key of ``METRICS``.
        pct: Signed threshold (percent): primary = the good direction, protected
            = the harmful direction.
        role: ``primary`` or ``protected``.
    """

    phase: str | None
    metric: str
    pct: float
    role: str

    @property
    def text(self) -> str:
        """As written: ``[phase.]metric:+x%``."""
        return f"{self.phase + '.' if self.phase else ''}{self.metric}:{self.pct:+g}%"


def parse_threshold(text: str, role: str) -> Threshold:
    """Parse ``[PHASE.]METRIC:[+-]X%``.

    Raises:
        ConfigError: bad syntax, unknown metric, or a zero threshold.
    """
    m = _THRESHOLD_RE.match(text.strip())
    if not m:
        raise ConfigError(f"{text!r}: expected [PHASE.]METRIC:+X% or -X%", field=f"--{role}")
    phase, metric, pct = m.group(1), m.group(2), float(m.group(3))
    if metric.startswith(RATIO_PREFIX):
        check_ratio_metric(metric, field=f"--{role}")
    elif metric not in METRICS:
        raise ConfigError(
            f"{text!r}: unknown metric {metric!r}; one of {', '.join(METRICS)}", field=f"--{role}"
        )
    if pct == 0:
        raise ConfigError(f"{text!r}: a threshold of 0% can never be decided", field=f"--{role}")
    return Threshold(phase, metric, pct, role)


def load_pairs(dirs: list[str | Path]) -> tuple[list[dict[str, Any]], list[str]]:
    """Matched (baseline, candidate) blocks from ab directories or run directories.

    Returns:
        ``(pairs, arms)``: each pair ``{"rep", "baseline": {"dir", "summary"},
        "candidate": {...}}``, and the two arm names.

    Raises:
        ConfigError: unreadable input, an odd number of plain run directories,
            or ab directories whose arms differ.
    """
    pairs: list[dict[str, Any]] = []
    plain: list[Path] = []
    arms: list[str] | None = None
    for d in map(Path, dirs):
        if (d / "ab.json").exists():
            ab = read_json_checked(d / "ab.json")
            names = [a["name"] for a in ab["arms"]]
            if arms is not None and names != arms:
                raise ConfigError(f"arms {names} differ from {arms}", path=d / "ab.json")
            arms = names
            by_rep: dict[int, dict[str, Path]] = {}
            for blk in ab["order"]:
                by_rep.setdefault(blk["rep"], {})[blk["arm"]] = d / blk["dir"]
            for rep in sorted(by_rep):
                got = by_rep[rep]
                if names[0] in got and names[1] in got:
                    pairs.append(
                        {
                            "rep": len(pairs),
                            "source": str(d),
                            "baseline": _block(got[names[0]]),
                            "candidate": _block(got[names[1]]),
                        }
                    )
        elif (d / SUMMARY).exists():
            plain.append(d)
        else:
            raise ConfigError(
                "neither an ab directory (ab.json) nor a run directory (summary.json)", path=d
            )
    if len(plain) % 2:
        raise ConfigError(
            "plain run directories are taken in pairs (baseline, candidate); got an odd number",
            path=plain[-1],
        )
    for i in range(0, len(plain), 2):
        pairs.append(
            {
                "rep": len(pairs),
                "source": "runs",
                "baseline": _block(plain[i]),
                "candidate": _block(plain[i + 1]),
            }
        )
    return pairs, arms or ["baseline", "candidate"]


def _block(d: Path) -> dict[str, Any]:
    p, plan = d / SUMMARY, d / PLAN
    return {
        "dir": str(d),
        "summary": read_json_checked(p) if p.exists() else None,
        "plan": read_json_checked(plan) if plan.exists() else None,
    }


def _backend(block: dict[str, Any]) -> str | None:
    """The block's backend: summary ``identity.before.backend``, else plan.json ``run.backend``."""
    ident = ((block.get("summary") or {}).get("identity") or {}).get("before") or {}
    name = ident.get("backend") if isinstance(ident, dict) else None
    if not name:
        name = ((block.get("plan") or {}).get("run") or {}).get("backend")
    return name if isinstance(name, str) else None


def _value(phase: dict[str, Any], metric: str) -> float | None:
    if metric.startswith(RATIO_PREFIX):
        return ratio_value(phase, metric)
    cur: Any = phase
    for key in METRICS[metric]:
        if not isinstance(cur, dict):
            return None
        cur = cur.get(key)
    return float(cur) if isinstance(cur, (int, float)) and not isinstance(cur, bool) else None


def _phase_state(summary: dict[str, Any] | None, name: str) -> tuple[str, dict[str, Any] | None]:
    """``ok``, ``failed`` or ``deferred`` (not run), and the phase.

    A phase of a block that aborted (e.g. identity drift inside the block) is
    ``failed`` even if it completed: the server changed under it. So is an
    invalid phase, or one where any request failed.
    """
    if summary is None:
        return "deferred", None
    ph = next((p for p in summary.get("phases", []) if p["name"] == name), None)
    if ph is None or ph.get("deferred") or ph.get("sent", 0) == 0:
        return "deferred", ph
    if (
        summary.get("aborted")
        or not ph.get("valid", True)
        or ph.get("ok", 0) == 0
        or ph.get("ok") != ph.get("planned")
    ):
        return "failed", ph
    return "ok", ph


def _decide(t: Threshold, lo: float, hi: float) -> str:
    """Decision of one check from the interval of the change (fractions, e.g. -0.05)."""
    m = abs(t.pct) / 100
    good_down = t.pct < 0
    if t.role == "primary":
        if good_down:
            if hi <= -m:
                return "benefit"
            if lo >= m:
                return "regression"
        else:
            if lo >= m:
                return "benefit"
            if hi <= -m:
                return "regression"
        if -m < lo and hi < m:
            return "no change"
        return "no decision"
    # protected: pct's sign is the harmful direction
    if t.pct > 0:
        if lo > m:
            return "regression"
        return "ok" if hi <= m else "no decision"
    if hi < -m:
        return "regression"
    return "ok" if lo >= -m else "no decision"


def compare_blocks(
    pairs: list[dict[str, Any]],
    thresholds: list[Threshold],
    *,
    seed: int = 0,
    n_boot: int = 10_000,
    alpha: float = 0.05,
    reps_planned: int | None = None,
    accept_busy_host: float | None = None,
) -> dict[str, Any]:
    """Paired ratios per phase and metric, bootstrap intervals, checks and the verdict.

    Args:
        pairs: From ``load_pairs``.
        thresholds: Primary and protected checks.
        seed: Bootstrap seed (numpy ``default_rng``).
        n_boot: Bootstrap resamples.
        alpha: 1 - confidence level.
        reps_planned: Repetitions the experiment planned (``ab.json`` ``reps``);
            None = one per pair given.
        accept_busy_host: ``--accept-busy-host``'s factor: a decisive timing outcome that the
            ``host_busy`` gate withholds stands when it clears every gate this many times over
            (``resolution.busy_acceptance``), with the ``host_busy`` caveat on the check and the
            verdict; None = withheld.

    Returns:
        ``{"reps": {"planned", "measured"}, "pairs", "phases", "metrics": {"PHASE.METRIC": {...}},
        "checks", "verdict", "caveats", "reasons"}``; ``measured`` counts pairs whose every phase is
        ``ok`` in both blocks, and a reason says when it is below ``planned``. ``caveats`` (strings)
        qualify the verdict: ``timing_not_computed (...)`` when a block ran at simulator time scale 0
        (timing metrics and checks are then ``not computed``, only counted ones decide), and the
        ``host_busy (...)`` of accepted checks.
    """
    phase_names: list[str] = []
    for pr in pairs:
        for side in ("baseline", "candidate"):
            s = pr[side]["summary"] or {}
            for ph in s.get("phases", []):
                if ph["name"] not in phase_names:
                    phase_names.append(ph["name"])
    metrics: dict[str, dict[str, Any]] = {}
    untimed = untimed_reason(pairs)
    clients: dict[str, list[dict[str, Any]]] = {}  # phase -> the self-check of each block compared
    metric_names = list(METRICS) + list(dict.fromkeys(t.metric for t in thresholds if t.metric not in METRICS))
    pair_rows = []
    for pr in pairs:
        row = {
            "rep": pr["rep"],
            "baseline": pr["baseline"]["dir"],
            "candidate": pr["candidate"]["dir"],
            "phases": {},
        }
        for name in phase_names:
            sb, pb = _phase_state(pr["baseline"]["summary"], name)
            sc, pc = _phase_state(pr["candidate"]["summary"], name)
            state = "ok" if sb == sc == "ok" else ("failed" if "failed" in (sb, sc) else "deferred")
            row["phases"][name] = state
            if state == "ok" and pb is not None and pc is not None:
                clients.setdefault(name, []).extend(
                    {"side": side, "rep": pr["rep"], "client": ph.get("client")}
                    for side, ph in (("baseline", pb), ("candidate", pc)))
            for metric in metric_names:
                key = f"{name}.{metric}"
                entry = metrics.setdefault(
                    key, {"phase": name, "metric": metric, "ratios": [], "cells": []}
                )
                if state != "ok" or pb is None or pc is None:  # "ok": both phases' summaries are there
                    entry["cells"].append(state)
                    continue
                if untimed and metric in _TIMING:  # no modelled time: the figures are the host's, not a server's
                    entry["not_computed"] = untimed
                    entry["cells"].append(NOT_COMPUTED)
                    continue
                vb, vc = _value(pb, metric), _value(pc, metric)
                if metric.startswith(RATIO_PREFIX) and (vb is None or vc is None) and "missing" not in entry:
                    why = missing_counter(pb, metric, _backend(pr["baseline"])) or missing_counter(
                        pc, metric, _backend(pr["candidate"]))
                    if why:
                        entry["missing"] = why
                if vb is None or vc is None or vb == 0:
                    entry["cells"].append("n/a")
                    continue
                r = vc / vb
                entry.setdefault("values_baseline", []).append(vb)
                entry.setdefault("values_candidate", []).append(vc)
                entry["ratios"].append(r)
                entry["cells"].append(round(r, 6))
        pair_rows.append(row)
    for entry in metrics.values():
        rs = entry["ratios"]
        entry["n"] = len(rs)
        if rs:
            entry["median_ratio"] = round(median(rs), 6)
            lo, hi = bootstrap_median_ci(rs, n_boot=n_boot, alpha=alpha, seed=seed)
            entry["ci_ratio"] = [round(lo, 6), round(hi, 6)]
            entry["change_pct"] = round((median(rs) - 1) * 100, 3)
            entry["ci_change_pct"] = [round((lo - 1) * 100, 3), round((hi - 1) * 100, 3)]
        else:
            entry["median_ratio"] = entry["ci_ratio"] = entry["change_pct"] = entry[
                "ci_change_pct"
            ] = None
    checks = []
    reasons: list[str] = []
    caveats: list[str] = []
    if untimed:
        caveats.append(f"timing_not_computed ({untimed})")
    for t in thresholds:
        for name in phase_names if t.phase is None else [t.phase]:
            found = metrics.get(f"{name}.{t.metric}")
            chk: dict[str, Any] = {
                "check": t.text,
                "role": t.role,
                "phase": name,
                "metric": t.metric,
                "threshold_pct": t.pct,
            }
            if found is not None and found.get("not_computed"):
                chk.update(decision=NOT_COMPUTED, n=0, reason=found["not_computed"])
            elif found is None or found["n"] < 2:
                n = 0 if found is None else found["n"]
                chk.update(
                    decision="no decision", n=n, reason=f"{n} usable pair(s); at least 2 are needed"
                )
                missing = None if found is None else found.get("missing")
                if missing:
                    chk["reason"] = missing
                reasons.append(f"{name}.{t.metric}: {missing or f'only {n} usable pair(s)'}")
            else:
                chk.update(_decide_check(t, found, clients.get(name, []), accept_busy_host))
                if chk.get("reason") is not None:
                    reasons.append(f"{name}.{t.metric}: no decision: {chk['reason']}")
                caveats.extend(c for c in chk.get("caveats", ()) if c not in caveats)
            checks.append(chk)
    comp = comparability(pairs)
    verdict = _verdict(checks)
    if not comp["comparable"]:
        verdict = "not comparable"
        for c in checks:
            c["decision"] = "not comparable"
        reasons[:0] = [f"not comparable: {w['message']}" for w in comp["warnings"] if w["blocking"]]
    if not thresholds:
        reasons.append("no thresholds given")
    measured = sum(1 for r in pair_rows if r["phases"] and all(v == "ok" for v in r["phases"].values()))
    planned = reps_planned if reps_planned is not None else len(pairs)
    if measured < planned:
        reasons.append(f"fewer repetitions than planned were measured: {measured} of {planned} "
                       "(a block deferred, aborted, or with a failed or invalid phase)")
    return {
        "reps": {"planned": planned, "measured": measured},
        "format": "kvreplay-compare/1",
        "pairs": pair_rows,
        "phases": phase_names,
        "metrics": metrics,
        "checks": checks,
        "verdict": verdict,
        "caveats": caveats,
        "reasons": reasons,
        "comparability": comp,
        "bootstrap": {
            "seed": seed,
            "n_boot": n_boot,
            "alpha": alpha,
            "method": "percentile (Efron 1979)",
        },
    }


def _decide_check(t: Threshold, found: dict[str, Any], clients: list[dict[str, Any]],
                  accept_busy_host: float | None) -> dict[str, Any]:
    """One check's ``decision``, ``n``, intervals, ``split_half``, and ``reason`` / ``caveats`` where set.

    The decision from the interval (``_decide``), through the resolution gates
    (``resolution.resolution_gate``); a protected ``ok`` whose interval is wider than its
    bound is ``no decision``; with ``accept_busy_host`` a decision withheld only for a busy
    host stands when ``resolution.busy_acceptance`` finds it clears every gate that many
    times over, with the ``host_busy`` caveat.
    """
    lo, hi = found["ci_ratio"]
    latency = METRICS.get(t.metric, ("",))[0].endswith("_ms")
    timing = t.metric in _TIMING
    noise = client_noise(clients) if timing else None
    first = _decide(t, lo - 1, hi - 1)
    decision, why = resolution_gate(found, t.pct, first, latency, noise)
    caveats: list[str] = []
    if noise is not None and why == noise and accept_busy_host is not None:
        busy = busy_caveat(clients)
        quiet_decision, quiet_why = resolution_gate(found, t.pct, first, latency, None)
        refusal = (quiet_why if quiet_why is not None else
                   "the client, not only the host, was loud" if busy is None else
                   busy_acceptance(found, t.pct, found["ci_change_pct"], latency, accept_busy_host))
        if refusal is None and busy is not None:
            decision, why = quiet_decision, None
            caveats.append(f"{busy}; accepted with --accept-busy-host {accept_busy_host:g}: the effect clears "
                           f"every gate {accept_busy_host:g} times over")
        else:
            why = f"{noise}; not accepted with --accept-busy-host {accept_busy_host:g}: {refusal}"
    if decision == "ok" and why is None:
        why = protected_width(t.pct, found["ci_change_pct"]) if t.role == "protected" else None
        if why is not None:
            decision = "no decision"
    out: dict[str, Any] = {"decision": decision, "n": found["n"], "ci_change_pct": found["ci_change_pct"],
                           "change_pct": found["change_pct"], "split_half": split_half(found["ratios"])}
    if why is not None:
        out["reason"] = why
    if caveats:
        out["caveats"] = caveats
    return out


def _verdict(checks: list[dict[str, Any]]) -> str:
    checks = [c for c in checks if c["decision"] != NOT_COMPUTED]
    if not checks:
        return "no decision"
    decisions = [c["decision"] for c in checks]
    if "regression" in decisions:
        return "regression"
    primary = [c["decision"] for c in checks if c["role"] == "primary"]
    protected_ok = all(c["decision"] == "ok" for c in checks if c["role"] == "protected")
    if primary and protected_ok and all(d == "benefit" for d in primary):
        return "benefit"
    if primary and protected_ok and all(d == "no change" for d in primary):
        return "no change"
    return "no decision"


def ci_pct_text(ci: list[float] | None) -> str:
    """A check's ``ci_change_pct`` (``[lo, hi]``, percent) as the terminal shows it.

    ``[-0.342, 17.471]`` -> ``"[-0.34%, +17.47%]"`` (two decimals and signs, as
    compare.md's ``-0.34% .. +17.47%``); None or empty -> ``"n/a"``.
    """
    return "n/a" if not ci else f"[{ci[0]:+.2f}%, {ci[1]:+.2f}%]"


def render_compare(result: dict[str, Any], arms: list[str]) -> str:
    """``compare.md``: the verdict, the checks, and every metric with its pairs."""
    comp = result.get("comparability") or {"comparable": True, "warnings": []}
    verdict = result["verdict"]
    if not comp["comparable"]:
        blocking = [w for w in comp["warnings"] if w["blocking"]]
        verdict = "not comparable: " + "; ".join(
            f"{w['field']} differs{' in phase ' + w['phase'] if w['phase'] else ''}" for w in blocking
        )
    lines = [
        f"# kvreplay compare: {arms[1]} vs {arms[0]}",
        "",
        f"**Verdict: {verdict}**",
        "",
    ]
    if result.get("caveats"):
        lines += [*(f"- Caveat: {c}" for c in result["caveats"]), ""]
    reps = result.get("reps")
    if reps:
        short = " (FEWER THAN PLANNED)" if reps["measured"] < reps["planned"] else ""
        lines += [f"Repetitions measured: {reps['measured']} of {reps['planned']} planned{short}.", ""]
    for w in comp["warnings"]:
        tag = "WARNING (no verdict)" if w["blocking"] else "WARNING"
        pairs = ", ".join(map(str, w["pairs"]))
        lines.append(f"- **{tag}** {w['message']} [pair {pairs}]")
    for r in result["reasons"]:
        if not r.startswith("not comparable: "):  # already listed as a warning
            lines.append(f"- {r}")
    lines += [
        "",
        "| check | role | n | change (median) | 95% CI | decision |",
        "|---|---|---|---|---|---|",
    ]
    for c in result["checks"]:
        ci = c.get("ci_change_pct")
        lines.append(
            f"| {c['phase']}.{c['metric']} ({c['threshold_pct']:+g}%) | {c['role']} | {c['n']} | "
            f"{change_pct_text(c.get('change_pct'))} | {ci_pct_range_text(ci)} | "
            f"{c['decision']} |"
        )
    n_pairs = len(result["pairs"])
    head = " | ".join(f"pair {i}" for i in range(n_pairs))
    lines += [
        "",
        f"| metric | n | change (median) | 95% CI | {head} |",
        "|---" * (4 + n_pairs) + "|",
    ]
    for key, e in result["metrics"].items():
        ci = e["ci_change_pct"]
        cells = " | ".join(f"{c:.4f}" if isinstance(c, float) else str(c) for c in e["cells"])
        lines.append(
            f"| {key} | {e['n']} | {change_pct_text(e['change_pct'])} | {ci_pct_range_text(ci)} | {cells} |"
        )
    lines += [
        "",
        "Pair cells are candidate / baseline ratios; `failed` = a block aborted or a phase had failures, "
        "`deferred` = not run, `n/a` = the metric is missing or zero in the baseline, "
        "`not computed` = a timing metric of a block with no modelled time (the simulator at scale 0).",
        "",
    ]
    return "\n".join(lines)
