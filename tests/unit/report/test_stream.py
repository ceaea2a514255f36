"""Reports at scale: the streamed run, the compact plan, the one scan, binning, the limited tables."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import orjson
import pytest
from rundirs import plan_json, record, sha, write_run

from kvreplay.report.cells import latency_cell
from kvreplay.report.document import build, started_utc, to_html, to_markdown
from kvreplay.report.plots import bin_series
from kvreplay.report.sections import identity_table, request_tables
from kvreplay.report.stream import scan
from kvreplay.report.units import sim_time_scale, unit_of
from kvreplay.rundir import (
    RecordStream,
    compact_plan,
    compact_plan_file,
    load_run,
    open_run,
    read_records,
    sequence_head,
    sequence_length,
)


def two_phase_run(tmp_path, *, indent: bool):
    # prime: bodies 0,1,2,0,1 at C1; load: 2,1 at C4. Position 3 of prime fails.
    plan = plan_json([("prime", "forward", 1, [0, 1, 2, 0, 1]), ("load", "forward", 4, [2, 1])])
    host = {"hit_tokens": 16, "host_fetched_tokens": 32, "host_reused_tokens": 48, "entries": 3}
    recs = [
        record("prime", 0, 0, ttft_ms=10.0, cached=0, delta={"hit_tokens": 0, "entries": 1}),
        record("prime", 1, 1, ttft_ms=12.0, cached=None, delta=dict(host)),
        record("prime", 2, 2, ttft_ms=14.0, cached=16, delta={**host, "reset": True}),
        record("prime", 3, 0, status="http", error="HTTP 500: boom"),
        record("prime", 4, 1, ttft_ms=9.0, cached=32, delta=dict(host)),
        record("load", 1, 1, ttft_ms=7.0, cached=8, c=4),
        record("load", 0, 2, ttft_ms=6.0, cached=4, c=4),
    ]
    out = write_run(tmp_path / "run", plan, recs)
    if indent:
        (out / "plan.json").write_bytes(orjson.dumps(plan, option=orjson.OPT_INDENT_2) + b"\n")
    return out, plan, recs


@pytest.mark.parametrize("indent", [False, True])
def test_compact_plan_keeps_names_lengths_heads_and_distinct_bodies(tmp_path, indent):
    out, plan, _ = two_phase_run(tmp_path, indent=indent)
    cp = compact_plan_file(out / "plan.json")
    assert cp == compact_plan((out / "plan.json").read_bytes())
    assert [p["name"] for p in cp["phases"]] == ["prime", "load"]
    assert [sequence_length(p) for p in cp["phases"]] == [5, 2]
    # first entry per distinct body, in send order
    assert [s["body_index"] for s in cp["phases"][0]["sequence"]] == [0, 1, 2]
    assert [s["position"] for s in cp["phases"][0]["sequence"]] == [0, 1, 2]
    assert [s["body_sha256"] for s in cp["phases"][1]["sequence"]] == [sha(2), sha(1)]
    assert sequence_head(cp["phases"][0]) == plan["phases"][0]["sequence"]
    assert sequence_head(plan["phases"][0], 2) == plan["phases"][0]["sequence"][:2]
    assert sequence_length(plan["phases"][1]) == 2
    # everything but the sequences is the plan itself
    strip = {k: v for k, v in plan.items() if k != "phases"}
    assert {k: v for k, v in cp.items() if k != "phases"} == strip
    assert compact_plan(b"not json") is None
    assert compact_plan(b"[1, 2]") is None


def test_streamed_load_holds_no_records_and_iterates_them(tmp_path):
    out, _, recs = two_phase_run(tmp_path, indent=True)
    run = load_run(out, stream=True)
    assert run.streamed and run.record_list == []
    assert isinstance(run.records, RecordStream) and bool(run.records)
    assert list(run.iter_records()) == list(run.records) == read_records(out / "records.jsonl")
    assert list(run.iter_records()) == recs
    full = load_run(out)
    assert not full.streamed and list(full.iter_records()) == recs
    # a missing summary is rebuilt from the streamed records and the compact plan,
    # the same as from the loaded records and the full plan
    (out / "summary.json").unlink()
    streamed, loaded = open_run(out), load_run(out)
    assert streamed.streamed and streamed.summary_rebuilt and loaded.summary_rebuilt
    assert streamed.summary == loaded.summary
    assert [p["planned"] for p in streamed.summary["phases"]] == [5, 2]


@pytest.mark.parametrize("indent", [False, True])
def test_streamed_rebuild_counts_positions_never_sent(tmp_path, indent):
    out, plan, recs = two_phase_run(tmp_path, indent=indent)
    # the kill came after prime position 3: positions 4 of prime and all of load have no record
    (out / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs[:4]))
    (out / "summary.json").unlink()
    s = open_run(out).summary
    assert s == load_run(out).summary
    assert s["aborted"]["message"].endswith("3 of 7 planned positions have no record of being sent "
                                            "(prime: 1, load: 2)")
    assert [(p["planned"], p["sent"], p["not_sent"], p["deferred"]) for p in s["phases"]] == [
        (5, 4, 1, False), (2, 0, 2, True)]


def test_scan_keeps_arrays_rows_examples_and_the_host_counter(tmp_path):
    out, _, _ = two_phase_run(tmp_path, indent=False)
    sc = scan(open_run(out), table_rows=2)
    pr, ld = sc.phases["prime"], sc.phases["load"]
    assert (pr.n, ld.n) == (5, 2)
    assert list(pr.pos) == [0, 1, 2, 4]
    assert list(pr.ttft_ms) == [10.0, 12.0, 14.0, 9.0]
    assert [None if math.isnan(c) else c for c in pr.cached] == [0.0, None, 16.0, 32.0]
    assert list(pr.failed_pos) == [3.0]
    # host restores win over device hits; a reset delta and a delta without the key are NaN
    assert pr.restore_key == "host_fetched_tokens"
    assert [None if math.isnan(v) else v for v in pr.restore] == [None, 32.0, None, 32.0]
    assert pr.counter_keys == {"hit_tokens", "host_fetched_tokens", "host_reused_tokens", "entries"}
    # the two lowest positions of the C1 phase; none kept for C4
    assert [r["position"] for r in pr.rows] == [0, 1]
    assert [r["position"] for r in ld.rows] == []
    assert ld.restore_key is None and list(ld.pos) == [1.0, 0.0]
    assert [(r["phase"], r["position"]) for r in sc.examples] == [("prime", 3)]


def test_streamed_and_loaded_reports_are_the_same_page(tmp_path):
    out, _, _ = two_phase_run(tmp_path, indent=True)
    a, b = build(load_run(out)), build(open_run(out))
    assert to_html(a) == to_html(b)
    assert to_markdown(a) == to_markdown(b)


def test_request_table_limited_with_every_counter_and_the_full_data_linked(tmp_path):
    out, _, _ = two_phase_run(tmp_path, indent=False)
    run = open_run(out)
    (t,) = request_tables(run, scan(run, table_rows=3))
    assert t.total == 5 and [h.split(" ")[0] for h, _ in t.rows] == ["0", "1", "2"]
    # every counter, host tier included, with units; the entries gauge left out
    assert t.columns == [
        "status", "TTFT (ms)", "E2E (ms)", "prompt (tokens)", "cached (tokens)",
        "Δ hit_tokens (tokens)", "Δ host_fetched_tokens (tokens)", "Δ host_reused_tokens (tokens)",
    ]
    assert [c.text for c in t.rows[1][1]] == ["ok", "12.0", "20.0", "100", "absent", "16", "32", "48"]
    rep = build(run)
    rep_html = to_html(rep)
    assert "prime: first 200 of 5 requests" not in rep_html
    assert "<summary>prime: 5 requests</summary>" in rep_html
    assert '<a href="records.jsonl">records.jsonl</a>' in rep_html


def test_one_reason_per_row_of_an_invalid_phase(tmp_path):
    plan = plan_json([("prime", "forward", 1, [0, 1])])
    recs = [record("prime", 0, 0, delta={"hits": 1}), record("prime", 1, 1, delta={"hits": 0})]
    out = write_run(tmp_path / "run", plan, recs,
                    prime={"valid": False, "invalid_reasons": ["drain failed"]})
    (t,) = request_tables(open_run(out))
    for _, cells in t.rows:
        assert cells[0].reason == "invalid phase: drain failed"
        assert {c.reason for c in cells[1:]} == {"as in the row's first column"}


def test_started_utc_units_and_simulator_scale(tmp_path):
    out, plan, _ = two_phase_run(tmp_path, indent=False)
    plan["run"]["wall_anchor_ns"] = 1_796_108_764_894_516_891
    plan["run"]["sim_time_scale"] = 0.01
    (out / "plan.json").write_text(json.dumps(plan))
    run = open_run(out)
    assert started_utc(run) == "2026-12-01 07:06:04 UTC"
    assert sim_time_scale(run.plan) == 0.01
    assert sim_time_scale({"run": {"sim_time_scale": 1.0}}) is None
    assert sim_time_scale({"run": {"sim_time_scale": 0}}) is None
    html = to_html(build(run))
    assert "<h1>kvreplay run report — started 2026-12-01 07:06:04 UTC</h1>" in html
    assert '<th scope="col">TTFT p50 (model ms)</th>' in html
    ph = {"name": "p", "ok": 1, "sent": 1, "valid": True, "ttft_ms": {"p50": 12.5}}
    c = latency_cell(ph, {}, "ttft", "p50", scale=0.01)
    assert (c.text, c.note) == ("1250.0", "measured 12.5 ms")
    assert latency_cell(ph, {}, "ttft", "p50").text == "12.5"
    assert [unit_of(k) for k in ("host_fetched_tokens", "host_bytes", "evictions", "host_pages_used")] == [
        "tokens", "bytes", "events", "pages"]
    assert unit_of("stores", {"units": {"stores": "blocks"}}) == "blocks"


def test_identity_is_one_row_per_field(tmp_path):
    out, _, _ = two_phase_run(tmp_path, indent=False)
    run = open_run(out)
    run.summary["identity"] = {
        "before": {"models": ["a", "b"], "version": {"version": "0.1.0", "build": "sim-1"}},
        "after": {"models": ["a", "b"], "version": {"version": "0.1.0", "build": "sim-2"}},
    }
    t = identity_table(run)
    assert [h for h, _ in t.rows] == ["models", "version.build", "version.version"]
    assert [c.text for c in t.rows[0][1]] == ["a, b", "a, b"]
    assert t.rows[1][1][1].reason == "changed to sim-2 (identity drift)"


def test_bin_series_min_median_max_per_bin():
    pos = np.array([9.0, 0, 1, 2, 3, 4, 5, 6, 7, 8])
    v = np.array([90.0, 0, 10, 20, 30, 40, 50, 60, 70, np.nan])
    xs, ((mn, md, mx),), width = bin_series(pos, [v], bins=2)
    assert width == 5.0 and list(xs) == [2.5, 7.5]
    assert list(mn) == [0.0, 50.0] and list(md) == [20.0, 65.0] and list(mx) == [40.0, 90.0]


def test_binned_chart_says_so():
    from kvreplay.report.plots import ttft_position_png

    n = 5000
    pos = np.arange(n, dtype=float)
    png, note = ttft_position_png("p", pos, pos % 7, pos % 5, np.array([3.0]), ("hits", pos % 2))
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert note == ("5000 requests binned into 500 bins of 10 positions: "
                    "line = median per bin, band = min to max")
    png, note = ttft_position_png("p", pos[:50], pos[:50], pos[:50], np.array([]))
    assert note is None


def test_importing_the_report_writer_loads_no_matplotlib():
    code = ("import sys, kvreplay.report.write, kvreplay.report.document, kvreplay.report.figures; "
            "print('matplotlib' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "False"


def test_invalid_phase_row_of_the_phase_table_says_its_reason_once(tmp_path):
    from kvreplay.report.sections import phase_table

    plan = plan_json([("prime", "forward", 1, [0, 1])])
    recs = [record("prime", 0, 0), record("prime", 1, 1)]
    out = write_run(tmp_path / "run", plan, recs,
                    prime={"valid": False, "invalid_reasons": ["drain failed"]})
    ((_, cells),) = phase_table(open_run(out)).rows
    assert [c.reason for c in cells] == [
        "invalid phase: drain failed; recorded 2/2",
        "as in the row's first column; recorded 0",
        *["as in the row's first column"] * 7,
    ]


def test_hits_column_is_lookups_and_hit_tokens_have_their_own_column():
    # NEWUSER 7: vLLM's hit tokens read "175440 tok" under "hits Δ"; hits are lookups.
    from kvreplay.report.markdown import hit_tokens_cell, hits_cell

    ph = {"name": "p", "ok": 1, "sent": 1, "valid": True, "attribution": "per_request",
          "counter_delta": {"hit_tokens": 175440.0, "prompt_tokens": 190516.0}}
    c = hits_cell(ph, {})
    assert (c.status, c.text, c.reason) == (
        "absent", "absent", "hits: the server counts no lookups (its hit tokens are in hit_tokens Δ)")
    c = hit_tokens_cell(ph, {})
    assert (c.status, c.text) == ("measured", "175440")
    ph["counter_delta"]["hits"] = 3.0
    assert (hits_cell(ph, {}).text, hit_tokens_cell(ph, {}).text) == ("3", "175440")
    del ph["counter_delta"]["hit_tokens"], ph["counter_delta"]["hits"]
    assert (hits_cell(ph, {}).status, hits_cell(ph, {}).reason) == (
        "absent", "hits not reported by this server")
    assert hit_tokens_cell(ph, {}).reason == "hit_tokens not reported by this server"
