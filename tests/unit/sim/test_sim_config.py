"""SimConfig, TOML loading, command-line options and fault specs."""

from __future__ import annotations

import argparse

import pytest

from kvreplay.errors import ConfigError
from kvreplay.sim import SimConfig, add_arguments, config_from_args
from kvreplay.sim.faults import Faults, parse_fault


def test_defaults_are_the_measured_server():
    c = SimConfig()
    assert (c.prefill_base_s, c.prefill_tokens_per_s, c.itl_s, c.time_scale) == (1.52, 1370.0, 0.020, 1.0)
    assert (c.cache, c.cache_entries, c.snapshot_points, c.model) == (
        "entries", 8, ("system", "messages"), "kvreplay-sim")
    assert SimConfig(snapshots=1).snapshot_points == ("system",)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"cache": "lru"}, "cache"), ({"snapshots": 3}, "snapshots"), ({"slots": 0}, "slots"),
     ({"time_scale": -1.0}, "time_scale"), ({"host_evict": "fifo"}, "host_evict"),
     ({"snapshot_at": ("end",)}, "snapshot_at")],
)
def test_invalid_values(kwargs, field):
    with pytest.raises(ConfigError) as ei:
        SimConfig(**kwargs)
    assert ei.value.field == field


def test_toml_then_cli(tmp_path):
    f = tmp_path / "sim.toml"
    f.write_text('[sim]\ncache = "radix"\ndevice-blocks = 215\nhost_rows = 40\nfaults = ["cut@3:chunks=2"]\n')
    p = argparse.ArgumentParser()
    add_arguments(p, prefix="sim-")
    args = p.parse_args(["--sim-config", str(f), "--sim-host-rows", "156", "--sim-fault", "http401@1",
                         "--sim-time-scale", "0"])
    c = config_from_args(args, prefix="sim-")
    assert (c.cache, c.device_blocks, c.host_rows, c.time_scale) == ("radix", 215, 156, 0.0)
    assert [s.text for s in c.faults] == ["cut@3:chunks=2", "http401@1"]


def test_no_prefix_options():
    p = argparse.ArgumentParser()
    add_arguments(p, prefix="")
    c = config_from_args(p.parse_args(["--cache-entries", "3", "--snapshots", "1"]), prefix="")
    assert (c.cache_entries, c.snapshots) == (3, 1)
    assert config_from_args(p.parse_args([]), prefix="") == SimConfig()


def test_toml_unknown_key_and_type(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text("cache_size = 3\n")
    with pytest.raises(ConfigError, match="unknown simulator setting 'cache_size'"):
        SimConfig.from_toml(f)
    f.write_text('cache_entries = "eight"\n')
    with pytest.raises(ConfigError, match="integer"):
        SimConfig.from_toml(f)
    f.write_text("cache_entries = 0\n")
    with pytest.raises(ConfigError) as ei:
        SimConfig.from_toml(f)
    assert (ei.value.path, ei.value.field) == (f, "cache_entries") and str(ei.value).endswith("must be >= 1")


def test_parse_fault_forms():
    f = parse_fault("cut@3:chunks=2")
    assert (f.kind, f.at_request, f.params, f.p) == ("cut", 3, {"chunks": 2}, None)
    f = parse_fault("stall:s=0.5,at=between")
    assert (f.at_request, f.params) == (None, {"s": 0.5, "at": "between"})
    f = parse_fault("oom500:p=0.25,seed=7")
    assert (f.p, f.seed, f.params) == (0.25, 7, {})


@pytest.mark.parametrize(
    ("spec", "match"),
    [("boom", "unknown fault kind"), ("cut@0", "1-based"), ("cut@x", "integer"), ("cut:s=1", "bad key"),
     ("stall:at=middle", "one of"), ("http401@2:p=0.5", "not both"), ("oom500:p=2", "0..1"),
     ("error-event:chunks=two", "not a int")],
)
def test_parse_fault_errors(spec, match):
    with pytest.raises(ConfigError, match=match):
        parse_fault(spec)


def test_firing_schedule():
    fs = Faults([parse_fault("http401@2"), parse_fault("busy-gauge:s=0")])
    assert [[s.kind for s in fs.firing(i)] for i in (1, 2, 3)] == [
        ["busy-gauge"], ["http401", "busy-gauge"], ["busy-gauge"]]
    # random faults repeat for the same seed
    a = Faults([parse_fault("oom500:p=0.5,seed=7")])
    b = Faults([parse_fault("oom500:p=0.5,seed=7")])
    seq_a = [bool(a.firing(i)) for i in range(1, 41)]
    assert seq_a == [bool(b.firing(i)) for i in range(1, 41)]
    assert 5 < sum(seq_a) < 35
