"""ITL gaps recorded natively into the HdrHistogram counts equal the numpy path and hdrh's own.

``LatencySet.record_gaps_of`` writes a stream's gaps straight into the counts
(``accounting.sse.hdr_record_gaps``, native) or buffers them for numpy (pure).
Both must leave the same histogram as ``hdrh``'s ``record_value`` on the rounded
µs values (the reference), with out-of-range values counted, not recorded.
"""

from __future__ import annotations

import os
import random
from array import array

import pytest
from hdrh.histogram import HdrHistogram

from kvreplay.accounting import sse
from kvreplay.metrics.histograms import HIGHEST_US, LOWEST_US, SIG_FIGS, LatencySet

NATIVE = sse.hdr_record_gaps is not None


def _times(gaps_ns: list[int], t0: int = 10**12) -> array:
    t = array("q", [t0])
    for g in gaps_ns:
        t.append(t[-1] + g)
    return t


# gaps (ns) -> rounded µs: 0 -> 1 (raised), 499 -> 1 (0.499 µs rounds to 0, raised), 500 -> 1, 1_499 -> 1,
# 1_500 -> 2, 2_047_499 -> 2047 (last exact sub-bucket value), 2_048_600 -> 2049 (shares 2048's bucket
# at 3 significant digits), 3_600_000_000_000 -> 3.6e9 µs (1 h, in range), 10**17 ns -> out of range,
# -7 (a clock step back) -> 1
EDGE_GAPS = [0, 499, 500, 1_499, 1_500, 2_047_499, 2_048_600, 3_600_000_000_000, 10**17, -7]


def _reference(gaps_ns: list[int]) -> tuple[list[int], int, int, int, int]:
    h = HdrHistogram(LOWEST_US, HIGHEST_US, SIG_FIGS)
    total, oor = 0, 0
    for g in gaps_ns:
        us = max(LOWEST_US, (g + 500) // 1000)
        if h.record_value(us):
            total += us
        else:
            oor += 1
    return list(h.counts), h.total_count, h.min_value, h.max_value, total


def _state(ls: LatencySet) -> tuple:
    h = ls.hist
    return list(h.counts), h.total_count, h.min_value, h.max_value, ls.sum_us, ls.out_of_range


def test_edge_gaps_by_hand():
    ls = LatencySet()
    ls.record_gaps_of(_times(EDGE_GAPS))
    counts, n, lo, hi, total = _reference(EDGE_GAPS)
    # 10 gaps, one (1e17 ns) out of range; the smallest is 1 µs, the largest 1 h
    assert (ls.hist.total_count, ls.out_of_range, ls.hist.min_value, ls.hist.max_value) == (9, 1, 1, 3_600_000_000)
    assert ls.sum_us == 1 + 1 + 1 + 1 + 2 + 2047 + 2049 + 3_600_000_000 + 1 == total
    assert _state(ls)[:4] == (counts, n, lo, hi)


@pytest.mark.skipif(not NATIVE or os.environ.get("KVREPLAY_NO_EXTENSIONS") == "1", reason="native side only")
def test_native_and_numpy_paths_leave_the_same_histogram():
    rng = random.Random(2121)
    native, numpy_path = LatencySet(), LatencySet()
    numpy_path._addr = 0  # the pure side's path: buffer + numpy
    for _ in range(300):
        gaps = [rng.choice((rng.randrange(0, 3_000), rng.randrange(0, 10**9), rng.choice(EDGE_GAPS)))
                for _ in range(rng.randrange(0, 200))]
        native.record_gaps_of(_times(gaps))
        numpy_path.record_gaps_of(_times(gaps))
    assert _state(native) == _state(numpy_path)
    assert native.hist.total_count > 20_000


def test_a_list_of_times_takes_the_buffered_path():
    ls = LatencySet()
    ls.record_gaps_of([0, 1_000, 3_000])  # not an array('q'): buffered, recorded on read
    assert (ls.hist.total_count, ls.sum_us, ls.hist.min_value, ls.hist.max_value) == (2, 3, 1, 2)
