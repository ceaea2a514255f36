"""Issue 27 item 7: the window's messages say what happened (no "(ok)" on a failure, the time
scale as set, no float noise, one name per cell, a nominated mechanism worded as a hypothesis)."""

from __future__ import annotations

import sys
from pathlib import Path

from kvreplay.experiments.publish import render_markdown
from kvreplay.experiments.steps.incarnation import completion_failure
from kvreplay.experiments.timescale import latency_line

sys.path.insert(0, str(Path(__file__).parent))
from test_experiment_findings import churn_window  # noqa: E402
from test_experiment_publish import build, cut_window  # noqa: E402


def test_ready_completion_failure_never_says_ok():
    assert completion_failure({"passed": False, "http_status": 200, "finish_reason": "length", "error": None}) == (
        "ready completion: HTTP 200 with finish_reason 'length'; want 'stop'")
    assert completion_failure({"passed": False, "http_status": 503, "finish_reason": None, "error": "busy"}) == (
        "ready completion: HTTP 503 (busy); want HTTP 200 with finish_reason 'stop'")
    assert completion_failure({"passed": False, "finish_reason": None, "error": "ClientConnectorError: refused"}) == (
        "ready completion: no answer (ClientConnectorError: refused); want HTTP 200 with finish_reason 'stop'")


def test_latency_line_names_the_configured_scale_when_no_step_measured():
    assert latency_line({}, True, 0.01) == (
        "no latency figure from a step at a time scale (simulator configured at time scale 0.01: figures "
        "would be in model ms, measured / 0.01)")
    assert latency_line({"A": None}, True, 1.0) == "ms as measured (simulator at time scale 1: no conversion)"
    assert latency_line({"A": None}, True, 0) == "ms as measured (simulator at time scale 0: no conversion)"


def test_a_window_with_every_run_step_deferred_states_its_scale(tmp_path):
    steps, frozen = cut_window(tmp_path)
    steps = [s if s["kind"] != "run" else {**s, "status": "deferred", "reason": "window aborted: auth",
                                           "run_dir": None} for s in steps]
    r = build(tmp_path, steps, frozen)
    assert "time scale 1 or 0" not in r["time"]["latency"] and "0.01" in r["time"]["latency"]


def test_one_name_per_latency_cell_measured_or_not(tmp_path):
    steps, frozen = cut_window(tmp_path)
    md = render_markdown(build(tmp_path, steps, frozen), "w")
    # the deferred control step's cells and the measured A's are named alike
    assert "| control | control.ttft_p50 (model ms) | deferred | — |" in md
    assert "| A | replay.ttft_p50 (model ms) | measured | 82.2 | — |" in md
    assert "ttft_p50_ms" not in md


def test_the_churn_finding_is_a_hypothesis_with_its_confirming_experiment(tmp_path):
    from kvreplay.experiments.findings import load_views, restore_findings

    (f,) = restore_findings(load_views(tmp_path, churn_window(tmp_path)))
    assert f["summary"].startswith("row/checkpoint churn, a hypothesis: ")
    assert "as it would if entries were evicted just before they come round" in f["summary"]
    assert "would confirm it" in f["summary"]
    assert "entries are evicted just before" not in f["summary"]  # not stated as fact
