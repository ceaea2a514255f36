"""The terminal's phase-end line: figures when the phase sent requests, "not run" (why) when not."""

from kvreplay.runner.observer import phase_end_line


def _phase(**kw):
    ph = {"name": "replay", "planned": 52, "sent": 52, "ok": 51, "not_sent": 0,
          "ttft_ms": {"p50": 12.5}, "tokens": {"cached": 175848, "prompt": 190516}}
    ph.update(kw)
    return ph


def test_a_phase_that_ran_gives_its_figures():
    assert phase_end_line(_phase()) == "phase replay: ok 51/52, TTFT p50 12.5 ms, cached 175848/190516 tokens"


def test_no_ttft_sample_prints_a_dash_not_none():
    line = phase_end_line(_phase(ok=0, ttft_ms={"p50": None}))
    assert line == "phase replay: ok 0/52, TTFT p50 -, cached 175848/190516 tokens"
    assert "None" not in line


def test_a_phase_that_sent_nothing_says_not_run_and_why():
    # new-user finding: an identity mismatch printed "ok 0/52, TTFT p50 None ms, cached 0/0 tokens"
    assert phase_end_line(_phase(sent=0, ok=0, not_sent=52, deferred=True)) == "phase replay: not run (deferred)"
    assert phase_end_line(_phase(sent=0, ok=0, not_sent=52, check_failed="fresh: hits=2.0 (want 0)")) == (
        "phase replay: not run (fresh: hits=2.0 (want 0))"
    )
    assert phase_end_line(_phase(sent=0, ok=0, not_sent=52)) == "phase replay: not run (52 of 52 positions not sent)"
