"""HdrHistogram interval logs written while a phase runs (issue 21, item 1).

``IntervalLogs`` appends one interval per metric to ``histograms/<phase>.<metric>.hlog``
every ``interval_s`` of wall time (a loop timer, ``start``, cutting the metrics in
turn) and once more when the phase ends (``close``). Each interval holds only the values recorded since that
metric's previous interval, so the intervals of a file add up exactly to the
phase's histogram (the one ``summary.json`` reports); a kill loses at most the
last interval, and ``records.jsonl`` still holds those requests.

Nothing runs per request: the phase's ``LatencySet`` objects record as before,
and each cut compares their counts with a copy taken at the previous cut
(numpy, one pass over the ~23,000 counts of a metric that got values since),
encodes the difference and appends it with one unbuffered ``write``.

File format (HdrHistogram interval log, format version 1.2, as
``hdrh.log.HistogramLogWriter`` writes it): the ``#`` comment, version and CSV
legend lines when the file is created (at the metric's first non-empty interval),
then one line per interval: ``start_s,length_s,max_ms,<base64 compressed
histogram>``, start in s from the run's origin. An interval without values is not
written; the next one starts where the metric's last one ended. Files are created
without following a symlink (``safe_io.open_new``, after removing whatever sits at
the name).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from kvreplay.clock import now_ns
from kvreplay.metrics.histograms import LatencySet, hlog_name, interval_line, new_histogram, new_log

if TYPE_CHECKING:
    import numpy as np

__all__ = ["INTERVAL_S", "IntervalLogs"]

INTERVAL_S = 1.0
"""Default wall time between two interval cuts (s)."""


class _Metric:
    __slots__ = ("comment", "f", "last_s", "name", "prev", "prev_total", "set")

    def __init__(self, ls: LatencySet, name: str, comment: str, start_s: float) -> None:
        self.set = ls
        self.name = name
        self.comment = comment
        self.last_s = start_s
        self.prev: np.ndarray | None = None  # counts at the previous cut
        self.prev_total = 0
        self.f: BinaryIO | None = None


class IntervalLogs:
    """The interval logs of one phase (one file per metric that gets values).

    Args:
        out_dir: The run's ``histograms/`` folder (created at the first file).
        phase: Phase name (file prefix).
        sets: metric -> the phase's ``LatencySet`` (µs), read at each cut.
        origin_ns: The run clock's origin (``now_ns()`` reading); timestamps are from it.
        start_ns: The phase start (``now_ns()``); the first interval of each metric starts there.
        on_error: Called once with the ``OSError`` of a failed create or write.

    Attributes:
        failed: The first write error, or None. After it the phase's files are
            removed (their intervals would no longer add up to the phase) and
            nothing more is written.
        files: metric -> file name of the files created so far.
    """

    def __init__(self, out_dir: Path, phase: str, sets: Mapping[str, LatencySet], origin_ns: int, start_ns: int,
                 on_error: Callable[[OSError], None] | None = None) -> None:
        self.out_dir = out_dir
        self.origin_ns = origin_ns
        start_s = (start_ns - origin_ns) / 1e9
        self._metrics = [_Metric(ls, m, f"kvreplay phase={phase} metric={m} unit=us", start_s)
                         for m, ls in sets.items()]
        self._phase = phase
        self._scratch = new_histogram()
        self._scratch_counts: np.ndarray | None = None  # a numpy view of the scratch counts, made at the first cut
        self._handle: asyncio.TimerHandle | None = None
        self.failed: OSError | None = None
        self.on_error = on_error
        self.files: dict[str, str] = {}

    def start(self, interval_s: float = INTERVAL_S) -> None:
        """Cut each metric every ``interval_s`` of wall time on the running loop, until ``close``.

        The cuts are staggered: a timer runs every ``interval_s / len(sets)`` and
        cuts the next metric in turn, so one tick costs one metric's encoding
        (a fraction of a millisecond), never all of them at once.
        """
        loop = asyncio.get_running_loop()
        n = len(self._metrics)
        if not n:
            return
        step = interval_s / n
        turn = {"i": 0}

        def tick() -> None:
            m = self._metrics[turn["i"] % n]
            turn["i"] += 1
            if self._cut_metric(m, (now_ns() - self.origin_ns) / 1e9):
                self._handle = loop.call_later(step, tick)

        self._handle = loop.call_later(step, tick)

    def cut(self, t_ns: int | None = None) -> None:
        """Append one interval per metric with values recorded since its previous interval.

        Args:
            t_ns: The interval end (``now_ns()`` reading); None = now.
        """
        end_s = ((now_ns() if t_ns is None else t_ns) - self.origin_ns) / 1e9
        for m in self._metrics:
            if not self._cut_metric(m, end_s):
                return

    def _cut_metric(self, m: _Metric, end_s: float) -> bool:
        """Append ``m``'s interval ending at ``end_s`` (s from the origin) when it got values; False once failed."""
        import numpy as np
        if self.failed is not None:
            return False
        h = m.set.hist  # records values buffered by record_many_ns first
        total = h.total_count
        if total == m.prev_total:
            return True
        cur = np.ctypeslib.as_array(h.counts)
        if m.prev is None:
            delta = cur.copy()
            m.prev = cur.copy()
        else:
            delta = cur - m.prev  # counts only grow: no wrap-around
            m.prev[:] = cur
        m.prev_total = total
        if not delta.any():
            return True
        line = self._encode(delta, m.last_s, end_s)
        try:
            if m.f is None:
                m.f = self._create(m)
            data = line.encode("ascii")
            n = m.f.write(data)
            if n != len(data):
                raise OSError(errno.ENOSPC, f"short write to {m.f.name} ({n} of {len(data)} bytes)")
        except OSError as exc:
            self._fail(exc)
            return False
        m.last_s = end_s
        return True

    def _encode(self, delta: np.ndarray, start_s: float, end_s: float) -> str:
        """The interval line of ``delta`` (counts in the histogram's layout and dtype; not all zero)."""
        import numpy as np
        h = self._scratch
        if self._scratch_counts is None:
            self._scratch_counts = np.ctypeslib.as_array(self._scratch.counts)
        self._scratch_counts[:] = delta
        nz = np.flatnonzero(delta)
        h.total_count = int(delta.sum())
        h.min_value = h.get_value_from_index(int(nz[0]))
        h.max_value = h.get_value_from_index(int(nz[-1]))  # encode() sizes the payload from it
        return interval_line(h.encode().decode("ascii"), h.get_max_value(), start_s, end_s)

    def _create(self, m: _Metric) -> BinaryIO:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        name = hlog_name(self._phase, m.name)
        f = new_log(self.out_dir / name, m.comment)
        self.files[m.name] = name
        return f

    def _fail(self, exc: OSError) -> None:
        self.failed = exc
        self.stop()
        for m in self._metrics:
            if m.f is not None:
                m.f.close()
                m.f = None
        for name in self.files.values():
            with contextlib.suppress(OSError):
                os.unlink(self.out_dir / name)
        self.files = {}
        if self.on_error is not None:
            self.on_error(exc)

    def stop(self) -> None:
        """Stop the timer (no final cut)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def close(self, t_ns: int | None = None) -> dict[str, str]:
        """Stop the timer, cut the last interval (ending at ``t_ns``, None = now) and close the files.

        Returns:
            metric -> file name (relative to ``out_dir``) of every file written;
            empty after a write error.
        """
        self.stop()
        self.cut(t_ns)
        for m in self._metrics:
            if m.f is not None:
                m.f.close()
                m.f = None
        return dict(self.files)
