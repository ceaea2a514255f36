"""Entries model: the one-pass curve equals the simulator's EntriesCache(recency="offer")."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvreplay.offline.entries import SnapshotRequest, entries_curve
from kvreplay.offline.reference import brute_entries
from kvreplay.offline.sources import ModelRequest, snapshot_requests
from kvreplay.sim.cache_entries import EntriesCache

SYS = (1, 2, 3)


def req(*parts, system=True):
    toks = (SYS if system else ()) + tuple(t for p in parts for t in p)
    return ModelRequest(toks + (9,), (), len(SYS) if system else 0, len(toks))


def test_by_hand():
    # bodies: A, B, A again, C. Snapshots: S (3 tokens, system) and the messages snapshot.
    A, B, C = req((10, 11)), req((20,)), req((30, 31, 32))
    reqs = snapshot_requests([A, B, A, C], ("system", "messages"))
    c = entries_curve(reqs)
    # reference string (offer order): S a | S b | S a | S c ; lookups before each request
    # A2: candidates S (distance 2: b, S above? after B the stack is b, S, a -> S=2, a=3)
    #     credited a = 5 tokens at N >= 3, S = 3 tokens at N >= 2
    # B: S at distance 2 (stack a, S) -> 3 tokens at N >= 2
    # C: stack after A2 is a, S, b -> S at 2 -> 3 tokens at N >= 2
    assert c.at(1) == (0, 0)
    assert c.at(2) == (3, 9)
    assert c.at(3) == (3, 11)
    assert c.max_capacity == 3 and c.requests == 4 and c.prompt_tokens == 6 + 5 + 6 + 7


def test_hit_credit_leaves_one_token():
    t = (5, 6, 7)
    c = entries_curve([SnapshotRequest(t, (3,)), SnapshotRequest(t, (3,))])
    assert c.at(1) == (1, 2)  # min(3, n - 1)


def test_refused_snapshots_never_hit():
    A = req((10, 11))
    reqs = snapshot_requests([A, A], ("system", "messages"))
    refusing = entries_curve(reqs, max_entry_tokens=4, truncate=False)
    assert refusing.at(5) == (1, 3)  # only S (3 tokens) stored
    assert entries_curve(reqs).at(5) == (1, 5)


def test_over_cap_snapshots_truncate_by_default():
    A = req((10, 11))
    reqs = snapshot_requests([A, A], ("system", "messages"))
    # M (5 tokens) is cut to its first 4: the repeat hits 4 tokens, as the simulator's class
    assert entries_curve(reqs, max_entry_tokens=4).at(5) == (1, 4)
    pts = brute_entries([A, A], [5], points=("system", "messages"), max_entry_bytes=4, bytes_per_token=1)
    assert (pts[0].hit_requests, pts[0].hit_tokens) == (1, 4)


def test_use_recency_is_not_a_stack_algorithm():
    """Why recency="use" gets the brute-force path: its hits fall from 4 to 5 entries.

    R1 stores S1=(1,2), M1=(1,2,7); R2 stores S2=(3,), M2=(3,7). R3 hits M1 and touches it.
    With 3 entries S1 was already gone, so R3 stores it anew (most recent) and R4 hits it.
    With 4 entries S1 is still held, so R3's offer does not refresh it, M3 evicts it, R4 misses.
    """
    t = [
        ModelRequest((1, 2, 7, 9), (), 2, 3),
        ModelRequest((3, 7, 9), (), 1, 2),
        ModelRequest((1, 2, 7, 6, 5, 9), (), 2, 5),
        ModelRequest((1, 2, 5, 6, 9), (), 2, 4),
    ]
    pts = ("system", "messages")
    use = [p.hit_tokens for p in brute_entries(t, range(1, 6), points=pts)]
    assert use == [0, 2, 5, 3, 5]
    offer = [p.hit_tokens for p in brute_entries(t, range(1, 6), points=pts, recency="offer")]
    c = entries_curve(snapshot_requests(t, pts))
    assert [c.at(n)[1] for n in range(1, 6)] == offer == sorted(offer)


@st.composite
def conversations(draw):
    systems = [(1, 2, 3), (4, 5, 6, 7)]
    convs, out = [], []
    for _ in range(draw(st.integers(1, 20))):
        if convs and draw(st.booleans()):
            c = draw(st.sampled_from(convs))
            if draw(st.booleans()):
                c.append(tuple(draw(st.lists(st.integers(10, 14), min_size=1, max_size=3))))
        else:
            c = [
                draw(st.sampled_from(systems)),
                tuple(draw(st.lists(st.integers(10, 14), min_size=1, max_size=3))),
            ]
            convs.append(c)
        toks = tuple(t for seg in c for t in seg)
        epoch = (
            draw(st.sampled_from([0, 0, 0, 1]))
            if out and out[-1].epoch == 0
            else (out[-1].epoch if out else 0)
        )
        out.append(
            ModelRequest(toks + (99,), (), len(c[0]), len(toks), draw(st.booleans()) or True, epoch)
        )
    return out


@settings(max_examples=80, deadline=None)
@given(
    conversations(), st.sampled_from([("system", "messages"), ("messages",), ("system", "prompt")])
)
def test_equals_entriescache_at_every_capacity(reqs, points):
    c = entries_curve(snapshot_requests(reqs, points))
    caps = list(range(1, c.max_capacity + 3))
    for p in brute_entries(reqs, caps, points=points, recency="offer"):
        assert c.at(p.capacity) == (p.hit_requests, p.hit_tokens), p


def test_offer_refreshes_in_the_class():
    e = EntriesCache(max_entries=2, recency="offer")
    e.store((1, 2, 3), (1,))
    e.store((5, 6), (1,))
    e.store((1, 2, 3), (1,))  # refresh (1,)
    e.store((7,), (1,))  # evicts (5,), not (1,)
    assert e.lookup((1, 9)).hit and not e.lookup((5, 9)).hit
