"""Read a run directory back, of this version or any earlier one: ``load_run`` and ``open_run``.

``load_run(path)`` is the notebook entry point (``kvreplay.load_run``). The
report commands use the same reader (``open_run``: records streamed, plan
compact), so what a notebook sees is what the report drew.

What an earlier version wrote still loads: a directory without plan.json
(replays then come from the records), without counters.jsonl, with one-interval
``.hlog`` files, a summary.json of schema version 1 with fewer keys (readers
ignore what they do not know and treat a missing key as absent), records with
fewer keys, or no summary.json at all (a killed run: rebuilt from the records,
``kvreplay.rundir.summary``). A probe (``verdict.json``) or simulate
(``simulate.json`` / ``mrc.json``) directory loads with an empty summary.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from kvreplay.metrics.summary import SCHEMA_VERSION
from kvreplay.rundir.hlogs import HistogramArrays, read_histograms
from kvreplay.rundir.jsonfile import read_object
from kvreplay.rundir.names import PLAN, RECORDS, SIMULATE_FILES, SUMMARY, VERDICT
from kvreplay.rundir.planfile import compact_plan_file
from kvreplay.rundir.records import RecordStream, iter_records, read_records
from kvreplay.rundir.summary import read_summary, rebuild_summary, write_summary

__all__ = ["RunData", "load_run", "open_run"]


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
            ``open_run``): ``record_list`` is empty, ``records`` is a
            ``RecordStream`` and each plan phase's ``sequence`` is compact
            (``kvreplay.rundir.compact_plan``).
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
            return iter_records(self.path / RECORDS)
        return iter(self.record_list)


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
                                f"{SUMMARY} / {RECORDS}")
    summary = read_summary(run_dir)
    records_file = run_dir / RECORDS
    if stream:
        try:
            plan = compact_plan_file(run_dir / PLAN)
        except (OSError, orjson.JSONDecodeError):
            plan = None
        record_list: list[dict[str, Any]] = []
    else:
        plan = read_object(run_dir / PLAN)
        record_list = read_records(records_file)
    verdict = read_object(run_dir / VERDICT)
    simulate = None
    for name in SIMULATE_FILES:
        simulate = read_object(run_dir / name)
        if simulate is not None:
            break
    rebuilt = False
    if summary is None:
        if records_file.exists():
            if stream:
                summary = rebuild_summary(run_dir, plan, iter_records(records_file))
            else:
                summary = rebuild_summary(run_dir, plan, record_list)
            rebuilt = True
            if write_rebuilt:
                write_summary(run_dir, summary)
        elif verdict is not None or simulate is not None:
            summary = {
                "schema_version": SCHEMA_VERSION,
                "phases": [],
            }  # a probe or simulate directory
        else:
            raise FileNotFoundError(
                f"{run_dir}: no {SUMMARY}, {RECORDS}, {VERDICT} "
                f"or {' / '.join(SIMULATE_FILES)}"
            )
    return RunData(
        path=run_dir,
        plan=plan,
        summary=summary,
        records=RecordStream(records_file) if stream else _records_frame(record_list),
        record_list=record_list,
        histograms=read_histograms(run_dir),
        summary_rebuilt=rebuilt,
        verdict=verdict,
        simulate=simulate,
        streamed=stream,
    )


def open_run(path: str | os.PathLike[str], *, write_rebuilt: bool = False) -> RunData:
    """A run directory for the reports, records not loaded (``RunData`` with ``streamed`` set).

    Like ``load_run`` but ``record_list`` is empty, ``records`` is a
    ``RecordStream`` and plan.json is compact (``compact_plan``). A missing
    summary.json is rebuilt from the records streamed once.

    Raises:
        FileNotFoundError: as ``load_run``.
    """
    return load_run(Path(path), write_rebuilt=write_rebuilt, stream=True)
