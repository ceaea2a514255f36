"""The run's narrow per-request state (issue 32) equals the wide one it replaced.

- ``workload.index``: a body index's JSONL lines as a ``range`` when consecutive, its
  lengths as int32; the cache file keeps its int64 layout;
- ``plan.Pairs.product``: a phase's pairs as its ordered bodies times its repeats
  (a ``range`` for a contiguous selection) instead of one int64 pair per position;
- ``rundir.read_hlog``: the interval histograms are freed as they are added.
"""

from __future__ import annotations

import gc
import pickle
from array import array
from pathlib import Path

import pytest
from hdrh.histogram import HdrHistogram

from kvreplay.metrics.histograms import PhaseHistograms
from kvreplay.metrics.hlog import IntervalLogs
from kvreplay.plan import Pairs
from kvreplay.rundir import read_hlog
from kvreplay.workload import index as ix
from kvreplay.workload import load_workload


def _jsonl(tmp_path: Path, gap: bool) -> Path:
    p = tmp_path / "w.jsonl"
    bodies = [b'{"prompt":"%d"}' % i for i in range(5)]
    p.write_bytes(b"\n".join(bodies[:2]) + (b"\n\n" if gap else b"\n") + b"\n".join(bodies[2:]) + b"\n")
    return p


@pytest.mark.parametrize("cached", [False, True])
def test_consecutive_lines_are_a_range_and_lengths_int32(tmp_path, cached):
    wl = load_workload(_jsonl(tmp_path, gap=False), cache_min_bytes=0 if cached else 1 << 30)
    if cached:  # the second load reads the cache file
        wl = load_workload(_jsonl(tmp_path, gap=False), cache_min_bytes=0)
    e = wl.bodies.entries
    assert e.lines == range(1, 6) and list(e.lines) == [1, 2, 3, 4, 5]
    assert e.lengths.typecode == "i" and list(e.lengths) == [14] * 5
    assert [wl.bodies.entries.source_of(i) for i in (0, 4)] == ["w.jsonl:1", "w.jsonl:5"]
    assert [b.raw for b in wl.bodies] == [b'{"prompt":"%d"}' % i for i in range(5)]


def test_lines_with_a_gap_stay_an_array(tmp_path):
    e = load_workload(_jsonl(tmp_path, gap=True)).bodies.entries
    assert isinstance(e.lines, array) and list(e.lines) == [1, 2, 4, 5, 6]


def test_narrowing_by_hand(monkeypatch):
    monkeypatch.setattr(ix, "_RUN", 2)  # compared two values at a time
    assert ix._narrow_lines(array("q", [3, 4, 5, 6, 7])) == range(3, 8)
    for a in ([3, 4, 5, 7, 8], [0, 1, 2], [0, 0, 0], [5, 4]):  # off by one at the end, a folder's zeros
        assert isinstance(ix._narrow_lines(array("q", a)), array)
    assert ix._narrow_lengths(array("q", [1, 2**31 - 1])).typecode == "i"
    assert ix._narrow_lengths(array("q", [1, 2**31])).typecode == "q"
    assert ix._q_bytes(range(1, 4)) == ix._q_bytes(array("i", [1, 2, 3])) == array("q", [1, 2, 3]).tobytes()


def test_the_cache_file_keeps_its_int64_layout(tmp_path):
    p = _jsonl(tmp_path, gap=False)
    wl = load_workload(p, cache_min_bytes=0)
    e = wl.bodies.entries
    wide = ix.BodyIndex(e.path, e.folder, e.offsets, array("q", e.lengths), array("q", e.lines), e.digests,
                        e.flags, e.names, e.name_ends, e.sha256)
    key = ix.cache_key(p)
    assert b"".join(ix._encode(e, key)) == b"".join(ix._encode(wide, key)) == ix.cache_paths(p)[0].read_bytes()


@pytest.mark.parametrize("ordered", [range(3, 7), range(6, 2, -1), [2, 0, 1], range(0)])
@pytest.mark.parametrize("repeats", [1, 3])
def test_pairs_product_reads_like_the_pairs_of(ordered, repeats):
    want = tuple((b, r) for r in range(repeats) for b in ordered)
    got, old = Pairs.product(ordered, repeats), Pairs.of(want)
    assert len(got) == len(want) and tuple(got) == want and got == want and got == old and old == got
    assert [got[i] for i in range(-len(want), len(want))] == list(want) * 2 and got[1:5] == want[1:5]
    assert hash(got) == hash(old) == hash(want) and pickle.loads(pickle.dumps(got)) == want
    assert len(got.flat) == 0  # nothing per position
    with pytest.raises(IndexError):
        got[len(want)]


def test_read_hlog_leaves_no_interval_histogram_for_the_collector(tmp_path):
    ph = PhaseHistograms()
    hl = IntervalLogs(tmp_path / "h", "p", ph.sets, 0, 1)
    for k in range(6):  # six intervals
        ph.sets["ttft"].record_ns(1_000_000 * (k + 1))
        hl.cut(1_000_000_000 * (k + 1))
    hl.close(10_000_000_000)
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        before = sum(isinstance(o, HdrHistogram) for o in gc.get_objects())
        total = read_hlog(tmp_path / "h" / "p.ttft.hlog")
        after = sum(isinstance(o, HdrHistogram) for o in gc.get_objects())
    finally:
        if was:
            gc.enable()
    assert total.get_total_count() == 6 and after - before == 1  # the sum only, not its six parts
