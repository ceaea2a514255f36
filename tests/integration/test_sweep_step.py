"""``kind = "sweep"``: a load sweep inside an experiment window, against the simulator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvreplay.cli import main

ROOT = Path(__file__).resolve().parents[2]
WL = (ROOT / "fixtures" / "workloads" / "mtbench-52").as_posix()

FILE = f'''
workload = "{WL}"

[server]
target = "sim"
backend = "halogen"

[server.sim]
time_scale = 0.0

[window]
stop_new_after = "100s"
hard_deadline = "115s"
restore_reserve = "10s"

[[step]]
name = "S0"
kind = "incarnation"
fresh = true

[[step]]
name = "load"
kind = "sweep"
concurrency = [1, 4]
select = "first4"
warmup = 1
cache = "cold"
slo = ["ttft_ms<=60000"]
'''


def test_a_sweep_step_freezes_its_points_and_publishes_their_cells(tmp_path, capsys):
    f = tmp_path / "exp.toml"
    f.write_text(FILE)
    out = tmp_path / "out"
    assert main(["experiment", str(f), "--out", str(out)]) == 0
    frozen = json.loads((out / "experiment.json").read_text())
    step = next(s for s in frozen["steps"] if s["name"] == "load")
    assert [p["phase"] for p in step["points"]] == ["c1", "c4"]
    assert [ph["name"] for ph in step["points"][1]["plan"]["phases"]] == ["warmup", "c4"]
    result = json.loads((out / "result.json").read_text())
    (st,) = [s for s in result["steps"] if s["name"] == "load"]
    assert st["status"] == "measured" and st["checks"]["points"] == 2
    doc = json.loads((out / st["run_dir"] / "sweep.json").read_text())
    assert [(p["concurrency"], p["run_dir"]) for p in doc["points"]] == [(1, "points/01-c1"), (4, "points/02-c4")]
    assert all(p["slo_attainment"] == 1.0 and p["cache"]["verified"] for p in doc["points"])
    cells = {c["metric"]: c for c in result["cells"] if c["step"] == "load"}
    assert cells["c4.cache_verified"]["value"] is True and cells["c4.cache_verified"]["status"] == "measured"
    assert cells["c1.slo_attainment"]["value"] == 1.0
    assert cells["c4.goodput_rps"]["value"] == doc["points"][1]["goodput_rps"]


def test_the_bundled_sweep_window_dry_runs(capsys):
    assert main(["experiment", str(ROOT / "fixtures" / "experiments" / "sweep-cold.toml"), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert "c1 (8 req), c2 (8 req), c4 (8 req), cache cold" in printed


@pytest.mark.parametrize(("line", "field"), [
    ("concurrency = \"auto\"", "step[1].concurrency"),
    ("cache = \"hot\"", "step[1].cache"),
    ("slo = [\"ttft<=1\"]", "step[1].slo"),
])
def test_bad_sweep_step_keys_name_the_field(tmp_path, capsys, line, field):
    f = tmp_path / "exp.toml"
    key = line.split(" = ")[0]
    text = "\n".join(ln for ln in FILE.splitlines() if not ln.startswith(f"{key} ="))
    f.write_text(text + "\n" + line + "\n")
    assert main(["experiment", str(f), "--out", str(tmp_path / "o"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert field in err, err
