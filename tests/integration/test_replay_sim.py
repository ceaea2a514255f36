"""Replay against the embedded simulator: cached tokens and counter deltas derived by hand.

Tiny workload: three chat bodies, system "a b c d", users "u", "v", "w".
Token counts by hand from the simulator's documented tokenizer (kvreplay.sim.tokenizer):
  system message  = <|im_start|> + "system","\\n","a"," b"," c"," d" + <|im_end|> + "\\n"      = 9
  user message    = <|im_start|> + "user","\\n","u" + <|im_end|> + "\\n"                         = 6
  generation      = <|im_start|> + "assist","ant","\\n"                                        = 4
So every prompt is 19 tokens; snapshot offsets are 9 (end of system) and 15 (end of messages).

Entries model, 2 snapshots per request (S = system snapshot, Hi = body i's history):
  capacity 8, prime forward:  b0 miss, stores S,H0 | b1 hit S (9), stores H1 | b2 hit S (9), stores H2
                              -> hits 2, misses 1, stores 4, evicted 0, cached 0+9+9 = 18
              replay reverse: b2 hit H2 (15) | b1 hit H1 (15) | b0 hit H0 (15), nothing stored
                              -> hits 3, misses 0, stores 0, cached 45
  capacity 2, prime forward:  b0 miss, stores S,H0 | b1 hit S, stores H1 evicting H0
                              | b2 hit S, stores H2 evicting H1 -> hits 2, misses 1, stores 4, evicted 2
              replay reverse: b2 hit H2 (15) | b1 hit S (9), stores H1 evicting H2 (LRU after S's refresh)
                              | b0 hit S (9), stores H0 evicting H1 -> hits 3, stores 2, evicted 2, cached 33
"""

import json
from pathlib import Path

import pytest
from helpers import write_chat_workload

from kvreplay.cli import main


@pytest.fixture
def tiny(tmp_path: Path) -> Path:
    return write_chat_workload(tmp_path / "wl", [("a b c d", u) for u in ("u", "v", "w")])


def replay(tiny: Path, out: Path, entries: int, *phases: str) -> tuple[list[dict], dict]:
    rc = main(["run", str(tiny), "--target", "sim", "--sim-cache", "entries", "--sim-cache-entries", str(entries),
               "--sim-snapshots", "2", "--sim-time-scale", "0", "--out", str(out), "--quiet",
               *[a for p in phases for a in ("--phase", p)]])
    assert rc == 0
    recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    summary = json.loads((out / "summary.json").read_text())
    return recs, summary


@pytest.mark.parametrize(
    "entries, prime_cached, replay_cached, prime_delta, replay_delta",
    [
        (8, [0, 9, 9], [15, 15, 15], {"hits": 2, "misses": 1, "stores": 4, "evictions": 0},
         {"hits": 3, "misses": 0, "stores": 0, "evictions": 0}),
        (2, [0, 9, 9], [15, 9, 9], {"hits": 2, "misses": 1, "stores": 4, "evictions": 2},
         {"hits": 3, "misses": 0, "stores": 2, "evictions": 2}),
    ],
)
def test_prime_forward_replay_reverse(tiny, tmp_path, entries, prime_cached, replay_cached, prime_delta,
                                      replay_delta):
    recs, summary = replay(tiny, tmp_path / "o", entries, "prime:forward:c1", "replay:reverse:c1")
    prime = [r for r in recs if r["phase"] == "prime"]
    rep = [r for r in recs if r["phase"] == "replay"]
    assert [r["body_index"] for r in prime] == [0, 1, 2] and [r["body_index"] for r in rep] == [2, 1, 0]
    assert [r["body_sha256"] for r in rep] == [r["body_sha256"] for r in prime][::-1]
    assert [r["usage"]["prompt_tokens"] for r in recs] == [19] * 6
    assert [r["usage"]["cached_tokens"] for r in prime] == prime_cached
    assert [r["usage"]["cached_tokens"] for r in rep] == replay_cached
    # Per-request native deltas at C1 sum to the phase delta, and each hit is one hit.
    for r in recs:
        assert r["attribution"] == "per_request"
        assert r["counter_delta"]["hits"] + r["counter_delta"]["misses"] == 1
        assert r["counter_delta"]["hits"] == (1 if r["usage"]["cached_tokens"] else 0)
    for phase_recs, want in ((prime, prime_delta), (rep, replay_delta)):
        for k, v in want.items():
            assert sum(r["counter_delta"][k] for r in phase_recs) == v, k
    ph = {p["name"]: p for p in summary["phases"]}
    for name, want in (("prime", prime_delta), ("replay", replay_delta)):
        for k, v in want.items():
            assert ph[name]["counter_delta"][k] == v, (name, k)
    for name in ("prime", "replay"):
        cc = ph[name]["cross_check"]
        assert cc["agree"] is True and cc["requests_disagreeing"] == 0
        assert cc["usage_cached_tokens"] == cc["counter_hit_tokens"] == ph[name]["tokens"]["cached"]
    assert ph["prime"]["tokens"] == {"prompt": 57, "cached": sum(prime_cached), "completion":
                                     sum(r["usage"]["completion_tokens"] for r in prime), "cached_unknown": 0}


def test_c4_replay_has_phase_deltas_only(tiny, tmp_path):
    recs, summary = replay(tiny, tmp_path / "o", 8, "prime:forward:c1", "replay:reverse:c4")
    rep = [r for r in recs if r["phase"] == "replay"]
    assert {r["attribution"] for r in rep} == {"phase_only"}
    assert all(r["counter_delta"] is None for r in rep)
    assert summary["phases"][1]["counter_delta"]["hits"] == 3


def test_from_plan_replays_the_same_sequence(tiny, tmp_path):
    recs1, _ = replay(tiny, tmp_path / "a", 8, "mix:shuffle:11:c1:x2")
    out2 = tmp_path / "b"
    assert main(["run", "--from-plan", str(tmp_path / "a" / "plan.json"), "--target", "sim",
                 "--sim-time-scale", "0", "--out", str(out2), "--quiet"]) == 0
    recs2 = [json.loads(x) for x in (out2 / "records.jsonl").read_text().splitlines()]
    assert [r["body_sha256"] for r in recs1] == [r["body_sha256"] for r in recs2]
    p1 = json.loads((tmp_path / "a" / "plan.json").read_text())
    p2 = json.loads((out2 / "plan.json").read_text())
    assert p1["plan_sha256"] == p2["plan_sha256"]
    # Records carry no run-specific location: the same plan's records compare field by field.
    same = ("phase", "position", "body_index", "body_sha256", "status", "usage", "finish_reason", "text_head")
    assert [{k: r[k] for k in same} for r in recs1] == [{k: r[k] for k in same} for r in recs2]


def test_demo_workload_forward_then_reverse(tmp_path):
    from helpers import MTBENCH

    out = tmp_path / "demo"
    rc = main(["run", str(MTBENCH), "--target", "sim", "--sim-time-scale", "0", "--phase", "prime:forward:c1",
               "--phase", "replay:reverse:c4", "--out", str(out), "--quiet"])
    assert rc == 0
    recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    assert len(recs) == 104 and {r["status"] for r in recs} == {"ok"}
    prime = [r["body_sha256"] for r in recs if r["phase"] == "prime"]
    replay = sorted((r for r in recs if r["phase"] == "replay"), key=lambda r: r["position"])
    assert [r["body_sha256"] for r in replay] == prime[::-1]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["phases"][1]["peak_in_flight"] == 4
