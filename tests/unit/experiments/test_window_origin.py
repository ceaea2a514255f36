"""``[window] deadline_from = "quiesce"`` and ``when``: on an injected clock (no machine speed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvreplay.errors import ConfigError
from kvreplay.experiments.model import StepResult
from kvreplay.experiments.window import execute
from kvreplay.experiments.window.execute import WindowRun
from kvreplay.experiments.window.spec import load_experiment

FILE = '''[server]
target = "sim"
[window]
deadline_from = "quiesce"
stop_new_after = "70m"
hard_deadline = "90m"
restore_reserve = "20m"
[[step]]
name = "Q"
kind = "quiesce"
cmd = "true"
[[step]]
name = "ctl"
kind = "incarnation"
when = ['time_left > "15m"', "previous_step_ok"]
'''


@pytest.fixture
def window(tmp_path, monkeypatch):
    p = tmp_path / "e.toml"
    p.write_text(FILE)
    exp = load_experiment(p)
    clock = [0]
    monkeypatch.setattr(execute, "now_ns", lambda: clock[0])
    w = WindowRun(exp, {"experiment_sha256": "0" * 64, "steps": []}, {}, None, tmp_path / "out", exp.window, {},
                  lambda _m: None)
    (tmp_path / "out").mkdir()
    clock[0] = w.t0
    return w, exp, clock


def test_deadlines_count_from_the_end_of_the_quiesce(window):
    w, exp, clock = window
    q, ctl = exp.steps
    clock[0] = w.t0 + 600 * 10**9  # the quiesce ends 10 minutes after the start
    assert w.time_left() == (3600.0, "stop_new_after")
    res = StepResult("Q", "quiesce", status="measured")
    w.results.append(res)
    w._maybe_origin(q, res)
    assert w.origin is not None and (w.origin["step"], w.origin["after_start_s"]) == ("Q", 600.0)
    clock[0] += 55 * 60 * 10**9  # 55 minutes after the quiesce: 15 minutes left to stop_new_after
    assert w.time_left() == (900.0, "stop_new_after")
    res2 = StepResult("ctl", "incarnation")
    w.results.append(res2)
    assert w._condition_holds(ctl, res2) is False
    assert (res2.status, res2.reason) == ("skipped", 'condition false: time_left > "15m"')
    assert res2.to_json()["condition"] == {
        "when": ['time_left > "15m"', "previous_step_ok"], "holds": False, "false": ['time_left > "15m"'],
        "seen": {"time_left_s": 900.0, "time_left_until": "stop_new_after", "previous_step": "Q",
                 "previous_status": "measured"}}


def test_a_failed_quiesce_leaves_the_deadlines_counted_from_the_start(window):
    w, exp, clock = window
    clock[0] = w.t0 + 600 * 10**9
    w._maybe_origin(exp.steps[0], StepResult("Q", "quiesce", status="failed"))
    assert w.origin is None and w.time_left() == (3600.0, "stop_new_after")


def test_deadline_from_needs_its_step(tmp_path):
    p = tmp_path / "e.toml"
    p.write_text(FILE.split("[[step]]")[0] + '[[step]]\nname = "R"\nkind = "restore"\n')
    with pytest.raises(ConfigError) as e:
        load_experiment(p)
    assert (e.value.field, e.value.line, e.value.message) == (
        "window.deadline_from", 4, "deadline_from = 'quiesce' needs a quiesce step")
    p.write_text(FILE.replace('deadline_from = "quiesce"', 'deadline_from = "run"'))
    with pytest.raises(ConfigError) as e:
        load_experiment(p)
    assert (e.value.field, e.value.message) == ("window.deadline_from", "must be one of start, quiesce, not 'run'")


def test_window_json_names_the_origin_only_when_set(tmp_path):
    p = tmp_path / "e.toml"
    p.write_text(FILE)
    assert load_experiment(p).window.to_json()["deadline_from"] == "quiesce"
    p.write_text(FILE.replace('deadline_from = "quiesce"\n', ""))
    assert "deadline_from" not in load_experiment(Path(p)).window.to_json()
