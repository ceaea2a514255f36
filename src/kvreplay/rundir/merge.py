"""The files of a ``--workers N`` / ``--ray`` run: one folder per worker, merged into the run directory.

Each worker writes an ordinary run directory under ``workers/w<index>``
(``names.worker_dir``): its own records.jsonl (flushed per record), and worker 0,
which reads the counters, its counters.jsonl (no plan.json: the run's is the
coordinator's, and the workers get its plan in memory). At the end the coordinator
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

from kvreplay.rundir.names import COUNTERS, COUNTERS_RAW, RECORDS, WORKERS, worker_dir

__all__ = ["adopt_worker_counters", "merge_records", "remove_worker_dirs", "worker_records"]


def worker_records(run_dir: Path, index: int) -> Path:
    """Worker ``index``'s records.jsonl: ``run_dir/workers/w<index>/records.jsonl``."""
    return worker_dir(run_dir, index) / RECORDS


_HEAD_BYTES = 512
_PHASE, _REPETITION, _POSITION = b'{"phase":', b',"repetition":', b',"position":'


def _head_key(head: bytes, heads: dict[bytes, int]) -> tuple[int, int] | None:
    """(phase index, position) from a record's first bytes, as the runner writes it; None = parse it whole.

    The runner's records begin ``{"phase":<JSON string>,"repetition":<int>,"position":<int>,``
    (``runner._runner``'s record). ``heads`` maps each phase name's JSON bytes (orjson) to its
    index. Any other layout (another key order, a phase unknown here, a long name) gives None.
    An unescaped ``,"`` cannot occur inside a JSON string, so the first ``,"repetition":``
    ends the phase name.
    """
    if not head.startswith(_PHASE):
        return None
    j = head.find(_REPETITION, len(_PHASE))
    phase = heads.get(head[len(_PHASE) : j]) if j > 0 else None
    if phase is None:
        return None
    k = head.find(_POSITION, j)
    rep = head[j + len(_REPETITION) : k]
    if k < 0 or not rep.isdigit():
        return None
    e = k + len(_POSITION)
    stop = head.find(b",", e)
    pos = head[e:stop]
    if stop < 0 or not pos.isdigit():
        return None
    return phase, int(pos)


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
    heads = {orjson.dumps(name): i for name, i in phase_order.items()}
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
                    key = _head_key(m[start:min(end, start + _HEAD_BYTES)], heads)
                    if key is None:  # another layout: read the whole record
                        rec = orjson.loads(m[start:end])
                        key = phase_order.get(rec["phase"], 1 << 30), rec["position"]
                    index.append((*key, k, start, end))
                start = end + 1
        index.sort()
        with open(run_dir / RECORDS, "wb") as out:
            for _, _, k, a, b in index:
                m = maps[k]
                out.write(m[a : b + 1] if b < len(m) else m[a:b] + b"\n")  # the line with its newline
    finally:
        for m in maps:
            if m is not None:
                m.close()
        for f in files:
            f.close()
    return len(index)


def adopt_worker_counters(run_dir: Path, index: int = 0) -> bool:
    """Copy worker ``index``'s counters.jsonl and its side file (worker 0 reads the counters) to the run's.

    Returns False when the worker has no counters.jsonl.
    """
    src = worker_dir(run_dir, index) / COUNTERS
    if not src.exists():
        return False
    shutil.copyfile(src, run_dir / COUNTERS)
    if (side := src.with_name(COUNTERS_RAW)).exists():
        shutil.copyfile(side, run_dir / COUNTERS_RAW)
    return True


def remove_worker_dirs(run_dir: Path) -> None:
    """Remove ``run_dir/workers`` unless ``KVREPLAY_KEEP_WORKER_DIRS=1`` (errors ignored)."""
    if os.environ.get("KVREPLAY_KEEP_WORKER_DIRS", "") != "1":
        shutil.rmtree(run_dir / WORKERS, ignore_errors=True)
