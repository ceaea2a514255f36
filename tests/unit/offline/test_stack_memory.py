"""The memory-lean stack distances (issue 32: ``simulate`` at a million requests in <= 1 GB).

``offline/stack.py`` works in int32 positions, one chunk of positions (``CHUNK``) per
level of the merge-sort tree, and ``load_block_trace`` / ``block_requests_from_trace``
keep no per-block Python object. The curve must be exactly the one of the earlier
all-at-once int64 code: the figures below were printed by that code (commit 0338301)
on the same seeded traces, and are checked both at the default ``CHUNK`` and with
chunks of 64 positions (hundreds of chunks per level).
"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from kvreplay.offline import stack
from kvreplay.offline.sources import block_requests_from_trace
from kvreplay.offline.stack import count_below_in_prefix, stack_distances_compact
from kvreplay.offline.traces import load_block_trace


def _naive_count(values, ends, thresholds):
    return [sum(1 for j in range(e) if values[j] < t) for e, t in zip(ends, thresholds, strict=True)]


def _naive_lru(items, q):
    out = []
    for t, x in enumerate(items):
        prev = max((j for j in range(t) if items[j] == x), default=-1)
        out.append(0 if prev < 0 else len(set(items[prev + 1 : q[t]])) + 1)
    return out


@pytest.mark.parametrize("chunk", [1, 2, 4, 8, 1 << 20])
def test_chunked_count_equals_naive(chunk):
    rng = np.random.default_rng(5)
    for _ in range(40):
        n = int(rng.integers(1, 90))
        values = rng.integers(-1, n, n)
        ends = rng.integers(0, n + 1, 30)  # unsorted: the permuted path
        thresholds = rng.integers(-1, n + 2, 30)
        got = count_below_in_prefix(values, ends, thresholds, chunk=chunk)
        assert got.dtype == np.int64
        assert got.tolist() == _naive_count(values.tolist(), ends.tolist(), thresholds.tolist())
        srt = np.sort(ends)  # sorted: no permutation
        got = count_below_in_prefix(values, srt, thresholds, chunk=chunk)
        assert got.tolist() == _naive_count(values.tolist(), srt.tolist(), thresholds.tolist())


def test_chunk_must_be_a_power_of_two():
    with pytest.raises(ValueError, match="power of two"):
        count_below_in_prefix(np.array([0]), np.array([1]), np.array([0]), chunk=3)


def test_compact_distances_by_request_starts(monkeypatch):
    monkeypatch.setattr(stack, "CHUNK", 4)
    rnd = random.Random(3)
    for _ in range(30):
        items, q, starts = [], [], [0]
        for _ in range(rnd.randrange(1, 12)):
            req = rnd.sample(range(1 << 40, (1 << 40) + 15), rnd.randrange(1, 5))  # ids past int32
            q += [len(items)] * len(req)
            items += req
            starts.append(len(items))
        got = stack_distances_compact(np.array(items, dtype=np.int64), request_starts=np.array(starts))
        assert got.dtype == np.int32
        assert got.tolist() == _naive_lru(items, q)
    with pytest.raises(ValueError, match="twice within one request"):
        stack_distances_compact(np.array([7, 7]), request_starts=np.array([0, 2]))
    with pytest.raises(ValueError, match="not both"):
        stack_distances_compact(np.array([7]), np.array([0]), request_starts=np.array([0, 1]))


def _trace(path, n, *, partial, seed=7):
    """``bench_scale.make_block_trace``'s shape, with a partial last block when ``partial``."""
    rng = random.Random(seed)
    with open(path, "w") as f:
        nxt = 10_000
        for i in range(n):
            shared = list(range(rng.randrange(0, 40)))
            own = list(range(nxt, nxt + rng.randrange(1, 8)))
            nxt += len(own)
            extra = rng.randrange(0, 512) if partial else 0
            f.write(json.dumps({"timestamp": i * 5, "input_length": 512 * (len(shared) + len(own)) - extra,
                                "output_length": 8, "hash_ids": shared + own}) + "\n")


# Printed by the code before this change (commit 0338301), 3,000 requests, seed 7.
PINNED = {
    True: (69829, 3000, 34989060, 575,
           [(2849, 1458688), (2857, 2863616), (2891, 6749696), (2914, 12366848), (2914, 28141568),
            (2914, 28275712), (2914, 28389888), (2914, 29665792), (2914, 29777920), (2914, 29777920)],
           (58160, 16660726784, 1675328, 32540482)),
    False: (69085, 3000, 35371520, 775,
            [(2852, 1460224), (2870, 2861568), (2895, 6678528), (2925, 12098560), (2925, 27148288),
             (2925, 27284480), (2925, 27414528), (2925, 29138944), (2925, 29322752), (2925, 29322752)],
            (57271, 22240530432, 2266588, 43438536)),
}


@pytest.mark.parametrize("chunk", [None, 64])
@pytest.mark.parametrize("partial", [True, False])
def test_trace_curve_is_the_one_before(tmp_path, monkeypatch, partial, chunk):
    if chunk is not None:
        monkeypatch.setattr(stack, "CHUNK", chunk)
    p = tmp_path / "t.jsonl"
    _trace(p, 3000, partial=partial)
    tr = load_block_trace(p)
    br = block_requests_from_trace(tr)
    if not partial:
        assert br.blocks is tr.blocks  # every block full: the trace's own array, no copy
    c = br.curve()
    n_refs, requests, prompt, top, at, sums = PINNED[partial]
    assert (len(tr.blocks), c.requests, c.prompt_tokens, c.max_capacity) == (n_refs, requests, prompt, top)
    caps = [1, 2, 5, 10, 39, 40, 41, 100, 1000, c.max_capacity]
    assert [c.at(k) for k in caps] == at
    got = (int(c.hit_units[-1]), int(c.hit_tokens.sum()), int(c.hit_requests.sum()), int(c.hit_units.sum()))
    assert got == sums
