"""The plan options of the mitigation experiments: order by-prefix and interleave.

They are additive: a plan that uses neither writes the same plan.json, byte for
byte, as before they existed (the digests below were taken from plan.py before
the change).
"""

import dataclasses
import hashlib

import orjson
import pytest
from helpers import write_chat_workload

from kvreplay.errors import ConfigError
from kvreplay.plan import (
    Interleave,
    PhaseSpec,
    build_plan,
    by_prefix,
    interleave_sequence,
    load_plan_toml,
    parse_phase,
)
from kvreplay.rundir import load_plan_json
from kvreplay.workload import load_workload


def wl3(tmp_path):
    p = write_chat_workload(tmp_path / "wl", [("sys A", "q1"), ("sys B", "q2"), ("sys A", "q3")])
    return dataclasses.replace(load_workload(p), path="wl")


def test_plans_without_the_options_are_byte_identical(tmp_path):
    plan = build_plan(
        wl3(tmp_path),
        [
            parse_phase(x)
            for x in ["prime:forward:c1", "replay:reverse:c4:x2", "s:shuffle:3:c1:last2"]
        ],
    )
    assert plan.sha256 == "c70eccfdbd5f327d3da53e65ec4189435aa81b8efe72452b175cb0611d70c8b2"
    text = orjson.dumps(plan.to_json({"target": "sim"}), option=orjson.OPT_INDENT_2)
    assert (
        hashlib.sha256(text).hexdigest()
        == "c55843bd3e5e9772cb41b028f06313e3c376dc12be0f68bf309f6eb4b499c330"
    )
    assert b"interleave" not in text


def test_by_prefix_groups_chains_by_first_appearance():
    a, b1, b2, c, d1, d2, e = (bytes([i]) for i in range(7))
    chains = [(a, b1), (c, d1), (a, b2), (c, d2), (e,), (a, b1)]
    assert by_prefix(chains) == [0, 5, 2, 1, 3, 4]


def test_by_prefix_order_in_a_plan(tmp_path):
    wl = wl3(tmp_path)
    plan = build_plan(wl, [parse_phase("g:by-prefix:c1")])
    assert [bi for bi, _ in plan.phases[0].sequence] == [0, 2, 1]
    assert plan.content()["phases"][0]["order"] == "by-prefix"


def test_interleave_sequence_by_hand():
    seq = tuple((i, 0) for i in range(5))
    assert interleave_sequence(seq, 10, 2, 2) == (
        (0, 0),
        (1, 0),
        (10, 0),
        (2, 0),
        (3, 0),
        (11, 0),
        (4, 0),
    )
    assert interleave_sequence(seq[:3], 10, 2, 1) == (
        (0, 0),
        (10, 0),
        (1, 0),
        (11, 0),
        (2, 0),
        (10, 1),
    )


def test_interleave_plan_json_round_trip(tmp_path):
    wl = load_workload(write_chat_workload(tmp_path / "wl", [("sys A", f"q{i}") for i in range(4)]))
    other = write_chat_workload(tmp_path / "other", [("own X", "u0"), ("own Y", "u1")])
    spec = PhaseSpec(
        name="mix", order="by-prefix", interleave=Interleave(workload=str(other), every=2)
    )
    plan = build_plan(wl, [spec])
    seq = plan.phases[0].sequence
    assert [bi for bi, _ in seq] == [0, 1, 4, 2, 3, 5]
    content = plan.content()
    assert content["workload"]["n_bodies"] == 4
    assert content["interleave_workloads"] == [
        {"path": str(other), "n_bodies": 2, "sha256": load_workload(other).sha256, "first_index": 4}
    ]
    assert content["phases"][0]["interleave"] == {"workload": str(other), "every": 2}
    other_sha = [b.sha256 for b in load_workload(other).bodies]
    assert [it["body_sha256"] for it in content["phases"][0]["sequence"]][2::3] == other_sha
    bound = plan.bind(wl)
    assert len(bound) == 6 and bound.bodies[5].sha256 == other_sha[1] and bound.bodies[5].index == 5
    path = tmp_path / "plan.json"
    path.write_bytes(orjson.dumps(plan.to_json({})))
    again, _ = load_plan_json(path, wl)
    assert again.sha256 == plan.sha256
    assert again.bind(wl).bodies[4].raw == load_workload(other).bodies[0].raw
    no_wl, _ = load_plan_json(path)  # without the workload: hashes from the sequence
    assert no_wl.sha256 == plan.sha256


def test_interleave_in_toml_and_its_errors(tmp_path):
    f = tmp_path / "p.toml"
    f.write_text(
        '[[phase]]\nname = "g"\norder = "by-prefix"\ninterleave = {workload = "o.jsonl", every = 3}\n'
    )
    specs, _ = load_plan_toml(f)
    assert specs[0].interleave == Interleave(workload="o.jsonl", every=3)
    for bad in (
        '{workload = "o.jsonl", every = 0}',
        '{workload = "o.jsonl"}',
        '"o.jsonl"',
        '{workload = "o.jsonl", every = 2, x = 1}',
    ):
        f.write_text(f'[[phase]]\nname = "g"\ninterleave = {bad}\n')
        with pytest.raises(ConfigError) as ei:
            load_plan_toml(f)
        assert ei.value.field == "phase[0].interleave"


def test_interleave_of_an_empty_workload_is_refused(tmp_path):
    wl = wl3(tmp_path)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    spec = PhaseSpec(name="m", interleave=Interleave(workload=str(empty), every=1))
    with pytest.raises((ConfigError, ValueError)):
        build_plan(wl, [spec])


def _rehashed(path, data):
    """Write ``data`` as plan.json with a plan_sha256 that matches it (an edit load_plan_json cannot see)."""
    content = {k: v for k, v in data.items() if k not in ("plan_sha256", "run")}
    data["plan_sha256"] = hashlib.sha256(orjson.dumps(content, option=orjson.OPT_SORT_KEYS)).hexdigest()
    path.write_bytes(orjson.dumps(data))


def test_burst_and_duplicate_selection_plans_round_trip_under_one_repetition_rule(tmp_path):
    wl = load_workload(write_chat_workload(tmp_path / "wl", [("sys A", f"q{i}") for i in range(3)]))
    other = write_chat_workload(tmp_path / "other", [("own X", "u0"), ("own Y", "u1")])
    burst = PhaseSpec(name="mix", repeats=2, select=(0, 2),
                      interleave=Interleave(workload=str(other), every=1, burst=3))
    dup = PhaseSpec(name="dup", repeats=2, select=(1, 1))
    plan = build_plan(wl, [burst, dup])
    # main 0,2 twice; after each main position 3 foreign bodies (3, 4 cycling), repetition = cycles done
    assert plan.phases[0].sequence == (
        (0, 0), (3, 0), (4, 0), (3, 1), (2, 0), (4, 1), (3, 2), (4, 2),
        (0, 1), (3, 3), (4, 3), (3, 4), (2, 1), (4, 4), (3, 5), (4, 5))
    assert plan.phases[1].sequence == ((1, 0), (1, 0), (1, 1), (1, 1))
    path = tmp_path / "plan.json"
    path.write_bytes(orjson.dumps(plan.to_json({})))
    again, _ = load_plan_json(path, wl)
    assert again.phases[0].sequence == plan.phases[0].sequence and again.sha256 == plan.sha256
    assert again.phases[1].sequence == plan.phases[1].sequence


@pytest.mark.parametrize(("k", "rep"), [(1, 5), (0, 1)])  # a foreign body's, then a main body's first position
def test_a_repetition_ahead_of_the_bodys_earlier_positions_is_refused(tmp_path, k, rep):
    wl = load_workload(write_chat_workload(tmp_path / "wl", [("sys A", f"q{i}") for i in range(2)]))
    other = write_chat_workload(tmp_path / "other", [("own X", "u0")])
    spec = PhaseSpec(name="mix", repeats=2, interleave=Interleave(workload=str(other), every=2))
    plan = build_plan(wl, [spec])
    assert plan.phases[0].sequence == ((0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1))
    data = plan.to_json({})
    data["phases"][0]["sequence"][2 if k == 1 else 0]["repetition"] = rep
    path = tmp_path / "plan.json"
    _rehashed(path, data)
    with pytest.raises(ConfigError) as err:
        load_plan_json(path, wl)
    assert err.value.field == f"phases[0].sequence[{2 if k == 1 else 0}]"
    assert "repetition" in str(err.value)
