"""Read a run directory back: records, summary, histograms, plan and side outputs.

``load_run(path)`` is the notebook entry point (``kvreplay.load_run``). The
report commands use the same reader, so what a notebook sees is what the report
drew.

Histograms are read from the HdrHistogram interval logs the runner wrote
(``histograms/<phase>.<metric>.hlog``, one interval appended per second of a phase
since issue 21, one per phase before); every interval of a file is added into one
histogram (a torn last line of a killed run is left out). Source: the HdrHistogram
interval log format, version 1.2 (``HistogramLogWriter`` / ``HistogramLogReader``
in HdrHistogram and HdrHistogram_py): comment lines start with ``#``, a
``"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"``
legend, then one line per interval whose last field is a base64, zlib
compressed histogram. Values are integer microseconds (1 µs to 1 h, 3
significant digits, ``kvreplay.metrics.histograms``).

When ``summary.json`` is missing (the run was killed with SIGKILL before it
could write it), ``rebuild_summary`` recomputes it from ``records.jsonl`` and
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

import os
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from hdrh.histogram import HdrHistogram

from kvreplay.metrics.histograms import new_histogram
from kvreplay.metrics.summary import SCHEMA_VERSION, PhaseStats
from kvreplay.runner.backend import GAUGE_NAMES
from kvreplay.safe_io import atomic_write_json

__all__ = [
    "HistogramArrays",
    "RunData",
    "load_run",
    "read_hlog",
    "read_json",
    "read_records",
    "rebuild_summary",
]

VERDICT_FILE = "verdict.json"
"""``kvreplay probe`` output (issue 6): ``prefill_fit``, ``points``, ``flush_bracket``..."""
SIMULATE_FILES = ("simulate.json", "mrc.json")
"""``kvreplay simulate --json`` output saved in the run directory (``curve``, ``recommended``)."""


@dataclass(frozen=True, slots=True)
class HistogramArrays:
    """One latency distribution as arrays (from an HdrHistogram).

    Attributes:
        value_us: Distinct recorded values, ascending (µs; each the highest value
            equivalent to its bucket, as HdrHistogram's percentile output uses).
        count: Samples at each value.
    """

    value_us: np.ndarray
    count: np.ndarray

    @property
    def total(self) -> int:
        """Number of samples."""
        return int(self.count.sum())

    def cdf(self) -> tuple[np.ndarray, np.ndarray]:
        """``(value_ms, fraction <= value)``; both empty when there are no samples."""
        if self.total == 0:
            return np.zeros(0), np.zeros(0)
        return self.value_us / 1000.0, np.cumsum(self.count) / self.total

    def percentile_ms(self, q: float) -> float | None:
        """Value at percentile ``q`` (0-100) in ms; None when empty.

        HdrHistogram's rule: the first value whose cumulative count reaches
        ``ceil(q / 100 * total)``.
        """
        n = self.total
        if n == 0:
            return None
        need = max(1, int(np.ceil(q / 100.0 * n)))
        i = int(np.searchsorted(np.cumsum(self.count), need))
        return float(self.value_us[min(i, len(self.value_us) - 1)]) / 1000.0

    @classmethod
    def from_histogram(cls, h: HdrHistogram) -> HistogramArrays:
        """Arrays from a ``hdrh`` histogram's recorded values."""
        vals, counts = [], []
        for it in h.get_recorded_iterator():
            vals.append(it.value_iterated_to)
            counts.append(it.count_added_in_this_iter_step)
        return cls(np.asarray(vals, dtype=np.int64), np.asarray(counts, dtype=np.int64))


@dataclass(slots=True)
class RunData:
    """Everything a run directory holds, parsed.

    Attributes:
        path: The run directory.
        plan: plan.json (None when absent).
        summary: summary.json (rebuilt from records when it was missing).
        records: records.jsonl as a pandas DataFrame when pandas is installed,
            else the list of record dicts.
        record_list: records.jsonl as a list of dicts, always.
        histograms: ``{phase: {metric: HistogramArrays}}`` from the .hlog files.
        summary_rebuilt: True when summary.json was rebuilt by this load.
        verdict: A probe's verdict.json, or None.
        simulate: A simulate ``--json`` output, or None.
        streamed: True when records were not loaded (``load_run(..., stream=True)``,
            ``report.stream.open_run``): ``record_list`` is empty, ``records`` is a
            ``report.stream.RecordStream`` and each plan phase's ``sequence`` is
            compact (``report.stream.compact_plan``).
    """

    path: Path
    plan: dict[str, Any] | None
    summary: dict[str, Any]
    records: Any
    record_list: list[dict[str, Any]]
    histograms: dict[str, dict[str, HistogramArrays]] = field(default_factory=dict)
    summary_rebuilt: bool = False
    verdict: dict[str, Any] | None = None
    simulate: dict[str, Any] | None = None
    streamed: bool = False

    def iter_records(self) -> Any:
        """The records one at a time: the loaded list, or records.jsonl streamed."""
        if self.streamed:
            from kvreplay.report.stream import iter_records

            return iter_records(self.path / "records.jsonl")
        return iter(self.record_list)


def read_records(path: Path) -> list[dict[str, Any]]:
    """records.jsonl as dicts; a torn last line (a killed writer) is skipped."""
    out: list[dict[str, Any]] = []
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return out
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            out.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            continue
    return out


def read_hlog(path: Path) -> HdrHistogram:
    """All intervals of one HdrHistogram interval log, added into one histogram (µs).

    Reads the one-interval logs of runs made before intervals were appended
    while a phase ran as well as multi-interval ones. A last line without its
    newline (the runner was killed while appending it) is left out: the
    intervals before it are whole.

    Raises:
        OSError: the file cannot be read.
        ValueError: an interval line before the last cannot be decoded (names the file and line).
    """
    total = new_histogram()
    text = path.read_bytes().decode("utf-8", errors="replace")
    lines = text.split("\n")
    for i, line in enumerate(lines[:-1], 1):  # lines[-1]: "" or a torn last line
        if not line or line.startswith("#") or line.startswith('"'):
            continue
        if line.startswith("Tag="):
            line = line.partition(",")[2]
        fields = line.split(",")
        if len(fields) != 4:
            raise ValueError(f"{path}:{i}: not an interval line (want start,length,max,histogram)")
        try:
            total.decode_and_add(fields[3].strip())
        except Exception as exc:  # noqa: BLE001 - hdrh raises TypeError, zlib.error and its own classes
            raise ValueError(f"{path}:{i}: interval histogram cannot be decoded: {exc}") from None
    return total


def read_json(path: Path) -> Any:
    """The JSON document in a run-directory file, or None when it is missing, unreadable or not JSON.

    Args:
        path: e.g. ``summary.json``, ``plan.json``, ``verdict.json``, ``ab.json``.

    Returns:
        The parsed value (any JSON type; the caller checks the shape), or None.
    """
    try:
        return orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None


def _read_json(path: Path) -> dict[str, Any] | None:
    data = read_json(path)
    return data if isinstance(data, dict) else None


def _add_delta(out: dict[str, Any], d: dict[str, Any]) -> None:
    """Add one per-request counter delta into ``out`` (gauges: the last value; reset flags: any)."""
    for k, v in d.items():
        if k == "reset":
            out["reset"] = out.get("reset", False) or bool(v)
        elif k == "reset_names":
            out["reset_names"] = sorted(set(out.get("reset_names", [])) | set(v))
        elif isinstance(v, (int, float)):
            out[k] = v if k in GAUGE_NAMES else out.get(k, 0) + v


def _sum_deltas(deltas: list[dict]) -> dict[str, Any] | None:
    if not deltas:
        return None
    out: dict[str, Any] = {}
    for d in deltas:
        _add_delta(out, d)
    return out


def _peak_in_flight(recs: list[dict[str, Any]]) -> int:
    """Most requests between ``t_sent_ns`` and ``t_done_ns`` at once (ends first at ties)."""
    sent = array("q", [])
    done = array("q", [])
    for r in recs:
        if r.get("t_sent_ns") is not None and r.get("t_done_ns") is not None:
            sent.append(r["t_sent_ns"])
            done.append(r["t_done_ns"])
    return _peak(sent, done)


def _peak(sent: array, done: array) -> int:
    """Peak of in-flight intervals ``[sent, done)``; at equal times an end counts first."""
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
    ``report.stream.iter_records`` both do).

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
            planned = _planned(spec)
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
            _add_delta(ph.delta, r["counter_delta"])
    phases = []
    missing: dict[str, int] = {}
    for name in order:
        spec = specs[name]
        ph = state.get(name)
        if ph is None:
            ph = _Rebuild(PhaseStats(name, int(spec.get("concurrency", 1)),
                                     int(spec.get("repeats", 1)), _planned(spec)))
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
        itl_log = run_dir / "histograms" / f"{name}.itl.hlog"
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
            if (run_dir / "histograms" / f"{name}.{m}.hlog").exists():
                files[m] = f"{name}.{m}.hlog"
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


def _planned(spec: dict[str, Any]) -> int:
    """Planned requests of a plan phase, full or compact (``report.stream.compact_plan``)."""
    if "sequence_length" in spec:
        return int(spec["sequence_length"])
    return len(spec.get("sequence") or [])


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
    planned = sum(_planned(spec) for spec in phases_spec)
    per_phase = ", ".join(f"{name}: {n}" for name, n in missing.items())
    return {
        "reason": "killed",
        "message": f"{why}; {sum(missing.values())} of {planned} planned positions "
        f"have no record of being sent ({per_phase})",
    }


def _records_frame(records: list[dict[str, Any]]) -> Any:
    try:
        import pandas as pd
    except ImportError:
        return records
    return pd.json_normalize(records, sep=".") if records else pd.DataFrame()


def load_run(
    path: str | os.PathLike[str], *, write_rebuilt: bool = False, stream: bool = False
) -> RunData:
    """Load a run directory for a notebook or a report.

    Args:
        path: The run directory (holding plan.json, records.jsonl, ...).
        write_rebuilt: When summary.json is missing and had to be rebuilt,
            also write it back to the directory.
        stream: Do not load the records (``RunData.streamed``; the reports'
            path at any scale); a missing summary.json is rebuilt from the
            records streamed once.

    Returns:
        The parsed run (``RunData``).

    Raises:
        FileNotFoundError: ``path`` is not a directory, or it holds no summary.json,
            records.jsonl, verdict.json or simulate output (nothing to load).
    """
    run_dir = Path(path)
    if not run_dir.is_dir():
        what = "a file" if run_dir.exists() else "not found"
        raise FileNotFoundError(f"{run_dir}: not a run directory ({what}); give the folder that holds "
                                "summary.json / records.jsonl")
    summary = _read_json(run_dir / "summary.json")
    if stream:
        from kvreplay.report.stream import RecordStream, compact_plan_file

        try:
            plan = compact_plan_file(run_dir / "plan.json")
        except (OSError, orjson.JSONDecodeError):
            plan = None
        record_list: list[dict[str, Any]] = []
    else:
        plan = _read_json(run_dir / "plan.json")
        record_list = read_records(run_dir / "records.jsonl")
    verdict = _read_json(run_dir / VERDICT_FILE)
    simulate = None
    for name in SIMULATE_FILES:
        simulate = _read_json(run_dir / name)
        if simulate is not None:
            break
    rebuilt = False
    if summary is None:
        if (run_dir / "records.jsonl").exists():
            if stream:
                from kvreplay.report.stream import iter_records

                summary = rebuild_summary(run_dir, plan, iter_records(run_dir / "records.jsonl"))
            else:
                summary = rebuild_summary(run_dir, plan, record_list)
            rebuilt = True
            if write_rebuilt:
                atomic_write_json(run_dir / "summary.json", summary)
        elif verdict is not None or simulate is not None:
            summary = {
                "schema_version": SCHEMA_VERSION,
                "phases": [],
            }  # a probe or simulate directory
        else:
            raise FileNotFoundError(
                f"{run_dir}: no summary.json, records.jsonl, {VERDICT_FILE} "
                f"or {' / '.join(SIMULATE_FILES)}"
            )
    hists: dict[str, dict[str, HistogramArrays]] = {}
    hdir = run_dir / "histograms"
    if hdir.is_dir():
        for f in sorted(hdir.glob("*.hlog")):
            phase, _, metric = f.name[: -len(".hlog")].rpartition(".")
            try:
                arr = HistogramArrays.from_histogram(read_hlog(f))
            except (OSError, ValueError):
                continue
            hists.setdefault(phase, {})[metric] = arr
    return RunData(
        path=run_dir,
        plan=plan,
        summary=summary,
        records=RecordStream(run_dir / "records.jsonl") if stream else _records_frame(record_list),
        record_list=record_list,
        histograms=hists,
        summary_rebuilt=rebuilt,
        verdict=verdict,
        simulate=simulate,
        streamed=stream,
    )
