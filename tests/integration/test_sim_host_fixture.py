"""The host-cache fixture reproduces the plan's three observations (issue 18).

Observations of the host-cache plan (fixtures/plans/host-cache.toml: prime forward,
replay forward, last 12 twice) on the measured server:
  1. 52 host rows retained after the prime;
  2. zero host tokens restored on the forward replay;
  3. the small working set (last 12) restoring.
Derivation for leaf-lru with 52 rows (cache_host docstring; same steps as scenario 3a
in test_sim_scenarios.py): the prime stores 3 rows per body (m, p, t) = 156 into 52
rows, evicting whole bodies oldest first, so rows 52 = bodies 35..51 whole (51 rows)
plus body 34's m. The forward replay reaches body i after its rows were evicted (the
prime and the replay's own stores push them out 17 bodies ahead): zero host hits; it
ends holding the same shape, bodies 35..51. The control's bodies 40..51 are all held:
12 host hits on the first pass, each on its prompt row p (credit n - 1), and 12 again
on the second (a hit stores nothing). The alternatives each miss one observation:
leaf-lru with 40 rows retains 40; ancestor-compact (200 rows) retains 52 and restores
nothing on the forward replay, but its control restores nothing either.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from kvreplay.sim import SimConfig
from kvreplay.sim.engine import SimEngine, generate_output
from kvreplay.sim.tokenizer import render_body

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "fixtures" / "sim" / "host-cache.toml"
BODIES = [p.read_bytes() for p in sorted((ROOT / "fixtures" / "workloads" / "mtbench-52").glob("*.json"))]
FWD = list(range(len(BODIES)))
LAST12 = FWD[-12:]


def run_plan(cfg: SimConfig):
    eng = SimEngine(cfg)
    seq = 0

    def phase(order):
        nonlocal seq
        cached = []
        for i in order:
            seq += 1
            body = orjson.loads(BODIES[i])
            prompt = render_body(body)
            t = eng.admit(seq, prompt)
            eng.prefilled(t)
            gen = generate_output(BODIES[i], body, cfg)
            eng.finish(t, gen.token_ids, gen.finish_reason)
            cached.append((t.cached_tokens, t.external_tokens, len(prompt)))
        return cached

    phase(FWD)  # the prime
    rows_after_prime = eng.radix.host.rows_used
    fwd = phase(FWD)
    c1 = phase(LAST12)
    c2 = phase(LAST12)
    return rows_after_prime, fwd, c1, c2


def observations(cfg):
    rows, fwd, c1, c2 = run_plan(cfg)
    restored_fwd = sum(ext for _c, ext, _n in fwd)
    control_hits = sum(1 for _c, ext, _n in c1 + c2 if ext > 0)
    return rows, restored_fwd, control_hits, c1, c2


def test_fixture_reproduces_all_three():
    cfg = SimConfig.from_toml(FIXTURE, base=SimConfig(time_scale=0.0))
    assert (cfg.cache, cfg.host_rows, cfg.host_evict, cfg.device_blocks) == ("radix", 52, "leaf-lru", 215)
    rows, restored_fwd, control_hits, c1, c2 = observations(cfg)
    assert rows == 52  # 1
    assert restored_fwd == 0  # 2
    assert control_hits == 24  # 3: every control request, both passes
    assert [c for c, _e, _n in c1] == [n - 1 for _c, _e, n in c1]  # credit n - 1 (prompt row)
    assert c1 == c2


@pytest.mark.parametrize(
    ("kw", "expected"),
    [
        ({"host_rows": 40}, (40, 0, 24)),  # retains 40, not 52
        ({"host_rows": 200, "host_pages": 8192, "host_evict": "ancestor-compact"}, (52, 0, 0)),
    ],
)
def test_alternatives_miss_one_observation(kw, expected):
    base = SimConfig.from_toml(FIXTURE, base=SimConfig(time_scale=0.0))
    cfg = SimConfig.from_mapping(kw, base=base)
    rows, restored_fwd, control_hits, _c1, _c2 = observations(cfg)
    assert (rows, restored_fwd, control_hits) == expected
