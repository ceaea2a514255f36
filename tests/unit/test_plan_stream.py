"""plan.json and the plan hash streamed entry by entry (issue 32): the same bytes as before, no list held."""

from __future__ import annotations

import hashlib
import pickle
from pathlib import Path

import orjson

from kvreplay.plan import SequenceView, build_plan, parse_phase
from kvreplay.rundir.planfile import sequence_head, write_plan_json
from kvreplay.safe_io import dumps_json
from kvreplay.workload import load_workload


def _plan(tmp_path: Path):
    wl = tmp_path / "w.jsonl"
    wl.write_bytes(b'{"prompt":"a"}\n{"prompt":"b"}\n{"messages":[{"role":"user","content":"c"}]}\n')
    specs = [parse_phase("prime:forward:c1"), parse_phase("big:reverse:c4:x1500"),  # 4500 > one batch of 4096
             parse_phase("open:forward:c2:x2:r40:poisson3")]
    return build_plan(load_workload(wl), specs), build_plan(load_workload(wl), [parse_phase("x:forward:c1")])


def test_plan_json_is_the_bytes_of_the_materialised_plan(tmp_path):
    p, _ = _plan(tmp_path)
    run = {"target": "http://127.0.0.1:1", "backend": "none"}
    doc = p.to_json(run, lazy=True)
    assert all(isinstance(ph["sequence"], SequenceView) for ph in doc["phases"])
    write_plan_json(tmp_path / "run", doc)
    want = dumps_json({**p.content(), "plan_sha256": p.sha256, "run": run}) + b"\n"
    got = (tmp_path / "run" / "plan.json").read_bytes()
    assert got == want
    back = orjson.loads(got)
    assert [len(ph["sequence"]) for ph in back["phases"]] == [3, 4500, 6]
    assert back["phases"][1]["sequence"][4096] == {"position": 4096, "body_index": 1,
                                                   "body_sha256": p.body_sha256[1], "repetition": 1365}


def test_plan_hash_streamed_equals_the_hash_of_the_whole_content(tmp_path):
    p, small = _plan(tmp_path)
    for plan in (p, small):
        whole = hashlib.sha256(orjson.dumps(plan.content(), option=orjson.OPT_SORT_KEYS)).hexdigest()
        assert plan.sha256 == whole


def test_sequence_view_reads_like_the_list(tmp_path):
    p, _ = _plan(tmp_path)
    view = p.to_json({}, lazy=True)["phases"][2]["sequence"]
    listed = p.content()["phases"][2]["sequence"]
    assert len(view) == 6 and view[0] == listed[0] and view[-1] == listed[-1] and view[1:3] == listed[1:3]
    assert view == listed and list(view) == listed and pickle.loads(pickle.dumps(view)) == listed
    assert sequence_head({"sequence": view}, 2) == listed[:2]


def test_compact_plan_holds_distinct_entries_as_arrays(tmp_path):
    from kvreplay.rundir.planfile import Entries, compact_plan_file

    p, _ = _plan(tmp_path)
    write_plan_json(tmp_path / "run", p.to_json({}, lazy=True))
    cp = compact_plan_file(tmp_path / "run" / "plan.json")
    seqs = [ph["sequence"] for ph in cp["phases"]]
    assert all(isinstance(s, Entries) for s in seqs)
    assert [len(s) for s in seqs] == [3, 3, 3] and [ph["sequence_length"] for ph in cp["phases"]] == [3, 4500, 6]
    # big:reverse sends bodies 2, 1, 0: the first entry of each, positions 0..2
    assert list(seqs[1]) == [{"position": i, "body_index": 2 - i, "body_sha256": p.body_sha256[2 - i],
                              "repetition": 0} for i in range(3)]
    assert seqs[2][0]["intended_ns"] == 0 and seqs[2] == p.content()["phases"][2]["sequence"][:3]
    odd = Entries()
    odd.append({"position": 0, "body_index": 0, "body_sha256": "not hex", "repetition": 0})
    odd.append({"position": 1, "body_index": 3, "body_sha256": "ab" * 32, "repetition": 0})
    assert odd[0]["body_sha256"] == "not hex" and odd[1] == {"position": 1, "body_index": 3,
                                                              "body_sha256": "ab" * 32, "repetition": 0}
