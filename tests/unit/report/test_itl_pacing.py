"""The demo's ITL is what the simulator models, or is marked (issue 45 item 3).

The simulator paces tokens with ~1 ms event-loop timers: at time scale 0.02 the 20 ms
model gap is 0.4 ms, and tokens come in bursts, so the ITL p50 is a burst gap (0.85 model
ms in the demo) while TPOT (the mean gap) stays the model's 20 ms. The report and console
then read ITL p50 "not meaningful" with why.
"""

from __future__ import annotations

import kvreplay
from kvreplay.report.cells import ITL_TIMER_FLOOR_MS, itl_pacing_note, latency_cell
from kvreplay.report.markdown import render_table
from kvreplay.sim import SimConfig


def _ph(itl_p50: float, tpot_p50: float) -> dict:
    return {"name": "replay", "ok": 52, "planned": 52, "sent": 52, "concurrency": 1, "valid": True,
            "itl_ms": {"p50": itl_p50}, "tpot_ms": {"p50": tpot_p50}}


def test_a_gap_finer_than_the_timers_marks_itl_not_meaningful():
    assert ITL_TIMER_FLOOR_MS == 2.0
    # the demo at 0.02: ITL p50 0.017 measured ms (0.85 model ms), TPOT p50 0.408 ms = 20.40 model ms
    why = ("not meaningful at sim time scale 0.02: the simulator's scaled token gap (TPOT p50 0.408 ms measured, "
           "20.40 model ms) is under 2 ms, finer than the event loop's ~1 ms timers, so tokens arrive in bursts; "
           "TPOT p50 is the modelled gap")
    assert itl_pacing_note(_ph(0.017, 0.408), 0.02) == why
    cell = latency_cell(_ph(0.017, 0.408), {}, "itl", "p50", scale=0.02)
    assert (cell.status, cell.text, cell.note) == ("measured", "not meaningful", f"measured 0.02 ms; {why}")
    # TPOT itself is shown, in model ms: 0.408 / 0.02 = 20.40
    assert latency_cell(_ph(0.017, 0.408), {}, "tpot", "p50", scale=0.02).text == "20.40"
    # at 0.2 each 4 ms gap spans four timer ticks: ITL p50 4.211 / 0.2 = 21.05 model ms is shown
    assert itl_pacing_note(_ph(4.211, 4.003), 0.2) is None
    assert latency_cell(_ph(4.211, 4.003), {}, "itl", "p50", scale=0.2).text == "21.05"
    # the bound: 1.999 ms is under it, 2.0 is not; a real server (no scale) is never marked
    assert itl_pacing_note(_ph(0.5, 1.999), 0.1) is not None and itl_pacing_note(_ph(0.5, 2.0), 0.1) is None
    assert itl_pacing_note(_ph(0.017, 0.408), None) is None
    assert latency_cell(_ph(0.017, 0.408), {}, "itl", "p50").text == "0.02"


def test_the_demo_marks_its_itl_or_shows_the_models(tmp_path):
    # the demo's phases (8 bodies each) at its time scale 0.02
    r = kvreplay.replay(kvreplay.DEMO_WORKLOAD, phases=["prime:forward:c1:first8", "replay:reverse:c1:first8"],
                        sim={"time_scale": 0.02}, out=tmp_path / "demo")
    model_itl_ms = SimConfig().itl_s * 1000  # 20 ms
    table = render_table(r.summary, 0.02)
    lines = [ln for ln in table.splitlines() if ln.startswith("|")]
    head, rows = (lines[0].split("|")[1:-1], [[c.strip() for c in ln.split("|")[1:-1]] for ln in lines[2:]])
    head = [c.strip() for c in head]
    col = head.index("ITL p50 model ms")
    for row, ph in zip(rows, r.summary["phases"], strict=True):
        itl_model = ph["itl_ms"]["p50"] / 0.02
        # either the ITL shown is the model's (within 10%) or it is marked, with why in the notes
        if abs(itl_model - model_itl_ms) > 0.1 * model_itl_ms:
            assert row[col] == "not meaningful", (row, ph["itl_ms"], ph["tpot_ms"])
            assert f"- {ph['name']}: ITL p50 not meaningful at sim time scale 0.02:" in table
        else:
            assert float(row[col]) == round(itl_model, 2)
