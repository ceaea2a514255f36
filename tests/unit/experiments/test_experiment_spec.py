"""Experiment files: parsing, errors naming file/line/field, freezing and its hash."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvreplay.errors import ConfigError
from kvreplay.experiments.lifecycle import expand, identity_mismatches
from kvreplay.experiments.window.frozen import experiment_sha256, freeze
from kvreplay.experiments.window.spec import load_experiment, parse_duration
from kvreplay.workload import load_workload

ROOT = Path(__file__).resolve().parents[3]
WL = ROOT / "fixtures" / "workloads" / "mtbench-52"
HEAD = f'workload = "{WL}"\n[server]\ntarget = "sim"\n'


def write(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "e.toml"
    p.write_text(HEAD + body)
    return p


def test_durations():
    assert [parse_duration(x) for x in (90, "90s", "70m", "1.5h", "250ms", 0)] == [90.0, 90.0, 4200.0, 5400.0,
                                                                                 0.25, 0.0]
    with pytest.raises(ConfigError, match="not a duration"):
        parse_duration("soon")


def test_control_step_marks_every_phase(tmp_path):
    exp = load_experiment(write(tmp_path, '[[step]]\nname = "c"\nkind = "run"\ncomparable = false\n'
                                          'label = "control: last 12"\nphases = ["k:forward:c1:x2:last12"]\n'))
    (ph,) = exp.steps[0].settings["phases"]
    assert (ph.comparable, ph.label, ph.repeats, ph.select) == (False, "control-last-12", 2, "last:12")
    assert exp.steps[0].comparable is False and exp.steps[0].dir == "steps/00-c"


@pytest.mark.parametrize(("body", "line", "field", "msg"), [
    ('[[step]]\nname = "a"\nkind = "walk"\n', 4, "step[0].kind", "kind must be one of"),
    ('[[step]]\nname = "a"\nkind = "run"\nphases = ["p:sideways:c1"]\n', 4, "step[0].phases", "sideways"),
    ('[[step]]\nname = "a"\nkind = "run"\nphases = ["p:forward:c1"]\nfresh = true\n', 4, "step[0].fresh",
     "unknown key 'fresh' for a run step"),
    ('[[step]]\nname = "a"\nkind = "incarnation"\n[[step]]\nname = "a"\nkind = "incarnation"\n', 7,
     "step[1].name", "used twice"),
    ('[[step]]\nname = "p"\nkind = "probe"\nreps = 3\n', 4, "step[0].reps", "unknown key 'reps' for a probe step"),
    # the simulator's settings, refused when the file is read (--dry-run too), not when the step starts it
    ('[server.sim]\ncache = "radix"\nhost_evict = "leaf-lruu"\n', 6, "server.sim.host_evict",
     r"^must be one of \('leaf-lru', 'ancestor-compact'\)$"),
    ('[server.sim]\nhost_evit = "leaf-lru"\n[[step]]\nname = "a"\nkind = "incarnation"\n', 5,
     "server.sim.host_evit", "^unknown simulator setting 'host_evit'$"),
    ('[[step]]\nname = "a"\nkind = "incarnation"\nsim = {time_scale = "fast"}\n', 4, "step[0].sim.time_scale",
     "number"),
])
def test_errors_name_file_line_field(tmp_path, body, line, field, msg):
    p = write(tmp_path, body)
    with pytest.raises(ConfigError) as ei:
        load_experiment(p)
    assert (ei.value.path, ei.value.line, ei.value.field) == (p, line, field)
    assert re.search(msg, ei.value.message)


def test_compare_must_name_a_run_phase(tmp_path):
    p = write(tmp_path, '[[step]]\nname = "a"\nkind = "run"\nphases = ["p:forward:c1"]\n')
    p.write_text(p.read_text().replace("[server]", 'compare = [["a/p", "a/q"]]\n[server]'))
    with pytest.raises(ConfigError, match="step 'a' has no phase 'q'") as ei:
        load_experiment(p)
    assert (ei.value.line, ei.value.field) == (2, "compare")


def test_window_abort_rules(tmp_path):
    exp = load_experiment(write(tmp_path, '[window]\nabort_if = ["host_bytes>34e9", "waiting >= 8"]\n'
                                          'max_error_rate = 0.05\nabort_on_malformed = true\n'
                                          '[[step]]\nname = "a"\nkind = "incarnation"\n'))
    w = exp.window
    assert (w.abort_if, w.max_error_rate, w.abort_on_malformed) == (
        (("host_bytes", ">", 34e9), ("waiting", ">=", 8.0)), 0.05, True)
    p = write(tmp_path, '[window]\nabort_if = ["host_bytes"]\n[[step]]\nname = "a"\nkind = "incarnation"\n')
    with pytest.raises(ConfigError, match="not a bound") as ei:
        load_experiment(p)
    assert (ei.value.line, ei.value.field) == (4, "window.abort_if")


def test_window_out_of_order_and_port_without_start(tmp_path):
    p = write(tmp_path, '[window]\nstop_new_after = "80m"\nhard_deadline = "90m"\nrestore_reserve = "20m"\n'
                        '[[step]]\nname = "a"\nkind = "incarnation"\n')
    with pytest.raises(ConfigError, match="later than hard_deadline - restore_reserve"):
        load_experiment(p)
    p.write_text('[server]\ntarget = "http://127.0.0.1:{port}"\n[[step]]\nname = "a"\nkind = "incarnation"\n')
    with pytest.raises(ConfigError, match="needs a start command") as ei:
        load_experiment(p)
    assert ei.value.field == "server.start"


def test_freeze_hash_covers_the_plans_and_window(tmp_path):
    p = write(tmp_path, '[window]\nstop_new_after = "70m"\nhard_deadline = "90m"\nrestore_reserve = "20m"\n'
                        '[[step]]\nname = "A"\nkind = "run"\nphases = ["prime:forward:c1:first3"]\n'
                        '[[step]]\nname = "t"\nkind = "ab"\nreps = 2\nselect = "first:2"\n'
                        'arms = [{name = "off", cmd = "sim:"}, {name = "on", cmd = "sim:prefill_scale=1.1"}]\n')
    exp = load_experiment(p)
    wl = load_workload(WL)
    doc, plans = freeze(exp, wl, exp.window)
    assert doc["window"] == {"stop_new_after_s": 4200.0, "hard_deadline_s": 5400.0, "restore_reserve_s": 1200.0,
                             "cancel_in_flight_at_s": 4200.0, "abort_if": [],
                             "max_error_rate": None, "abort_on_malformed": False,
                             "max_output_error_rate": None, "max_transport_failures": 3}
    assert [x["body_index"] for x in doc["steps"][0]["plan"]["phases"][0]["sequence"]] == [0, 1, 2]
    assert doc["steps"][0]["plan_sha256"] == plans["A"].sha256
    assert [(b["rep"], b["arm"]) for b in doc["steps"][1]["ab_order"]] == [(0, "off"), (0, "on"), (1, "on"),
                                                                           (1, "off")]
    assert doc["experiment_sha256"] == experiment_sha256(doc)
    doc2, _ = freeze(exp, wl, exp.window.__class__(60.0, 5400.0, 1200.0))
    assert doc2["experiment_sha256"] != doc["experiment_sha256"]


def test_placeholders_and_pins(tmp_path):
    assert expand("x {port} {dir} {}", port=8123, out_dir=tmp_path) == f"x 8123 {tmp_path.resolve()} {{}}"
    ident = {"models": ["m1"], "version": {"build": "b2"}}
    assert identity_mismatches(ident, {"models": "m1", "version.build": "b2"}) == []
    assert identity_mismatches(ident, {"version.build": "b1"}) == ["version.build: 'b1' -> 'b2'"]


def test_transport_and_output_rules_in_window_and_step(tmp_path):
    p = write(tmp_path, '[window]\nmax_transport_failures = 5\nmax_output_error_rate = 0.25\n'
                        '[[step]]\nname = "A"\nkind = "run"\nmax_transport_failures = 0\n'
                        'phases = ["prime:forward:c1:first3"]\n')
    exp = load_experiment(p)
    assert (exp.window.max_transport_failures, exp.window.max_output_error_rate) == (5, 0.25)
    assert exp.steps[0].settings["max_transport_failures"] == 0
    p = write(tmp_path, '[window]\nmax_transport_failures = 0\n'
                        '[[step]]\nname = "A"\nkind = "run"\nphases = ["prime:forward:c1:first3"]\n')
    assert load_experiment(p).window.max_transport_failures is None  # 0: never


@pytest.mark.parametrize("bad", ["-1", "1.5", "true", '"3"'])
def test_max_transport_failures_must_be_a_whole_number(tmp_path, bad):
    p = write(tmp_path, f'[window]\nmax_transport_failures = {bad}\n'
                        '[[step]]\nname = "A"\nkind = "run"\nphases = ["prime:forward:c1:first3"]\n')
    with pytest.raises(ConfigError, match="whole number") as ei:
        load_experiment(p)
    assert ei.value.field == "window.max_transport_failures"


def test_an_incarnation_without_a_start_command_is_refused_at_load(tmp_path):
    """A URL target with no ``[server] start``: the step could start nothing (it failed at run time with an
    AssertionError before); the simulator target and a target with a start command are accepted."""
    steps = ('[[step]]\nname = "run"\nkind = "run"\nphases = ["a:forward:c1"]\n'
             '[[step]]\nname = "I"\nkind = "incarnation"\n')
    p = tmp_path / "e.toml"
    p.write_text(f'workload = "{WL}"\n[server]\ntarget = "http://127.0.0.1:9"\n' + steps)
    with pytest.raises(ConfigError, match="an incarnation starts a fresh server") as ei:
        load_experiment(p)
    assert (ei.value.path, ei.value.line, ei.value.field) == (p, 8, "step[1].kind")
    assert [s.kind for s in load_experiment(write(tmp_path, steps)).steps] == ["run", "incarnation"]
    p.write_text(f'workload = "{WL}"\n[server]\ntarget = "http://127.0.0.1:9"\nstart = "true"\n' + steps)
    assert [s.kind for s in load_experiment(p).steps] == ["run", "incarnation"]
