"""kvreplay.rundir: the one owner of the run directory's and the experiment directory's files.

Every file name (``names``), the records writer and readers (``records``), the
plan file (``planfile``), summary.json written, read and rebuilt (``summary``),
the counter log (``counterlog``; format in docs/summary-schema.md), the
histogram logs read back (``hlogs``), the merge of ``--workers`` / ``--ray``
worker folders (``merge``), loading a run of this or any earlier version
(``load``: ``load_run``, ``open_run``) and the experiment directory
(``experiment``). The runner, the reports, compare and the experiments go
through it; no other module opens ``records.jsonl``, ``counters.jsonl``,
``summary.json`` or ``plan.json`` (``tests/unit/rundir/test_ownership.py``).

It sits below the runner and above the plan (layers: docs/architecture.md):
it imports ``plan``, ``workload``, ``metrics``, ``safe_io``, ``redaction``,
``errors`` and ``clock``, never ``runner``, ``report``, ``experiments``,
``commands`` or ``backends``.
"""

from kvreplay.rundir.counterlog import (
    DEFAULT_CAP_BYTES,
    CounterLog,
    cache_violations,
    flatten_raw,
    raw_changes,
    read_counter_log,
    read_violations,
)
from kvreplay.rundir.experiment import (
    read_experiment,
    read_result,
    read_step_log,
    write_experiment,
    write_result,
    write_step_log,
)
from kvreplay.rundir.hlogs import HistogramArrays, read_histograms, read_hlog
from kvreplay.rundir.jsonfile import read_json, read_json_checked, read_object
from kvreplay.rundir.load import RunData, load_run, open_run
from kvreplay.rundir.merge import adopt_worker_counters, merge_records, remove_worker_dirs, worker_records
from kvreplay.rundir.names import (
    COUNTERS,
    COUNTERS_RAW,
    EXPERIMENT,
    HISTOGRAMS,
    PLAN,
    RECORDS,
    REPORT_HTML,
    REPORT_MD,
    RESULT,
    SIMULATE_FILES,
    STEP_LOG,
    STEPS,
    SUMMARY,
    VERDICT,
    WORKERS,
    hlog_name,
    hlog_path,
    step_dir,
    worker_dir,
)
from kvreplay.rundir.planfile import (
    compact_plan,
    compact_plan_file,
    load_plan_json,
    read_plan,
    read_plan_bytes,
    read_plan_file,
    sequence_head,
    sequence_length,
    write_plan_json,
)
from kvreplay.rundir.records import RecordStream, RecordWriter, iter_records, read_records
from kvreplay.rundir.summary import read_summary, rebuild_summary, write_report_md, write_summary

__all__ = [
    "COUNTERS",
    "COUNTERS_RAW",
    "DEFAULT_CAP_BYTES",
    "EXPERIMENT",
    "HISTOGRAMS",
    "PLAN",
    "RECORDS",
    "REPORT_HTML",
    "REPORT_MD",
    "RESULT",
    "SIMULATE_FILES",
    "STEPS",
    "STEP_LOG",
    "SUMMARY",
    "VERDICT",
    "WORKERS",
    "CounterLog",
    "HistogramArrays",
    "RecordStream",
    "RecordWriter",
    "RunData",
    "adopt_worker_counters",
    "cache_violations",
    "compact_plan",
    "compact_plan_file",
    "flatten_raw",
    "hlog_name",
    "hlog_path",
    "iter_records",
    "load_plan_json",
    "load_run",
    "merge_records",
    "open_run",
    "raw_changes",
    "read_counter_log",
    "read_experiment",
    "read_histograms",
    "read_hlog",
    "read_json",
    "read_json_checked",
    "read_object",
    "read_plan",
    "read_plan_bytes",
    "read_plan_file",
    "read_records",
    "read_result",
    "read_step_log",
    "read_summary",
    "read_violations",
    "rebuild_summary",
    "remove_worker_dirs",
    "sequence_head",
    "sequence_length",
    "step_dir",
    "worker_dir",
    "worker_records",
    "write_experiment",
    "write_plan_json",
    "write_report_md",
    "write_result",
    "write_step_log",
    "write_summary",
]
