"""The body index (issue 32): offsets, lengths and hashes by hand, byte-exact reads, the cache, edits refused.

Hand-made JSONL (91 bytes), byte by byte:
  offset  0: {"prompt":"a"}            14 bytes, then LF            line 1
  offset 15: LF                        blank line, no body           line 2
  offset 16: {"messages":[...],"stream":true}   59 bytes, then CR LF line 3 (the CR is not part of it)
  offset 77: {"prompt":"b"}            14 bytes, no final LF         line 4
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from kvreplay.bundled import DEMO_WORKLOAD
from kvreplay.cli import main
from kvreplay.plan import build_plan, parse_phase
from kvreplay.workload import index as index_mod
from kvreplay.workload import load_workload
from kvreplay.workload.index import BodyChanged, IndexedBodies, cache_paths

B0 = b'{"prompt":"a"}'
B1 = b'{"messages":[{"role":"user","content":"hi"}],"stream":true}'
B2 = b'{"prompt":"b"}'
SHA = [
    "732acbb3e402e912437dbe53442ca54368b45e73c284acbf4c0530fac53cca74",
    "0df97ce458d538732cedbba79f8fbf0193034e6dff30fcb42a5051436f0085b1",
    "8e71c43ded330b0fc5a427dccc809d279ff89ac2ee06037497b8a1c4918ac306",
]


@pytest.fixture
def jsonl(tmp_path: Path) -> Path:
    p = tmp_path / "w.jsonl"
    p.write_bytes(B0 + b"\n" + b"\n" + B1 + b"\r\n" + B2)
    assert p.stat().st_size == 91
    return p


def test_index_entries_of_a_hand_made_jsonl(jsonl):
    wl = load_workload(jsonl)
    assert isinstance(wl.bodies, IndexedBodies)
    ix = wl.bodies.entries
    assert list(ix.offsets) == [0, 16, 77]
    assert list(ix.lengths) == [14, 59, 14]
    assert list(ix.lines) == [1, 3, 4]
    assert [ix.sha_of(i) for i in range(3)] == SHA
    assert [wl.sha_of(i) for i in range(3)] == SHA and [wl.size_of(i) for i in range(3)] == [14, 59, 14]
    assert [ix.source_of(i) for i in range(3)] == ["w.jsonl:1", "w.jsonl:3", "w.jsonl:4"]
    assert [(b.kind, b.stream) for b in wl.bodies] == [("completions", False), ("chat", True), ("completions", False)]


def test_body_read_back_byte_exact(jsonl):
    wl = load_workload(jsonl)
    assert [b.raw for b in wl.bodies] == [B0, B1, B2]
    b = wl.bodies[1]
    assert (b.index, b.sha256, b.source, b.body_bytes) == (1, SHA[1], "w.jsonl:3", 59)
    assert wl.bodies[-1].raw == B2 and [x.raw for x in wl.bodies[0:2]] == [B0, B1]


def test_folder_bodies_are_read_from_their_files(tmp_path):
    d = tmp_path / "f"
    d.mkdir()
    for name, raw in (("b.json", B1), ("a.json", B0), ("c.json", B2), ("note.txt", b"x")):
        (d / name).write_bytes(raw)
    wl = load_workload(d)
    assert [wl.bodies.entries.name_of(i) for i in range(3)] == ["a.json", "b.json", "c.json"]
    assert [b.raw for b in wl.bodies] == [B0, B1, B2] and [wl.sha_of(i) for i in range(3)] == SHA
    (d / "b.json").write_bytes(B1.replace(b"hi", b"ho"))
    with pytest.raises(BodyChanged, match=r"b\.json.*body 1 changed on disk"):
        wl.bodies[1]  # noqa: B018


def test_an_edited_body_is_refused_when_read(jsonl):
    wl = load_workload(jsonl)
    data = jsonl.read_bytes()
    jsonl.write_bytes(data.replace(b'"b"', b'"c"'))  # same length, other bytes
    assert wl.bodies[0].raw == B0
    with pytest.raises(BodyChanged, match=r"w\.jsonl:4.*body 2 changed on disk .*planned 8e71c43ded33"):
        wl.bodies[2]  # noqa: B018
    assert wl.sha_of(2) == SHA[2]  # the index still says what was planned


def test_cache_beside_is_written_reused_and_invalidated(jsonl, monkeypatch):
    beside, _ = cache_paths(jsonl)
    load_workload(jsonl)
    assert not beside.exists()  # small workloads are not cached
    wl = load_workload(jsonl, cache_min_bytes=0)
    assert beside == jsonl.with_name("w.jsonl.kvindex") and beside.exists()
    real = index_mod.build_index
    monkeypatch.setattr(index_mod, "build_index", lambda *a: pytest.fail("indexed again"))
    again = load_workload(jsonl, cache_min_bytes=0)
    assert list(again.bodies.entries.offsets) == [0, 16, 77] and again.sha256 == wl.sha256
    assert [b.raw for b in again.bodies] == [B0, B1, B2]
    jsonl.write_bytes(jsonl.read_bytes() + b"\n" + B0)  # size changes: the cache is stale
    built = []
    monkeypatch.setattr(index_mod, "build_index", lambda *a: built.append(1) or real(*a))
    third = load_workload(jsonl, cache_min_bytes=0)
    assert built == [1] and list(third.bodies.entries.offsets) == [0, 16, 77, 92]


def test_cache_falls_back_to_the_user_cache_when_beside_is_not_writable(jsonl, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    beside, user = cache_paths(jsonl)
    real = index_mod.atomic_write_chunks

    def refuse_beside(path, data, **kw):
        if Path(path) == beside:
            raise PermissionError(13, "Permission denied")
        return real(path, data, **kw)

    monkeypatch.setattr(index_mod, "atomic_write_chunks", refuse_beside)
    load_workload(jsonl, cache_min_bytes=0)
    assert not beside.exists() and user.exists() and user.parent == tmp_path / "xdg" / "kvreplay" / "index"
    monkeypatch.setattr(index_mod, "build_index", lambda *a: pytest.fail("indexed again"))
    assert [b.raw for b in load_workload(jsonl, cache_min_bytes=0).bodies] == [B0, B1, B2]


def test_a_cache_of_another_file_is_not_used(jsonl, tmp_path):
    load_workload(jsonl, cache_min_bytes=0)
    other = tmp_path / "o" / "w.jsonl"
    other.parent.mkdir()
    shutil.copy2(jsonl, other)  # same size, mtime and edges, another path
    shutil.copy2(cache_paths(jsonl)[0], cache_paths(other)[0])
    other.write_bytes(B2 + b"\n" + B0)
    os.utime(other, ns=(jsonl.stat().st_atime_ns, jsonl.stat().st_mtime_ns))
    assert [b.raw for b in load_workload(other, cache_min_bytes=0).bodies] == [B2, B0]


def test_plan_hash_of_the_bundled_workload_is_unchanged(tmp_path, monkeypatch):
    """Hashes computed with the loader before issue 32 (tuples of bytes in memory), same relative path."""
    shutil.copytree(DEMO_WORKLOAD, tmp_path / "mtbench-52")
    monkeypatch.chdir(tmp_path)
    wl = load_workload("mtbench-52")
    assert wl.sha256 == "f30e6809c0f91edafd75898820a89feb007d3e02a427bf2af49e322cf7441af1"
    p1 = build_plan(wl, [parse_phase("prime:forward:c1"), parse_phase("replay:reverse:c4:x2")])
    p2 = build_plan(wl, [parse_phase("g:by-prefix:c1"), parse_phase("s:shuffle:7:c4:last5")])
    assert p1.sha256 == "5a1e0c4227511054d5661fb0157654d138552a803d21dad80ed664393665cfa2"
    assert p2.sha256 == "c15edf902c0aaed40545961a80a4a9f4e40098e25de9ce043db7711c13a8b08c"


def test_run_refuses_a_body_edited_between_planning_and_sending(jsonl, tmp_path, monkeypatch):
    import kvreplay.api.runflow as api_run  # where the run plans (issue 41 moved it out of api/run.py)

    real = api_run.build_plan

    def plan_then_edit(workload, specs, *a, **kw):
        plan = real(workload, specs, *a, **kw)
        jsonl.write_bytes(jsonl.read_bytes().replace(b'"hi"', b'"ho"'))  # body 1, same length
        return plan

    monkeypatch.setattr(api_run, "build_plan", plan_then_edit)
    out = tmp_path / "run"
    rc = main(["run", str(jsonl), "--target", "sim", "--sim-time-scale", "0", "--phase", "p:forward:c1",
               "--out", str(out), "--quiet"])
    assert rc != 0
    recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    assert [(r["body_index"], r["sent"], r["status"]) for r in recs] == [
        (0, True, "ok"), (1, False, "aborted"), (2, False, "aborted")]
    assert recs[1]["body_sha256"] == SHA[1]  # what was planned, not what is on disk
    assert "body 1 changed on disk since the workload was indexed and planned" in recs[1]["error"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["aborted"]["reason"] == "body_changed"
    assert summary["aborted"]["message"].startswith(f"{jsonl}:3: body 1 changed on disk")


def test_the_plan_holds_the_index_digests_not_strings(jsonl):
    from kvreplay.workload.index import HexDigests

    plan = build_plan(load_workload(jsonl), [parse_phase("a:forward:c1")])
    assert isinstance(plan.body_sha256, HexDigests) and len(plan.body_sha256.digests) == 96
    assert plan.body_sha256 == tuple(SHA) and list(plan.body_sha256) == SHA and plan.sha_of(2) == SHA[2]


def test_readahead_of_several_bodies_is_one_hint_over_their_span(jsonl, monkeypatch):
    # Issue 43 item 1: one posix_fadvise per batch. Bodies 0 and 1 span [0, 75) for 73 bytes
    # of bodies (within twice their bytes): one call. Bodies 0 and 2 span [0, 91) for 28
    # bytes (more than twice): one call each, at their own offsets. One body: its own slice.
    if not hasattr(os, "posix_fadvise"):
        pytest.skip("no posix_fadvise on this platform")
    calls = []
    monkeypatch.setattr(index_mod.os, "posix_fadvise", lambda fd, off, n, advice: calls.append((off, n, advice)))
    wl = load_workload(jsonl)
    wl.readahead([0, 1])
    wl.readahead([0, 2])
    wl.readahead(1)
    wl.readahead([])
    w = os.POSIX_FADV_WILLNEED
    assert calls == [(0, 75, w), (0, 14, w), (77, 14, w), (16, 59, w)]
    # A body's source is named as the index names it, without a Path per read.
    assert [b.source for b in wl.bodies] == ["w.jsonl:1", "w.jsonl:3", "w.jsonl:4"]


def test_joined_bodies_hint_each_indexed_part_once_with_its_own_positions(jsonl, monkeypatch):
    # JoinedBodies (Plan.bind of several workloads): the same 3-body file twice, then an
    # in-memory part (no hint). Joined positions 1, 2 are the first part's 1, 2 (span [16, 91)
    # for 73 bytes: one call); 3, 4 are the second part's 0, 1 (span [0, 75): one call, on
    # that part's own file descriptor); 6 is in memory.
    if not hasattr(os, "posix_fadvise"):
        pytest.skip("no posix_fadvise on this platform")
    calls = []
    monkeypatch.setattr(index_mod.os, "posix_fadvise", lambda fd, off, n, advice: calls.append((off, n)))
    a, b = load_workload(jsonl).bodies, load_workload(jsonl).bodies
    joined = index_mod.JoinedBodies([a, b, (B0,)])
    joined.readahead([1, 2, 3, 4, 6])
    assert calls == [(16, 75), (0, 75)]
    assert a._fd is not None and b._fd is not None and a._fd != b._fd
