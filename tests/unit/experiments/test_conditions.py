"""``when`` conditions: parsed from the step's table, evaluated with given values (no clock)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvreplay.errors import ConfigError
from kvreplay.experiments.conditions import Condition, evaluate, parse_when
from kvreplay.experiments.fields import Where
from kvreplay.experiments.window.spec import load_experiment

W = Where(Path("exp.toml"), 7, "step[2]")


def test_the_three_forms_parse():
    got = parse_when(['time_left > "15m"', "previous_step_ok", 'step_ok = "A"', "time_left<=90s"], W)
    assert got == (Condition('time_left > "15m"', "time_left", op=">", seconds=900.0),
                   Condition("previous_step_ok", "previous_step_ok"),
                   Condition('step_ok = "A"', "step_ok", step="A"),
                   Condition("time_left<=90s", "time_left", op="<=", seconds=90.0))
    assert [c.describe() for c in got] == ["time_left > 900 s", "previous_step_ok", "step_ok A",
                                           "time_left <= 90 s"]


@pytest.mark.parametrize("bad", ["time_left >> 5m", "previous_step", "step_ok = ''", 3, []])
def test_other_forms_are_refused_naming_the_field(bad):
    with pytest.raises(ConfigError) as e:
        parse_when(bad, W)
    assert (e.value.field, e.value.line) == ("step[2].when", 7)


def test_time_left_false_records_the_values_seen():
    conds = parse_when(['time_left > "15m"'], W)
    got = evaluate(conds, time_left_s=612.0, time_left_until="stop_new_after", previous=None, statuses={})
    assert got == {"when": ['time_left > "15m"'], "holds": False, "false": ['time_left > "15m"'],
                   "seen": {"time_left_s": 612.0, "time_left_until": "stop_new_after"}}
    got = evaluate(conds, time_left_s=900.5, time_left_until="stop_new_after", previous=None, statuses={})
    assert got["holds"] is True and got["false"] == []
    # exactly 15 minutes left is not more than 15 minutes
    assert evaluate(conds, time_left_s=900.0, time_left_until="x", previous=None, statuses={})["holds"] is False


def test_time_left_unbounded_holds():
    conds = parse_when('time_left > "15m"', W)
    assert evaluate(conds, time_left_s=None, time_left_until=None, previous=None, statuses={}) == {
        "when": ['time_left > "15m"'], "holds": True, "false": [],
        "seen": {"time_left_s": None, "time_left_until": None}}


def test_step_conditions_read_statuses():
    conds = parse_when(["previous_step_ok", 'step_ok = "A"'], W)
    got = evaluate(conds, time_left_s=None, time_left_until=None, previous=("B", "measured"),
                   statuses={"A": "failed", "B": "measured"})
    assert got == {"when": ["previous_step_ok", 'step_ok = "A"'], "holds": False, "false": ['step_ok = "A"'],
                   "seen": {"previous_step": "B", "previous_status": "measured", "step_ok": {"A": "failed"}}}
    got = evaluate(conds, time_left_s=None, time_left_until=None, previous=None, statuses={"A": "measured"})
    assert got["false"] == ["previous_step_ok"] and got["seen"]["previous_step"] is None


def _exp(tmp_path: Path, steps: str) -> Path:
    p = tmp_path / "e.toml"
    p.write_text('[server]\ntarget = "sim"\n' + steps)
    return p


def test_step_ok_must_name_an_earlier_step(tmp_path):
    p = _exp(tmp_path, '[[step]]\nname = "A0"\nkind = "incarnation"\nwhen = \'step_ok = "R"\'\n'
                       '[[step]]\nname = "R"\nkind = "restore"\n')
    with pytest.raises(ConfigError) as e:
        load_experiment(p)
    assert (e.value.field, e.value.line) == ("step[0].when", 3)
    assert e.value.message == "'step_ok = \"R\"': no earlier step 'R'"


def test_a_restore_takes_no_when(tmp_path):
    p = _exp(tmp_path, '[[step]]\nname = "R"\nkind = "restore"\nwhen = "previous_step_ok"\n')
    with pytest.raises(ConfigError) as e:
        load_experiment(p)
    assert (e.value.field, e.value.message) == ("step[0].when", "a restore step always runs: it takes no when")
