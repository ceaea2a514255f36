"""``[gates]``: body gates asserted before anything is written, and ``fixed_bytes`` before each sending step."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvreplay.cli import main
from kvreplay.errors import ConfigError
from kvreplay.experiments.gates import GateSpec, body_gate_failure, fixed_bytes_failure, parse_gates
from kvreplay.workload import load_workload

GOOD = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2048, "temperature": 1,
        "top_p": 0.95, "reasoning_effort": "max"}


def workload(tmp: Path, *bodies: dict) -> Path:
    d = tmp / "wl"
    d.mkdir()
    for i, b in enumerate(bodies):
        (d / f"{i:03d}.json").write_text(json.dumps(b))
    return d


def experiment(tmp: Path, wl: Path, gates: str) -> Path:
    p = tmp / "exp.toml"
    p.write_text(f'workload = "{wl}"\n[server]\ntarget = "sim"\n{gates}\n'
                 '[[step]]\nname = "A"\nkind = "run"\nphases = ["a:forward:c1"]\n')
    return p


GATES = '[gates]\nbody = {max_tokens = 2048, temperature = 1, top_p = 0.95, reasoning_effort = "max"}\n'


def test_a_body_that_differs_exits_2_naming_file_body_and_field_and_writes_nothing(tmp_path, capsys):
    wl = workload(tmp_path, GOOD, {**GOOD, "temperature": 0.7})
    exp = experiment(tmp_path, wl, GATES)
    out = tmp_path / "out"
    assert main(["experiment", str(exp), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == (f"kvreplay: error: {wl / '001.json'}, field 'gates.body.temperature': body 1 (001.json) of "
                   f"workload {wl}: temperature is 0.7, the gate in {exp} wants 1\n")
    assert not out.exists()


def test_a_missing_field_is_named_missing(tmp_path):
    body = dict(GOOD)
    del body["reasoning_effort"]
    wl = load_workload(workload(tmp_path, body))
    gates = parse_gates({"body": {"max_tokens": 2048, "reasoning_effort": "max"}}, path=Path("x"), line=1)
    bad = body_gate_failure(gates, wl)
    assert bad is not None and (bad[0].index, bad[1], bad[2], bad[3]) == (0, "reasoning_effort", "max", "missing")


@pytest.mark.parametrize(("want", "got", "holds"), [(1, 1.0, True), (1, True, False), (True, 1, False),
                                                   (0.95, 0.95, True), ("max", "high", False), (2048, "2048", False)])
def test_values_compare_by_type_and_value(tmp_path, want, got, holds):
    wl = load_workload(workload(tmp_path, {**GOOD, "x": got}))
    assert (body_gate_failure(GateSpec((("x", want),)), wl) is None) is holds


def test_a_dotted_field_reads_a_nested_object(tmp_path):
    wl = load_workload(workload(tmp_path, {**GOOD, "reasoning": {"effort": "low"}}))
    bad = body_gate_failure(GateSpec((("reasoning.effort", "max"),)), wl)
    assert bad is not None and bad[1:] == ("reasoning.effort", "max", "low")


def test_bad_gate_tables_are_refused_naming_the_field():
    with pytest.raises(ConfigError) as e:
        parse_gates({"body": {"x": [1]}}, path=Path("f.toml"), line=3)
    assert e.value.field == "gates.body.x" and e.value.line == 3
    with pytest.raises(ConfigError) as e:
        parse_gates({"fixed_bytes": "yes"}, path=Path("f.toml"), line=3)
    assert e.value.field == "gates.fixed_bytes"
    with pytest.raises(ConfigError) as e:
        parse_gates({"bodies": {}}, path=Path("f.toml"), line=3)
    assert e.value.field == "gates.bodies"


def test_fixed_bytes_names_a_changed_workload(tmp_path):
    d = workload(tmp_path, GOOD)
    wl = load_workload(d)
    assert fixed_bytes_failure(str(d), wl.sha256, max_body_bytes=1 << 20) is None
    (d / "000.json").write_text(json.dumps(GOOD) + " ")
    now = load_workload(d)
    assert fixed_bytes_failure(str(d), wl.sha256, max_body_bytes=1 << 20) == (
        f"fixed_bytes: the workload {d} changed since the freeze (sha256 {wl.sha256[:12]} frozen, "
        f"{now.sha256[:12]} now); the step sends nothing")
