"""A run flags each phase whose host was short of CPUs, in ``kvreplay compare``'s words (issue 42 item 5).

The console's phase line, report.md's table notes and report.html's banners; the bound is
``host_cpu_wait_share`` >= 0.1, inclusive (``metrics.selfmeasure.HOST_CPU_WAIT_SHARE``).
"""

from __future__ import annotations

from rundirs import plan_json, record, write_run

from kvreplay.experiments.ab.resolution import client_noise
from kvreplay.metrics.selfmeasure import host_busy_text, phase_busy_line
from kvreplay.report.markdown import render_table
from kvreplay.runner.observer import phase_end_line

BUSY = "host_busy (a task on the host waited for a CPU 61% of the phase)"
LINE = (f"phase replay: {BUSY}: a server on this host waited too, so its latencies include the host's CPU "
        "shortage (kvreplay compare withholds timing decisions on such phases)")


def _ph(name: str, share: float | None, **extra: object) -> dict:
    return {"name": name, "ok": 52, "planned": 52, "sent": 52, "concurrency": 1, "ttft_ms": {"p50": 3.7},
            "tokens": {"cached": 175848, "prompt": 190516},
            "client": {"verdict": "quiet", "host_cpu_wait_share": share, "host_load_1m": 7.0, "host_cpus": 2},
            **extra}


def test_the_words_are_compares():
    client = {"verdict": "quiet", "host_cpu_wait_share": 0.61}
    assert host_busy_text(client) == BUSY
    # compare's reason holds the very same label and sentence
    assert BUSY in client_noise([{"side": "candidate", "rep": 0, "client": client}])
    assert host_busy_text({"host_cpu_wait_share": 0.1}, load=False) == (
        "host_busy (a task on the host waited for a CPU 10% of the phase)")
    assert host_busy_text({"host_cpu_wait_share": 0.0999, "host_load_1m": 7.0, "host_cpus": 2}, load=False) is None
    # compare also counts a load average over the CPUs; a run's own flag is the phase's pressure only
    assert host_busy_text({"host_cpu_wait_share": 0.0999, "host_load_1m": 7.0, "host_cpus": 2}) == (
        "host_busy (load average 7 on 2 CPUs)")


def test_the_console_line_ends_with_host_busy():
    assert phase_end_line(_ph("replay", 0.61)) == (
        f"phase replay: ok 52/52, TTFT p50 3.7 ms, cached 175848/190516 tokens; {BUSY}")
    quiet = "phase replay: ok 52/52, TTFT p50 3.7 ms, cached 175848/190516 tokens"
    assert phase_end_line(_ph("replay", 0.0999)) == quiet and phase_end_line(_ph("replay", None)) == quiet


def test_report_md_table_notes_each_busy_phase():
    assert phase_busy_line(_ph("replay", 0.61)) == LINE
    summary = {"phases": [_ph("prime", 0.05, failed={}), _ph("replay", 0.61, failed={})]}
    notes = [ln for ln in render_table(summary).splitlines() if "host_busy" in ln]
    assert notes == [f"- {LINE}"]  # the replay's only: the prime's 5% is under the bound


def test_report_html_and_md_banner_each_busy_phase(tmp_path):
    from kvreplay.report.document import build, to_html, to_markdown
    from kvreplay.rundir import load_run

    plan = plan_json([("prime", "forward", 1, [0]), ("replay", "forward", 1, [0])])
    recs = [record("prime", 0, 0), record("replay", 0, 0, t0_ms=50)]
    out = write_run(tmp_path / "run", plan, recs, prime={"client": {"verdict": "quiet", "host_cpu_wait_share": 0.02}},
                    replay={"client": {"verdict": "quiet", "host_cpu_wait_share": 0.61}})
    rep = build(load_run(out))
    banner = LINE[:1].upper() + LINE[1:]
    assert [b for b in rep.banners if "host_busy" in b] == [banner]
    assert f"> **{banner}**" in to_markdown(rep)
    assert "Phase replay: host_busy (a task on the host waited for a CPU 61% of the phase)" in to_html(rep)
