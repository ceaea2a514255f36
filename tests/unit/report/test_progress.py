"""The live progress display: its state, the rich panel, and plain lines off a terminal."""

import io

from rich.console import Console

from kvreplay.report.progress import LiveObserver, ProgressState, make_live_observer
from kvreplay.runner.observer import PlainObserver

PLAN = {
    "phases": [{"name": "prime", "sequence": [{}] * 3}, {"name": "replay", "sequence": [{}] * 3}]
}


def rec(status="ok", ttft_ms=10.0, cached=5, sent=True):
    return {
        "status": status,
        "sent": sent,
        "ttft_ns": int(ttft_ms * 1e6) if status == "ok" else None,
        "usage": {"cached_tokens": cached},
    }


def test_state_follows_the_hooks():
    st = ProgressState()
    st.run_start(PLAN, None)
    st.phase_start("prime", 3, 1)
    st.request_start(0)
    assert st.in_flight == 1
    st.record(rec(ttft_ms=30.0))
    st.request_start(1)
    st.record(rec(ttft_ms=10.0, cached=None))
    st.request_start(2)
    st.record(rec(status="timeout"))
    lines = dict(st.lines())
    assert lines["phase"] == "prime (C1)" and lines["position in frozen sequence"] == "3/3"
    assert lines["done / planned"] == "3/6" and lines["in flight"] == "0"
    assert lines["errors"] == "timeout 1" and lines["TTFT p50 (phase)"] == "10.0 ms"
    assert lines["cached tokens so far"] == "5" and lines["time left"] == "no deadline"
    st.phase_start("replay", 3, 4)
    assert dict(st.lines())["TTFT p50 (phase)"] == "-"  # per phase
    st.record(rec(status="aborted", sent=False))
    assert st.in_flight == 0 and dict(st.lines())["errors"] == "aborted 1, timeout 1"


def test_deadline_and_drain():
    st = ProgressState()
    st.run_start(PLAN, 3600.0)
    left = st.time_left_s()
    assert 3590 < left <= 3600
    st.last_drain = ("replay", {"passed": False, "waited_s": 10.0, "reason": "running 1"})
    lines = dict(st.lines())
    assert lines["last drain"] == "replay: FAILED after 10.0 s (running 1)"
    assert lines["time left"].endswith("before no new requests")


def test_live_panel_renders_on_a_terminal():
    buf = io.StringIO()
    obs = LiveObserver(Console(file=buf, force_terminal=True, width=100), refresh_per_second=50)
    obs.on_run_start(PLAN, None)
    obs.on_phase_start("prime", 3, 1)
    obs.on_request_start("prime", 0)
    obs.on_record(rec())
    obs.on_drain("prime", {"passed": True, "waited_s": 0.2, "reason": None})
    obs.on_message("counter read failed: x")
    obs.on_phase_end(
        {
            "name": "prime",
            "ok": 1,
            "planned": 3,
            "ttft_ms": {"p50": 10.0},
            "tokens": {"cached": 5, "prompt": 100},
        }
    )
    obs.on_run_end({})
    out = buf.getvalue()
    for text in (
        "position in frozen sequence",
        "1/6",
        "prime: passed after 0.2 s",
        "counter read failed",
        "phase prime: ok 1/3",
    ):
        assert text in out, text


def test_plain_lines_when_not_a_terminal():
    assert isinstance(make_live_observer(stdout=io.StringIO(), stderr=io.StringIO()), PlainObserver)

    class Tty(io.StringIO):
        def isatty(self):
            return True

    assert isinstance(make_live_observer(stdout=Tty(), stderr=Tty()), LiveObserver)


def test_deadline_from_the_command_line_survives_run_start():
    class Tty(io.StringIO):
        def isatty(self):
            return True

    obs = make_live_observer(stdout=Tty(), stderr=Tty(), deadline_s=70 * 60)
    obs.state.run_start(PLAN, None)
    assert 4190 < obs.state.time_left_s() <= 4200


def test_phase_end_line_states_model_ms_at_a_sim_time_scale():
    # NEWUSER 4: the terminal printed the scaled, measured 5.9 ms where report.html says 295.0
    # model ms; now both say model ms and the terminal states the scale.
    ph = {"name": "prime", "ok": 52, "planned": 52, "ttft_ms": {"p50": 5.9},
          "tokens": {"cached": 175848, "prompt": 190516}}
    sim_plan = dict(PLAN, run={"sim_time_scale": 0.02})
    buf = io.StringIO()
    plain = PlainObserver(buf)
    plain.on_run_start(sim_plan, None)
    plain.on_phase_end(ph)
    assert buf.getvalue() == (
        "phase prime: ok 52/52, TTFT p50 295.0 ms (model ms, sim time scale 0.02), "
        "cached 175848/190516 tokens\n"
    )
    # Real time (no scale, or scale 0 / 1: nothing to convert): the measured value as before.
    for run in ({}, {"sim_time_scale": 0}, {"sim_time_scale": 1}):
        buf = io.StringIO()
        plain = PlainObserver(buf)
        plain.on_run_start(dict(PLAN, run=run), None)
        plain.on_phase_end(ph)
        assert buf.getvalue() == "phase prime: ok 52/52, TTFT p50 5.9 ms, cached 175848/190516 tokens\n"
    # The rich panel: the same line at the phase end, and the running p50 in model ms.
    out = io.StringIO()
    live = LiveObserver(Console(file=out, force_terminal=False, width=200), refresh_per_second=50)
    live.on_run_start(sim_plan, None)
    live.on_phase_start("prime", 3, 1)
    live.on_record(rec(ttft_ms=4.0))
    assert dict(live.state.lines())["TTFT p50 (phase)"] == "200.0 ms (model ms, sim time scale 0.02)"
    live.on_phase_end(ph)
    live.on_run_end({})
    assert ("phase prime: ok 52/52, TTFT p50 295.0 ms (model ms, sim time scale 0.02), "
            "cached 175848/190516 tokens") in out.getvalue()
