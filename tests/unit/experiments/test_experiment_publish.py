"""The experiment's publication from synthetic step directories: partial phases, the status
line, the latency convention at a simulator time scale, the server left running.

Every expected figure is written by hand from the synthetic inputs below.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import pytest

from kvreplay.experiments.findings import load_views, not_run, partial_reason
from kvreplay.experiments.lifecycle import ServerControl, listening_pid
from kvreplay.experiments.publish import build_result, left_line, render_html, render_markdown, status_line
from kvreplay.experiments.timescale import latency_line, model_ms, scale_of_step
from kvreplay.experiments.window.spec import ServerSpec

DEADLINE = "deadline: no new requests after 5 s"


def host(fetched: float) -> dict:
    return {"host_fetched_tokens": fetched, "host_lookups": 100.0, "hit_tokens": 50.0, "lookups": 200.0}


def write_step(out: Path, name: str, phases: list[dict], *, scale: float | None = 0.01) -> str:
    """phases: {"name", "order", "bodies": [sha...], "planned", "fetched"} -> run dir ``name``.

    Each sent body is one ok record with ``host(fetched)`` as its counter delta; positions past
    ``len(bodies)`` up to ``planned`` were never sent.
    """
    d = out / name
    d.mkdir(parents=True)
    recs, sums = [], []
    for ph in phases:
        sent = len(ph["bodies"])
        for pos, sha in enumerate(ph["bodies"]):
            recs.append({"phase": ph["name"], "position": pos, "body_sha256": sha, "sent": True, "status": "ok",
                         "counter_delta": host(ph.get("fetched", 0.0))})
        planned = ph.get("planned", sent)
        sums.append({"name": ph["name"], "ok": sent, "planned": planned, "sent": sent, "not_sent": planned - sent,
                     "valid": sent > 0, "deferred": sent == 0, "invalid_reasons": [],
                     "attribution": "per_request", "counter_delta": {k: v * sent for k, v in host(
                         ph.get("fetched", 0.0)).items()}, "tokens": {"cached": 1000 * sent, "cached_unknown": 0},
                     "ttft_ms": {"p50": 0.822} if sent else {}, "e2e_ms": {"p50": 25.871} if sent else {}})
    (d / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    (d / "summary.json").write_text(json.dumps({"phases": sums}))
    run = {"target": "sim", **({"sim_time_scale": scale} if scale is not None else {})}
    (d / "plan.json").write_text(json.dumps({"run": run, "phases": [{"name": p["name"], "order": p["order"]}
                                                                    for p in phases]}))
    return name


def run_step(name: str, inc: str, status: str = "measured", reason: str | None = None) -> dict:
    return {"name": name, "kind": "run", "status": status, "reason": reason, "run_dir": name, "comparable": True,
            "incarnation": inc}


def other(name: str, kind: str, status: str, reason: str | None = None) -> dict:
    return {"name": name, "kind": kind, "status": status, "reason": reason, "run_dir": None, "comparable": True,
            "incarnation": None}


BODIES = [f"b{i}" for i in range(52)]


def cut_window(tmp_path: Path) -> tuple[list[dict], dict]:
    """A complete reverse replay in A; B's forward replay cut at 9 of 52; three steps deferred."""
    write_step(tmp_path, "A", [{"name": "prime", "order": "forward", "bodies": BODIES},
                               {"name": "replay", "order": "reverse", "bodies": BODIES[::-1], "fetched": 10.0}])
    write_step(tmp_path, "B", [{"name": "prime", "order": "forward", "bodies": BODIES},
                               {"name": "replay", "order": "forward", "bodies": BODIES[:9], "planned": 52}])
    steps = [other("A0", "incarnation", "measured"), run_step("A", "A0"), other("B0", "incarnation", "measured"),
             run_step("B", "B0", "aborted", DEADLINE),
             other("C0", "incarnation", "deferred", "window: no step starts after stop_new_after = 5 s"),
             {**other("control", "run", "deferred", "window: no step starts after stop_new_after = 5 s"),
              "comparable": False},
             other("trace", "ab", "deferred", "window: no step starts after stop_new_after = 5 s"),
             other("restore", "restore", "measured")]
    phases = [{"name": "prime"}, {"name": "replay"}]
    frozen = {"experiment_sha256": "0" * 64, "server": {"target": "sim", "sim": {"time_scale": 0.01}},
              "steps": [{"name": "A", "plan": {"phases": phases}}, {"name": "B", "plan": {"phases": phases}},
                        {"name": "control", "plan": {"phases": [{"name": "control"}]}}],
              "compare": [["A/replay", "B/replay"]]}
    return steps, frozen


def build(tmp_path: Path, steps: list[dict], frozen: dict, **kw) -> dict:
    return build_result(tmp_path, frozen, steps, started="2026-12-01T07:00:00Z", ended="2026-12-01T07:00:05Z",
                        aborted=kw.pop("aborted", None), identity=None, **kw)


def test_a_phase_cut_short_is_flagged_skipped_and_refused(tmp_path):
    steps, frozen = cut_window(tmp_path)
    r = build(tmp_path, steps, frozen)
    cells = {(c["step"], c["metric"]): c for c in r["cells"]}
    why = f"partial: 9 of 52 positions sent ({DEADLINE})"
    # every cell of the cut phase is aborted with the count, never "measured"; its values stay visible
    assert [(m, c["status"], c["value"], c["reason"]) for (s, m), c in cells.items()
            if s == "B" and m.startswith("replay.")] == [
        ("replay.requests_ok", "aborted", 9, why), ("replay.ttft_p50_ms", "aborted", 0.822, why),
        ("replay.e2e_p50_ms", "aborted", 25.871, why), ("replay.cached_tokens", "aborted", 9000, why),
        ("replay.hit_tokens", "aborted", None, why), ("replay.host_fetched_tokens", "aborted", None, why),
            ("replay.host_lookups", "aborted", None, why), ("replay.host_hits", "aborted", None, why),
            ("replay.host_reused_tokens", "aborted", None, why)]
    # the complete phase before it is measured
    assert cells[("B", "prime.requests_ok")]["status"] == "measured"
    # the finding does not rest on B/replay: it names it as cut short
    (f,) = r["findings"]
    assert f["rule"] == "restore_pattern_incomplete"
    assert [e["cell"] for e in f["evidence"]] == ["A/replay"] and f["evidence"][0]["value"] == 520.0
    assert f["skipped"] == [{"cell": "B/replay", "reason": "partial: 9 of 52 positions sent", "order": "forward",
                             "comparable": True}]
    assert f["summary"] == (
        "no decision on churn: a forward replay was not measured in full. host tier restores "
        "(host_fetched_tokens, repeats only): forward none measured; reverse A/replay 520; control none measured; "
        "prime phases not counted as evidence: A/prime, B/prime; cut short, not counted as evidence: B/replay "
        "(partial: 9 of 52 positions sent)")
    # the compare table refuses the cut side instead of setting 52 requests against 9
    assert r["compare"] == [{"a": "A/replay", "b": "B/replay",
                             "note": "not compared: B/replay is partial: 9 of 52 positions sent"}]
    md = render_markdown(r, "w")
    assert "| not compared: B/replay is partial: 9 of 52 positions sent |" in md
    assert f"| B | replay.requests_ok | aborted | 9 | {why} |" in md


def test_status_counts_steps_and_keeps_the_window_abort_apart(tmp_path):
    steps, frozen = cut_window(tmp_path)
    r = build(tmp_path, steps, frozen)
    assert (r["status"], r["aborted"]) == ("incomplete", None)
    assert r["step_counts"] == {"measured": 4, "failed": 0, "deferred": 3, "aborted": 1}
    assert status_line(r) == "incomplete: 1 step aborted, 3 steps deferred"
    md = render_markdown(r, "w")
    assert "- status: incomplete: 1 step aborted, 3 steps deferred\n- window aborted: no\n" in md
    assert "Status: <b>incomplete: 1 step aborted, 3 steps deferred</b><br>Window aborted: no" in render_html(r, "w")
    # every step measured but the window aborted (an interrupt during the restore): still incomplete
    done = [{**s, "status": "measured", "reason": None} for s in steps]
    r2 = build(tmp_path, done, frozen, aborted={"reason": "interrupt", "message": "operator interrupt (signal)"})
    assert r2["status"] == "incomplete" and status_line(r2) == "incomplete: the window was aborted"
    r3 = build(tmp_path, done, frozen)
    assert r3["status"] == "complete" and status_line(r3) == "complete"
    # a result.json written before step_counts existed is counted from its steps
    old = {k: v for k, v in r.items() if k not in ("status", "step_counts")}
    assert status_line(old) == "incomplete: 1 step aborted, 3 steps deferred"


def test_latencies_in_model_ms_with_the_scale_stated(tmp_path):
    steps, frozen = cut_window(tmp_path)
    r = build(tmp_path, steps, frozen)
    assert r["time"] == {"sim_time_scale": {"A": 0.01, "B": 0.01}, "latency": (
        "model ms at simulator time scale 0.01 (measured / 0.01; the client's own overhead is divided too): "
        "steps A, B")}
    c = next(c for c in r["cells"] if (c["step"], c["metric"]) == ("A", "replay.ttft_p50_ms"))
    assert (c["value"], c["model_ms"]) == (0.822, 82.2)  # value as measured, model ms beside it
    md = render_markdown(r, "w")
    assert ("- latencies: model ms at simulator time scale 0.01 (measured / 0.01; the client's own overhead is "
            "divided too): steps A, B\n") in md
    assert "| A | replay.ttft_p50 (model ms) | measured | 82.2 | — |" in md
    assert "| A | replay.e2e_p50 (model ms) | measured | 2,587.1 | — |" in md
    assert "replay.ttft_p50_ms" not in md and "prime.ttft_p50_ms" not in md  # only cells with no value keep _ms
    assert "Latencies: model ms at simulator time scale 0.01" in render_html(r, "w")


def test_compare_rows_in_model_ms_with_the_counters_own_names(tmp_path):
    write_step(tmp_path, "A", [{"name": "prime", "order": "forward", "bodies": ["b1", "b2"]},
                               {"name": "replay", "order": "reverse", "bodies": ["b2", "b1"], "fetched": 10.0}])
    write_step(tmp_path, "B", [{"name": "prime", "order": "forward", "bodies": ["b1", "b2"]},
                               {"name": "replay", "order": "forward", "bodies": ["b1", "b2"]}])
    phases = {"plan": {"phases": [{"name": "prime"}, {"name": "replay"}]}}
    frozen = {"experiment_sha256": "0" * 64, "steps": [{"name": "A", **phases}, {"name": "B", **phases}],
              "compare": [["A/replay", "B/replay"]]}
    r = build(tmp_path, [run_step("A", "A0"), run_step("B", "B0")], frozen)
    (t,) = r["compare"]
    rows = {row["metric"]: row for row in t["rows"]}
    assert t["sim_time_scale"] == 0.01
    assert rows["ttft_p50_ms"] == {"metric": "ttft_p50_ms", "a": 0.822, "b": 0.822, "ratio": 1.0,
                                   "a_model_ms": 82.2, "b_model_ms": 82.2}
    assert rows["host_fetched_tokens"] == {"metric": "host_fetched_tokens", "a": 20.0, "b": 0.0, "ratio": 0.0}
    assert rows["hit_tokens"]["a"] == 100.0 and "host_restored_tokens" not in rows and "device_hit_tokens" not in rows
    md = render_markdown(r, "w")
    assert "| ttft_p50 (model ms) | 82.2 | 82.2 | 1 |" in md
    assert "| cached_tokens | 2,000 | 2,000 | 1 |" in md  # thousands separators on integers too
    # prime phases: no evidence by design, shown absent (not "measured" with no value)
    prime = next(c for c in r["cells"] if (c["step"], c["metric"]) == ("A", "prime.host_fetched_tokens"))
    assert prime == {"step": "A", "metric": "prime.host_fetched_tokens", "status": "absent", "value": None,
                     "reason": "not evidence: a prime (first sends only) restores nothing"}


def test_compare_refuses_a_side_not_run_or_at_another_time_scale(tmp_path):
    write_step(tmp_path, "A", [{"name": "replay", "order": "forward", "bodies": ["b1", "b2"]}])
    write_step(tmp_path, "B", [{"name": "replay", "order": "forward", "bodies": [], "planned": 52}])
    write_step(tmp_path, "C", [{"name": "replay", "order": "forward", "bodies": ["b1", "b2"]}], scale=0.02)
    frozen = {"experiment_sha256": "0" * 64, "steps": [{"name": "B", "plan": {"phases": [{"name": "replay"}]}}],
              "compare": [["A/replay", "B/replay"], ["A/replay", "C/replay"]]}
    steps = [run_step("A", "A0"), run_step("B", "B0", "aborted", DEADLINE), run_step("C", "C0")]
    r = build(tmp_path, steps, frozen)
    assert [t["note"] for t in r["compare"]] == [
        "not compared: B/replay was not run: 0 of 52 positions sent",
        "not compared: A/replay ran at simulator time scale 0.01, C/replay at 0.02"]
    # a phase that sent nothing is deferred, with no value, on every cell
    assert [(c["metric"], c["status"], c["value"]) for c in r["cells"] if c["step"] == "B"] == [
        ("replay.requests_ok", "deferred", None), ("replay.ttft_p50_ms", "deferred", None),
        ("replay.e2e_p50_ms", "deferred", None), ("replay.cached_tokens", "deferred", None),
        ("replay.hit_tokens", "deferred", None), ("replay.host_fetched_tokens", "deferred", None),
        ("replay.host_lookups", "deferred", None), ("replay.host_hits", "deferred", None),
        ("replay.host_reused_tokens", "deferred", None)]
    assert r["time"]["latency"] == (
        "model ms at simulator time scale 0.01 (measured / 0.01; the client's own overhead is divided too): "
        "steps A, B; model ms at simulator time scale 0.02 (measured / 0.02; the client's own overhead is "
        "divided too): step C")


def test_partial_and_not_run_words():
    assert partial_reason({"planned": 52, "not_sent": 43}) == "partial: 9 of 52 positions sent"
    assert partial_reason({"planned": 52, "not_sent": 0}) is None
    assert partial_reason({"planned": 52, "not_sent": 52, "deferred": True}) is None
    assert partial_reason({"planned": 52, "not_sent": 52, "check_failed": "drain"}) is None
    assert not_run({"planned": 52, "not_sent": 52, "deferred": True}) == "not run: 0 of 52 positions sent"
    assert not_run({"planned": 52, "not_sent": 43}) is None


def test_time_scale_of_a_step_and_the_words():
    frozen = {"server": {"target": "sim", "sim": {"time_scale": 0.01}},
              "steps": [{"name": "I0", "sim": {"time_scale": 0.05}}, {"name": "I1", "sim": {}}]}
    # plan.json's run.sim_time_scale wins; 1 and 0 convert nothing
    assert scale_of_step({"run": {"sim_time_scale": 0.02}}, {}, frozen, "I0") == 0.02
    assert scale_of_step({"run": {"sim_time_scale": 1.0}}, {}, frozen, "I0") is None
    assert scale_of_step({"run": {"sim_time_scale": 0}}, {}, frozen, "I0") is None
    # a step directory written before the key: the incarnation's overlay, else [server.sim]
    assert scale_of_step({"run": {}}, {}, frozen, "I0") == 0.05
    assert scale_of_step({"run": {}}, {}, frozen, "I1") == 0.01
    assert scale_of_step({"run": {}}, {}, frozen, None) == 0.01
    assert scale_of_step({"run": {}}, {}, {"server": {"target": "http://127.0.0.1:8000"}}, None) is None
    assert model_ms(0.822, 0.01) == 82.2 and model_ms(None, 0.01) is None and model_ms(0.8, None) is None
    assert latency_line({"A": None}, False) == "ms as measured (no simulator time scale)"
    assert latency_line({"A": None}, True) == "ms as measured (simulator at time scale 1 or 0: no conversion)"
    assert latency_line({"A": 0.01, "B": None}, True) == (
        "model ms at simulator time scale 0.01 (measured / 0.01; the client's own overhead is divided too): "
        "step A; ms as measured: step B")


def test_views_carry_the_step_scale(tmp_path):
    write_step(tmp_path, "A", [{"name": "p", "order": "forward", "bodies": ["b1"]}], scale=0.05)
    (v,) = load_views(tmp_path, [run_step("A", "A0")])
    assert v.scale == 0.05


def test_left_running_line_in_the_report(tmp_path):
    steps, frozen = cut_window(tmp_path)
    lr = {"url": "http://127.0.0.1:41234", "port": 41234, "pid": 5150, "pid_source": "owner of the listening socket",
          "by": "the incumbent server restored by step restore", "note": None}
    r = build(tmp_path, steps, frozen, left_running=lr)
    assert r["left_running"] == lr
    line = ("left running: the incumbent server restored by step restore at http://127.0.0.1:41234 (port 41234, "
            "pid 5150 (owner of the listening socket)); kvreplay does not stop it; stop it with: kill 5150")
    assert left_line(lr) == line
    assert f"- {line}\n" in render_markdown(r, "w")
    assert f"<b>{line}</b>" in render_html(r, "w")
    assert left_line(None) is None and "left running" not in render_markdown(build(tmp_path, steps, frozen), "w")
    assert left_line({**lr, "pid": None, "pid_source": None}) == (
        "left running: the incumbent server restored by step restore at http://127.0.0.1:41234 (port 41234, "
        "pid unknown); kvreplay does not stop it")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/net/tcp is Linux's")
def test_listening_pid_and_left_running_find_this_process(tmp_path):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        assert listening_pid(port) == os.getpid()
        ctl = ServerControl(ServerSpec(target="http://127.0.0.1:{port}"), tmp_path, {})
        ctl.port, ctl.url = port, f"http://127.0.0.1:{port}"
        assert ctl.left_running("a server this window started (no restore step)") == {
            "url": f"http://127.0.0.1:{port}", "port": port, "pid": os.getpid(),
            "pid_source": "owner of the listening socket", "by": "a server this window started (no restore step)",
            "note": None}
    # nothing listens any more: nothing is reported
    assert listening_pid(port) is None
    assert ctl.left_running("x") is None
    # the embedded simulator is stopped by the window itself
    assert ServerControl(ServerSpec(target="sim"), tmp_path, {}).left_running("x") is None


def test_probe_fit_in_model_time():
    from kvreplay.experiments.timescale import model_fit, probe_scale

    cells = [{"step": "P", "metric": "prefill_fit.a_s", "status": "measured", "value": 0.0304, "reason": None},
             {"step": "P", "metric": "prefill_fit.rate_tokens_per_s", "status": "measured", "value": 68500.0,
              "reason": None},
             {"step": "P", "metric": "prefill_fit.r2", "status": "measured", "value": 0.9999, "reason": None}]
    assert probe_scale({"sim_time_scale": 0.02}) == 0.02 and probe_scale({"sim_time_scale": 0.0}) is None
    got = model_fit([dict(c) for c in cells], 0.02)
    assert got[0]["model_s"] == 1.52 and got[1]["model_tokens_per_s"] == 1370.0  # 0.0304 / 0.02, 68500 x 0.02
    assert "model_s" not in got[2] and "model_tokens_per_s" not in got[2]
    assert model_fit([dict(c) for c in cells], None) == cells
