"""A real workload (mtbench-52, prime forward then replay reverse): one pass == the sim classes."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvreplay.offline.entries import entries_curve
from kvreplay.offline.reference import brute_entries, brute_radix
from kvreplay.offline.sources import (
    block_requests_from_models,
    interleave,
    model_requests,
    snapshot_requests,
)
from kvreplay.sim.tokenizer import render_body
from kvreplay.workload import load_workload

ROOT = Path(__file__).resolve().parents[3]
WL = load_workload(ROOT / "fixtures" / "workloads" / "mtbench-52")
ORDER = list(range(52)) + list(range(51, -1, -1))


@pytest.fixture(scope="module")
def reqs():
    return model_requests(WL, ORDER)


def test_rendering_matches_the_tokenizer(reqs):
    p = render_body(WL.bodies[3].decoded())
    assert reqs[3].tokens == p.tokens and reqs[3].messages_end == p.messages_end
    assert reqs[3].system_end == p.system_end > 0
    assert reqs[3].tokens == reqs[104 - 4].tokens  # same body in the reverse replay
    assert len(reqs[3].output) > 0


@pytest.mark.parametrize("points", [("system", "messages"), ("messages",)])
def test_entries_offer_equals_class(reqs, points):
    c = entries_curve(snapshot_requests(reqs, points))
    caps = [1, 2, 3, 8, 30, 52, 60, c.max_capacity, c.max_capacity + 5]
    for p in brute_entries(reqs, caps, points=points, recency="offer"):
        assert c.at(p.capacity) == (p.hit_requests, p.hit_tokens), p


def test_radix_equals_class(reqs):
    br = block_requests_from_models(reqs, 16)
    c = br.curve()
    caps = [1, 100, 250, 400, c.max_capacity, 20000]
    for p in brute_radix(reqs, caps, block_size=16):
        assert c.at(p.capacity) == (p.hit_requests, p.hit_tokens), p


def test_interleaved_radix_equals_class(reqs):
    foreign = model_requests(WL, list(range(40, 52)))
    mixed = interleave(reqs[:52], foreign, 4)
    assert len(mixed) == 65 and sum(r.counted for r in mixed) == 52
    br = block_requests_from_models(mixed, 16)
    c = br.curve()
    for p in brute_radix(mixed, [50, 200, 1000], block_size=16):
        assert c.at(p.capacity) == (p.hit_requests, p.hit_tokens), p
