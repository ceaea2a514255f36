"""loop_seconds and add_sizing with a non-zero warm base (issue 29: no test held hit_base_s)."""

from __future__ import annotations

import pytest

from kvreplay.offline.report import PrefillModel
from kvreplay.offline.sizing import add_sizing, loop_seconds

MODEL = PrefillModel(1.5, 1000.0)


def test_loop_seconds_pays_the_warm_base_on_hits():
    # cold 10 x 1.5 + 10,000 / 1000 = 25 s; 4 hits skip a but pay 0.25 s each (4 x 1.25 = 5 s
    # saved), 2,000 cached tokens skip 2 s of prefill and cost 2,000 x 1e-5 = 0.02 s to restore
    kw = dict(requests=10, prompt_tokens=10_000, hit_requests=4, hit_tokens=2_000, prefill=MODEL)
    assert loop_seconds(**kw, hit_base_s=0.25, restore_s_per_token=1e-5) == pytest.approx(18.02, abs=1e-12)
    assert loop_seconds(**kw, hit_base_s=0.0, restore_s_per_token=1e-5) == pytest.approx(17.02, abs=1e-12)
    # a warm base equal to a: hits save only their cached tokens
    assert loop_seconds(**kw, hit_base_s=1.5, restore_s_per_token=0.0) == pytest.approx(23.0, abs=1e-12)


def test_add_sizing_passes_the_warm_base_on():
    rows = [{"capacity": 3, "hit_requests": 4, "hit_tokens": 2_000}]
    add_sizing(rows, unit="entry", requests=10, prompt_tokens=10_000, prefill=MODEL, entry_size=1 << 30,
               hit_base_s=0.25, restore_s_per_token=1e-5)
    assert rows[0]["loop_s"] == pytest.approx(18.02, abs=1e-12)
    assert rows[0]["memory_gib"] == 3.0
