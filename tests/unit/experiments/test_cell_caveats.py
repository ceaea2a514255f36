"""Issue 27 item 3 / issue 31 item 5: every caveat a cell rests on is carried on it, and each step links
its own run report.

``cells[].caveats`` gains ``invalid_phase``, ``client_bound`` and ``absent_counter`` beside
``unread_series``. Every expected text is written by hand from the synthetic phases below.
"""

from __future__ import annotations

import json
from pathlib import Path

from kvreplay.experiments.findings import PhaseView
from kvreplay.experiments.publish import build_result, render_html, render_markdown, with_caveats
from kvreplay.experiments.steps import kind_of


def view(step: str, phase: str, **summary) -> PhaseView:
    return PhaseView(f"{step}/{phase}", step, phase, "forward", True, None, {"name": phase, **summary})


def cells(step: str, phase: str) -> list[dict]:
    return [{"step": step, "metric": f"{phase}.{m}"} for m in
            ("requests_ok", "ttft_p50_ms", "e2e_p50_ms", "cached_tokens", "hit_tokens", "host_fetched_tokens")]


FROZEN = {"steps": [{"name": "A", "plan": {"phases": [{"name": "p"}]}}]}


def test_client_bound_goes_on_the_latency_cells_of_that_phase_only():
    v = view("A", "p", valid=True, client_bound=True, counter_delta=None,
             client={"loop_lag_p99_ms": 42.5, "cpu_utilisation": 0.934})
    out = {c["metric"]: c.get("caveats") for c in with_caveats(cells("A", "p"), FROZEN, None, [v])}
    want = ["client_bound: phase p was client-bound (loop lag p99 42.5 ms, client CPU 93%); "
            "its latencies include the client's own delay"]
    assert out == {"p.requests_ok": None, "p.ttft_p50_ms": want, "p.e2e_p50_ms": want, "p.cached_tokens": None,
                   "p.hit_tokens": None, "p.host_fetched_tokens": None}
    # a phase the self-check found quiet (client_bound false or absent) gets none
    quiet = view("A", "p", valid=True, client_bound=False, client={"loop_lag_p99_ms": 1.0})
    assert all("caveats" not in c for c in with_caveats(cells("A", "p"), FROZEN, None, [quiet]))


def test_invalid_phase_goes_on_every_cell_of_it_with_its_reasons():
    v = view("A", "p", valid=False, invalid_reasons=["identity_drift: 3 requests", "drain failed"])
    out = with_caveats(cells("A", "p") + cells("A", "q"), FROZEN, None, [v])
    want = ["invalid_phase: phase p invalid: identity_drift: 3 requests; drain failed"]
    assert [c.get("caveats") for c in out] == [want] * 6 + [None] * 6


def test_absent_counter_names_the_tier_whose_restore_counters_the_server_never_gave():
    # the device tier is exposed (hit_tokens read), the host tier not at all
    v = view("A", "p", valid=True, counter_delta={"hit_tokens": 10.0, "lookups": 3.0})
    out = {c["metric"]: c.get("caveats") for c in with_caveats(cells("A", "p"), FROZEN, None, [v])}
    assert out["p.hit_tokens"] is None
    assert out["p.host_fetched_tokens"] == [
        "absent_counter: the server exposes none of host_fetched_tokens, host_reused_tokens, host_hit_tokens, "
        "host_hits (host tier)"]
    assert out["p.ttft_p50_ms"] is None
    # hits alone (llama.cpp-style) is a device restore counter: not absent
    v2 = view("A", "p", valid=True, counter_delta={"hits": 1.0, "host_hits": 2.0})
    assert all("caveats" not in c for c in with_caveats(cells("A", "p"), FROZEN, None, [v2]))
    # a counter read but invalid (out of range) is not absent; no counters read at all (backend none) says nothing
    v3 = view("A", "p", valid=True, counter_delta={"invalid": {"hit_tokens": "out of range"}, "host_hits": 1.0})
    v4 = view("A", "p", valid=True, counter_delta=None)
    for v_ in (v3, v4):
        assert all("caveats" not in c for c in with_caveats(cells("A", "p"), FROZEN, None, [v_]))
    # an empty delta (the backend read nothing the vocabulary knows): both tiers absent
    v5 = view("A", "p", valid=True, counter_delta={})
    out5 = {c["metric"]: c.get("caveats") for c in with_caveats(cells("A", "p"), FROZEN, None, [v5])}
    assert out5["p.hit_tokens"] == ["absent_counter: the server exposes none of hit_tokens, hits (device tier)"]


def test_every_caveat_of_one_cell_in_order_beside_unread_series():
    v = view("A", "p", valid=False, invalid_reasons=["x"], client_bound=True, client={}, counter_delta={})
    unread = {"backend": "vllm", "common": ["host_lookups"], "drain_gauges": [], "profile": "sim"}
    out = {c["metric"]: c.get("caveats") for c in with_caveats(cells("A", "p"), FROZEN, unread, [v])}
    assert out["p.host_fetched_tokens"] == [
        "invalid_phase: phase p invalid: x",
        "absent_counter: the server exposes none of host_fetched_tokens, host_reused_tokens, host_hit_tokens, "
        "host_hits (host tier)",
        "unread_series: backend vllm does not read host_lookups (sim reads them)"]
    assert out["p.ttft_p50_ms"] == ["invalid_phase: phase p invalid: x",
                                    "client_bound: phase p was client-bound; its latencies include the client's "
                                    "own delay"]


def _run_dir(d: Path, *, client_bound: bool) -> None:
    d.mkdir(parents=True)
    rec = {"phase": "p", "position": 0, "body_sha256": "b0", "sent": True, "status": "ok", "counter_delta": None}
    (d / "records.jsonl").write_text(json.dumps(rec) + "\n")
    ph = {"name": "p", "ok": 1, "planned": 1, "sent": 1, "not_sent": 0, "valid": True, "invalid_reasons": [],
          "attribution": "none", "counter_delta": None, "tokens": {"cached": 0, "prompt": 10, "cached_unknown": 0},
          "ttft_ms": {"p50": 1.5}, "e2e_ms": {"p50": 9.0}, "client_bound": client_bound,
          "client": {"loop_lag_p99_ms": 30.0, "cpu_utilisation": 0.5}}
    (d / "summary.json").write_text(json.dumps({"phases": [ph]}))
    (d / "plan.json").write_text(json.dumps({"run": {"target": "http://127.0.0.1:1"},
                                             "phases": [{"name": "p", "order": "forward"}]}))


def test_result_json_and_both_reports_carry_the_caveat_and_link_each_steps_run_report(tmp_path):
    _run_dir(tmp_path / "A", client_bound=True)
    _run_dir(tmp_path / "B", client_bound=False)
    steps = [{"name": n, "kind": "run", "status": "measured", "reason": None, "run_dir": n, "comparable": True,
              "incarnation": None} for n in ("A", "B")]
    # the run kind draws each step's report.html, in real time too (the runner writes only report.md)
    for st in steps:
        assert kind_of("run").restate(tmp_path, st) is None
        assert (tmp_path / st["run_dir"] / "report.html").is_file()
    frozen = {"experiment_sha256": "0" * 64, "server": {"target": "http://127.0.0.1:1"},
              "steps": [{"name": n, "plan": {"phases": [{"name": "p"}]}} for n in ("A", "B")]}
    r = build_result(tmp_path, frozen, steps, started="s", ended="e", aborted=None, identity=None)
    assert [s["report"] for s in r["steps"]] == ["A/report.html", "B/report.html"]
    got = {(c["step"], c["metric"]): c.get("caveats") for c in r["cells"]}
    cb = ["client_bound: phase p was client-bound (loop lag p99 30 ms, client CPU 50%); "
          "its latencies include the client's own delay"]
    assert got[("A", "p.ttft_p50_ms")] == cb and got[("A", "p.e2e_p50_ms")] == cb
    assert got[("A", "p.requests_ok")] is None and got[("B", "p.ttft_p50_ms")] is None
    md = render_markdown(r, "x")
    assert "| step | metric | status | value | reason | caveats |" in md
    assert f"| A | p.ttft_p50_ms | measured | 1.5 | — | {cb[0]} |" in md
    assert "| A | run | measured | True | — | [A](A/report.html) |" in md
    html = render_html(r, "x")
    assert '<td><a href="A/report.html">A</a></td>' in html and '<td><a href="B/report.html">B</a></td>' in html
    assert "client-bound (loop lag p99 30 ms, client CPU 50%)" in html
    # a step whose folder holds no report.html gets no link (and no key)
    (tmp_path / "B" / "report.html").unlink()
    r2 = build_result(tmp_path, frozen, [{k: v for k, v in s.items() if k != "report"} for s in steps],
                      started="s", ended="e", aborted=None, identity=None)
    assert "report" not in r2["steps"][1]
    assert "| B | run | measured | True | — | B |" in render_markdown(r2, "x")
    # no caveat anywhere: the Cells table keeps its five columns
    r2["cells"] = [{k: v for k, v in c.items() if k != "caveats"} for c in r2["cells"]]
    assert "| step | metric | status | value | reason |\n" in render_markdown(r2, "x")


def test_a_phase_that_never_started_is_not_called_invalid_with_no_reason():
    # a window killed before phase p: 0 of 52 sent, valid false, no invalid_reasons; its cells'
    # reason says it was not run, so no "invalid_phase ... no reason given" caveat
    for never in ({"deferred": True, "planned": 52, "sent": 0}, {"planned": 52, "not_sent": 52, "sent": 0},
                  {"sent": 0}):
        v = view("A", "p", valid=False, **never)
        assert all("caveats" not in c for c in with_caveats(cells("A", "p"), FROZEN, None, [v])), never
    # one that sent 9 and was invalid keeps it
    v = view("A", "p", valid=False, planned=52, not_sent=43, sent=9, invalid_reasons=["drain failed"])
    assert with_caveats(cells("A", "p"), FROZEN, None, [v])[0]["caveats"] == [
        "invalid_phase: phase p invalid: drain failed"]


def test_compare_rows_carry_the_caveats_of_their_sides_beside_each_ratio():
    from kvreplay.experiments.findings import compare_tables
    from kvreplay.experiments.publish import compare_caveats

    base = {"valid": True, "ok": 4, "ttft_ms": {"p50": 10.0}, "e2e_ms": {"p50": 20.0}, "tokens": {"cached": 100},
            "counter_delta": {"hit_tokens": 100.0}}
    a = view("A", "replay", **base)
    b = view("B", "replay", **{**base, "ttft_ms": {"p50": 17.97}, "client_bound": True,
                               "client": {"loop_lag_p99_ms": 42.5, "cpu_utilisation": 0.934}})
    (t,) = compare_caveats(compare_tables([a, b], [["A/replay", "B/replay"]]), [a, b])
    rows = {r["metric"]: r for r in t["rows"]}
    cb = ("B/replay: client_bound: phase replay was client-bound (loop lag p99 42.5 ms, client CPU 93%); "
          "its latencies include the client's own delay")
    assert rows["ttft_p50_ms"]["ratio"] == 1.797 and rows["ttft_p50_ms"]["caveats"] == [cb]
    assert "caveats" not in rows["cached_tokens"] and "caveats" not in rows["requests"]
    # the host tier: neither side's server exposes its restore counters
    assert rows["host_fetched_tokens"]["caveats"] == [
        f"{s}/replay: absent_counter: the server exposes none of host_fetched_tokens, host_reused_tokens, "
        "host_hit_tokens, host_hits (host tier)" for s in "AB"]
    md = render_markdown({"experiment_sha256": "0" * 64, "started": "s", "ended": "e", "aborted": None,
                          "identity": None, "steps": [], "cells": [], "findings": [], "compare": [t]}, "x")
    assert "| metric | A/replay | B/replay | ratio b/a | caveats |" in md
    assert f"| ttft_p50_ms | 10 | 17.97 | 1.797 | {cb} |" in md


def test_reports_name_the_window_times_once_in_utc(tmp_path):
    # result.json writes "...Z" (UTC already): the reports said "...Z UTC"; other text keeps " UTC"
    frozen = {"experiment_sha256": "0" * 64, "server": {"target": "http://127.0.0.1:1"}, "steps": []}
    r = build_result(tmp_path, frozen, [], started="2026-12-05T03:10:40Z", ended="2026-12-05T03:10:43Z",
                     aborted=None, identity=None)
    assert "- started 2026-12-05T03:10:40Z, ended 2026-12-05T03:10:43Z\n" in render_markdown(r, "x")
    assert "Started <b>2026-12-05T03:10:40Z</b>, ended <b>2026-12-05T03:10:43Z</b>." in render_html(r, "x")
    r["started"], r["ended"] = "2026-12-05 03:10:40", "2026-12-05 03:10:43"
    assert "- started 2026-12-05 03:10:40 UTC, ended 2026-12-05 03:10:43 UTC\n" in render_markdown(r, "x")
