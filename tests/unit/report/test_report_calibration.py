"""The simulator calibration in the report header and config_and_calibration's record (hand-made verdicts)."""

from __future__ import annotations

import argparse
import hashlib
import json

from kvreplay.report.calibration import MAX_TEXT, calibration_line, sim_calibration
from kvreplay.sim.calibrate import UNBOUNDED_ENTRIES
from kvreplay.sim.config import add_arguments, config_and_calibration

RADIX_VERDICT = {
    "format": "kvreplay-probe/1",
    "backend": "vllm",
    "prefill_fit": {"a_s": 0.05, "rate_tokens_per_s": 2000.0, "source": "ttft"},
    # restore per cached token: (0.068 - 76/2000) / 1024 = 2.9296875e-05 and
    # (0.087 - 52/2000) / 2048 = 2.978515625e-05; median 2.9541015625e-05
    "warm": [
        {"prompt_tokens": 1100, "cached_tokens": 1024, "warm_ttft_s": 0.068},
        {"prompt_tokens": 2100, "cached_tokens": 2048, "warm_ttft_s": 0.087},
    ],
    "points": [{"cached_first": 0, "cached_second": 896}],
    "min_flush_k": 3,
    "flush_prefix_tokens": 1024,
    "config": {"foreign_tokens": 256},
}


def entries_verdict_unbounded() -> dict:
    """A halogen-like verdict whose bisection found no flushing k."""
    return {
        "format": "kvreplay-probe/1",
        "backend": "halogen",
        "prefill_fit": {"a_s": 0.05, "rate_tokens_per_s": 2000.0, "source": "ttft"},
        "warm": [],
        "bytes_per_token": 100.0,
        "bytes_per_token_kind": "prompt_cache_entry",
        "entries_per_request": 2,
        "entry_cap_bytes": 10000,
        "min_flush_k": None,
        "eviction_note": "6 foreign requests did not flush",
    }


def test_record_has_source_sha_changes_capacity_and_overrides(tmp_path, capsys):
    p = tmp_path / "verdict.json"
    raw = json.dumps(RADIX_VERDICT).encode()
    p.write_bytes(raw)
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    cfg, cal = config_and_calibration(parser.parse_args(["--sim-from-verdict", str(p), "--sim-block-size", "64"]))
    assert (cfg.block_size, cfg.device_blocks) == (64, 13)
    assert cal["source"] == str(p) and cal["sha256"] == hashlib.sha256(raw).hexdigest()
    assert list(cal["changes"]) == [
        "prefill_base_s", "prefill_tokens_per_s", "restore_s_per_token", "hit_prefill_base_s",
        "cache", "block_size", "device_blocks",
    ]
    ch = cal["changes"]
    assert (ch["prefill_base_s"], ch["prefill_tokens_per_s"], ch["hit_prefill_base_s"]) == (0.05, 2000.0, 0.0)
    assert abs(ch["restore_s_per_token"] - 2.9541015625e-05) < 1e-18
    # gcd(1024, 2048, 896) = 128; ceil((1024 + 2.5 x 256) / 128) = 13
    assert (ch["cache"], ch["block_size"], ch["device_blocks"], cal["capacity"]) == ("radix", 128, 13, 13)
    assert cal["overridden"] == {"block_size": 64}  # the flag won over the calibrated 128
    # the record is plain JSON (it goes into plan.json as is)
    assert json.loads(json.dumps(cal)) == cal


def test_no_verdict_no_record():
    parser = argparse.ArgumentParser()
    add_arguments(parser, prefix="")
    cfg, cal = config_and_calibration(parser.parse_args(["--block-size", "32"]), prefix="")
    assert cal is None and cfg.block_size == 32


def test_unbounded_entries_record_and_line(tmp_path):
    p = tmp_path / "v.json"
    raw = json.dumps(entries_verdict_unbounded()).encode()
    p.write_bytes(raw)
    parser = argparse.ArgumentParser()
    add_arguments(parser, prefix="")
    cfg, cal = config_and_calibration(parser.parse_args(["--from-verdict", str(p)]), prefix="")
    assert (cfg.cache, cfg.cache_entries, cfg.max_entry_bytes, cfg.bytes_per_token) == (
        "entries", UNBOUNDED_ENTRIES, 10000, 100)
    assert cal["capacity"] == "unbounded" and cal["overridden"] == {}
    sha = hashlib.sha256(raw).hexdigest()
    line = calibration_line(*sim_calibration({"run": {"sim_calibration": cal}}, None))
    assert line == (
        f"from {p} (sha256 {sha}); set prefill_base_s = 0.05, prefill_tokens_per_s = 2000,"
        " bytes_per_token = 100, cache = entries, snapshots = 2, max_entry_bytes = 10000,"
        " cache_entries = 1000000; capacity unbounded (the eviction bisection found no flushing k);"
        " recorded in plan.json"
    )


def test_line_radix_with_override_and_where():
    rec = {
        "source": "v.json",
        "sha256": "ab" * 32,
        "changes": {"prefill_base_s": 1.52, "restore_s_per_token": 2.9541015625e-05, "cache": "radix",
                    "block_size": 128, "device_blocks": 13},
        "capacity": 13,
        "overridden": {"block_size": 64},
    }
    summary = {"identity": {"before": {"version": {"version": "0.1.0", "calibration": rec}}}}
    assert sim_calibration(None, summary) == (rec, "server /version")
    assert sim_calibration({"run": {"sim_calibration": rec}}, summary) == (rec, "plan.json")
    assert calibration_line(rec, "server /version") == (
        f"from v.json (sha256 {'ab' * 32}); set prefill_base_s = 1.52, restore_s_per_token = 2.9541e-05,"
        " cache = radix, block_size = 128, device_blocks = 13; capacity 13 blocks;"
        " overridden by options: block_size = 64; recorded in server /version"
    )


def test_hostile_identity_is_bounded():
    assert sim_calibration(None, {"identity": {"before": {"version": {"calibration": "x"}}}}) is None
    assert sim_calibration(None, {"identity": {"before": {"version": "0.1"}}}) is None
    assert sim_calibration({"run": {}}, {}) is None
    rec = {"source": "s" * 500, "sha256": ["x"], "changes": {f"k{i}": i for i in range(40)}, "capacity": True}
    line = calibration_line(rec, "server /version")
    assert line.startswith("from " + "s" * MAX_TEXT + "... (sha256 list); set k0 = 0, k1 = 1,")
    assert ", k31 = 31, ... (8 more); capacity not set; recorded in server /version" in line
