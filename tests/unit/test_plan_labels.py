"""Issue 14: phase label/comparable (TOML, shorthand, plan.json) and the contract settings of a plan."""

from pathlib import Path

import pytest

from kvreplay.errors import ConfigError
from kvreplay.plan import PhaseSpec, load_plan_toml, parse_phase

ROOT = Path(__file__).resolve().parents[2]


def test_shorthand_label_and_nocompare():
    spec = parse_phase("control:forward:c1:x2:last12:label=control:nocompare")
    assert (spec.name, spec.repeats, spec.select, spec.label, spec.comparable) == ("control", 2, "last:12", "control",
                                                                                   False)
    assert parse_phase("main:reverse:c4:label=main").comparable is True
    with pytest.raises(ConfigError, match="label"):
        parse_phase("a:forward:c1:label=")
    with pytest.raises(ConfigError, match="unknown token 'compare'"):
        parse_phase("a:forward:c1:compare")


def test_label_and_comparable_only_in_plan_json_when_set():
    plain = PhaseSpec.from_mapping({"name": "a"}, where={})
    assert "label" not in plain.to_json() and "comparable" not in plain.to_json()
    ctl = PhaseSpec.from_mapping({"name": "c", "label": "control", "comparable": False}, where={})
    assert ctl.to_json()["label"] == "control" and ctl.to_json()["comparable"] is False
    # plan.json round trip
    assert PhaseSpec.from_mapping(ctl.to_json(), where={}) == ctl


def test_toml_contract_settings(tmp_path):
    p = tmp_path / "p.toml"
    p.write_text('abort_on_malformed = true\non_check_fail = "mark"\n[identity]\nmodels = ["m"]\n'
                 '[[phase]]\nname = "a"\nlabel = "prime"\n')
    phases, settings = load_plan_toml(p)
    assert phases[0].label == "prime" and phases[0].comparable is True
    assert settings == {"abort_on_malformed": True, "on_check_fail": "mark", "identity": {"models": ["m"]}}
    assert load_plan_toml(ROOT / "fixtures" / "plans" / "c4-forward.toml")[1] == {}  # older plans still load
    p.write_text('on_check_fail = "ignore"\n[[phase]]\nname = "a"\n')
    with pytest.raises(ConfigError) as e:
        load_plan_toml(p)
    assert str(e.value) == f"{p}:1, field 'on_check_fail': must be \"skip\" or \"mark\", not 'ignore'"
