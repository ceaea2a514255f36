"""``bundled:NAME`` names a file shipped in the package, from any directory (issue 41 item 4)."""

from __future__ import annotations

import json

import pytest

from kvreplay.bundled import DATA, DEMO_WORKLOAD, resolve
from kvreplay.cli import main


def test_bundled_names_resolve_under_the_package_data():
    assert resolve("bundled:mtbench-52") == DEMO_WORKLOAD
    assert resolve("bundled:host-cache.toml") == DATA / "plans" / "host-cache.toml"
    assert resolve("bundled:experiments/probe-sizing.toml") == DATA / "experiments" / "probe-sizing.toml"
    assert resolve("fixtures/workloads/mtbench-52") == "fixtures/workloads/mtbench-52"  # a path stays a path
    with pytest.raises(FileNotFoundError, match=r"no bundled file 'nope' \(bundled workloads: conversations, "):
        resolve("bundled:nope")
    with pytest.raises(FileNotFoundError):
        resolve("bundled:../bundled.py")


def test_run_takes_a_bundled_workload_from_any_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no fixtures/ here
    code = main(["run", "bundled:mtbench-52", "--phase", "a:forward:c1:first4", "--sim-time-scale", "0",
                 "--out", "r", "--report", "none", "--quiet"])
    assert code == 0
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert [(p["name"], p["sent"], p["ok"]) for p in summary["phases"]] == [("a", 4, 4)]
    assert main(["run", "bundled:mtbench-5", "--phase", "a:forward:c1", "--out", "x"]) == 2
    assert "no bundled file 'mtbench-5'" in capsys.readouterr().err
