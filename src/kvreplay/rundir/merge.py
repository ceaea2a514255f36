"""The files of a ``--workers N`` / ``--ray`` run: one folder per worker, merged into the run directory.

Each worker writes an ordinary run directory under ``workers/w<index>``
(``names.worker_dir``): its own records.jsonl (flushed per record), and worker 0,
which reads the counters, its counters.jsonl. At the end the coordinator
(``kvreplay.runner.multiproc`` / ``rayrun``) merges them here, at file level:

- ``merge_records``: every worker's records in (phase, position) order into the
  run's records.jsonl, each record's bytes copied as written (never
  re-serialised); memory: 4 integers per record;
- ``adopt_worker_counters``: worker 0's counters.jsonl becomes the run's;
- ``remove_worker_dirs``: the worker folders go (kept with
  ``KVREPLAY_KEEP_WORKER_DIRS=1``).

The summary, histograms and report of the merged run are the coordinator's
(``kvreplay.runner._merge``).
"""

from __future__ import annotations

import mmap
import os
import shutil
from pathlib import Path
from typing import Any

import orjson

from kvreplay.rundir.names import COUNTERS, RECORDS, WORKERS, worker_dir

__all__ = ["adopt_worker_counters", "merge_records", "remove_worker_dirs", "worker_records"]


def worker_records(run_dir: Path, index: int) -> Path:
    """Worker ``index``'s records.jsonl: ``run_dir/workers/w<index>/records.jsonl``."""
    return worker_dir(run_dir, index) / RECORDS


def merge_records(paths: list[Path], phase_order: dict[str, int], run_dir: Path) -> int:
    """Write the workers' records into ``run_dir/records.jsonl`` in (phase, position) order.

    Args:
        paths: Each worker's records.jsonl (a missing or empty file adds nothing).
        phase_order: Phase name -> its index in the plan (an unknown phase sorts last).
        run_dir: The run directory.

    Returns:
        The number of records written.

    Raises:
        OSError: a file cannot be read or the merged file written.
        orjson.JSONDecodeError: a line is not JSON (workers write whole lines only).
    """
    index: list[tuple[int, int, int, int, int]] = []
    maps: list[Any] = []
    files = []
    try:
        for k, path in enumerate(paths):
            if not path.exists() or path.stat().st_size == 0:
                maps.append(None)
                continue
            f = open(path, "rb")  # noqa: SIM115 - closed below
            files.append(f)
            m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            maps.append(m)
            start = 0
            size = len(m)
            while start < size:
                end = m.find(b"\n", start)
                if end < 0:
                    end = size
                if end > start:
                    rec = orjson.loads(m[start:end])
                    index.append((phase_order.get(rec["phase"], 1 << 30), rec["position"], k, start, end))
                start = end + 1
        index.sort()
        with open(run_dir / RECORDS, "wb") as out:
            for _, _, k, a, b in index:
                out.write(maps[k][a:b] + b"\n")
    finally:
        for m in maps:
            if m is not None:
                m.close()
        for f in files:
            f.close()
    return len(index)


def adopt_worker_counters(run_dir: Path, index: int = 0) -> bool:
    """Copy worker ``index``'s counters.jsonl (worker 0 reads the counters) to the run's; False when it has none."""
    src = worker_dir(run_dir, index) / COUNTERS
    if not src.exists():
        return False
    shutil.copyfile(src, run_dir / COUNTERS)
    return True


def remove_worker_dirs(run_dir: Path) -> None:
    """Remove ``run_dir/workers`` unless ``KVREPLAY_KEEP_WORKER_DIRS=1`` (errors ignored)."""
    if os.environ.get("KVREPLAY_KEEP_WORKER_DIRS", "") != "1":
        shutil.rmtree(run_dir / WORKERS, ignore_errors=True)
