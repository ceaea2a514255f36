"""``kvreplay simulate`` with sessions: the in-flight order, reuse by turn, entries to keep N conversations warm."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvreplay.cli import main
from kvreplay.errors import ConfigError
from kvreplay.offline.sessions import by_turn, session_order
from kvreplay.offline.simulate import SimulateOptions, simulate
from kvreplay.offline.sources import model_requests
from kvreplay.workload import load_workload
from kvreplay.workload.import_sharegpt import import_sharegpt
from kvreplay.workload.sessions import Turn, load_sessions, write_sessions


def _sessions(tmp_path: Path) -> object:
    w = tmp_path / "w.jsonl"
    w.write_text("".join(f'{{"model":"m","prompt":"p{i}"}}\n' for i in range(6)))
    # A: bodies 0,1,2 (think 2, 2); B: body 3; C: bodies 4,5 (think 1)
    write_sessions(w, [Turn(0, "A", 0), Turn(1, "A", 1, 2.0), Turn(2, "A", 2, 2.0), Turn(3, "B", 0),
                       Turn(4, "C", 0), Turn(5, "C", 1, 1.0)])
    s = load_sessions(w, 6)
    assert s is not None
    return s


def test_session_order_by_hand(tmp_path: Path) -> None:
    s = _sessions(tmp_path)
    # service 0.5 s: A0@0 B0@0; B ends -> C0@0.5; C1@2.0; A1@2.5; A2@5.0
    assert session_order(s, 2, service_time_s=0.5) == [0, 3, 4, 5, 1, 2]
    # think 0: A1@0.5 (due before C0@0.5), C0, A2@1.0, C1@1.0
    assert session_order(s, 2, think_time_s=0.0, service_time_s=0.5) == [0, 3, 1, 4, 2, 5]
    # think 0, service 0: round robin, first come first served
    assert session_order(s, 2, think_time_s=0.0) == [0, 3, 1, 4, 2, 5]
    assert session_order(s, 1) == [0, 1, 2, 3, 4, 5]
    assert session_order(s, 9) == [0, 3, 4, 5, 1, 2]
    with pytest.raises(ValueError):
        session_order(s, 0)


def test_by_turn_sums() -> None:
    assert by_turn([0, 1, 0, 1, 2], [10, 20, 30, 40, 50], [0, 8, 5, 0, 25]) == [
        {"turn": 0, "requests": 2, "prompt_tokens": 40, "cached_tokens": 5, "hit_requests": 1,
         "hit_ratio_tokens": 0.125},
        {"turn": 1, "requests": 2, "prompt_tokens": 60, "cached_tokens": 8, "hit_requests": 1,
         "hit_ratio_tokens": 8 / 60},
        {"turn": 2, "requests": 1, "prompt_tokens": 50, "cached_tokens": 25, "hit_requests": 1,
         "hit_ratio_tokens": 0.5},
    ]


def _two_conversations(tmp_path: Path) -> Path:
    src = tmp_path / "c.json"
    src.write_text('[{"id":"A","conversations":[{"from":"human","value":"alpha one"},{"from":"gpt","value":"ok a"},'
                   '{"from":"human","value":"alpha two"}]},'
                   '{"id":"B","conversations":[{"from":"human","value":"beta one"},{"from":"gpt","value":"ok b"},'
                   '{"from":"human","value":"beta two"}]}]')
    return import_sharegpt(src, tmp_path / "w").workload


def test_entries_needed_to_keep_n_conversations_warm(tmp_path: Path) -> None:
    wl = _two_conversations(tmp_path)  # bodies A0, A1, B0, B1
    reqs = model_requests(load_workload(wl))
    # a second turn hits its first turn's messages snapshot, nothing else hits
    want = reqs[0].messages_end + reqs[2].messages_end
    assert reqs[0].messages_end > 0 and reqs[2].messages_end > 0
    opts = dict(source=str(wl), model="entries", capacities=[1, 2, 3], share=1.0)
    # workload order A0 A1 B0 B1: one entry keeps each conversation warm
    rep = simulate(SimulateOptions(**opts))
    assert [(r["capacity"], r["hit_ratio_requests"], r["hit_tokens"]) for r in rep["curve"]] == [
        (1, 0.5, want), (2, 0.5, want), (3, 0.5, want)]
    assert rep["recommended"]["capacity"] == 1
    ses = rep["sessions"]
    assert (ses["sessions"], ses["in_flight"], ses["order"]) == (2, None, "workload")
    assert [b["capacity"] for b in ses["by_turn"]] == [1, 3]
    turn1 = ses["by_turn"][0]["rows"][1]
    assert (turn1["turn"], turn1["requests"], turn1["hit_requests"], turn1["cached_tokens"]) == (1, 2, 2, want)
    assert ses["by_turn"][0]["rows"][0]["cached_tokens"] == 0
    # two in flight, A0 B0 A1 B1 (recency "use"): at 1 entry B0 evicts A0; at 2, A1 hits A0 (refreshing
    # it) and its own snapshot evicts B0, so B1 misses; 3 entries keep both warm
    rep = simulate(SimulateOptions(**opts, sessions=2, think_time=3.0))
    assert [(r["capacity"], r["hit_ratio_requests"], r["hit_tokens"]) for r in rep["curve"]] == [
        (1, 0.0, 0), (2, 0.25, reqs[0].messages_end), (3, 0.5, want)]
    assert rep["recommended"]["capacity"] == 3
    ses = rep["sessions"]
    assert (ses["in_flight"], ses["think_time_s"], ses["service_time_s"]) == (2, 3.0, 0.0)
    assert [(b["capacity"], [r["cached_tokens"] for r in b["rows"]]) for b in ses["by_turn"]] == [(3, [0, want])]


def test_cli_table_and_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    wl = _two_conversations(tmp_path)
    assert main(["simulate", str(wl), "--model", "entries", "--capacities", "1,2,3", "--sessions", "2"]) == 0
    out = capsys.readouterr().out
    assert "sessions: 2, simulated in 2 conversations in flight order (think time per turn (side file), " \
           "service time 0 s)" in out
    assert "reuse by turn at 3 entries:" in out
    flat = tmp_path / "flat.jsonl"
    flat.write_text('{"model":"m","prompt":"x"}\n')
    with pytest.raises(ConfigError, match="no sessions side file"):
        simulate(SimulateOptions(source=str(flat), model="entries", sessions=2))
    with pytest.raises(ConfigError, match="give no --phase"):
        simulate(SimulateOptions(source=str(wl), model="entries", sessions=2, phases=("all:forward:c1",)))
    assert "sessions" not in simulate(SimulateOptions(source=str(flat), model="entries"))
