from pathlib import Path

import orjson
import pytest

from kvreplay.errors import ConfigError
from kvreplay.plan import build_plan, load_plan_toml, parse_phase
from kvreplay.rundir import load_plan_json
from kvreplay.workload import load_workload


@pytest.fixture
def wl(tmp_path: Path):
    f = tmp_path / "w.jsonl"
    f.write_text("".join(f'{{"prompt": "p{i}"}}\n' for i in range(20)))
    return load_workload(f)


def test_shorthand():
    p = parse_phase("control:forward:c1:x2:last12")
    assert (p.name, p.order, p.concurrency, p.repeats, p.select) == ("control", "forward", 1, 2, "last:12")
    p = parse_phase("mix:shuffle:7:c4:first3")
    assert (p.order, p.concurrency, p.select) == ("shuffle:7", 4, "first:3")


@pytest.mark.parametrize("bad", ["x:forward", "x:sideways:c1", "x:forward:c0", "x:forward:c1:z9", "x:shuffle:c1"])
def test_shorthand_errors(bad):
    with pytest.raises(ConfigError) as ei:
        parse_phase(bad)
    assert "--phase" in str(ei.value)


def test_expansion(wl):
    plan = build_plan(wl, [parse_phase("prime:forward:c1"), parse_phase("replay:reverse:c4"),
                           parse_phase("control:forward:c1:x2:last12")])
    prime, replay, control = (ph.sequence for ph in plan.phases)
    assert [b for b, _ in prime] == list(range(20))
    assert [b for b, _ in replay] == list(range(19, -1, -1))
    assert [b for b, _ in control] == list(range(8, 20)) * 2
    assert [r for _, r in control] == [0] * 12 + [1] * 12
    assert plan.total_requests == 64


def test_shuffle_is_seeded_and_a_permutation(wl):
    a = build_plan(wl, [parse_phase("s:shuffle:7:c1")]).phases[0].sequence
    b = build_plan(wl, [parse_phase("s:shuffle:7:c1")]).phases[0].sequence
    c = build_plan(wl, [parse_phase("s:shuffle:8:c1")]).phases[0].sequence
    assert a == b != c
    assert sorted(x for x, _ in a) == list(range(20))


def test_plan_hash_stable_and_sensitive(wl):
    h1 = build_plan(wl, [parse_phase("a:forward:c1")]).sha256
    assert h1 == build_plan(wl, [parse_phase("a:forward:c1")]).sha256
    assert h1 != build_plan(wl, [parse_phase("a:reverse:c1")]).sha256
    assert h1 != build_plan(wl, [parse_phase("a:forward:c2")]).sha256


def test_plan_json_round_trip_and_tamper(wl, tmp_path):
    plan = build_plan(wl, [parse_phase("a:shuffle:3:c2:x2")])
    p = tmp_path / "plan.json"
    p.write_bytes(orjson.dumps(plan.to_json({"target": "t"})))
    again, run = load_plan_json(p, wl)
    assert again.phases[0].sequence == plan.phases[0].sequence and again.sha256 == plan.sha256
    assert run == {"target": "t"}
    data = orjson.loads(p.read_bytes())
    data["phases"][0]["sequence"][0]["body_index"] = 5
    p.write_bytes(orjson.dumps(data))
    with pytest.raises(ConfigError, match="plan_sha256"):
        load_plan_json(p, wl)


def test_duplicate_names_and_bad_selection(wl):
    with pytest.raises(ConfigError, match="used twice"):
        build_plan(wl, [parse_phase("a:forward:c1"), parse_phase("a:reverse:c1")])
    from kvreplay.plan import PhaseSpec

    spec = PhaseSpec.from_mapping({"name": "x", "select": [0, 25]}, where={})
    with pytest.raises(ConfigError, match="selects body 25"):
        build_plan(wl, [spec])


@pytest.mark.parametrize("sel", ["first21", "last21"])
def test_a_first_or_last_past_the_workload_is_refused_not_cut(wl, sel):
    with pytest.raises(ConfigError) as ei:
        build_plan(wl, [parse_phase(f"a:forward:c1:{sel}")])
    kind = sel.rstrip("0123456789")
    assert str(ei.value) == (f"field 'select': phase 'a' selects {kind}:21 but the workload has 20 bodies "
                             f"({kind}:20 or all sends every one)")


@pytest.mark.parametrize("sel,want", [("first20", list(range(20))), ("last20", list(range(20))),
                                      ("last3", [17, 18, 19]), ("first1", [0]), ("last1", [19])])
def test_a_first_or_last_up_to_the_workload_sends_exactly_those(wl, sel, want):
    plan = build_plan(wl, [parse_phase(f"a:forward:c1:{sel}")])
    assert [bi for bi, _ in plan.phases[0].sequence] == want


def test_toml_plan_and_errors_with_line(tmp_path):
    f = tmp_path / "p.toml"
    f.write_text('workload = "w"\n\n[[phase]]\nname = "prime"\nconcurrency = 1\n\n'
                 '[[phase]]\nname = "replay"\norder = "reverse"\nconcurrency = 4\nselect = [1, 2]\n')
    phases, settings = load_plan_toml(f)
    assert [p.name for p in phases] == ["prime", "replay"] and phases[1].select == (1, 2)
    assert settings == {"workload": "w"}
    f.write_text('[[phase]]\nname = "a"\n\n[[phase]]\nname = "b"\nconcurency = 4\n')
    with pytest.raises(ConfigError) as ei:
        load_plan_toml(f)
    assert ei.value.line == 4 and ei.value.field == "phase[1].concurency"
    assert f"{f}:4" in str(ei.value)
    f.write_text('[[phase]]\nname = "a"\nconcurrency = 0\n')
    with pytest.raises(ConfigError, match="integer >= 1"):
        load_plan_toml(f)
    f.write_text('speed = 3\n[[phase]]\nname = "a"\n')
    with pytest.raises(ConfigError) as ei:
        load_plan_toml(f)
    assert ei.value.line == 1


def test_every_fixture_plan_loads():
    plans = sorted((Path(__file__).resolve().parents[2] / "fixtures" / "plans").glob("*.toml"))
    assert plans, "fixtures/plans/ holds no plan"
    for p in plans:
        phases, _ = load_plan_toml(p)
        assert phases
