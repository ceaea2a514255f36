"""Conversation workloads: sessions loaded with the workload, frozen into the plan, shown by inspect, checked."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from kvreplay.commands.inspect import analyse, render
from kvreplay.errors import ConfigError
from kvreplay.plan import build_plan, parse_phase, plan_from_json
from kvreplay.workload import load_workload
from kvreplay.workload.conversations import live_body, session_warnings
from kvreplay.workload.sessions import Turn, write_sessions

ROOT = Path(__file__).resolve().parents[3]
CONV = ROOT / "fixtures" / "workloads" / "conversations"
MTBENCH = ROOT / "fixtures" / "workloads" / "mtbench-52"


def _u(t: str) -> str:  # 29 bytes for a one-letter text: {"role":"user","content":"a"}
    return f'{{"role":"user","content":"{t}"}}'


def _a(t: str) -> str:  # 34 bytes: "assistant" is 5 bytes longer than "user"
    return f'{{"role":"assistant","content":"{t}"}}'


def _hand(tmp_path: Path) -> Path:
    """One session of 3 turns; turn 2 resends a different assistant answer ("x", not "b") for turn 0."""
    w = tmp_path / "w.jsonl"
    bodies = [[_u("a")], [_u("a"), _a("b"), _u("c")], [_u("a"), _a("x"), _u("c"), _a("d"), _u("e")]]
    w.write_text("".join('{"model":"m","messages":[' + ",".join(m) + "]}\n" for m in bodies))
    write_sessions(w, [Turn(0, "s", 0), Turn(1, "s", 1, 1.5), Turn(2, "s", 2, 2.0)])
    return w


def test_bundled_workload_plan_hash_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    # No side file: nothing about sessions enters the plan (these are main's hashes before sessions existed).
    monkeypatch.chdir(ROOT)
    wl = load_workload("fixtures/workloads/mtbench-52")
    assert wl.sessions is None
    assert build_plan(wl, [parse_phase("a:forward:c4")]).sha256 == (
        "80c9d87fcd6d020dbc1c50355ed99350a8dd370ccbc7b6a13489392341bb584e")
    assert build_plan(wl, [parse_phase("p:shuffle:3:c1:x2:last7:r5")]).sha256 == (
        "dea0b03a3c68495c7218538728c37183686e67875988e92a313e8527260d60bc")


def test_sessions_load_with_the_workload_and_count_in_selectors() -> None:
    wl = load_workload(CONV)
    assert wl.sessions is not None and wl.sessions.order == ("conv-0", "conv-1", "conv-2", "conv-3")
    plan = build_plan(wl, [parse_phase("a:reverse:c4:x2:first2"), parse_phase("b:forward:c1:last1")])
    a, b = plan.phases
    # first2 = sessions conv-0 (bodies 0-2) and conv-1 (3-5); reversed = conv-1 starts first; x2 repeats sessions
    assert a.sequence == tuple((bi, r) for r in (0, 1) for bi in (3, 4, 5, 0, 1, 2))
    assert a.turns == (("conv-1", 0), ("conv-1", 1), ("conv-1", 2), ("conv-0", 0), ("conv-0", 1), ("conv-0", 2)) * 2
    assert a.session_spans() == ((0, 3), (3, 3), (6, 3), (9, 3))
    assert b.sequence == ((9, 0), (10, 0), (11, 0))
    content = plan.content()
    assert content["workload"]["sessions"] == {"sha256": wl.sessions.sha256, "n_sessions": 4}
    assert content["phases"][0]["sequence"][1] == {"position": 1, "body_index": 4, "body_sha256": wl.bodies[4].sha256,
                                                   "repetition": 0, "session": "conv-1", "turn": 1}


def test_session_order_is_hashed_and_round_trips(tmp_path: Path) -> None:
    wl = load_workload(CONV)
    fwd = build_plan(wl, [parse_phase("a:forward:c4")])
    shuf = build_plan(wl, [parse_phase("a:shuffle:5:c4")])
    assert fwd.sha256 != shuf.sha256
    assert [t for t in shuf.phases[0].turns or () if t[1] == 0] != [t for t in fwd.phases[0].turns or () if t[1] == 0]
    data = orjson.loads(orjson.dumps(shuf.to_json({})))
    again, _ = plan_from_json(data, wl, path="plan.json")
    assert again.sha256 == shuf.sha256 and again.phases[0].turns == shuf.phases[0].turns
    # a side file edited since the plan was frozen is refused
    copy = tmp_path / "c"
    copy.mkdir()
    for f in CONV.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    (copy / "sessions.jsonl").write_bytes((CONV / "sessions.jsonl").read_bytes().replace(b"0.05", b"0.06", 1))
    with pytest.raises(ConfigError, match="sessions side file"):
        plan_from_json(data, load_workload(copy), path="plan.json")


def test_open_loop_arrivals_are_session_starts() -> None:
    wl = load_workload(CONV)
    ph = build_plan(wl, [parse_phase("a:forward:c4:r2")]).phases[0]
    assert ph.intended_ns == (0, 500_000_000, 1_000_000_000, 1_500_000_000)  # 4 session starts at 2/s
    items = build_plan(wl, [parse_phase("a:forward:c4:r2")]).content()["phases"][0]["sequence"]
    assert [it.get("intended_ns") for it in items[:4]] == [0, None, None, 500_000_000]


def test_interleave_refused_with_sessions(tmp_path: Path) -> None:
    from kvreplay.plan import Interleave, PhaseSpec
    spec = PhaseSpec(name="a", interleave=Interleave(workload=str(MTBENCH), every=2))
    with pytest.raises(ConfigError, match="conversation workload"):
        build_plan(load_workload(CONV), [spec])


def test_inspect_reuse_by_turn_hand_computed(tmp_path: Path) -> None:
    a = analyse(load_workload(_hand(tmp_path)))
    s = a["sessions"]
    assert (s["sessions"], s["turns"], s["max_turns"]) == (1, 3, 3)
    # turn 0: U(a) = 29 bytes; turn 1: 29 + 34 + 29 = 92, shares U(a) = 29 (all of turn 0);
    # turn 2: 29 + 34 + 29 + 34 + 29 = 155, shares only U(a) = 29 (its A(x) is not turn 1's A(b))
    assert s["by_turn"] == [
        {"turn": 0, "bodies": 1, "prefix_bytes": 29, "shared_bytes": 0, "fraction": 0.0},
        {"turn": 1, "bodies": 1, "prefix_bytes": 92, "shared_bytes": 29, "fraction": 29 / 92},
        {"turn": 2, "bodies": 1, "prefix_bytes": 155, "shared_bytes": 29, "fraction": 29 / 155},
    ]
    assert [r["extends"] for r in s["per_turn"]] == [True, True, False]
    assert s["warnings"] == ["history_not_prefix: 1 turns whose history does not extend the previous turn's "
                             "(first: session 's' turn 2); they are sent as retained, and the reuse across those "
                             "turns is lost"]
    text = render(a)
    assert "sessions   1 sessions, 3 turns (at most 3 per session)" in text
    assert "     2       1          29         155   18.7%" in text


def test_session_longer_than_the_deadline_warns(tmp_path: Path) -> None:
    wl = load_workload(_hand(tmp_path))
    over = [w for w in session_warnings(wl, deadline_s=3.0) if w.startswith("session_over_deadline")]
    assert over == ["session_over_deadline: 1 sessions whose think times alone exceed the run's deadline of 3 s "
                    "(first: 's', 3.5 s); their later turns will not be sent"]
    assert not [w for w in session_warnings(wl, deadline_s=4.0) if w.startswith("session_over_deadline")]


def test_bundled_conversations_extend_their_history() -> None:
    a = analyse(load_workload(CONV))
    assert a["sessions"]["warnings"] == []
    assert all(r["extends"] for r in a["sessions"]["per_turn"])


def test_live_body_replaces_each_earlier_answer_with_the_servers() -> None:
    t0 = b'{"model":"m","messages":[' + _u("a").encode() + b"]}"
    t1 = b'{"model":"m","messages":[' + ",".join([_u("a"), _a("b"), _u("c")]).encode() + b"]}"
    t2 = b'{"model":"m","messages":[' + ",".join([_u("a"), _a("b"), _u("c"), _a("d"), _u("e")]).encode() + b"]}"
    assert live_body(t0, [], []) is t0  # a first turn is sent as retained
    assert live_body(t1, [t0], ["B1"]) == (
        b'{"model":"m","messages":[{"role":"user","content":"a"},{"role":"assistant","content":"B1"},'
        b'{"role":"user","content":"c"}]}')
    assert orjson.loads(live_body(t2, [t0, t1], ["B1", "D2"]))["messages"] == [
        {"role": "user", "content": "a"}, {"role": "assistant", "content": "B1"}, {"role": "user", "content": "c"},
        {"role": "assistant", "content": "D2"}, {"role": "user", "content": "e"}]
    # the server said exactly what was captured: the retained bytes themselves
    assert live_body(t1, [t0], ["b"]) is t1
    # a history that does not extend the earlier turn: nothing replaced there
    other = b'{"model":"m","messages":[' + _u("z").encode() + b"]}"
    assert live_body(t1, [other], ["B1"]) is t1
    # a completions body has no messages to replace
    comp = b'{"model":"m","prompt":"a b"}'
    assert live_body(comp, [b'{"model":"m","prompt":"a"}'], ["x"]) is comp


def _chat(*contents: tuple[str, str]) -> bytes:
    import orjson

    return orjson.dumps({"model": "m", "messages": [{"role": r, "content": c} for r, c in contents]})


def test_live_history_equals_live_body_and_parses_each_body_once(monkeypatch):
    """Issue 44 low: ``--history live`` parsed every earlier body again for each turn (O(turn) parses per
    turn, 36 s of loop lag over a 300-turn session). ``LiveHistory`` gives ``live_body``'s bytes for every
    turn, extending histories and a history that does not extend (turn 3 restarts), with one parse per turn
    while the history extends."""
    import orjson

    from kvreplay.workload import conversations
    from kvreplay.workload.conversations import LiveHistory, live_body

    n = 40
    turns: list[bytes] = []
    msgs: list[tuple[str, str]] = [("system", "s")]
    for k in range(n):
        msgs = [*msgs, ("user", f"q{k}")]
        turns.append(_chat(*msgs))
        msgs = [*msgs, ("assistant", f"captured {k}")]
    turns[3] = _chat(("system", "s"), ("user", "other"))  # not an extension of turn 2; turn 4 extends turn 2
    replies = [f"live {k}" for k in range(n)]
    expected = [live_body(turns[k], turns[:k], replies[:k]) for k in range(n)]

    parses = []
    real = orjson.loads
    monkeypatch.setattr(conversations, "orjson", type("O", (), {
        "loads": staticmethod(lambda b: parses.append(1) or real(b)), "dumps": staticmethod(orjson.dumps)}))
    history = LiveHistory(lambda j: turns[j])
    got = [history.body(turns[k], replies[:k]) for k in range(n)]
    assert got == expected
    assert orjson.loads(got[5])["messages"][4] == {"role": "assistant", "content": "live 1"}
    assert orjson.loads(got[2])["messages"][2] == {"role": "assistant", "content": "live 0"}
    # one parse per turn, plus the earlier turns again where the chain breaks: turn 3 (turns 0..2) and
    # turn 4 (turns 0..3: turn 3 is no prefix of it); live_body parses 1 + k for turn k (820 here)
    assert len(parses) == n + 3 + 4
