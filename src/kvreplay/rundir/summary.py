"""``summary.json``: written at the end of a run, read back, and rebuilt from records when missing.

The schema is ``kvreplay.metrics.summary``'s (docs/summary-schema.md). When
``summary.json`` is missing (the run was killed with SIGKILL before it could
write it), ``rebuild_summary`` recomputes it from ``records.jsonl`` and
``plan.json``: counts, tokens and TTFT/TPOT/E2E from the records, ITL from the
phase's ``.itl.hlog`` (records keep only an ITL summary): all of a finished
phase, and of a phase the kill cut short the intervals appended before it (up to
about a second of ITL samples fewer than the records),
per-phase counter deltas as the sum of per-request deltas at C1. The rebuilt
summary says so (``rebuilt_from_records: true``). When every planned position of
every phase has a sent record, the run finished its requests and ``aborted`` is
null; otherwise (or without plan.json) the run is marked aborted with reason
``killed`` and a message that counts the positions without a record.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvreplay.metrics.summary import SCHEMA_VERSION, PhaseStats
from kvreplay.rundir.hlogs import HistogramArrays, read_hlog
from kvreplay.rundir.jsonfile import read_object
from kvreplay.rundir.names import REPORT_MD, SUMMARY, hlog_name, hlog_path
from kvreplay.rundir.planfile import sequence_length
from kvreplay.safe_io import atomic_write_json, atomic_write_text

if TYPE_CHECKING:
    pass

__all__ = ["read_summary", "rebuild_summary", "write_report_md", "write_summary"]


def write_summary(run_dir: Path, summary: dict[str, Any]) -> None:
    """Write ``run_dir/summary.json`` atomically (indented; registered secrets redacted).

    Raises:
        OSError: it cannot be written (the previous file, if any, is kept).
    """
    atomic_write_json(run_dir / SUMMARY, summary)


def write_report_md(run_dir: Path, text: str) -> None:
    """Write ``run_dir/report.md`` atomically (``text``: rendered by the caller, e.g. ``report.markdown``).

    Raises:
        OSError: it cannot be written.
    """
    atomic_write_text(run_dir / REPORT_MD, text)


def read_summary(run_dir: Path) -> dict[str, Any] | None:
    """A run directory's summary.json as a dict; None when missing, unreadable or not a JSON object."""
    return read_object(run_dir / SUMMARY)


def _add_delta(out: dict[str, Any], d: dict[str, Any], gauges: tuple[str, ...]) -> None:
    """Add one per-request counter delta into ``out`` (``gauges``: the last value; reset flags: any)."""
    for k, v in d.items():
        if k == "reset":
            out["reset"] = out.get("reset", False) or bool(v)
        elif k == "reset_names":
            out["reset_names"] = sorted(set(out.get("reset_names", [])) | set(v))
        elif k == "invalid" and isinstance(v, dict):
            out["invalid"] = {**out.get("invalid", {}), **v}
        elif isinstance(v, (int, float)):
            out[k] = v if k in gauges else out.get(k, 0) + v


def _peak(sent: array, done: array) -> int:
    """Peak of in-flight intervals ``[sent, done)``; at equal times an end counts first."""
    import numpy as np
    if not sent:
        return 0
    t = np.concatenate([np.frombuffer(sent, dtype=np.int64), np.frombuffer(done, dtype=np.int64)])
    step = np.concatenate([np.ones(len(sent), np.int64), -np.ones(len(done), np.int64)])
    order = np.lexsort((step, t))
    return int(max(0, np.cumsum(step[order]).max()))


@dataclass(slots=True)
class _Rebuild:
    """One phase's running state while records stream past (``rebuild_summary``)."""

    st: PhaseStats
    n: int = 0
    done: set[Any] = field(default_factory=set)
    sent_t: array = field(default_factory=lambda: array("q"))
    done_t: array = field(default_factory=lambda: array("q"))
    start: int | None = None
    end: int = 0
    any_sent: bool = False
    attrs: set[Any] = field(default_factory=set)
    delta: dict[str, Any] | None = None


def rebuild_summary(
    run_dir: Path, plan: dict[str, Any] | None, records: Iterable[dict[str, Any]]
) -> dict[str, Any]:
    """A summary.json rebuilt from records (and the phases' ``.itl.hlog`` intervals for ITL).

    Records are read once, in order, and never held (a list or a stream such as
    ``kvreplay.rundir.iter_records`` both do).

    Args:
        run_dir: The run directory (for ``histograms/``).
        plan: plan.json; gives phase order, concurrency and planned counts.
            Without it, phases come from the records in first-seen order.
        records: records.jsonl as dicts.

    Returns:
        A summary in the schema of ``kvreplay.metrics.summary`` with
        ``rebuilt_from_records: true``. Positions of the plan that have no
        record were never run: they count as ``not_sent`` and a phase with no
        record at all is ``deferred``.
    """
    from kvreplay.evidence.vocab import GAUGE_NAMES as gauges  # which common names are gauges

    specs: dict[str, dict[str, Any]] = {}
    for spec in (plan or {}).get("phases") or []:
        specs.setdefault(spec["name"], spec)
    from_plan = bool(specs)
    state: dict[str, _Rebuild] = {}
    order: list[str] = list(specs)
    restarts = n_records = 0
    for r in records:
        n_records += 1
        name = r["phase"]
        ph = state.get(name)
        if ph is None:
            spec = specs.get(name)
            if spec is None and not from_plan:
                spec = specs[name] = {"name": name, "concurrency": r.get("concurrency", 1),
                                      "repeats": 1}
                order.append(name)
            spec = spec or {"name": name, "concurrency": r.get("concurrency", 1), "repeats": 1}
            planned = sequence_length(spec)
            ph = state[name] = _Rebuild(
                PhaseStats(name, int(spec.get("concurrency", 1)), int(spec.get("repeats", 1)), planned)
            )
        ph.n += 1
        ph.st.add(r)
        if (r.get("counter_delta") or {}).get("reset"):
            restarts += 1
        if r.get("status") == "check_failed" and ph.st.check_failed is None:
            ph.st.check_failed = r.get("reason")
        if not r.get("sent", True):
            continue
        ph.any_sent = True
        ph.done.add(r.get("position"))
        t0, t1 = r.get("t_sent_ns"), r.get("t_done_ns")
        ph.start = (t0 or 0) if ph.start is None else min(ph.start, t0 or 0)
        ph.end = max(ph.end, t1 or 0)
        if t0 is not None and t1 is not None:
            ph.sent_t.append(t0)
            ph.done_t.append(t1)
        ph.attrs.add(r.get("attribution"))
        if r.get("counter_delta"):
            if ph.delta is None:
                ph.delta = {}
            _add_delta(ph.delta, r["counter_delta"], gauges)
    phases = []
    missing: dict[str, int] = {}
    for name in order:
        spec = specs[name]
        ph = state.get(name)
        if ph is None:
            ph = _Rebuild(PhaseStats(name, int(spec.get("concurrency", 1)),
                                     int(spec.get("repeats", 1)), sequence_length(spec)))
        st = ph.st
        if not from_plan:
            st.planned = ph.n
        elif spec.get("sequence") or spec.get("sequence_length"):
            n = _missing(spec, ph.done)
            if n:
                missing[name] = n
        st.label, st.comparable = spec.get("label"), spec.get("comparable", True) is not False
        if st.check_failed:
            st.invalid_reasons.append(st.check_failed)
        st.not_sent += max(0, st.planned - ph.n)
        if ph.any_sent:
            st.start_ns = ph.start
            st.end_ns = ph.end or None
        if hasattr(st, "deferred"):  # schema additions made while this reader was written
            st.deferred = not ph.any_sent
        if hasattr(st, "peak_in_flight"):
            st.peak_in_flight = _peak(ph.sent_t, ph.done_t)
        st.attribution = next((a for a in ("per_request", "phase_only") if a in ph.attrs), "none")
        if st.attribution == "per_request":
            st.counter_delta = ph.delta
        itl_log = hlog_path(run_dir, name, "itl")
        if itl_log.exists():
            try:
                h = read_hlog(itl_log)
            except (OSError, ValueError):
                h = None
            if h is not None:
                arr = HistogramArrays.from_histogram(h)
                ls = st.hists.sets["itl"]
                ls.hist = h
                ls.sum_us = int((arr.value_us * arr.count).sum())
        files = {}
        for m in st.hists.sets:
            if hlog_path(run_dir, name, m).exists():
                files[m] = hlog_name(name, m)
        st.histogram_files = files
        # The rebuilt phase is no more or less valid than the records say; the
        # run-level flag tells readers it was rebuilt.
        phases.append(st.to_json())
    return {
        "schema_version": SCHEMA_VERSION,
        "plan_sha256": (plan or {}).get("plan_sha256"),
        "implementation": ((plan or {}).get("run") or {}).get("implementation"),
        "aborted": _rebuilt_abort(plan, list(specs.values()), missing),
        "restarts": restarts,
        "identity": {"before": None, "after": None},
        "wall_s": None,
        "records": n_records,
        "phases": phases,
        "rebuilt_from_records": True,
    }


def _missing(spec: dict[str, Any], done: set[Any]) -> int:
    """Planned positions of a phase without a sent record.

    A compact plan keeps positions only as ``0 .. sequence_length - 1`` when it
    saw them so (``sequence_positions: "range"``); a full plan lists them.
    """
    if spec.get("sequence_positions") == "range":
        n = int(spec["sequence_length"])
        return n - sum(1 for p in done if isinstance(p, int) and 0 <= p < n)
    return sum(1 for e in spec.get("sequence") or [] if e.get("position") not in done)


def _rebuilt_abort(
    plan: dict[str, Any] | None, phases_spec: list[dict[str, Any]], missing: dict[str, int]
) -> dict[str, str] | None:
    """The rebuilt summary's ``aborted``: None when every planned position was sent.

    A position counts as sent when it has a record with ``sent`` true (a failed
    request was sent; a ``sent: false`` record was not). Without plan.json
    nothing says what was planned, so the run is taken as killed.
    """
    why = (
        "summary.json was missing (the run ended without writing it); "
        "rebuilt from records.jsonl by kvreplay report"
    )
    if plan is None or not (plan.get("phases") or []):
        return {"reason": "killed", "message": f"{why}; no plan.json to tell whether every position was sent"}
    if not missing:
        return None
    planned = sum(sequence_length(spec) for spec in phases_spec)
    per_phase = ", ".join(f"{name}: {n}" for name, n in missing.items())
    return {
        "reason": "killed",
        "message": f"{why}; {sum(missing.values())} of {planned} planned positions "
        f"have no record of being sent ({per_phase})",
    }
