"""Latency histograms: HdrHistogram in integer microseconds, 1 µs to 1 h, 3 significant digits.

Stored as HdrHistogram interval logs (the format HdrHistogram's ``HistogramLogReader``
and ``HistogramLogProcessor`` read, lines as ``hdrh.log.HistogramLogWriter`` writes them),
one file per phase and metric; the runner appends an interval while a phase runs
(``metrics.hlog``). Out-of-range values are counted, never dropped
silently (``hdrh``'s ``record_value`` returns False for them).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import sys
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from hdrh.histogram import HdrHistogram

from kvreplay.accounting.events import itl_gaps_ns
from kvreplay.accounting.sse import hdr_record_gaps
from kvreplay.safe_io import open_new

if TYPE_CHECKING:
    import numpy as np

__all__ = ["HEADER_LINES", "HIGHEST_US", "LOWEST_US", "METRICS", "LatencySet", "PhaseHistograms", "hlog_header",
           "hlog_name", "interval_line", "load_recording", "new_histogram", "new_log", "write_log"]



def load_recording() -> None:
    """Import what recording a phase needs (numpy: batched ITL gaps, histogram log cuts) now.

    Called at a phase's set-up, before its clock starts (``runner._Run.run_phase``): imported
    lazily instead, numpy (~55 ms) was loaded on the event loop in the middle of the first phase
    and sent its early requests late (issue 42 item 6). Not at module import, so
    ``kvreplay --help`` and commands that record nothing stay light (issue 35). Idempotent;
    raises ImportError only if numpy is not installed.
    """
    import numpy  # noqa: F401
    import numpy.ctypeslib  # noqa: F401  (numpy loads it on first attribute use: the logs' cuts)


LOWEST_US = 1
HIGHEST_US = 3_600_000_000
SIG_FIGS = 3
FLUSH_AT = 1 << 16
"""Values ``LatencySet.record_many_ns`` buffers before recording them in one numpy pass."""
METRICS = ("ttft", "itl", "tpot", "e2e", "queue", "ttft_from_intended", "e2e_from_intended")
"""ttft: sent -> first token; itl: gap between token events; tpot: (last - first token) /
(completion tokens - 1); e2e: sent -> done. Open loop only (wrk2's corrected
latencies): queue: intended -> sent (dispatch delay); ttft_from_intended and
e2e_from_intended: measured from the intended send time."""


def _is_ndarray(x: object) -> bool:
    """True when ``x`` is a numpy array (numpy imported only if something already did: no array exists otherwise)."""
    np_mod = sys.modules.get("numpy")
    return np_mod is not None and isinstance(x, np_mod.ndarray)


def new_histogram() -> HdrHistogram:
    """An empty histogram for µs values from 1 µs to 1 h at 3 significant digits."""
    return HdrHistogram(LOWEST_US, HIGHEST_US, SIG_FIGS)


class LatencySet:
    """One histogram with its out-of-range count and exact sum.

    Recording computes HdrHistogram's counts index itself (the same arithmetic
    as ``hdrh``'s ``_counts_index_for``: bucket from the bit length of
    ``value | sub_bucket_mask``, sub-bucket by shift) and updates the counts,
    total, min and max in place, about ten times cheaper than ``record_value``'s
    chain of method calls; ``record_many_ns`` does a whole batch (a stream's
    inter-token gaps) with numpy. The histogram is an ordinary ``HdrHistogram``:
    logs, ``add`` and encode/decode are unchanged. Out-of-range values are
    counted, never dropped silently.

    Attributes:
        hist: The histogram (values in µs).
        out_of_range: Values beyond the histogram's range (a little over 1 h; counted, not recorded).
        sum_us: Exact sum of the recorded values (µs), for the mean.
    """

    __slots__ = ("_addr", "_counts", "_half_count", "_half_mag", "_hist", "_len", "_mask", "_np_counts", "_oor",
                 "_pend", "_unit", "sum_us")

    _np_counts: np.ndarray | None

    def __init__(self, hist: HdrHistogram | None = None, out_of_range: int = 0, sum_us: int = 0) -> None:
        self._pend = array("q")
        self.hist = hist if hist is not None else new_histogram()
        self._oor = out_of_range
        self.sum_us = sum_us

    @property
    def hist(self) -> HdrHistogram:
        """The underlying ``HdrHistogram`` (µs), with every buffered value recorded."""
        if self._pend:
            self.flush()
        return self._hist

    @hist.setter
    def hist(self, h: HdrHistogram) -> None:
        self._pend = array("q")
        self._hist = h
        self._counts = h.counts
        self._addr = ctypes.addressof(h.counts) if hdr_record_gaps is not None else 0
        self._np_counts = None
        self._mask = h.sub_bucket_mask
        self._unit = h.unit_magnitude
        self._half_mag = h.sub_bucket_half_count_magnitude
        self._half_count = h.sub_bucket_half_count
        self._len = h.counts_len

    @property
    def out_of_range(self) -> int:
        """Values beyond the histogram's range (counted, never recorded)."""
        if self._pend:
            self.flush()
        return self._oor

    @out_of_range.setter
    def out_of_range(self, n: int) -> None:
        self._oor = n

    def __repr__(self) -> str:
        return f"LatencySet(n={self.hist.total_count}, out_of_range={self.out_of_range})"

    def record_ns(self, value_ns: int) -> None:
        """Record one latency given in ns (rounded to µs, at least 1 µs)."""
        us = (value_ns + 500) // 1000
        if us < LOWEST_US:
            us = LOWEST_US
        bucket = (us | self._mask).bit_length() - self._unit - self._half_mag - 1
        idx = ((bucket + 1) << self._half_mag) + (us >> (bucket + self._unit)) - self._half_count
        if idx >= self._len:  # hdrh's own bound (a little above HIGHEST_US)
            self._oor += 1
            return
        self._counts[idx] += 1
        h = self._hist
        h.total_count += 1
        if us < h.min_value:
            h.min_value = us
        if us > h.max_value:
            h.max_value = us
        self.sum_us += us

    def record_many_ns(self, values_ns: Iterable[int]) -> None:
        """Record a batch of latencies given in ns (same rounding as ``record_ns``).

        Values are buffered (an ``array('q')``) and recorded with numpy in
        batches of ``FLUSH_AT``; reading ``hist`` or ``out_of_range`` records
        what is buffered first, so readers always see every value.
        """
        is_array = _is_ndarray(values_ns)
        if is_array and len(values_ns) >= FLUSH_AT:  # type: ignore[arg-type]
            # A long stream's gaps: recorded in place, block by block (no copy).
            self.flush()
            v = values_ns.astype("int64", copy=False)  # type: ignore[attr-defined]
            for i in range(0, len(v), FLUSH_AT):
                self._record_block(v[i : i + FLUSH_AT])
            return
        p = self._pend
        if is_array:
            p.frombytes(values_ns.astype("int64", copy=False).tobytes())  # type: ignore[attr-defined]
        else:
            p.extend(values_ns)
        if len(p) >= FLUSH_AT:
            self.flush()

    def record_gaps_of(self, token_ns: Sequence[int]) -> None:
        """Record the gaps between successive arrival times ``token_ns`` (ns): a stream's ITL samples.

        The same values as ``record_many_ns(itl_gaps_ns(token_ns))``: natively
        straight into the counts (``accounting.sse.hdr_record_gaps``), else through
        ``record_many_ns`` (numpy).
        """
        if self._addr and hdr_record_gaps is not None:  # native: into the counts directly
            r = hdr_record_gaps(self._addr, self._len, self._mask, self._unit, self._half_mag, self._half_count,
                                token_ns)
            if r is not None:
                n, oor, total, lo, hi = r
                self._oor += oor
                if n:
                    h = self._hist
                    h.total_count += n
                    if lo < h.min_value:
                        h.min_value = lo
                    if hi > h.max_value:
                        h.max_value = hi
                    self.sum_us += total
                return
        # numpy: a long stream's gaps are recorded in place, block by block (no buffer copy)
        self.record_many_ns(itl_gaps_ns(token_ns))

    def flush(self) -> None:
        """Record the buffered values of ``record_many_ns``."""
        p = self._pend
        if not p:
            return
        self._pend = array("q")
        import numpy as np  # imported on first use: a run's start-up does not pay for numpy (issue 35)

        v = np.frombuffer(p, dtype=np.int64)
        for i in range(0, len(v), FLUSH_AT):
            self._record_block(v[i : i + FLUSH_AT])

    def _record_block(self, values_ns: np.ndarray) -> None:
        """Record at most ``FLUSH_AT`` int64 ns values in one numpy pass (bounded temporaries)."""
        import numpy as np

        us = (values_ns + 500) // 1000
        np.maximum(us, LOWEST_US, out=us)
        np.minimum(us, 1 << 52, out=us)  # keeps frexp exact; far beyond the range anyway
        _, exp = np.frexp((us | self._mask).astype(np.float64))  # exp = bit length (values < 2**53)
        bucket = exp.astype(np.int64) - (self._unit + self._half_mag + 1)
        idx = ((bucket + 1) << self._half_mag) + (us >> (bucket + self._unit)) - self._half_count
        bad = idx >= self._len
        nbad = int(bad.sum())
        if nbad:
            self._oor += nbad
            keep = ~bad
            us, idx = us[keep], idx[keep]
            if not len(us):
                return
        counts = self._np_counts
        if counts is None:
            counts = self._np_counts = np.ctypeslib.as_array(self._counts)
        counts += np.bincount(idx, minlength=len(counts)).astype(counts.dtype)
        h = self._hist
        h.total_count += len(us)
        lo, hi = int(us.min()), int(us.max())
        if lo < h.min_value:
            h.min_value = lo
        if hi > h.max_value:
            h.max_value = hi
        self.sum_us += int(us.sum())

    def summary_ms(self) -> dict[str, float | int | None]:
        """``{n, mean, p50, p90, p99, max}`` in ms (None when empty)."""
        h = self.hist
        n = h.get_total_count()
        if n == 0:
            return {"n": 0, "mean": None, "p50": None, "p90": None, "p99": None, "max": None}

        def ms(us: float) -> float:
            return round(us / 1000.0, 3)

        # One pass over the counts (hdrh's get_mean_value walks every bucket in
        # Python); the mean comes from the exact running sum instead.
        pct = h.get_percentile_to_value_dict([50, 90, 99])
        return {
            "n": n,
            "mean": ms(self.sum_us / n),
            "p50": ms(pct[50]),
            "p90": ms(pct[90]),
            "p99": ms(pct[99]),
            "max": ms(h.get_max_value()),
        }


@dataclass(slots=True)
class PhaseHistograms:
    """The histograms of one phase, one ``LatencySet`` per metric in ``METRICS``."""

    sets: dict[str, LatencySet] = field(default_factory=lambda: {m: LatencySet() for m in METRICS})

    def write_logs(self, out_dir: Path, phase: str, start_s: float, end_s: float) -> dict[str, str]:
        """Write one HdrHistogram interval log per non-empty metric.

        Args:
            out_dir: The run's ``histograms/`` folder.
            phase: Phase name (file prefix).
            start_s: Interval start (s, run-relative).
            end_s: Interval end (s, run-relative).

        Returns:
            metric -> relative file name.
        """
        out_dir.mkdir(parents=True, exist_ok=True)
        files = {}
        for metric, ls in self.sets.items():
            if ls.hist.get_total_count() == 0:
                continue
            name = hlog_name(phase, metric)
            write_log(out_dir / name, ls.hist, f"kvreplay phase={phase} metric={metric} unit=us", start_s, end_s)
            files[metric] = name
        return files


def hlog_name(phase: str, metric: str) -> str:
    """The file name of a phase's interval log of ``metric`` in ``histograms/``: ``<phase>.<metric>.hlog``.

    The one definition of the pattern (``kvreplay.rundir.names`` re-exports it).
    """
    return f"{phase}.{metric}.hlog"


HEADER_LINES = ('#[Histogram log format version 1.2]\n'
                '"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"\n')
"""``HistogramLogWriter``'s ``output_log_format_version`` and ``output_legend`` lines."""


def hlog_header(comment: str) -> str:
    """The header of a new ``.hlog``: ``#<comment>``, the format version and the legend lines."""
    return f"#{comment}\n{HEADER_LINES}"


def new_log(path: Path, comment: str) -> BinaryIO:
    """Create ``path`` as a new ``.hlog`` holding its header (``hlog_header``), open for appending lines.

    Whatever sits at ``path`` is removed first (a symlink is removed, not followed),
    then the file is made with ``safe_io.open_new`` (O_NOFOLLOW, unbuffered).

    Raises:
        OSError: the file cannot be created, or the header not written whole.
    """
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)  # a stale or planted entry
    f = open_new(path)
    header = hlog_header(comment).encode("utf-8")
    try:
        if f.write(header) != len(header):
            raise OSError(errno.ENOSPC, f"short write to {path}")
    except BaseException:
        f.close()
        raise
    return f


def interval_line(encoded: str, max_us: int, start_s: float, end_s: float) -> str:
    """One interval line: ``start_s,length_s,max_ms,encoded``.

    The line ``hdrh``'s ``HistogramLogWriter.output_interval_histogram`` writes with a
    max-value unit ratio of 1000.

    Args:
        encoded: ``HdrHistogram.encode()`` of the interval (base64 text).
        max_us: The interval's ``get_max_value()`` (µs).
        start_s: Interval start (s from the run's origin).
        end_s: Interval end (s from the run's origin).
    """
    return f"{start_s:f},{end_s - start_s:f},{max_us // 1000.0:f},{encoded}\n"


def write_log(path: Path, hist: HdrHistogram, comment: str, start_s: float, end_s: float) -> None:
    """Write one histogram as an HdrHistogram interval log (one interval).

    The file is created without following a symlink (whatever sits at ``path``
    is removed first, then ``safe_io.open_new``); the runner appends intervals
    while a phase runs instead (``metrics.hlog.IntervalLogs``).

    Args:
        path: The ``.hlog`` file.
        hist: Values in µs (written with a max-value unit ratio of 1000, i.e. ms).
        comment: The ``#`` comment line.
        start_s: Interval start (s, run-relative).
        end_s: Interval end (s, run-relative).

    Raises:
        OSError: the file cannot be created or written.
    """
    with new_log(path, comment) as f:
        data = interval_line(hist.encode().decode("ascii"), hist.get_max_value(), start_s, end_s).encode("utf-8")
        if f.write(data) != len(data):
            raise OSError(errno.ENOSPC, f"short write to {path}")
