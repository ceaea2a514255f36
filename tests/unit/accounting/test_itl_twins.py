"""The ITL summary (``itl_summary_ns``): native and pure twins give the same ints.

A record's ``itl`` summary and the phase's ITL histogram come from these (issue 21
item 2 moved them off numpy on the native side). Expected values are derived by
hand: gaps are successive differences; p50 is the upper median (index ``n // 2`` of
the sorted gaps).
"""

from __future__ import annotations

import importlib
import os
import random
from array import array

import pytest

from kvreplay.accounting import events


@pytest.fixture
def twin(helpers):
    """``itl_summary_ns`` of one twin (``conftest.helpers``)."""
    return helpers.itl_summary_ns


@pytest.mark.parametrize(("times", "expected"), [
    ([], None),
    ([7], None),
    ([0, 10], (1, 10, 10, 10)),
    ([0, 10, 30, 60, 100, 200], (5, 200, 100, 30)),   # gaps 10 20 30 40 100
    ([0, 5, 10, 15, 15, 15], (5, 15, 5, 5)),         # gaps 5 5 5 0 0 -> sorted 0 0 5 5 5
    ([100, 104, 105, 108, 110], (4, 10, 4, 3)),      # gaps 4 1 3 2 -> sorted 1 2 3 4, index 2
    ([10, 5, 20], (2, 10, 15, 15)),                  # a negative gap (-5) is kept as it is
    ([2**62, 2**62 + 3], (1, 3, 3, 3)),
])
def test_summary_by_hand(twin, times, expected):
    summary = twin
    assert summary(array("q", times)) == expected
    assert summary(list(times)) == expected  # any int sequence (the native side hands it to the pure twin)


def test_twins_agree_on_generated_streams():
    native = pytest.importorskip("kvreplay.accounting._sse_c") if os.environ.get(
        "KVREPLAY_NO_EXTENSIONS", "") != "1" else pytest.skip("native twin disabled")
    rng = random.Random(21)
    for _ in range(2000):
        n = rng.randrange(0, 400)
        t, acc = array("q"), rng.randrange(0, 10**12)
        for _ in range(n):
            acc += rng.choice((0, 1, 7, rng.randrange(0, 10**9)))
            t.append(acc)
        assert native.itl_summary_ns(t) == events.itl_summary_ns(t)


def test_facade_picks_one_side():
    sse = importlib.import_module("kvreplay.accounting.sse")
    side = "_sse_c" if sse.IMPLEMENTATION == "native" else "events"
    assert sse.itl_summary_ns.__module__.endswith(side)
