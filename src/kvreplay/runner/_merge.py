"""The coordinator's lossless merge of ``--workers N`` (and ``--ray``) payloads into one run directory.

Split out of ``kvreplay.runner.multiproc`` (which re-exports ``merge_run``; its
module docstring describes the merge). A worker's payload per phase is
``phase_payload``'s ``{"fields": {...}, "hists": {metric: (encoded, sum_us, out_of_range)}}``
(HdrHistogram's compressed V2 encoding); ``merge_run`` adds them up.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvreplay.clock import RunClock, now_ns
from kvreplay.metrics.fleet import FleetStats
from kvreplay.metrics.histograms import hlog_name, new_histogram, write_log
from kvreplay.metrics.selfmeasure import merge_client, thresholds
from kvreplay.metrics.summary import SCHEMA_VERSION, PhaseStats
from kvreplay.plan import Plan
from kvreplay.rundir import HISTOGRAMS, merge_records, write_report_md, write_summary
from kvreplay.runner._execute import ReportRenderer
from kvreplay.runner.observer import RunObserver

__all__ = ["merge_run", "phase_payload"]


_MERGED_FIELDS = (
    "sent",
    "ok",
    "not_sent",
    "failed_transport",
    "failed_output",
    "prompt_tokens",
    "cached_tokens",
    "cached_unknown",
    "completion_tokens",
    "peak_in_flight",
    "n_disagreements",
    "no_usage_n",
    "no_usage_tokens",
    "no_usage_counted",
)


_WORKER0_FIELDS = (
    "counter_delta",
    "drain",
    "invalid_reasons",
    "attribution",
    "open_loop",
    "offered_rps",
    "check_failed",
)


def phase_payload(st: PhaseStats) -> dict[str, Any]:
    """A worker's payload for one phase (module docstring), as ``merge_run`` adds it up."""
    return {
        "fields": {
            k: getattr(st, k)
            for k in _MERGED_FIELDS
            + _WORKER0_FIELDS
            + ("failed", "start_ns", "end_ns", "deferred", "disagreements", "client")
            + ("no_usage_by_status", "no_usage_positions", "cap_wait_max_ns")
        },
        "hists": {
            m: (ls.hist.encode() if ls.hist.get_total_count() else None, ls.sum_us, ls.out_of_range)
            for m, ls in st.hists.sets.items()
        },
        "fleet": st.fleet.to_payload() if st.fleet is not None else None,  # metrics.fleet
    }


def merge_run(
    plan: Plan,
    plan_json: dict[str, Any],
    parts: list[dict[str, Any]],
    clock: RunClock,
    out: Path,
    obs: RunObserver,
    render_report: ReportRenderer | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """Merge the workers' payloads (from :func:`run_worker`, in worker order) into the run directory.

    Writes records.jsonl in (phase, position) order (``kvreplay.rundir.merge_records``),
    the added histograms (HdrHistogram ``add`` is exact), summary.json (``extra`` keys
    join it) and, with ``render_report``, report.md.

    Returns:
        The merged summary.
    """
    from kvreplay.accounting import IMPLEMENTATION

    names = {ph.name: i for i, ph in enumerate(plan.phases)}
    n_records = merge_records([Path(p["records"]) for p in parts], names, out)
    phases_json = []
    for i, phase in enumerate(plan.phases):
        spec = phase.spec
        st = PhaseStats(phase.name, spec.concurrency, spec.repeats, len(phase.sequence),
                        label=spec.label, comparable=spec.comparable)
        w0 = parts[0]["phases"][i]["fields"] if i < len(parts[0]["phases"]) else None
        present = [p["phases"][i] for p in parts if i < len(p["phases"])]
        if w0 is not None:
            for k in _WORKER0_FIELDS:
                setattr(st, k, w0[k])
        for ph in present:
            f = ph["fields"]
            for k in _MERGED_FIELDS:
                setattr(st, k, getattr(st, k) + (f[k] or 0))
            for cls, n in f["failed"].items():
                st.failed[cls] = st.failed.get(cls, 0) + n
            st.disagreements.extend(f["disagreements"])
            if f.get("cap_wait_max_ns") is not None:  # each worker's own share of the cap
                st.cap_wait_max_ns = max(st.cap_wait_max_ns or 0, f["cap_wait_max_ns"])
            for cls, n in (f.get("no_usage_by_status") or {}).items():
                st.no_usage_by_status[cls] = st.no_usage_by_status.get(cls, 0) + n
            st.no_usage_positions = sorted(st.no_usage_positions + list(f.get("no_usage_positions") or []))[:20]
            if ph.get("fleet") is not None:
                if st.fleet is None:
                    st.fleet = FleetStats()
                st.fleet.merge_payload(ph["fleet"])
            for m, (enc, sum_us, oor) in ph["hists"].items():
                ls = st.hists.sets[m]
                if enc is not None:
                    ls.hist.decode_and_add(enc)
                ls.sum_us += sum_us
                ls.out_of_range += oor
        starts = [
            ph["fields"]["start_ns"] for ph in present if ph["fields"]["start_ns"] is not None
        ]
        ends = [ph["fields"]["end_ns"] for ph in present if ph["fields"]["end_ns"] is not None]
        st.start_ns = min(starts) if starts else None
        st.end_ns = max(ends) if ends else None
        st.deferred = bool(present) and all(ph["fields"]["deferred"] for ph in present)
        st.disagreements = sorted(st.disagreements, key=lambda d: d["position"])[:20]
        clients = [ph["fields"]["client"] for ph in present if ph["fields"]["client"]]
        st.client = merge_client(clients) if clients else None
        if st.client is not None:
            st.client.pop("loop_lag_log", None)
        if st.start_ns is not None and st.end_ns is not None:
            start_s = (st.start_ns - clock.origin_ns) / 1e9
            end_s = (st.end_ns - clock.origin_ns) / 1e9
            st.histogram_files = st.hists.write_logs(out / HISTOGRAMS, phase.name, start_s, end_s)
            lag_enc = [p["lag"][i] for p in parts if i < len(p["lag"]) and p["lag"][i]]
            if lag_enc and st.client is not None:
                h = new_histogram()
                for enc in lag_enc:
                    h.decode_and_add(enc)
                name = hlog_name(phase.name, "loop_lag")
                write_log(
                    out / HISTOGRAMS / name,
                    h,
                    f"kvreplay phase={phase.name} metric=loop_lag unit=us workers={len(parts)}",
                    start_s,
                    end_s,
                )
                st.client["loop_lag_log"] = name
        pj = st.to_json()
        phases_json.append(pj)
        obs.on_phase_end(pj)
    aborts = sorted(
        (p["summary"]["aborted"] for p in parts if p["summary"]["aborted"]),
        key=lambda a: str(a.get("message", "")).startswith("stopped by another worker"),
    )
    summary = {
        "schema_version": SCHEMA_VERSION,
        "plan_sha256": plan.sha256,
        "implementation": IMPLEMENTATION,
        "aborted": aborts[0] if aborts else None,
        "restarts": sum(p["summary"]["restarts"] or 0 for p in parts),
        "identity": parts[0]["summary"]["identity"],
        "wall_s": round((now_ns() - clock.origin_ns) / 1e9, 6),
        "records": n_records,
        "client_thresholds": thresholds(),
        "workers": len(parts),
        **extra,
        "phases": phases_json,
    }
    write_summary(out, summary)
    if render_report is not None:
        write_report_md(out, render_report(summary, plan_json))
    obs.on_run_end(summary)
    return summary
