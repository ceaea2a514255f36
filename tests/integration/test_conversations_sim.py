"""Conversations against the embedded simulator: turns serial with their think times, sessions as the unit.

Hand workload: 3 sessions x 3 turns; session s has the system message "p", "q" or "r"
(distinct, so no session hits another's snapshot), users "u", assistants "b". Token counts
by hand from the simulator's documented tokenizer (kvreplay.sim.tokenizer):
  system message    = <|im_start|> + "system","\\n","p" + <|im_end|> + "\\n"            = 6
  user message      = <|im_start|> + "user","\\n","u" + <|im_end|> + "\\n"              = 6
  assistant message = <|im_start|> + "assist","ant","\\n","b" + <|im_end|> + "\\n"      = 7
  generation prompt = <|im_start|> + "assist","ant","\\n"                               = 4
Turn 0 = [S, U]             -> prompt 16, snapshots at 6 and 12, miss: cached 0
Turn 1 = [S, U, A, U]       -> prompt 29, longest held snapshot is turn 0's 12: cached 12; stores 25
Turn 2 = [S, U, A, U, A, U] -> prompt 42, turn 1's snapshot at 25: cached 25
(entries model, 64 entries: 4 stores per session, nothing evicted, whatever the interleaving of sessions.)
By turn over the 3 sessions: cached 0 / 36 / 75 of prompt 48 / 87 / 126.
"""

from __future__ import annotations

import json
from pathlib import Path

from kvreplay.cli import main
from kvreplay.rundir.summary import rebuild_summary
from kvreplay.workload.sessions import Turn, write_sessions

THINK = (0.0, 0.02, 0.03)


def conversation_workload(folder: Path, systems: tuple[str, ...] = ("p", "q", "r")) -> Path:
    folder.mkdir(parents=True)
    turns, i = [], 0
    for s, system in enumerate(systems):
        msgs: list[dict] = [{"role": "system", "content": system}]
        for k in range(3):
            msgs = [*msgs, {"role": "user", "content": "u"}]
            body = {"model": "m", "messages": msgs, "max_tokens": 4, "stream": True,
                    "stream_options": {"include_usage": True}}
            (folder / f"{i:03d}.json").write_text(json.dumps(body))
            turns.append(Turn(i, f"s{s}", k, THINK[k]))
            msgs = [*msgs, {"role": "assistant", "content": "b"}]
            i += 1
    write_sessions(folder, turns)
    return folder


def run(tmp_path: Path, *args: str) -> tuple[int, list[dict], dict]:
    wl = tmp_path / "wl"
    if not wl.exists():
        conversation_workload(wl)
    out = tmp_path / "out"
    rc = main(["run", str(wl), "--target", "sim", "--sim-cache", "entries", "--sim-cache-entries", "64",
               "--sim-snapshots", "2", "--sim-time-scale", "0", "--out", str(out), "--quiet", *args])
    recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    return rc, recs, json.loads((out / "summary.json").read_text())


def by_session(recs: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in sorted(recs, key=lambda r: r["position"]):
        out.setdefault(r["session"], []).append(r)
    return out


def test_c4_turns_serial_with_think_times_and_exact_cached_tokens(tmp_path: Path) -> None:
    rc, recs, summary = run(tmp_path, "--phase", "conv:forward:c4")
    assert rc == 0 and len(recs) == 9
    sessions = by_session(recs)
    assert sorted(sessions) == ["s0", "s1", "s2"]
    for sid, rs in sessions.items():
        assert [r["turn"] for r in rs] == [0, 1, 2]
        assert [r["think_time_planned_s"] for r in rs] == list(THINK)
        assert rs[0]["think_time_actual_s"] is None
        for prev, cur, think in zip(rs, rs[1:], THINK[1:], strict=False):
            # serial: the next turn leaves after the previous one's last byte plus its think time
            assert cur["t_sent_ns"] >= prev["t_done_ns"] + round(think * 1e9)
            assert cur["think_time_actual_s"] == round((cur["t_sent_ns"] - prev["t_done_ns"]) / 1e9, 9)
            assert cur["think_time_actual_s"] >= think
        assert [r["usage"]["prompt_tokens"] for r in rs] == [16, 29, 42]
        assert [r["usage"]["cached_tokens"] for r in rs] == [0, 12, 25], sid
    ph = summary["phases"][0]
    assert ph["sessions"] == 3 and ph["valid"], ph["invalid_reasons"]  # C4 with 3 sessions: 3 in flight at most
    assert [(t["turn"], t["requests"], t["cached_tokens"], t["prompt_tokens"], t["hit_rate"], t["ttft_ms"]["n"])
            for t in ph["by_turn"]] == [(0, 3, 0, 48, 0.0, 3), (1, 3, 36, 87, round(36 / 87, 6), 3),
                                        (2, 3, 75, 126, round(75 / 126, 6), 3)]
    # a summary rebuilt from the records alone gives the same table
    rebuilt = rebuild_summary(tmp_path / "out", json.loads((tmp_path / "out" / "plan.json").read_text()), recs)
    assert rebuilt["phases"][0]["by_turn"] == ph["by_turn"]
    # the report: the table (report.md) and the plot (report.html)
    assert main(["report", str(tmp_path / "out")]) == 0
    md = (tmp_path / "out" / "report.md").read_text()
    assert "## Reuse by turn (conversations)" in md
    assert "| conv · 1 | 3 |" in md and "| 36 | 87 | 0.414 |" in md
    assert 'data-plot="by-turn:conv"' in (tmp_path / "out" / "report.html").read_text()


def test_c1_runs_sessions_one_after_another_in_start_order(tmp_path: Path) -> None:
    rc, recs, _ = run(tmp_path, "--phase", "conv:reverse:c1")
    assert rc == 0
    assert [(r["session"], r["turn"]) for r in recs] == [(s, k) for s in ("s2", "s1", "s0") for k in range(3)]
    for prev, cur in zip(recs, recs[1:], strict=False):
        assert cur["t_sent_ns"] >= prev["t_done_ns"]


def test_first_n_and_repeats_count_sessions(tmp_path: Path) -> None:
    rc, recs, _ = run(tmp_path, "--phase", "conv:forward:c2:x2:first2")
    assert rc == 0
    assert sorted((r["repetition"], r["session"], r["turn"]) for r in recs) == [
        (rep, s, k) for rep in (0, 1) for s in ("s0", "s1") for k in range(3)]


def test_a_failed_turn_ends_its_session(tmp_path: Path) -> None:
    # the 2nd generation request (s0's turn 1, at C1) gets an error event: s0's turn 2 is never sent
    rc, recs, _ = run(tmp_path, "--phase", "conv:forward:c1", "--sim-fault", "error-event@2")
    s0 = by_session(recs)["s0"]
    assert [r["sent"] for r in s0] == [True, True, False]
    assert s0[1]["status"] != "ok"
    assert (s0[2]["status"], s0[2]["error"], s0[2]["think_time_actual_s"]) == (
        "aborted", "session aborted: turn 1 failed", None)
    assert [r["sent"] for s in ("s1", "s2") for r in by_session(recs)[s]] == [True] * 6
    assert len(recs) == 9


def test_live_history_reuses_what_this_server_generated(tmp_path: Path) -> None:
    """Radix cache, 1-token blocks, C1; every reply is max_tokens = 4 tokens (the simulator's natural length is >= 32).

    A finished request leaves prompt + output - 1 tokens cached (the last sampled token has no KV).
    captured: turn k+1 resends "b" where this server said 4 other words: it matches turn k's prompt only
              -> turn 1: 16, turn 2: 29 (turn 0: 0 for s0, then 3 = <|im_start|>, "system", "\\n" of s0's)
    live:     turn k+1 resends this server's 4 words: it matches turn k's prompt + 3 output tokens
              -> turn 1: 16 + 3 = 19; turn 2: turn 1's live prompt (6+6+10+6+4 = 32, the assistant message
                 <|im_start|> assist ant \\n w w w w <|im_end|> \\n being 10 tokens) + 3 = 35
    """
    common = ("--phase", "conv:forward:c1", "--sim-cache", "radix", "--sim-block-size", "1")
    (tmp_path / "c").mkdir()
    (tmp_path / "l").mkdir()
    conversation_workload(tmp_path / "c" / "wl")
    conversation_workload(tmp_path / "l" / "wl")
    rc, cap, cap_sum = run(tmp_path / "c", *common)
    assert rc == 0
    rc, live, live_sum = run(tmp_path / "l", *common, "--history", "live")
    assert rc == 0
    assert [r["usage"]["cached_tokens"] for r in cap] == [0, 16, 29, 3, 16, 29, 3, 16, 29]
    assert [r["usage"]["cached_tokens"] for r in live] == [0, 19, 35, 3, 19, 35, 3, 19, 35]
    assert [r["usage"]["prompt_tokens"] for r in live] == [16, 32, 48] * 3
    assert all("history" not in r and "sent_sha256" not in r for r in cap)
    assert [r["history_differs"] for r in live] == [False, True, True] * 3
    for r in live:
        assert r["history"] == "live"
        assert (r["sent_sha256"] != r["body_sha256"]) == r["history_differs"]
    # the retained bytes are the same in both runs; only the sent ones differ
    assert [r["body_sha256"] for r in live] == [r["body_sha256"] for r in cap]
    ph = live_sum["phases"][0]
    assert ph["history"] == {"mode": "live", "turns": 9, "differs": 6}
    assert "history" not in cap_sum["phases"][0]
    assert [t["cached_tokens"] for t in ph["by_turn"]] == [6, 57, 105]
    assert [t["cached_tokens"] for t in cap_sum["phases"][0]["by_turn"]] == [6, 48, 87]
    assert json.loads((tmp_path / "l" / "out" / "plan.json").read_text())["run"]["history"] == "live"
    assert main(["report", str(tmp_path / "l" / "out")]) == 0
    assert "ran with live history: 6 of 9 turns" in (tmp_path / "l" / "out" / "report.md").read_text()


def test_live_history_needs_sessions(tmp_path: Path) -> None:
    wl = tmp_path / "w.jsonl"
    wl.write_text('{"model":"m","prompt":"p"}\n')
    assert main(["run", str(wl), "--target", "sim", "--phase", "a:forward:c1", "--history", "live",
                 "--out", str(tmp_path / "o"), "--quiet"]) == 2


def test_bundled_history_experiment_publishes_the_reuse_difference(tmp_path: Path) -> None:
    """fixtures/experiments/conversation-history.toml: captured vs live on the bundled conversations.

    Radix cache, 1-token blocks, C1, every answer max_tokens = 8 tokens. Live - captured, by hand:
    turn 1: each session matches 8 - 1 = 7 more tokens of the previous answer -> 4 x 7 = 28;
    turn 2: 7 more again per session, plus the live history being longer before it: the captured
    answers of turn 0 are 7 + 9 + 7 + 5 = 28 tokens ("Start"," at"," Fushim","i"," Inari"," early",".";
    "A"," number"," with"," exactl","y"," two"," diviso","rs","."; "It"," double","s"," x",";"," fine",".";
    "After"," the"," last"," frost","."), the live ones 4 x 8 = 32 -> 28 + 4 = 32. Turn 0 is the same.
    """
    spec = Path(__file__).resolve().parents[2] / "fixtures" / "experiments" / "conversation-history.toml"
    out = tmp_path / "x"
    assert main(["experiment", str(spec), "--out", str(out), "--quiet"]) == 0
    r = json.loads((out / "result.json").read_text())
    assert [(s["name"], s["status"]) for s in r["steps"]] == [
        ("fresh-captured", "measured"), ("captured", "measured"), ("fresh-live", "measured"), ("live", "measured")]
    rows = {row["metric"]: row for row in r["compare"][0]["rows"]}
    diff = {k: rows[f"turn{k}_cached_tokens"]["b"] - rows[f"turn{k}_cached_tokens"]["a"] for k in range(3)}
    assert diff == {0: 0, 1: 28, 2: 32}
    assert rows["cached_tokens"]["b"] - rows["cached_tokens"]["a"] == 60
    frozen = json.loads((out / "experiment.json").read_text())
    assert [s.get("history") for s in frozen["steps"]] == [None, None, None, "live"]


def test_open_loop_schedules_session_arrivals(tmp_path: Path) -> None:
    # r20: a session starts every 50 ms (intended); later turns follow their own session, not the schedule
    rc, recs, summary = run(tmp_path, "--phase", "conv:forward:c4:r20")
    assert rc == 0
    for sid, rs in by_session(recs).items():
        assert rs[0]["t_intended_ns"] is not None, sid
        assert [r["t_intended_ns"] for r in rs[1:]] == [None, None]
        for prev, cur in zip(rs, rs[1:], strict=False):
            assert cur["t_sent_ns"] >= prev["t_done_ns"] + round(cur["think_time_planned_s"] * 1e9)
    starts = sorted(r["t_intended_ns"] for r in recs if r["turn"] == 0)
    assert [b - a for a, b in zip(starts, starts[1:], strict=False)] == [50_000_000, 50_000_000]
    assert summary["phases"][0]["schedule"]["open_loop"] is True
    assert summary["phases"][0]["schedule"]["offered_rps"] == 20.0  # session arrivals per second


def test_from_plan_replays_the_same_session_order(tmp_path: Path) -> None:
    rc, recs, _ = run(tmp_path, "--phase", "conv:shuffle:3:c1")
    assert rc == 0
    again = tmp_path / "again"
    assert main(["run", "--from-plan", str(tmp_path / "out" / "plan.json"), "--target", "sim", "--sim-time-scale", "0",
                 "--out", str(again), "--quiet", "--report", "none"]) == 0
    recs2 = [json.loads(x) for x in (again / "records.jsonl").read_text().splitlines()]
    assert [(r["session"], r["turn"]) for r in recs2] == [(r["session"], r["turn"]) for r in recs]
    assert json.loads((again / "plan.json").read_text())["plan_sha256"] == json.loads(
        (tmp_path / "out" / "plan.json").read_text())["plan_sha256"]


def test_sharegpt_import_replays_at_c4_with_turns_serial_and_think_times_kept(tmp_path: Path) -> None:
    """Issue 34's "Done when": a ShareGPT file -> ``kvreplay import sharegpt`` -> ``kvreplay run --target sim`` at C4.

    Hand-made file: 6 conversations of 1-4 human turns (13 turns in all, so C4 keeps 4 of 6 sessions in
    flight), imported with ``--think-time 0.02``: every turn after a session's first waits 20 ms after the
    previous turn's last byte. Each session's records must come in turn order, each later turn sent at least
    20 ms after its predecessor finished, with the planned (0.02) and the actual delay recorded.
    """
    human_turns = {"c0": 3, "c1": 1, "c2": 4, "c3": 2, "c4": 2, "c5": 1}
    convs = []
    for cid, n in human_turns.items():
        msgs = [{"from": "system", "value": f"You are assistant {cid}."}]
        for k in range(n):
            msgs += [{"from": "human", "value": f"{cid} question {k}?"}, {"from": "gpt", "value": f"answer {k}."}]
        convs.append({"id": cid, "conversations": msgs})
    src = tmp_path / "chats.json"
    src.write_text(json.dumps(convs))
    wl = tmp_path / "chats.jsonl"
    assert main(["import", "sharegpt", str(src), "--out", str(wl), "--think-time", "0.02"]) == 0
    out = tmp_path / "out"
    assert main(["run", str(wl), "--target", "sim", "--sim-time-scale", "0", "--phase", "chat:forward:c4",
                 "--out", str(out), "--quiet", "--report", "none"]) == 0
    recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    assert len(recs) == 13 and all(r["status"] == "ok" for r in recs)
    sessions = by_session(recs)
    assert {sid: len(rs) for sid, rs in sessions.items()} == human_turns
    bodies = [json.loads(x) for x in wl.read_text().splitlines()]
    for sid, rs in sessions.items():
        assert [r["turn"] for r in rs] == list(range(human_turns[sid]))
        # the body of turn k is the conversation up to its (k+1)-th human message: system + 2k + 1 messages
        assert [len(bodies[r["body_index"]]["messages"]) for r in rs] == [2 + 2 * k for k in range(len(rs))]
        assert bodies[rs[-1]["body_index"]]["messages"][-1]["content"] == f"{sid} question {len(rs) - 1}?"
        assert rs[0]["think_time_planned_s"] == 0.0 and rs[0]["think_time_actual_s"] is None
        for prev, cur in zip(rs, rs[1:], strict=False):
            assert cur["think_time_planned_s"] == 0.02
            assert cur["t_sent_ns"] >= prev["t_done_ns"] + 20_000_000
            assert cur["think_time_actual_s"] == round((cur["t_sent_ns"] - prev["t_done_ns"]) / 1e9, 9)
            assert cur["think_time_actual_s"] >= 0.02
    # C4: never more than 4 requests in flight, and so never more than 4 sessions
    events = sorted([(r["t_sent_ns"], 1) for r in recs] + [(r["t_done_ns"], -1) for r in recs])
    level = peak = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    assert peak <= 4
    # sessions are the unit: the 5th and 6th start only once one of the first four has ended
    first_end = min(sessions[sid][-1]["t_done_ns"] for sid in ("c0", "c1", "c2", "c3"))
    assert min(sessions[sid][0]["t_sent_ns"] for sid in ("c4", "c5")) >= first_end


def test_a_first_turns_think_time_is_neither_applied_nor_planned(tmp_path: Path) -> None:
    """Issue 44 low: a first turn's think time (0.5 s here) was recorded as planned but never waited for."""
    from kvreplay.workload import load_workload
    from kvreplay.workload.conversations import session_warnings

    wl = tmp_path / "wl"
    conversation_workload(wl)
    lines = (wl / "sessions.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    assert (first["session"], first["turn"]) == ("s0", 0)
    lines[0] = json.dumps({**first, "think_time_s": 0.5})
    (wl / "sessions.jsonl").write_text("\n".join(lines) + "\n")
    assert session_warnings(load_workload(str(wl)))[0] == (
        "first_turn_think: 1 sessions whose first turn has a think time (first: 's0', 0.5 s); a first turn is "
        "sent when its session starts, so it is not applied (records: think_time_planned_s 0)")
    rc, recs, _ = run(tmp_path, "--phase", "conv:forward:c1")
    assert rc == 0
    assert [r["think_time_planned_s"] for r in by_session(recs)["s0"]] == [0.0, 0.02, 0.03]
