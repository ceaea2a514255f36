"""The HdrHistogram interval logs of a run directory (``histograms/<phase>.<metric>.hlog``), read back.

The runner writes them (``kvreplay.metrics.hlog``: one interval appended per
second of a phase since issue 21, one per phase before); every interval of a
file is added into one histogram (a torn last line of a killed run is left out).
Source: the HdrHistogram interval log format, version 1.2
(``HistogramLogWriter`` / ``HistogramLogReader`` in HdrHistogram and
HdrHistogram_py): comment lines start with ``#``, a
``"StartTimestamp","Interval_Length","Interval_Max","Interval_Compressed_Histogram"``
legend, then one line per interval whose last field is a base64, zlib
compressed histogram. Values are integer microseconds (1 µs to 1 h, 3
significant digits, ``kvreplay.metrics.histograms``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hdrh.histogram import HdrHistogram

from kvreplay.metrics.histograms import new_histogram
from kvreplay.rundir.names import HISTOGRAMS

if TYPE_CHECKING:
    import numpy as np

__all__ = ["HistogramArrays", "read_histograms", "read_hlog"]


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
        import numpy as np
        if self.total == 0:
            return np.zeros(0), np.zeros(0)
        return self.value_us / 1000.0, np.cumsum(self.count) / self.total

    def percentile_ms(self, q: float) -> float | None:
        """Value at percentile ``q`` (0-100) in ms; None when empty.

        HdrHistogram's rule: the first value whose cumulative count reaches
        ``ceil(q / 100 * total)``.
        """
        import numpy as np
        n = self.total
        if n == 0:
            return None
        need = max(1, int(np.ceil(q / 100.0 * n)))
        i = int(np.searchsorted(np.cumsum(self.count), need))
        return float(self.value_us[min(i, len(self.value_us) - 1)]) / 1000.0

    @classmethod
    def from_histogram(cls, h: HdrHistogram) -> HistogramArrays:
        """Arrays from a ``hdrh`` histogram's recorded values: the steps of its recorded iterator.

        One step per count slot that holds a count, in slot order, until ``total_count``
        values are counted: the value is hdrh's ``get_highest_equivalent_value`` of the slot's
        ``get_value_from_index``, the count the slot's (as ``get_recorded_iterator`` gives
        ``value_iterated_to`` and ``count_added_in_this_iter_step``). The slots are found with
        numpy, not by stepping through all of them in Python (~23,000 slots: 20 ms a histogram
        by the iterator, the report's reading of a run's five).
        """
        import numpy as np
        if h.total_count <= 0:
            return cls(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        counts = np.ctypeslib.as_array(h.counts)[: h.counts_len]
        idx = np.flatnonzero(counts)
        c = counts[idx].astype(np.int64)
        stop = int(np.searchsorted(np.cumsum(c), h.total_count))  # the iterator ends at total_count
        idx, c = idx[: stop + 1], c[: stop + 1]
        vals = [h.get_highest_equivalent_value(h.get_value_from_index(int(i))) for i in idx]
        return cls(np.asarray(vals, dtype=np.int64), c)


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
            other = HdrHistogram.decode(fields[3].strip(), total.b64_wrap)
            total.add(other)
            # hdrh's histogram and its encoder refer to each other: freed now, not at the next
            # garbage collection (a long run's hundreds of intervals, ~100 KB each; issue 32)
            other.encoder = None
        except Exception as exc:  # noqa: BLE001 - hdrh raises TypeError, zlib.error and its own classes
            raise ValueError(f"{path}:{i}: interval histogram cannot be decoded: {exc}") from None
    return total


def read_histograms(run_dir: Path) -> dict[str, dict[str, HistogramArrays]]:
    """``{phase: {metric: HistogramArrays}}`` of every ``.hlog`` in ``run_dir/histograms`` ({} without it).

    A file that cannot be read or decoded is left out.
    """
    hists: dict[str, dict[str, HistogramArrays]] = {}
    hdir = run_dir / HISTOGRAMS
    if hdir.is_dir():
        for f in sorted(hdir.glob("*.hlog")):
            phase, _, metric = f.name[: -len(".hlog")].rpartition(".")
            try:
                arr = HistogramArrays.from_histogram(read_hlog(f))
            except (OSError, ValueError):
                continue
            hists.setdefault(phase, {})[metric] = arr
    return hists
