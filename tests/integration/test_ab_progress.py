"""``kvreplay ab`` prints each block's phases as they start and end (new-user item 5)."""

from __future__ import annotations

from pathlib import Path

from kvreplay.cli import main
from kvreplay.runner.observer import CallbackObserver

WORKLOAD = Path(__file__).resolve().parents[2] / "fixtures" / "workloads" / "mtbench-52"


def test_callback_observer_hands_plain_lines_to_the_callback():
    got: list[str] = []
    obs = CallbackObserver(got.append)
    obs.on_phase_start("c1", 52, 1)
    obs.on_drain("c1", {"passed": True, "waited_s": 0.107, "reason": None})
    obs.on_phase_end({"name": "c1", "ok": 52, "planned": 52, "sent": 52, "ttft_ms": {"p50": 3.733},
                      "tokens": {"cached": 175848, "prompt": 190516}})
    obs.on_message("abort: bound: x")
    assert got == [
        "phase c1: 52 requests at C1",
        "phase c1: drain passed after 0.107 s",
        "phase c1: ok 52/52, TTFT p50 3.733 ms, cached 175848/190516 tokens",
        "abort: bound: x",
    ]


def test_ab_prints_phase_progress_inside_each_block(tmp_path, capsys):
    rc = main(["ab", str(WORKLOAD), "--target", "sim", "--arm", "off=sim:", "--arm", "on=sim:prefill_scale=1.1",
               "--reps", "1", "--phases", "c1", "--primary", "ttft_p50:-5%", "--sim-time-scale", "0",
               "--out", str(tmp_path / "ab")])
    assert rc == 0
    lines = capsys.readouterr().out.splitlines()
    block = [ln for ln in lines if ln.startswith("ab: ")]
    # the sim at time scale 0: every request of each block answered, the same cache
    # sequence in both arms (prefill_scale changes time, not the cache)
    shape = [ln.split(" TTFT")[0] if "TTFT" in ln else ln for ln in block if "drain" not in ln]
    assert shape == [
        "ab: block 0 (rep 0, arm off)",
        "ab:   phase c1: 52 requests at C1",
        "ab:   phase c1: ok 52/52,",
        "ab: block 1 (rep 0, arm on)",
        "ab:   phase c1: 52 requests at C1",
        "ab:   phase c1: ok 52/52,",
    ]
    ends = [ln for ln in block if "ok 52/52" in ln]
    # a busy host adds "; host_busy (...)" to the line (the phase's own CPU pressure, not the arms')
    assert all(ln.split("; host_busy (")[0].endswith(" ms, cached 175848/190516 tokens") for ln in ends)
    assert sum("drain passed" in ln for ln in block) == 2


def test_callback_observer_states_the_sim_scale_the_plan_lacks():
    got: list[str] = []
    obs = CallbackObserver(got.append, 0.05)
    obs.on_run_start({"run": {"target": "sim"}}, None)
    obs.on_phase_end({"name": "c1", "ok": 52, "planned": 52, "sent": 52, "ttft_ms": {"p50": 9.945},
                      "tokens": {"cached": 175848, "prompt": 190516}})
    # 9.945 measured ms / 0.05 = 198.9 model ms
    assert got == ["phase c1: ok 52/52, TTFT p50 198.9 ms (model ms, sim time scale 0.05), cached 175848/190516 tokens"]
    got.clear()
    obs = CallbackObserver(got.append, 0)  # time scale 0: measured ms, no scale
    obs.on_run_start({"run": {}}, None)
    obs.on_phase_end({"name": "c1", "ok": 1, "planned": 1, "sent": 1, "ttft_ms": {"p50": 1.5},
                      "tokens": {"cached": 0, "prompt": 10}})
    assert got == ["phase c1: ok 1/1, TTFT p50 1.5 ms, cached 0/10 tokens"]
