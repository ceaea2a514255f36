"""``HistogramArrays.from_histogram``: the steps of hdrh's recorded iterator, found from the counts with numpy.

The report reads each run's histograms through it (``rundir.hlogs.read_histograms``). The
values are HdrHistogram's highest equivalent value of each recorded slot (µs histograms of
``metrics.histograms.new_histogram``: 3 significant digits, so values up to 2047 are exact,
then the resolution doubles each power of two: 2048-4095 in steps of 2, 4096-8191 in steps
of 4, ...).
"""

from __future__ import annotations

import random

from hdrh.histogram import HdrHistogram

from kvreplay.metrics.histograms import new_histogram
from kvreplay.rundir import HistogramArrays


def _by_iterator(h: HdrHistogram) -> tuple[list[int], list[int]]:
    """The definition: hdrh's own recorded iterator (what ``from_histogram`` walked before)."""
    vals, counts = [], []
    for it in h.get_recorded_iterator():
        vals.append(it.value_iterated_to)
        counts.append(it.count_added_in_this_iter_step)
    return vals, counts


def test_by_hand():
    h = new_histogram()
    for v, n in ((1, 3), (1000, 2), (2048, 1), (2049, 1), (5000, 4)):
        h.record_value(v, n)
    arr = HistogramArrays.from_histogram(h)
    # 2048 and 2049 share a slot (steps of 2 there): its highest value is 2049, counted twice;
    # 5000 is in the steps of 4 (4096-8191): its slot is 5000-5003
    assert arr.value_us.tolist() == [1, 1000, 2049, 5003]
    assert arr.count.tolist() == [3, 2, 2, 4]
    assert arr.total == 11


def test_empty():
    arr = HistogramArrays.from_histogram(new_histogram())
    assert arr.value_us.tolist() == [] and arr.count.tolist() == [] and arr.total == 0


def test_the_iterators_steps_on_random_histograms():
    rnd = random.Random(43)
    for k in range(150):
        h = new_histogram()
        n = rnd.randrange(1, 400)
        for _ in range(n):
            shape = k % 3
            v = (rnd.randrange(1, 3000) if shape == 0 else int(rnd.lognormvariate(8, 2)) + 1 if shape == 1
                 else rnd.choice([1, 2047, 2048, 4095, 4096, 3_600_000_000]))
            h.record_value(min(v, 3_600_000_000), rnd.randrange(1, 5))
        if k % 2:  # through an interval log line's encoding, as read_hlog gets them
            h = HdrHistogram.decode(h.encode())
        arr = HistogramArrays.from_histogram(h)
        assert (arr.value_us.tolist(), arr.count.tolist()) == _by_iterator(h), k
