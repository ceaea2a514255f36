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
    # hits (lookups) 3, hit_tokens absent, misses 0 (NEWUSER 7: tokens have their own column)
    assert rows["ok"][7] == "150/200 (1 unknown)" and rows["ok"][8:11] == ["3", "absent", "0"]
    assert rows["ok"][11] == "absent"  # stores not reported
    assert "77.7" not in table and rows["bad"][3:] == ["invalid"] * 10
    assert rows["later"][3:] == ["deferred"] * 10
    assert "- ok: absent: hit_tokens not reported by this server" in table
    assert "- ok: absent: stores not reported by this server" in table
    assert "- bad: failed: invalid phase: drain did not pass" in table
    assert "- later: deferred: not run: deadline" in table
    assert "n/a" not in table


def test_table_in_model_ms_at_a_sim_time_scale():
    # NEWUSER 4: the terminal table is in model ms, as report.html, and says so.
    plan = plan_json([("ok", "forward", 1, [0, 1])])
    recs = [record("ok", 0, 0, ttft_ms=12.5, cached=40), record("ok", 1, 1, ttft_ms=12.5, t0_ms=30, cached=60)]
    s = summarise(plan, recs, ok={"counter_delta": {"hits": 3, "hit_tokens": 250}, "attribution": "phase_only"})
    plain = render_table(s)
    table = render_table(s, 0.02)
    assert table.startswith(
        "Latencies in model ms (measured ms / sim time scale 0.02, as in report.html).\n\n"
        "| phase | C | ok/planned | failed | TTFT p50 model ms | TTFT p99 model ms | ITL p50 model ms "
        "| E2E p50 model ms | cached/prompt tokens | hits Δ | hit_tokens Δ |"
    )
    # The summary's p50 is the histogram's 12.503 ms (s["phases"][0]["ttft_ms"]):
    # 12.503 / 0.02 = 625.15 model ms, printed with one decimal as in report.html.
    assert s["phases"][0]["ttft_ms"]["p50"] == 12.503
    row = [c.strip() for c in table.splitlines()[4].split("|")[1:-1]]
    assert row[:5] == ["ok", "1", "2/2", "0", f"{12.503 / 0.02:.1f}"] and row[4] in ("625.1", "625.2")
    assert row[8:11] == ["100/200", "3", "250"]
    assert plain.startswith("| phase | C | ok/planned | failed | TTFT p50 ms |")
    assert [c.strip() for c in plain.splitlines()[2].split("|")[1:-1]][4] == "12.5"


def test_counters_a_server_never_reports_are_one_line_not_columns():
    """Issue 31 item 6: vLLM counts hit and query tokens only; hits, misses, stores, evicted are one line."""
    plan = plan_json([("a", "forward", 1, [0, 1]), ("b", "forward", 1, [0, 1])])
    recs = [record(p, i, i, ttft_ms=12.5, t0_ms=30 * i, cached=40) for p in ("a", "b") for i in (0, 1)]
    s = summarise(plan, recs,
                  a={"counter_delta": {"hit_tokens": 250, "query_tokens": 400}, "attribution": "phase_only"},
                  b={"counter_delta": {"hit_tokens": 300, "query_tokens": 400}, "attribution": "phase_only"})
    table = render_table(s)
    lines = table.splitlines()
    assert lines[0] == ("| phase | C | ok/planned | failed | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | E2E p50 ms "
                        "| cached/prompt tokens | hit_tokens Δ |")
    assert lines[1] == "|---" * 10 + "|"
    assert [c.strip() for c in lines[2].split("|")[1:-1]][-1] == "250"
    assert [c.strip() for c in lines[3].split("|")[1:-1]][-1] == "300"
    notes = [ln for ln in lines if ln.startswith("- ")]
    assert notes[0] == ("- not reported by this server in any phase (absent, not zero): hits, misses, stores, "
                        "evicted (it counts no lookups: its hit tokens are in hit_tokens Δ)")
    assert not any("not reported by this server" in n for n in notes[1:])  # no note per phase and counter
    assert not any(n.startswith(("- a: absent", "- b: absent")) and "hits" in n for n in notes)
