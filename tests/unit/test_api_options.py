"""The typed run options of the API (``RunOptions`` / ``SimOptions``) are checked at run time as the CLI checks them.

Each refusal is a ``ConfigError`` naming the keyword (``sim.NAME`` for a simulator option),
raised before anything is made or sent; a value the command line refuses for the same flag
is refused with the command line's message.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

import kvreplay
from kvreplay.api import _replay_args
from kvreplay.cli import main


def _args(sim: Any = None, **options: Any) -> Any:
    return _replay_args(kvreplay.DEMO_WORKLOAD, ["a:forward:c1"], None, None, "sim", None, sim, "none", True, options)


@pytest.mark.parametrize(("options", "sim", "field", "message"), [
    ({"read_timeout": "60"}, None, "read_timeout", "expected a number (float), got '60' (str)"),
    ({"read_timeout": -1}, None, "read_timeout", "not a duration: '-1' (e.g. 90s, 70m, 1h)"),
    ({"read_timeout": math.inf}, None, "read_timeout", "not a duration: 'inf' (e.g. 90s, 70m, 1h)"),
    ({"no_text": 1}, None, "no_text", "expected bool, got 1 (int)"),
    ({"max_transport_failures": 1.5}, None, "max_transport_failures", "expected int, got 1.5 (float)"),
    ({"max_transport_failures": -1}, None, "max_transport_failures", "expected a whole number >= 0, got '-1'"),
    ({"history": "alive"}, None, "history", "expected one of 'captured', 'live', got 'alive' (str)"),
    ({"abort_if": "host_bytes>1"}, None, "abort_if", "expected a list of str, got 'host_bytes>1' (str)"),
    ({"abort_if": ["host_bytes=1"]}, None, "abort_if", "not a bound: 'host_bytes=1' (e.g. host_bytes>34e9)"),
    ({"report": "pdf"}, None, "report", "expected one of 'none', 'md', 'html', got 'pdf' (str)"),
    ({"read_timout": 60.0}, None, "read_timout", "unknown option 'read_timout'"),
    ({}, {"replicas": -1}, "sim.replicas", "expected a whole number >= 1, got '-1'"),
    ({}, {"time_scale": "0"}, "sim.time_scale", "expected a number (float), got '0' (str)"),
    ({}, {"time_scale": True}, "sim.time_scale", "expected a number (float), got True (bool)"),
    ({}, {"snapshots": 3}, "sim.snapshots", "expected one of 1, 2, got 3 (int)"),
    ({}, {"warp": 9}, "sim.warp", "unknown simulator option 'warp'"),
    ({}, ["time_scale"], "sim", "sim is a dict of simulator options, got list"),
])
def test_a_bad_keyword_is_a_config_error_naming_it(options, sim, field, message):
    with pytest.raises(kvreplay.ConfigError) as info:
        _args(sim, **options)
    assert (info.value.field, info.value.message) == (field, message)


def test_good_keywords_keep_their_values_and_repeatable_ones_take_the_command_lines_form():
    args = _args({"time_scale": 0, "replicas": 2, "faults": ["cut@3"]}, read_timeout=60, max_error_rate=0.5,
                 abort_if=["host_bytes>34e9"], history="live", abort_on_malformed=None)
    assert (args.read_timeout, args.max_error_rate, args.history, args.abort_on_malformed) == (60, 0.5, "live", None)
    assert args.abort_if == [("host_bytes", ">", 34e9)]
    assert args.sim == {"time_scale": 0, "replicas": 2, "faults": ["cut@3"]}
    assert args.connect_timeout == 30.0  # a default, as the command line's


def test_the_cli_refuses_the_same_value_with_the_same_words(capsys):
    with pytest.raises(SystemExit):
        main(["run", str(kvreplay.DEMO_WORKLOAD), "--phase", "a:forward:c1", "--read-timeout", "-1"])
    assert "not a duration: '-1' (e.g. 90s, 70m, 1h)" in capsys.readouterr().err


def test_unmeasured_figures_are_nan_with_an_optional_accessor_beside_them():
    ph = kvreplay.PhaseResult.from_json({"name": "a", "tokens": {"prompt": 10}, "ttft_ms": {"n": 0, "p50": None}})
    assert math.isnan(ph.cached_ratio) and ph.cached_ratio_or_none is None
    assert math.isnan(ph.ttft_ms.p50) and ph.ttft_ms.get("p50") is None and not ph.ttft_ms.measured


def test_phase_result_types_itl_tpot_throughput_counters_and_model_ms():
    d = {"name": "r", "ok": 4, "wall_s": 2.0, "throughput_rps": 2.0, "output_tokens_per_s": 64.0,
         "ttft_ms": {"n": 4, "mean": 20.0, "p50": 10.0, "p90": 30.0, "p99": 40.0, "max": 40.0},
         "itl_ms": {"n": 60, "mean": 0.4, "p50": 0.4, "p90": 0.5, "p99": 0.6, "max": 0.8},
         "tpot_ms": {"n": 4, "mean": 0.4, "p50": 0.4, "p90": 0.4, "p99": 0.4, "max": 0.4},
         "counter_delta": {"hits": 3, "hit_tokens": 300, "reset": True, "reset_names": ["hits"]},
         "valid": False, "invalid_reasons": ["restart"]}
    ph = kvreplay.PhaseResult.from_json(d, time_scale=0.02)
    assert (ph.itl_ms.p99, ph.tpot_ms.n, ph.throughput_rps, ph.output_tokens_per_s) == (0.6, 4, 2.0, 64.0)
    assert ph.counter_delta == {"hits": 3.0, "hit_tokens": 300.0} and ph.counter_reset
    assert ph.invalid_reasons == ("restart",)
    assert (ph.ttft_model_ms.p50, ph.ttft_model_ms.n) == (500.0, 4)  # 10 ms measured at scale 0.02
    assert ph.itl_model_ms.p99 == pytest.approx(30.0) and ph.e2e_model_ms.n == 0
    real = kvreplay.PhaseResult.from_json(d)
    assert real.ttft_model_ms == real.ttft_ms  # against a real server: the same milliseconds
