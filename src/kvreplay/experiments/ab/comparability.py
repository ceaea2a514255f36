"""Comparability of matched blocks: did both arms (and every baseline) run the same load?

Split out of ``kvreplay.experiments.ab.compare`` (which re-exports ``comparability``
and ``BLOCKING_FIELDS``; its module docstring describes the rules). The input is
``load_pairs``' pairs: each ``{"baseline": block, "candidate": block}`` with a
block's ``plan`` (plan.json) and ``summary`` (summary.json) dicts.
"""

from __future__ import annotations

from typing import Any

__all__ = ["BLOCKING_FIELDS", "comparability"]


BLOCKING_FIELDS = ("workload sha256", "concurrency", "arrival")
"""Differences that make a different load: no verdict across them."""


def _arrival(ph: dict[str, Any]) -> str:
    """``closed loop`` or ``open loop (PROCESS, RATE/s[, time scale X])`` of a plan phase."""
    if not ph.get("arrival"):
        return "closed loop"
    parts = [str(ph["arrival"])]
    if ph.get("rate") is not None:
        parts.append(f"{ph['rate']:g}/s")
    if ph.get("time_scale") not in (None, 1, 1.0):
        parts.append(f"time scale {ph['time_scale']:g}")
    return f"open loop ({', '.join(parts)})"


def _shape(block: dict[str, Any]) -> dict[str, Any] | None:
    """What must match between blocks: ``{"workload", "phases": {name: {...}}}``; None if unknown.

    From plan.json; without it, concurrency and open/closed loop from summary.json
    (which keeps neither the workload nor the body order).
    """
    plan, summary = block.get("plan"), block.get("summary")
    if plan:
        wl = plan.get("workload") or {}
        phases = {}
        for ph in plan.get("phases") or []:
            seq = sorted(ph.get("sequence") or [], key=lambda e: e.get("position", 0))
            phases[ph["name"]] = {
                "concurrency": ph.get("concurrency"),
                "arrival": _arrival(ph),
                "order": ph.get("order"),
                "sequence": [(e.get("body_sha256"), e.get("body_index")) for e in seq],
            }
        return {
            "workload": wl.get("sha256"),
            "workload_text": f"{wl.get('path')}, {wl.get('n_bodies')} bodies",
            "phases": phases,
        }
    if summary:
        phases = {}
        for ph in summary.get("phases") or []:
            sched = ph.get("schedule") or {}
            phases[ph["name"]] = {
                "concurrency": ph.get("concurrency"),
                "arrival": None
                if "open_loop" not in sched
                else ("open loop" if sched["open_loop"] else "closed loop"),
                "order": None,
                "sequence": None,
            }
        return {"workload": None, "workload_text": None, "phases": phases}
    return None


def _sequence_difference(a: dict[str, Any], b: dict[str, Any]) -> tuple[str, str, str] | None:
    """``(baseline, candidate, detail)`` when two phases send different bodies or orders."""
    sa, sb = a["sequence"], b["sequence"]
    if sa is None or sb is None or [x[0] for x in sa] == [x[0] for x in sb]:
        return None
    detail = f"; the first {min(len(sa), len(sb))} positions agree"
    for pos, (xa, xb) in enumerate(zip(sa, sb, strict=False)):  # lengths may differ
        if xa[0] != xb[0]:
            detail = f"; first difference at position {pos}: body {xa[1]} vs body {xb[1]}"
            break
    return (
        f"{len(sa)} positions ({a['order']})",
        f"{len(sb)} positions ({b['order']})",
        detail,
    )


def _differences(base: dict[str, Any], cand: dict[str, Any]) -> list[tuple[str, str | None, str, str, str]]:
    """``(field, phase, baseline value, candidate value, detail)`` for each difference."""
    out: list[tuple[str, str | None, str, str, str]] = []
    wa, wb = base["workload"], cand["workload"]
    same_workload = wa is None or wb is None or wa == wb
    if not same_workload:
        out.append(
            (
                "workload sha256",
                None,
                f"{wa[:12]}… ({base['workload_text']})",
                f"{wb[:12]}… ({cand['workload_text']})",
                "",
            )
        )
    pa, pb = base["phases"], cand["phases"]
    if set(pa) != set(pb):
        out.append(("phases", None, ", ".join(pa) or "none", ", ".join(pb) or "none", ""))
    for name in (n for n in pa if n in pb):
        a, b = pa[name], pb[name]
        for fld in ("concurrency", "arrival"):
            if a[fld] is not None and b[fld] is not None and a[fld] != b[fld]:
                out.append((fld, name, str(a[fld]), str(b[fld]), ""))
        if same_workload and (d := _sequence_difference(a, b)):
            out.append(("sequence", name, *d))
    return out


def comparability(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    """Whether the blocks ran the same experiment (see the module docstring).

    Each pair's candidate is checked against its baseline, and each pair's
    baseline against pair 0's (pairs are pooled into one interval).

    Returns:
        ``{"comparable": bool, "warnings": [{"field", "phase", "baseline",
        "candidate", "blocking", "pairs", "dirs", "message"}]}``; ``comparable``
        is False when a warning is blocking (``BLOCKING_FIELDS``).
    """
    warnings: dict[tuple[Any, ...], dict[str, Any]] = {}

    def note(pair: int, key: tuple[Any, ...], **w: Any) -> None:
        if key in warnings:
            warnings[key]["pairs"].append(pair)
        else:
            warnings[key] = {**w, "blocking": w["field"] in BLOCKING_FIELDS, "pairs": [pair]}

    ref = pairs[0]["baseline"] if pairs else None
    for pr in pairs:
        checks = [(pr["baseline"], pr["candidate"])]
        if pr["rep"] > 0 and ref is not None:
            checks.append((ref, pr["baseline"]))
        for a, b in checks:
            for blk in (a, b):
                if "plan" in blk and blk["plan"] is None and blk.get("summary") is not None:
                    note(pr["rep"], ("plan.json", blk["dir"]), field="plan.json", phase=None,
                         baseline=None, candidate=None, dirs=[blk["dir"]],
                         message=f"plan.json missing in {blk['dir']}: workload and body order not checked")
            sa, sb = _shape(a), _shape(b)
            if sa is None or sb is None:
                continue
            for field, phase, va, vb, detail in _differences(sa, sb):
                where = f" in phase {phase}" if phase else ""
                note(pr["rep"], (field, phase, va, vb), field=field, phase=phase, baseline=va,
                     candidate=vb, dirs=[a["dir"], b["dir"]],
                     message=f"{field} differs{where}: {va} ({a['dir']}) vs {vb} ({b['dir']}){detail}")
    out = list(warnings.values())
    return {"comparable": not any(w["blocking"] for w in out), "warnings": out}
