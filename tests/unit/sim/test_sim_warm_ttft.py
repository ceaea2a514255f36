"""Warm TTFT at default settings (issue 18, docs/simulator.md "Warm TTFT").

Decision: the cold fit's fixed cost ``a`` (prefill_base_s = 1.52 s) is paid by a
request with no cached tokens; a request with cached tokens pays
``hit_prefill_base_s`` (default 0) plus its tail at the prefill rate plus the
restore (2e-5 s per restored token). Hand-computed:

  cold 24130 tokens:  1.52 + 24130 / 1370                    = 19.133 s
  warm 24000 cached + 130-token tail:
      prefill 0 + 130 / 1370 = 0.0948905 s, restore 24000 x 2e-5 = 0.48 s
      TTFT = 0.5748905 s  (halogen resumes in 0.2-0.7 s)
"""

from __future__ import annotations

import pytest

from kvreplay.sim.config import SimConfig
from kvreplay.sim.engine import SimEngine
from kvreplay.sim.tokenizer import Prompt

SYSTEM = tuple(range(1000, 25000))  # 24000 tokens
TAIL_A = tuple(range(50000, 50130))  # 130 tokens
TAIL_B = tuple(range(60000, 60130))


def prompt(tail):
    toks = SYSTEM + tail
    return Prompt(toks, len(SYSTEM), len(toks))


def test_cold_keeps_the_fit_and_warm_resume_is_0_2_to_0_7_s():
    eng = SimEngine(SimConfig())
    cold = eng.admit(1, prompt(TAIL_A))
    assert cold.cached_tokens == 0
    assert cold.prefill_s + cold.restore_s == pytest.approx(1.52 + 24130 / 1370, abs=1e-12)
    eng.finish(cold, (1,), "stop")  # stores the 24000-token system snapshot
    warm = eng.admit(2, prompt(TAIL_B))
    assert warm.cached_tokens == 24000
    assert warm.prefill_s == pytest.approx(130 / 1370, abs=1e-12)
    assert warm.restore_s == pytest.approx(0.48, abs=1e-12)
    ttft = warm.prefill_s + warm.restore_s
    assert ttft == pytest.approx(0.5748905109489051, abs=1e-12)
    assert 0.2 <= ttft <= 0.7


def test_hit_base_is_configurable():
    eng = SimEngine(SimConfig(hit_prefill_base_s=0.1))
    t = eng.admit(1, prompt(TAIL_A))
    eng.finish(t, (1,), "stop")
    warm = eng.admit(2, prompt(TAIL_B))
    assert warm.prefill_s == pytest.approx(0.1 + 130 / 1370, abs=1e-12)


def test_cli_flag_sets_hit_base(tmp_path):
    import argparse

    from kvreplay.sim.config import add_arguments, config_from_args

    p = argparse.ArgumentParser()
    add_arguments(p)
    cfg = config_from_args(p.parse_args(["--sim-hit-base-s", "0.25", "--sim-refuse-over-bytes"]))
    assert (cfg.hit_prefill_base_s, cfg.refuse_over_bytes) == (0.25, True)
    assert config_from_args(p.parse_args([])).refuse_over_bytes is False
