"""Hand-built run directories for report tests: plan, records, summary, histograms."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from kvreplay.metrics.summary import PhaseStats


def sha(i: int) -> str:
    return hashlib.sha256(f"body {i}".encode()).hexdigest()


def plan_json(phases: list[tuple[str, str, int, list[int]]]) -> dict[str, Any]:
    """phases: (name, order, concurrency, body indices in send order)."""
    n = max((max(b) for *_, b in phases if b), default=-1) + 1
    return {
        "format": "kvreplay-plan/1",
        "workload": {"path": "wl", "n_bodies": n, "sha256": "0" * 64},
        "phases": [
            {
                "name": name,
                "order": order,
                "concurrency": c,
                "repeats": 1,
                "select": "all",
                "drain": False,
                "reset": False,
                "fresh": False,
                "sequence": [
                    {"position": p, "body_index": b, "body_sha256": sha(b), "repetition": 0}
                    for p, b in enumerate(bodies)
                ],
            }
            for name, order, c, bodies in phases
        ],
        "plan_sha256": "f" * 64,
        "run": {
            "target": "sim",
            "backend": "halogen",
            "kvreplay_version": "0.1.0",
            "implementation": "pure",
            "wall_anchor_ns": 0,
            "unplanned_requests": [],
        },
    }


def record(
    phase: str,
    pos: int,
    body: int,
    *,
    status: str = "ok",
    ttft_ms: float = 10.0,
    e2e_ms: float = 20.0,
    cached: int | None = 0,
    prompt: int = 100,
    delta: dict | None = None,
    t0_ms: float = 0.0,
    c: int = 1,
    sent: bool = True,
    error: str | None = None,
    attribution: str | None = None,
) -> dict[str, Any]:
    base = {
        "phase": phase,
        "repetition": 0,
        "position": pos,
        "body_index": body,
        "body_sha256": sha(body),
        "body_bytes": 400,
        "concurrency": c,
    }
    if not sent:
        return {
            **base,
            "sent": False,
            "status": "aborted",
            "http_status": None,
            "error": error or "interrupt",
        }
    ok = status == "ok"
    t_sent = int(t0_ms * 1e6)
    return {
        **base,
        "sent": True,
        "status": status,
        "http_status": 200 if ok else 500,
        "finish_reason": "stop" if ok else None,
        "usage": {
            "prompt_tokens": prompt if ok else None,
            "completion_tokens": 4 if ok else None,
            "cached_tokens": cached if ok else None,
        },
        "error": error,
        "t_sent_ns": t_sent,
        "t_done_ns": t_sent + int(e2e_ms * 1e6),
        "ttft_ns": int(ttft_ms * 1e6) if ok else None,
        "tpot_ns": 1_000_000 if ok else None,
        "e2e_ns": int(e2e_ms * 1e6),
        "attribution": attribution or ("per_request" if delta is not None else "none"),
        "counter_delta": delta,
    }


def summarise(
    plan: dict[str, Any],
    records: list[dict[str, Any]],
    out: Path | None = None,
    **phase_overrides: dict[str, Any],
) -> dict[str, Any]:
    """A summary built the runner's way (PhaseStats), with per-phase overrides merged in."""
    phases = []
    for spec in plan["phases"]:
        st = PhaseStats(spec["name"], spec["concurrency"], 1, len(spec["sequence"]))
        recs = [r for r in records if r["phase"] == spec["name"]]
        for r in recs:
            st.add(r)
        if hasattr(st, "peak_in_flight"):
            st.peak_in_flight = spec["concurrency"]
        sent = [r for r in recs if r.get("sent", True)]
        if sent:
            st.start_ns = min(r["t_sent_ns"] for r in sent)
            st.end_ns = max(r["t_done_ns"] for r in sent)
        if out is not None:
            st.histogram_files = st.hists.write_logs(out / "histograms", spec["name"], 0.0, 1.0)
        over = phase_overrides.get(spec["name"], {})
        if "counter_delta" in over and "cross_check" not in over:
            st.counter_delta = over["counter_delta"]  # so cross_check is the runner's
        ph = st.to_json()
        ph.update(over)
        phases.append(ph)
    return {
        "schema_version": 1,
        "plan_sha256": plan["plan_sha256"],
        "implementation": "pure",
        "aborted": None,
        "restarts": 0,
        "identity": {"before": {"model": "m"}, "after": {"model": "m"}},
        "wall_s": 1.0,
        "records": len(records),
        "phases": phases,
    }


def write_run(
    out: Path,
    plan: dict[str, Any],
    records: list[dict[str, Any]],
    summary: dict[str, Any] | None = None,
    **phase_overrides: dict[str, Any],
) -> Path:
    """Write plan.json, records.jsonl, histograms and summary.json (unless ``summary is False``)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "plan.json").write_text(json.dumps(plan))
    (out / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    s = summarise(plan, records, out, **phase_overrides) if summary is None else summary
    if s is not False:
        (out / "summary.json").write_text(json.dumps(s))
    return out
