"""One-pass LRU stack distances against hand-computed strings and a naive stack."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvreplay.offline.stack import count_below_in_prefix, lru_stack_distances, previous_positions


def naive(items, query_at=None):
    """List-based LRU stack: distance = 1-based depth before the request's first touch."""
    out = []
    stack: list = []
    snapshot: list = []
    last_q = None
    for t, x in enumerate(items):
        q = t if query_at is None else query_at[t]
        if q != last_q:
            snapshot, last_q = list(stack), q
        out.append(snapshot.index(x) + 1 if x in snapshot else 0)
        if x in stack:
            stack.remove(x)
        stack.insert(0, x)
    return out


def test_previous_positions():
    assert previous_positions(np.array([5, 7, 5, 5, 7, 9])).tolist() == [-1, -1, 0, 2, 1, -1]


def test_count_below_in_prefix_by_hand():
    values = np.array([-1, -1, 0, 2, 1, -1, 3])
    # prefix 7, values < 1: -1, -1, 0, -1 -> 4; prefix 3, < 0: 2; prefix 0: 0; prefix 5, < 3: all 5
    got = count_below_in_prefix(values, np.array([7, 3, 0, 5]), np.array([1, 0, 3, 3]))
    assert got.tolist() == [4, 2, 0, 5]


def test_distances_by_hand():
    # a b c a b b d a : a at 3 sees {b, c} since -> 3; b at 4 sees {c, a} -> 3; b again -> 1;
    # a at 7 sees {b, d} -> 3
    items = np.array(list(map(ord, "abcabbda")))
    assert lru_stack_distances(items).tolist() == [0, 0, 0, 3, 3, 1, 0, 3]


def test_lookup_before_update_within_request():
    # requests [a b] [b a]: looked up against the state after request 1 (a then b touched),
    # b has distance 1, a distance 2, although a plain string would give a = 1 after b.
    items = np.array([1, 2, 2, 1])
    q = np.array([0, 0, 2, 2])
    assert lru_stack_distances(items, q).tolist() == [0, 0, 1, 2]


def test_rejects_repeat_within_request():
    try:
        lru_stack_distances(np.array([1, 1]), np.array([0, 0]))
    except ValueError:
        return
    raise AssertionError("expected ValueError")


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 12), max_size=80))
def test_equals_naive_stack(items):
    assert lru_stack_distances(np.array(items, dtype=np.int64)).tolist() == naive(items)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sets(st.integers(0, 15), min_size=1, max_size=5), max_size=25), st.randoms())
def test_equals_naive_with_requests(reqs, rnd):
    items, q = [], []
    for r in reqs:
        r = list(r)
        rnd.shuffle(r)
        q += [len(items)] * len(r)
        items += r
    got = lru_stack_distances(np.array(items, dtype=np.int64), np.array(q, dtype=np.int64))
    assert got.tolist() == naive(items, q)
