"""Issue 27 item 2: a cell reads ``measured`` only when its evidence exists.

A property test over randomly cut windows, built in-process (no server, no sleeping):
a run step of one to three phases, each position either answered, failed in
transport (the server killed at a random send; ``max_transport_failures`` = 3
consecutive ones stop new requests), failed in output, or never sent (a deadline
at a random send); a random phase's drain failing (nothing of it sent:
``check_failed``); a random phase's records lost. The phase summaries are written
as the runner writes them (``metrics.summary``), then the run kind's ``cells`` hook
reads them. Asserted: no cell is measured without ok records behind it, every cell
of a phase that sent nothing is ``failed`` or ``deferred``, and every cell that is
neither ``measured`` nor ``absent`` has a non-empty reason.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as hst

from kvreplay.experiments.findings import PhaseView, phase_status
from kvreplay.experiments.steps.base import CellContext
from kvreplay.experiments.steps.run import KIND

LIMIT = 3


def _window(planned: list[int], kill_at: int | None, deadline_at: int | None, drain_fails: int | None,
            output_fail: set[int], lost: int | None) -> tuple[list[dict[str, Any]], list[int], str | None]:
    """Phase summaries (as the runner writes them), the sent-record count per phase, the abort reason."""
    abort: str | None = None
    run = 0
    g = 0  # global send index
    phases, records = [], []
    for i, n in enumerate(planned):
        ph: dict[str, Any] = {"name": f"p{i}", "planned": n, "sent": 0, "ok": 0, "not_sent": 0,
                              "failed_transport": 0, "failed_output": 0, "invalid_reasons": [],
                              "check_failed": None, "deferred": False,
                              "ttft_ms": None, "e2e_ms": None, "tokens": {"cached": 0}}
        if drain_fails == i and abort is None:
            ph["check_failed"] = "drain: did not pass within 10.0 s: running=1"
            ph["invalid_reasons"].append("drain did not pass within 10.0 s: running=1")
            ph["not_sent"] = n
        else:
            for _pos in range(n):
                if deadline_at is not None and g >= deadline_at and abort is None:
                    abort = "deadline"
                if abort is not None:
                    ph["not_sent"] += 1
                    continue
                ph["sent"] += 1
                if kill_at is not None and g >= kill_at:
                    ph["failed_transport"] += 1
                    run += 1
                    if run >= LIMIT:
                        abort = "transport"
                elif g in output_fail:
                    ph["failed_output"] += 1
                    run = 0
                else:
                    ph["ok"] += 1
                    ph["tokens"]["cached"] += 16
                    run = 0
                g += 1
            ph["deferred"] = ph["sent"] == 0 and abort is not None
        if ph["ok"]:
            ph["ttft_ms"] = ph["e2e_ms"] = {"p50": 12.5}
        ph["valid"] = not ph["invalid_reasons"] and not ph["deferred"]
        phases.append(ph)
        records.append(0 if lost == i else ph["sent"])
    return phases, records, abort


@settings(max_examples=300, deadline=None, derandomize=True)
@given(planned=hst.lists(hst.integers(1, 6), min_size=1, max_size=3),
       kill_at=hst.none() | hst.integers(0, 18), deadline_at=hst.none() | hst.integers(0, 18),
       drain_fails=hst.none() | hst.integers(0, 2), output_fail=hst.sets(hst.integers(0, 18), max_size=6),
       lost=hst.none() | hst.integers(0, 2), tier=hst.booleans(), evidence=hst.booleans(),
       prime=hst.booleans())
def test_no_cell_reads_measured_without_records_behind_it(planned, kill_at, deadline_at, drain_fails,
                                                          output_fail, lost, tier, evidence, prime):
    phases, records, abort = _window(planned, kill_at, deadline_at, drain_fails, output_fail, lost)
    if abort == "transport":
        status, reason = "failed", "transport: 3 consecutive sends did not reach the server; 9 of 12 sent"
    elif abort is not None:
        status, reason = "aborted", "deadline: no new requests after 70 s"
    elif any(not p["valid"] for p in phases):
        status, reason = "failed", "p0: drain did not pass"
    else:
        status, reason = "measured", None
    views = {}
    for ph, n in zip(phases, records, strict=True):
        v = PhaseView(f"A/{ph['name']}", "A", ph["name"], "forward", True, None, ph, sent_records=n,
                      repeats=0 if prime else ph["ok"], first=ph["ok"] if prime else 0,
                      evidence={"hit_tokens": 32.0, "host_fetched_tokens": 8.0} if evidence and ph["ok"] else None)
        views[v.ref] = v
    ctx = CellContext(views, {"device": tier, "host": tier}, [], None)
    st = {"name": "A", "status": status, "reason": reason}
    fs = {"plan": {"phases": [{"name": p["name"]} for p in phases]}}
    cells = KIND.cells(st, fs, ctx)
    by_phase = {p["name"]: (p, n) for p, n in zip(phases, records, strict=True)}
    assert {c["metric"].split(".")[0] for c in cells} == set(by_phase)
    for c in cells:
        ph, n = by_phase[c["metric"].split(".")[0]]
        if c["status"] == "measured":
            assert ph["ok"] > 0 and n > 0 and ph["not_sent"] == 0 and ph["valid"], (c, ph, n)
            assert c["value"] is not None, c
        if ph["sent"] == 0:
            assert c["status"] in ("failed", "deferred"), (c, ph)
        if c["status"] not in ("measured", "absent"):
            assert isinstance(c["reason"], str) and c["reason"].strip(), c


def _ph(**kw: Any) -> dict[str, Any]:
    base = {"planned": 4, "sent": 4, "ok": 4, "not_sent": 0, "failed_transport": 0, "failed_output": 0,
            "invalid_reasons": [], "check_failed": None, "deferred": False, "valid": True}
    return {**base, **kw}


def test_phase_status_cases_by_hand():
    assert phase_status(_ph(), 4, None) == ("measured", None)
    # every send failed in transport: failed, never "measured 0"
    assert phase_status(_ph(ok=0, failed_transport=4), 4, "transport: x") == (
        "failed", "none of the 4 sent requests succeeded (4 in transport, 0 in output)")
    # sends counted, no records behind them
    assert phase_status(_ph(), 0, None) == (
        "failed", "no records: the summary counts 4 sent but records.jsonl holds none")
    # deferred by an abort: the step's reason
    assert phase_status(_ph(sent=0, ok=0, not_sent=4, deferred=True, valid=False), 0, "transport: x") == (
        "deferred", "transport: x")
    # nothing sent, a failed drain: its own reason
    assert phase_status(_ph(sent=0, ok=0, not_sent=4, valid=False, check_failed="drain: x",
                            invalid_reasons=["drain did not pass"]), 0, None) == ("failed", "drain did not pass")
    # cut short: partial, with the step's reason
    assert phase_status(_ph(sent=3, ok=3, not_sent=1), 3, "deadline: y") == (
        "aborted", "partial: 3 of 4 positions sent (deadline: y)")
