"""Cell statuses: measured, failed (reason), deferred (not run); never an invalid phase's number."""

from kvreplay.report.cells import (
    counter_cell,
    latency_cell,
    phase_gate,
    phases_in_order,
    record_cells,
    tokens_cell,
)

SUMMARY = {"aborted": {"reason": "interrupt", "message": "operator interrupt"}}


def phase(**kw):
    ph = {
        "name": "p",
        "concurrency": 1,
        "planned": 4,
        "sent": 4,
        "ok": 4,
        "not_sent": 0,
        "failed": {},
        "ttft_ms": {"n": 4, "p50": 12.5, "p99": 30.0},
        "itl_ms": {"n": 0, "p50": None},
        "tokens": {"prompt": 400, "cached": 128, "completion": 16, "cached_unknown": 0},
        "attribution": "per_request",
        "counter_delta": {"hits": 2, "hit_tokens": 128},
        "valid": True,
        "invalid_reasons": [],
    }
    ph.update(kw)
    return ph


def test_measured_values():
    c = latency_cell(phase(), SUMMARY, "ttft", "p50")
    assert (c.status, c.text) == ("measured", "12.5")
    assert tokens_cell(phase(), SUMMARY).text == "128/400"
    assert counter_cell(phase(), SUMMARY, "hit_tokens").text == "128"


def test_invalid_phase_never_shows_its_number():
    ph = phase(valid=False, invalid_reasons=["drain did not pass within 10 s"])
    for c in (
        latency_cell(ph, SUMMARY, "ttft", "p50"),
        tokens_cell(ph, SUMMARY),
        counter_cell(ph, SUMMARY, "hits"),
    ):
        assert c.status == "failed"
        assert "12.5" not in c.text + (c.reason or "") and "drain did not pass" in c.reason
        assert c.markdown().startswith("failed: invalid phase")


def test_unrun_phase_is_deferred_with_the_abort_reason():
    for ph in (phase(sent=0, ok=0, not_sent=4), phase(deferred=True), "later"):
        c = latency_cell(ph, SUMMARY, "ttft", "p50")
        assert c.status == "deferred" and "interrupt" in c.reason


def test_all_failed_phase_names_the_classes():
    g = phase_gate(phase(ok=0, failed={"connect": 3, "http": 1}), SUMMARY)
    assert g.status == "failed" and "connect 3" in g.reason and "http 1" in g.reason


def test_missing_figures_fail_with_a_reason():
    # No answer streamed two or more tokens: ITL/TPOT do not exist, absent (NEWUSER 13(b)).
    for metric in ("itl", "tpot"):
        c = latency_cell(phase(tpot_ms={"n": 0, "p50": None}), SUMMARY, metric, "p50")
        assert (c.status, c.text, c.reason) == (
            "absent", "absent", "no samples: no answer streamed two or more tokens (a non-streamed "
            "answer arrives at once: it has no decode interval)")
    rebuilt = dict(SUMMARY, rebuilt_from_records=True)
    c = latency_cell(phase(), rebuilt, "itl", "p50")
    assert (c.status, c.reason) == (
        "failed", "ITL samples are not kept in records and the phase's histogram was never written")
    c = latency_cell(phase(ttft_ms={}), SUMMARY, "ttft", "p50")
    assert (c.status, c.reason) == ("failed", "no TTFT samples")
    # A series the server does not have is absent, not failed.
    c = counter_cell(phase(), SUMMARY, "host_hits")
    assert (c.status, c.reason) == ("absent", "host_hits not reported by this server")
    assert (
        counter_cell(phase(attribution="none", counter_delta=None), SUMMARY, "hits").status
        == "failed"
    )
    assert (
        "restarted"
        in counter_cell(phase(counter_delta={"hits": 1, "reset": True}), SUMMARY, "hits").reason
    )
    unknown = phase(tokens={"prompt": 400, "cached": 0, "completion": 16, "cached_unknown": 4})
    assert tokens_cell(unknown, SUMMARY).status == "absent"


def test_partial_phase_is_measured_with_a_note():
    c = latency_cell(phase(sent=2, ok=2, not_sent=2), SUMMARY, "ttft", "p50")
    assert c.status == "measured" and "2 of 4" in c.note


def test_phases_in_order_keeps_unrun_plan_phases():
    plan = {"phases": [{"name": "a"}, {"name": "b"}]}
    out = phases_in_order({"phases": [phase(name="a")]}, plan)
    assert out[0]["name"] == "a" and out[1] == "b"


def test_record_cells():
    ok = {
        "sent": True,
        "status": "ok",
        "ttft_ns": 5_000_000,
        "e2e_ns": 9_000_000,
        "usage": {"prompt_tokens": 10, "cached_tokens": None},
        "counter_delta": {"hits": 1},
    }
    cells = record_cells(ok, ["hits", "host_hits"])
    # cached_tokens and host_hits: series the server does not have (absent), not failed reads
    assert [c.status for c in cells] == ["measured"] * 4 + ["absent", "measured", "absent"]
    assert cells[1].text == "5.0"
    bad = record_cells({"sent": True, "status": "timeout", "error": "read idle"}, ["hits"])
    assert {c.status for c in bad} == {"failed"} and "read idle" in bad[0].reason
    never = record_cells({"sent": False, "status": "aborted", "error": "deadline"}, ["hits"])
    assert {c.status for c in never} == {"deferred"} and "deadline" in never[0].reason


def test_a_failed_check_is_the_phases_failure_not_a_deferral():
    # Issue 14: a failed fresh check sends nothing; the report names the check, not "run ended".
    why = "fresh: lookups=3.0, hits=2.0 (want 0)"
    g = phase_gate(phase(sent=0, ok=0, not_sent=4, check_failed=why), {"aborted": None})
    assert (g.status, g.reason) == ("failed", f"check failed, nothing sent: {why}")
    c = latency_cell(phase(sent=0, ok=0, not_sent=4, check_failed=why), {"aborted": None}, "ttft", "p50")
    assert c.status == "failed" and c.reason == f"check failed, nothing sent: {why}"
