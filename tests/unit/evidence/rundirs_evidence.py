"""Hand-built run directories for the evidence tests (plan.json, records.jsonl, summary.json)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from kvreplay.metrics.summary import PhaseStats


def sha(i: int) -> str:
    return hashlib.sha256(f"body {i}".encode()).hexdigest()


def write_run(out: Path, phases: list[tuple[str, str, list[int], dict[str, Any]]], *,
              attribution: str = "phase_only", plan_extra: dict[str, dict[str, Any]] | None = None,
              summary_extra: dict[str, dict[str, Any]] | None = None) -> Path:
    """One run directory: phases ``(name, order, body indices in send order, phase counter delta)``.

    Usage ``cached_tokens`` is not reported (so only the counters are evidence). With
    ``attribution="per_request"`` the phase's whole delta rides on its first request.
    """
    out.mkdir(parents=True, exist_ok=True)
    plan_phases, recs, sums = [], [], []
    t = 0
    for name, order, bodies, delta in phases:
        spec = {"name": name, "order": order, "concurrency": 1, "repeats": 1, "select": "all",
                "drain": False, "reset": False, "fresh": False,
                "sequence": [{"position": p, "body_index": b, "body_sha256": sha(b), "repetition": 0}
                             for p, b in enumerate(bodies)]}
        spec.update((plan_extra or {}).get(name, {}))
        plan_phases.append(spec)
        st = PhaseStats(name, 1, 1, len(bodies))
        for p, b in enumerate(bodies):
            per = (delta if p == 0 else {k: 0 for k in delta if k not in ("reset", "reset_names")}
                   ) if attribution == "per_request" else None
            r = {"phase": name, "repetition": 0, "position": p, "body_index": b, "body_sha256": sha(b),
                 "body_bytes": 400, "concurrency": 1, "sent": True, "status": "ok", "http_status": 200,
                 "finish_reason": "stop", "usage": {"prompt_tokens": 100, "completion_tokens": 4,
                                                    "cached_tokens": None},
                 "error": None, "t_sent_ns": t, "t_done_ns": t + 20_000_000, "ttft_ns": 10_000_000,
                 "tpot_ns": 1_000_000, "e2e_ns": 20_000_000, "attribution": attribution,
                 "counter_delta": per}
            t += 100_000_000
            st.add(r)
            recs.append(r)
        st.start_ns, st.end_ns = t - len(bodies) * 100_000_000, t
        st.peak_in_flight = 1
        st.attribution = attribution
        st.counter_delta = delta
        ph = st.to_json()
        ph.update((summary_extra or {}).get(name, {}))
        sums.append(ph)
    plan = {"format": "kvreplay-plan/1", "workload": {"path": "wl", "n_bodies": 8, "sha256": "0" * 64},
            "phases": plan_phases, "plan_sha256": "f" * 64,
            "run": {"target": "sim", "backend": "halogen", "kvreplay_version": "0.1.0",
                    "implementation": "pure", "wall_anchor_ns": 0, "unplanned_requests": []}}
    summary = {"schema_version": 1, "plan_sha256": "f" * 64, "implementation": "pure", "aborted": None,
               "restarts": 0, "identity": {"before": {"model": "m"}, "after": {"model": "m"}}, "wall_s": 1.0,
               "records": len(recs), "phases": sums}
    (out / "plan.json").write_text(json.dumps(plan))
    (out / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (out / "summary.json").write_text(json.dumps(summary))
    return out
