"""--sim-from-verdict: simulator settings from a probe verdict, hand-made verdicts."""

from __future__ import annotations

import argparse
import json

import pytest

from kvreplay.errors import ConfigError
from kvreplay.sim.calibrate import UNBOUNDED_BLOCKS, calibrate_from_verdict
from kvreplay.sim.config import add_arguments, config_from_args


def verdict(**kw):
    v = {
        "format": "kvreplay-probe/1",
        "backend": "vllm",
        "prefill_fit": {"a_s": 0.05, "rate_tokens_per_s": 2000.0, "r2": 0.99, "source": "ttft"},
        # warm: 1024 cached of 1100 -> (0.068 - 76/2000) / 1024 = 0.03 / 1024
        #       2048 cached of 2100 -> (0.087 - 52/2000) / 2048 = 0.061 / 2048
        "warm": [
            {"prompt_tokens": 1100, "cached_tokens": 1024, "warm_ttft_s": 0.068},
            {"prompt_tokens": 2100, "cached_tokens": 2048, "warm_ttft_s": 0.087},
            {"prompt_tokens": 600, "cached_tokens": 0, "warm_ttft_s": 0.3},
        ],
        "points": [{"cached_first": 0, "cached_second": 896}],
        "min_flush_k": 3,
        "flush_prefix_tokens": 1024,
        "config": {"foreign_tokens": 256},
        "bytes_per_token": None,
    }
    v.update(kw)
    return v


def write(tmp_path, v):
    p = tmp_path / "verdict.json"
    p.write_text(json.dumps(v))
    return p


def test_radix_from_vllm_verdict(tmp_path):
    cal = calibrate_from_verdict(write(tmp_path, verdict()))
    ch = cal.changes
    assert (ch["cache"], ch["prefill_base_s"], ch["prefill_tokens_per_s"]) == ("radix", 0.05, 2000.0)
    assert ch["restore_s_per_token"] == pytest.approx((0.03 / 1024 + 0.061 / 2048) / 2, rel=1e-12)
    assert ch["block_size"] == 128  # gcd(1024, 2048, 896)
    # ceil((1024 + 2.5 x 256) / 128) = ceil(1664 / 128) = 13
    assert ch["device_blocks"] == 13 and cal.capacity == 13


def test_unbounded_said_so(tmp_path):
    v = verdict(min_flush_k=None, flush_bracket=[4, None], eviction_note="4 foreign requests did not flush")
    cal = calibrate_from_verdict(write(tmp_path, v))
    assert cal.capacity == "unbounded" and cal.changes["device_blocks"] == UNBOUNDED_BLOCKS
    assert any(n.startswith("capacity: unbounded") and "did not flush" in n for n in cal.notes)


def test_entries_from_halogen_like_verdict(tmp_path):
    v = verdict(
        backend="halogen",
        bytes_per_token=2674.0,
        bytes_per_token_kind="prompt_cache_entry",
        entries_per_request=2,
        implied_entries=[8, 9],
        min_flush_k=4,
        entry_cap_bytes=116388524,
        sim_time_scale=0.5,
    )
    cal = calibrate_from_verdict(write(tmp_path, v))
    ch = cal.changes
    assert (ch["cache"], ch["cache_entries"], ch["snapshots"], ch["bytes_per_token"]) == ("entries", 8, 2, 2674)
    assert ch["max_entry_bytes"] == 116388524
    # time scale 0.5 undone: a / 0.5, rate x 0.5
    assert (ch["prefill_base_s"], ch["prefill_tokens_per_s"]) == (0.1, 1000.0)


def test_bad_verdicts(tmp_path):
    with pytest.raises(ConfigError, match="not a kvreplay probe verdict"):
        calibrate_from_verdict(write(tmp_path, {"x": 1}))
    with pytest.raises(ConfigError, match="positive rate"):
        calibrate_from_verdict(write(tmp_path, verdict(prefill_fit=None)))


def test_config_flags_order(tmp_path, capsys):
    p = write(tmp_path, verdict())
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    cfg = config_from_args(parser.parse_args(["--sim-from-verdict", str(p), "--sim-block-size", "64"]))
    assert (cfg.cache, cfg.device_blocks, cfg.block_size) == ("radix", 13, 64)  # the flag wins
    assert "sim calibration: capacity: 13 blocks" in capsys.readouterr().err
    serve = argparse.ArgumentParser()
    add_arguments(serve, prefix="")
    assert config_from_args(serve.parse_args(["--from-verdict", str(p)]), prefix="").device_blocks == 13
