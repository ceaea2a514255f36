"""The report's narrow per-record state (issue 32) equals what the wide one gave.

Three representations were narrowed so that a 1,000,000-record report stays under
200 MB; each is pinned here against the old logic (kept in this file) or hand-derived
values on small hand-made inputs:

- ``report.stream.scan`` keeps one array of counter deltas per phase (the most
  preferred restore counter seen so far) instead of one per candidate counter;
- ``report.plots.bin_series`` summarises a group of bins at a time, with no sorted
  copy of the series;
- ``rundir.planfile.Entries`` holds an integer column as ``a + d * i`` while it
  follows that progression, and, read from a plan.json file, leaves the digests there.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import orjson
import pytest

from kvreplay.evidence import replay_orders
from kvreplay.report import plots
from kvreplay.report.stream import scan
from kvreplay.rundir import planfile as pf


def _rec(phase, pos, *, ok=True, delta=None):
    r = {"phase": phase, "position": pos, "sent": True, "status": "ok" if ok else "error",
         "ttft_ns": 1_000_000 * (pos + 1) if ok else None, "usage": {"cached_tokens": pos}}
    if delta is not None:
        r["counter_delta"] = delta
    return r


def test_scan_keeps_the_most_preferred_counter_seen_with_nan_before_it():
    recs = [
        # phase a: "hits" seen first (least preferred), then "hit_tokens" on a failed request
        _rec("a", 0),
        _rec("a", 1, delta={"hits": 3}),
        _rec("a", 2, ok=False, delta={"hit_tokens": 7}),
        _rec("a", 3, delta={"hit_tokens": 5, "hits": 1, "reset": True}),
        _rec("a", 4, delta={"hit_tokens": 2, "hits": 9}),
        # phase b: a host counter (preferred over device ones) with a non-numeric value
        _rec("b", 0, delta={"hit_tokens": 4}),
        _rec("b", 1, delta={"host_hits": "x", "hit_tokens": 6}),
        _rec("b", 2, delta={"host_hits": 8}),
        # phase c: no counters at all
        _rec("c", 0),
        _rec("c", 1),
    ]
    sc = scan(SimpleNamespace(summary={"phases": []}, record_list=recs, streamed=False))
    a, b, c = sc.phases["a"], sc.phases["b"], sc.phases["c"]
    assert list(a.pos) == [0.0, 1.0, 3.0, 4.0] and list(a.failed_pos) == [2.0]
    # hit_tokens per ok request: absent (0, 1), reset (3), 2 (4); not the "hits" column [nan, 3, nan, 9]
    assert a.restore_key == "hit_tokens"
    assert [None if math.isnan(v) else v for v in a.restore] == [None, None, None, 2.0]
    assert b.restore_key == "host_hits"
    assert [None if math.isnan(v) else v for v in b.restore] == [None, None, 8.0]
    assert c.restore_key is None and len(c.restore) == 0 and list(c.ttft_ms) == [1.0, 2.0]


def _bin_series_sorted(pos, values, bins):
    """``plots.bin_series`` as it was before issue 32's narrowing: one sort by bin, whole copies."""
    lo, hi = float(pos.min()), float(pos.max())
    width = max((hi - lo + 1) / bins, 1.0)
    idx = np.minimum(((pos - lo) / width).astype(np.int64), bins - 1)
    order = np.argsort(idx, kind="stable")
    present, starts = np.unique(idx[order], return_index=True)
    out = []
    for v in values:
        sv = v[order]
        mins, meds, maxs = (np.full(len(present), np.nan) for _ in range(3))
        for j, chunk in enumerate(np.split(sv, starts[1:])):
            chunk = chunk[~np.isnan(chunk)]
            if len(chunk):
                mins[j], meds[j], maxs[j] = chunk.min(), np.median(chunk), chunk.max()
        out.append((mins, meds, maxs))
    return lo + (present + 0.5) * width, out, width


def test_bin_series_by_hand():
    # positions 0..9 in 5 bins of width 2, out of order; bin 3 (positions 6, 7) holds only NaN
    pos = np.array([9, 0, 3, 1, 2, 8, 6, 7, 5, 4], dtype=np.float64)
    v = np.array([90, 0, 30, 10, 20, 80, np.nan, np.nan, 50, 40], dtype=np.float64)
    xs, [(mn, md, mx)], width = plots.bin_series(pos, [v], bins=5)
    assert width == 2.0 and list(xs) == [1.0, 3.0, 5.0, 7.0, 9.0]
    assert list(mn[[0, 1, 2, 4]]) == [0, 20, 40, 80] and list(md[[0, 1, 2, 4]]) == [5, 25, 45, 85]
    assert list(mx[[0, 1, 2, 4]]) == [10, 30, 50, 90] and math.isnan(md[3])


@pytest.mark.parametrize("group", [1, 2, 3, 32])
def test_bin_series_in_groups_equals_one_sort(monkeypatch, group):
    monkeypatch.setattr(plots, "BIN_GROUP", group)
    monkeypatch.setattr(plots, "_SPAN", 7)
    rng = np.random.default_rng(3)
    pos = rng.permutation(np.arange(5, 400, dtype=np.float64))
    pos = np.concatenate([pos, pos[:37]])  # repeated positions
    a = rng.normal(size=len(pos))
    b = rng.integers(0, 50, size=len(pos)).astype(np.float64)
    b[rng.random(len(pos)) < 0.3] = np.nan
    b[(pos > 100) & (pos < 140)] = np.nan  # whole bins of NaN
    for bins in (1, 7, 40):
        got = plots.bin_series(pos, [a, b], bins=bins)
        want = _bin_series_sorted(pos, [a, b], bins)
        assert got[2] == want[2] and np.array_equal(got[0], want[0])
        for g, w in zip(got[1], want[1], strict=True):
            for x, y in zip(g, w, strict=True):
                assert np.array_equal(x, y, equal_nan=True)


def _entry(pos, bi, rep=0, ins=None, sha=None):
    e = {"position": pos, "body_index": bi, "body_sha256": sha or f"{bi:064x}", "repetition": rep}
    if ins is not None:
        e["intended_ns"] = ins
    return e


def test_entries_of_a_forward_phase_keep_no_integers_per_entry(monkeypatch):
    monkeypatch.setattr(pf.Entries, "_BATCH", 3)
    es = pf.Entries()
    want = [_entry(i, 10 - i) for i in range(8)]  # positions 0.., body indices descending
    for e in want:
        es.append(e)
    assert list(es) == want and [es[i] for i in range(-8, 8)] == want + want
    assert all(c.arr is None for c in es.cols) and len(es.digests) == 32 * 8


@pytest.mark.parametrize("batch", [1, 2, 3, 4096])
def test_entries_leave_a_progression_exactly_where_it_breaks(monkeypatch, batch):
    monkeypatch.setattr(pf.Entries, "_BATCH", batch)
    want = [_entry(0, 5, ins=100), _entry(1, 6, ins=250),  # intended_ns 100, 250: then off (400 expected)
            _entry(2, 7, ins=401), _entry(3, 3, rep=1), _entry(4, 9, ins=2**63 - 1),
            {"position": 5, "body_index": 1, "body_sha256": "not hex", "repetition": 0},
            _entry(6, 11), _entry(7, 12, rep=1)]
    es = pf.Entries()
    for k, e in enumerate(want):
        es.append(e)
        assert es[k] == e  # read between appends (a partial batch settled early)
    assert list(es) == want and es[1:4] == want[1:4]
    assert all(c.arr is not None for c in es.cols[:4])  # the entry kept as its dict holds zeros there


def _two_phase_plan_bytes():
    h = [f"{k:02x}" * 32 for k in (1, 2, 3, 4)]
    seq1 = [_entry(p, b, sha=h[b]) for p, b in enumerate([0, 1, 2, 1, 0, 3])]
    seq1.insert(2, {"position": 2, "body_index": 7, "body_sha256": "not hex", "repetition": 0})  # kept as its dict
    for p, e in enumerate(seq1):
        e["position"] = p
    seq2 = [_entry(p, b, sha=h[b], ins=1000 * p) for p, b in enumerate([3, 0, 3, 1])]
    plan = {"format": 1, "phases": [{"name": "prime", "order": "forward", "sequence": seq1},
                                    {"name": "replay", "order": "reverse", "sequence": seq2}]}
    return orjson.dumps(plan, option=orjson.OPT_INDENT_2)


@pytest.mark.parametrize("read", [1, 7, 64, 1 << 20])
def test_file_backed_entries_read_the_digests_the_memory_ones_hold(tmp_path, monkeypatch, read):
    monkeypatch.setattr(pf.Entries, "_READ", read)  # entries straddling every read boundary
    data = _two_phase_plan_bytes()
    (tmp_path / "plan.json").write_bytes(data)
    got, want = pf.compact_plan_file(tmp_path / "plan.json"), pf.compact_plan(data)
    for g, w in zip(got["phases"], want["phases"], strict=True):
        gs, ws = g["sequence"], w["sequence"]
        assert gs.path is not None and ws.path is None and len(gs._digests) == 0  # nothing held per entry
        assert bytes(gs.digests) == bytes(ws.digests) and list(gs) == list(ws)
        assert [gs[i] for i in range(len(gs))] == list(ws) and gs[1:3] == ws[1:3]
    # by hand: prime's firsts 0 1 (not hex) 2 3; replay's firsts 3 0 1 were all sent before
    assert [e["body_index"] for e in got["phases"][0]["sequence"]] == [0, 1, 7, 2, 3]
    assert replay_orders({"phases": [{"name": "prime"}, {"name": "replay"}]}, got, []) == {"replay": "reverse"}


def test_file_backed_entries_refuse_a_plan_changed_after_reading(tmp_path):
    data = _two_phase_plan_bytes()
    (tmp_path / "plan.json").write_bytes(data)
    got = pf.compact_plan_file(tmp_path / "plan.json")
    (tmp_path / "plan.json").write_bytes(data.replace(b'"position": 1,', b'"position": 9,', 1))
    with pytest.raises(ValueError, match="not the one read"):
        list(got["phases"][0]["sequence"])
