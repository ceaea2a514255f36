"""A step's own ``workload``: frozen and hashed into its experiment.json entry, its plan built on it."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvreplay.api.experiment import Experiment
from kvreplay.errors import ConfigError
from kvreplay.experiments.window.spec import load_experiment
from kvreplay.plan import build_plan, parse_phase
from kvreplay.workload import load_workload

ROOT = Path(__file__).resolve().parents[3]
MAIN = ROOT / "fixtures" / "workloads" / "window-main"
AB = ROOT / "fixtures" / "workloads" / "window-ab-1024"


def _file(tmp_path: Path, extra: str = "") -> Path:
    p = tmp_path / "e.toml"
    p.write_text(f'workload = "{MAIN}"\n[server]\ntarget = "sim"\n'
                 '[[step]]\nname = "A"\nkind = "run"\nphases = ["a:forward:c1"]\n'
                 f'[[step]]\nname = "B"\nkind = "run"\nworkload = "{AB}"\nphases = ["b:forward:c1"]\n' + extra)
    return p


def test_the_step_workload_is_frozen_with_its_hash_and_plan(tmp_path):
    frozen = Experiment.from_file(_file(tmp_path)).freeze(tmp_path / "out")
    a, b = frozen.doc["steps"]
    main, ab = load_workload(MAIN), load_workload(AB)
    assert "workload" not in a
    assert b["workload"] == {"path": str(AB), "n_bodies": 4, "sha256": ab.sha256}
    assert frozen.doc["workload"] == {"path": str(MAIN), "n_bodies": 16, "sha256": main.sha256}
    assert b["plan_sha256"] == build_plan(ab, [parse_phase("b:forward:c1")]).sha256
    assert a["plan_sha256"] == build_plan(main, [parse_phase("a:forward:c1")]).sha256
    assert len(frozen.plans["B"].phases[0].sequence) == 4
    assert frozen.step_workloads["B"].sha256 == ab.sha256


def test_a_step_workload_is_relative_to_the_file(tmp_path):
    p = tmp_path / "sub" / "e.toml"
    p.parent.mkdir()
    p.write_text('[server]\ntarget = "sim"\n[[step]]\nname = "B"\nkind = "run"\nworkload = "../wl"\n'
                 'phases = ["b:forward:c1"]\n')
    assert load_experiment(p).steps[0].workload == str((tmp_path / "wl").resolve())


def test_a_step_that_sends_nothing_takes_no_workload(tmp_path):
    p = _file(tmp_path, f'[[step]]\nname = "R"\nkind = "restore"\nworkload = "{AB}"\n')
    with pytest.raises(ConfigError) as e:
        load_experiment(p)
    assert (e.value.field, e.value.message) == ("step[2].workload", "a restore step sends no workload")
