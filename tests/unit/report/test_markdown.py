"""The terminal table (``render_table``): every figure a value or a status, reasons as notes."""

from rundirs import plan_json, record, summarise

from kvreplay.report.markdown import render_table


def test_table_labels_missing_and_invalid_figures():
    plan = plan_json(
        [("ok", "forward", 1, [0, 1]), ("bad", "forward", 1, [0, 1]), ("later", "forward", 1, [0])]
    )
    recs = [
        record("ok", 0, 0, ttft_ms=12.5, cached=None),
        record("ok", 1, 1, ttft_ms=12.5, t0_ms=30, cached=150),
    ]
    recs += [record("bad", 0, 0, ttft_ms=77.7), record("bad", 1, 1, ttft_ms=77.7, t0_ms=30)]
    recs += [record("later", 0, 0, sent=False)]
    s = summarise(
        plan,
        recs,
        ok={"counter_delta": {"hits": 3, "misses": 0}, "attribution": "phase_only"},
        bad={"valid": False, "invalid_reasons": ["drain did not pass"]},
        later={"deferred": True},
    )
    s["aborted"] = {"reason": "deadline", "message": "no new requests after 60 s"}
    table = render_table(s)
    rows = {
        line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
        for line in table.splitlines()
        if line.startswith("| ") and not line.startswith("| phase")
    }
    assert (
        rows["ok"][3] == "12.5" and rows["ok"][5] == "absent"
    )  # ITL: no answer streamed two or more tokens: absent, nothing failed
    assert rows["ok"][7] == "150/200 (1 unknown)" and rows["ok"][8:10] == ["3", "0"]
    assert rows["ok"][10] == "absent"  # stores not reported
    assert "77.7" not in table and rows["bad"][3:] == ["invalid"] * 9
    assert rows["later"][3:] == ["deferred"] * 9
    assert "- ok: absent: stores not reported by this server" in table
    assert "- bad: failed: invalid phase: drain did not pass" in table
    assert "- later: deferred: not run: deadline" in table
    assert "n/a" not in table
