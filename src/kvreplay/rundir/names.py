"""The names of the files in a run directory and an experiment directory (the one definition).

A run directory (``kvreplay run --out DIR``; docs/summary-schema.md)::

    plan.json         PLAN        the frozen plan, written before the first request
    records.jsonl     RECORDS     one JSON line per request, flushed as written
    counters.jsonl    COUNTERS    every raw counter series read (docs/summary-schema.md)
    counters-raw.jsonl.gz COUNTERS_RAW the series an adapter does not map, first and last read
    summary.json      SUMMARY     written at the end (rebuilt from records when missing)
    report.md         REPORT_MD   written by the layer above the runner (commands, experiments)
    report.html       REPORT_HTML ``kvreplay report DIR --html``
    histograms/       HISTOGRAMS  ``<phase>.<metric>.hlog`` (``hlog_name``)
    workers/wN/       WORKERS     one folder per ``--workers`` / ``--ray`` worker while a run goes
    verdict.json      VERDICT     a probe's verdict (``kvreplay probe``)

An experiment directory (``kvreplay experiment FILE --out DIR``)::

    experiment.json   EXPERIMENT  the frozen experiment, written before anything runs
    steps/NN-name/    STEPS       one folder per step (a run directory for a sending step)
      step.json       STEP_LOG    what happened to that step
    result.json       RESULT      the publication's data, written at the end

Modules outside ``kvreplay.rundir`` name these files through the constants here
(or not at all, going through the readers and writers of ``kvreplay.rundir``).
"""

from __future__ import annotations

from pathlib import Path

from kvreplay.metrics.histograms import hlog_name

__all__ = [
    "COUNTERS",
    "COUNTERS_RAW",
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
    "hlog_name",
    "hlog_path",
    "step_dir",
    "worker_dir",
]

PLAN = "plan.json"
RECORDS = "records.jsonl"
COUNTERS = "counters.jsonl"
COUNTERS_RAW = "counters-raw.jsonl.gz"
"""The series a partial-reads adapter does not map, at the run's first and last reads.

gzip members of JSON lines (``kvreplay.rundir.counterlog``)."""
SUMMARY = "summary.json"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
HISTOGRAMS = "histograms"
WORKERS = "workers"
VERDICT = "verdict.json"
"""``kvreplay probe`` output (issue 6): ``prefill_fit``, ``points``, ``flush_bracket``..."""
SIMULATE_FILES = ("simulate.json", "mrc.json")
"""``kvreplay simulate --json`` output saved in the run directory (``curve``, ``recommended``)."""

EXPERIMENT = "experiment.json"
RESULT = "result.json"
STEPS = "steps"
STEP_LOG = "step.json"
PROGRESS = "progress.json"
SOURCE = "experiment.toml"
WORKLOADS = "workloads.json"
"""Each workload of an experiment and the SHA-256 of every body (``rundir.experiment.write_workloads``)."""


def hlog_path(run_dir: Path, phase: str, metric: str) -> Path:
    """``run_dir/histograms/<phase>.<metric>.hlog``."""
    return run_dir / HISTOGRAMS / hlog_name(phase, metric)


def worker_dir(run_dir: Path, index: int) -> Path:
    """The folder of worker ``index`` of a ``--workers`` / ``--ray`` run: ``run_dir/workers/w<index>``."""
    return run_dir / WORKERS / f"w{index}"


def step_dir(index: int, name: str) -> str:
    """A step's folder, relative to the experiment directory: ``steps/NN-name`` (``NN``: index, 2 digits)."""
    return f"{STEPS}/{index:02d}-{name}"
