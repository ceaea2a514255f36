"""Probe steps of ``kvreplay experiment`` against the simulator.

Expected values come from the simulator's configured model (as in
``test_probe_sim.py``), not from the probe's code:

- entries model, N snapshots, strict LRU, ``s`` snapshots stored per missed
  request: the probed prefix is evicted once ``s * (k + 1) > N``, so the
  smallest flushing k is ``floor(N / s)`` (N=8, s=2 -> 4; N=10, s=1 -> 10;
  N=6, s=2 -> 3).
- the halogen adapter reports the stored entry's bytes: bytes per token is the
  configured ``bytes_per_token``.
- prefill is ``a + uncached / rate`` model seconds slept times ``time_scale``:
  the wall-clock fit gives ``a * time_scale`` and ``rate / time_scale``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import aiohttp  # noqa: F401 - the simulator's client stack must import
import pytest

from kvreplay.cli import main
from kvreplay.sim import SimConfig

FLUSH = """sizes = "512,1024"
flush_prefix = 1024
foreign_tokens = 128
flush_max = 16
flush_repeats = 2
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "probe.toml"
    p.write_text(text)
    return p


def result(out: Path) -> dict:
    return json.loads((out / "result.json").read_text())


def cells_of(r: dict, step: str) -> dict[str, dict]:
    return {c["metric"]: c for c in r["cells"] if c["step"] == step}


@pytest.mark.timeout(120)
def test_probe_steps_measure_each_incarnation(tmp_path):
    text = f"""
[server]
target = "sim"
[server.sim]
cache_entries = 8
snapshots = 2
time_scale = 0
bytes_per_token = 4096

[[step]]
name = "X0"
kind = "incarnation"
fresh = true

[[step]]
name = "PX"
kind = "probe"
backend = "halogen"
{FLUSH}
[[step]]
name = "Y0"
kind = "incarnation"
fresh = true
sim = {{cache_entries = 10, snapshots = 1, bytes_per_token = 1000}}

[[step]]
name = "PY"
kind = "probe"
backend = "halogen"
label = "one snapshot per request"
{FLUSH}
[[step]]
name = "restore"
kind = "restore"
"""
    out = tmp_path / "e"
    assert main(["experiment", str(write(tmp_path, text)), "--out", str(out), "--quiet"]) == 0
    r = result(out)
    assert [(s["name"], s["kind"], s["status"], s["run_dir"]) for s in r["steps"]] == [
        ("X0", "incarnation", "measured", None), ("PX", "probe", "measured", "steps/01-PX"),
        ("Y0", "incarnation", "measured", None), ("PY", "probe", "measured", "steps/03-PY"),
        ("restore", "restore", "measured", None)]
    px, py = cells_of(r, "PX"), cells_of(r, "PY")
    # floor(N / s): the probe runs against the incarnation in force, not the first one.
    assert px["min_flush_k"] == {"step": "PX", "metric": "min_flush_k", "status": "measured", "value": 4,
                                 "reason": None}
    assert py["min_flush_k"]["value"] == 10 and py["min_flush_k"]["status"] == "measured"
    assert px["bytes_per_token"]["value"] == 4096.0
    assert py["bytes_per_token"]["value"] == 1000.0
    # each step is an ordinary probe output directory
    for d, k in (("01-PX", 4), ("03-PY", 10)):
        v = json.loads((out / "steps" / d / "verdict.json").read_text())
        assert v["format"] == "kvreplay-probe/1" and v["min_flush_k"] == k and v["flush_bracket"] == [k - 1, k]
        assert v["target"] == "sim" and v["sim_time_scale"] == 0.0 and v["backend"] == "halogen"
        assert v["legs_failed"] == []
        recs = (out / "steps" / d / "requests.jsonl").read_text().splitlines()
        assert len(recs) == v["requests"]
        assert f"about {k} foreign requests evict a 1k prefix" in (out / "steps" / d / "report.md").read_text()
        assert cells_of(r, d[3:])["cmax_tokens"]["value"] == v["cmax_tokens"]
    # time_scale 0: the fitted slope is only the client's own noise, and its sign is chance. The
    # cell follows the verdict: a rate the verdict has is measured with that value; a slope that
    # is not positive leaves the verdict without a rate, and the cell says so instead of inventing one.
    for cells, d in ((px, "01-PX"), (py, "03-PY")):
        v = json.loads((out / "steps" / d / "verdict.json").read_text())
        rate = (v.get("prefill_fit") or {}).get("rate_tokens_per_s")
        cell = cells["prefill_fit.rate_tokens_per_s"]
        if rate is None:
            assert cell["status"] == "failed" and "slope is not positive" in cell["reason"]
        else:
            assert cell["status"] == "measured" and cell["value"] == rate
    assert [c for c in r["cells"] if c["step"] == "PY"][0]["metric"] == "prefill_fit.a_s"
    # frozen before the first request, as the other steps
    doc = json.loads((out / "experiment.json").read_text())
    frozen = {s["name"]: s for s in doc["steps"]}
    assert frozen["PX"]["probe"] == {
        "sizes": [512, 1024], "cold_repeats": 1, "flush_prefix_tokens": 1024, "foreign_tokens": 128,
        "flush_max": 16, "flush_repeats": 2, "fit_on": "ttft", "model": None, "nonce": None,
        "backend": "halogen", "read_timeout_s": 600.0, "drain_timeout_s": 10.0}
    assert frozen["PY"]["dir"] == "steps/03-PY" and frozen["PY"]["label"] == "one snapshot per request"
    assert doc["workload"] is None  # a probe needs no workload
    md = (out / "report.md").read_text()
    assert "| PX | min_flush_k | measured | 4 |" in md


@pytest.mark.timeout(120)
def test_probe_step_fit_matches_the_configured_prefill_cost(tmp_path):
    scale = 0.2
    text = f"""
[server]
target = "sim"
sim = {{cache_entries = 8, time_scale = {scale}}}
[[step]]
name = "I"
kind = "incarnation"
[[step]]
name = "fit"
kind = "probe"
sizes = "1k,2k,4k,8k"
flush_max = 0
fit_on = "stream"
"""
    out = tmp_path / "fit"
    assert main(["experiment", str(write(tmp_path, text)), "--out", str(out), "--quiet"]) == 0
    c = cells_of(result(out), "fit")
    base = SimConfig()
    assert c["prefill_fit.a_s"]["value"] == pytest.approx(base.prefill_base_s * scale, rel=0.05)
    assert c["prefill_fit.rate_tokens_per_s"]["value"] == pytest.approx(base.prefill_tokens_per_s / scale,
                                                                        rel=0.05)
    assert c["prefill_fit.r2"]["value"] > 0.999
    assert "min_flush_k" not in c  # flush_max = 0: no eviction legs were planned
    v = json.loads((out / "steps" / "01-fit" / "verdict.json").read_text())
    assert v["prefill_fit"]["source"] == "stream" and v["sim_time_scale"] == scale
    # the fit in model time beside the scaled value, and the report shows model time with the scale
    a, rate = c["prefill_fit.a_s"], c["prefill_fit.rate_tokens_per_s"]
    assert a["model_s"] == round(a["value"] / scale, 4)
    assert rate["model_tokens_per_s"] == round(rate["value"] * scale, 3)
    r = result(out)
    assert r["time"]["sim_time_scale"] == {"fit": scale}
    md = (out / "report.md").read_text()
    assert "- latencies: model ms at simulator time scale 0.2 (measured / 0.2;" in md
    assert "| fit | prefill_fit.a (model s) | measured |" in md
    assert "| fit | prefill_fit.rate (tokens per model s) | measured |" in md


@pytest.fixture
def sim6(tmp_path):
    """serve-sim with 6 entries (s = 2 -> k = 3) and 2,048 bytes per token, on a free port."""
    from kvreplay.experiments.lifecycle import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "kvreplay", "serve-sim", "--port", str(port), "--time-scale", "0",
                             "--cache-entries", "6", "--bytes-per-token", "2048"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    assert "listening" in line, line
    yield f"http://127.0.0.1:{port}"
    proc.terminate()
    proc.wait(timeout=10)
    proc.stdout.close()


@pytest.mark.timeout(120)
def test_probe_step_against_a_url_target_matches_the_servers_events(tmp_path, sim6):
    import urllib.request

    text = f"""
[server]
target = "{sim6}"
backend = "halogen"
identity = {{models = "kvreplay-sim"}}
restore = "true"
[[step]]
name = "P"
kind = "probe"
{FLUSH}
[[step]]
name = "restore"
kind = "restore"
"""
    out = tmp_path / "url"
    assert main(["experiment", str(write(tmp_path, text)), "--out", str(out), "--quiet"]) == 0
    c = cells_of(result(out), "P")
    assert c["min_flush_k"]["value"] == 3 and c["bytes_per_token"]["value"] == 2048.0
    with urllib.request.urlopen(f"{sim6}/events?limit=100000") as resp:  # noqa: S310 - loopback
        events = [e for e in json.loads(resp.read())["events"] if e["kind"] == "request"]
    v = json.loads((out / "steps" / "00-P" / "verdict.json").read_text())
    # every generation request the server saw is one the probe sent, and the largest
    # reuse the server itself recorded is the cmax cell
    assert len(events) == v["requests"]
    assert c["cmax_tokens"]["value"] == max(e["cached_tokens"] for e in events)
    assert v["target"] == sim6 and "sim_time_scale" not in v


def test_dry_run_shows_the_probe_step(tmp_path, capsys):
    text = """
[server]
target = "sim"
[[step]]
name = "I"
kind = "incarnation"
[[step]]
name = "probe-1"
kind = "probe"
sizes = ["8k", 16384]
cold_repeats = 3
flush_prefix = "4k"
flush_max = 24
fit_on = "server"
"""
    out = tmp_path / "dry"
    assert main(["experiment", str(write(tmp_path, text)), "--out", str(out), "--dry-run"]) == 0
    printed = capsys.readouterr().out
    assert ("  01 probe-1        probe        sizes 8192,16384 x3 fit_on server, flush k<=24 x2 "
            "(4096-token prefix, 1024-token foreign)") in printed
    assert not out.exists()  # --dry-run writes nothing
    import kvreplay

    doc = kvreplay.Experiment.from_file(tmp_path / "probe.toml").freeze(tmp_path / "api").doc
    assert doc["steps"][1]["probe"]["sizes"] == [8192, 16384] and doc["steps"][1]["dir"] == "steps/01-probe-1"
    # the same file freezes to the same hash, and the dry-run printed it
    assert f"experiment {doc['experiment_sha256'][:16]}  (2 steps)" in printed
    out2 = tmp_path / "api2"
    assert kvreplay.Experiment.from_file(tmp_path / "probe.toml").freeze(out2).doc["experiment_sha256"] == (
        doc["experiment_sha256"])


@pytest.mark.timeout(120)
def test_probe_step_deferred_after_stop_new_after_and_restore_runs(tmp_path):
    # The first probe runs at time scale 0.2 (four legs, the cold ones >= 0.3 s each) across
    # stop_new_after = 1 s: it sends no leg after it (aborted, not the window) and the second
    # cannot start.
    text = """
[server]
target = "sim"
sim = {time_scale = 0.2}
[window]
stop_new_after = "1s"
[[step]]
name = "I"
kind = "incarnation"
[[step]]
name = "slow"
kind = "probe"
sizes = "1k,2k"
flush_max = 0
[[step]]
name = "late"
kind = "probe"
sizes = "1k,2k"
flush_max = 4
[[step]]
name = "restore"
kind = "restore"
"""
    out = tmp_path / "late"
    assert main(["experiment", str(write(tmp_path, text)), "--out", str(out), "--quiet"]) == 3
    r = result(out)
    st = {s["name"]: s for s in r["steps"]}
    assert [s["status"] for s in r["steps"]] == ["measured", "aborted", "deferred", "measured"]
    assert st["slow"]["reason"] == "deadline: no new probe requests after 1 s"
    assert st["late"]["reason"].startswith("window: no step starts after stop_new_after = 1 s (elapsed ")
    assert not (out / "steps" / "02-late" / "requests.jsonl").exists()
    late = [c for c in r["cells"] if c["step"] == "late"]
    assert [c["metric"] for c in late] == ["prefill_fit.a_s", "prefill_fit.rate_tokens_per_s", "prefill_fit.r2",
                                           "cmax_tokens", "bytes_per_token", "min_flush_k"]
    assert all(c["status"] == "deferred" and c["value"] is None and c["reason"] == st["late"]["reason"]
               for c in late)
    assert r["aborted"] is None


@pytest.mark.timeout(120)
def test_probe_step_cancelled_at_hard_deadline_minus_reserve(tmp_path):
    text = """
[server]
target = "sim"
sim = {time_scale = 0.2}
[window]
hard_deadline = "3s"
restore_reserve = "1.5s"
[[step]]
name = "I"
kind = "incarnation"
[[step]]
name = "long"
kind = "probe"
sizes = "1k,2k,4k,8k,16k"
flush_max = 0
[[step]]
name = "restore"
kind = "restore"
"""
    out = tmp_path / "cut"
    assert main(["experiment", str(write(tmp_path, text)), "--out", str(out), "--quiet"]) == 3
    r = result(out)
    st = {s["name"]: s for s in r["steps"]}
    assert st["long"]["status"] == "aborted"
    assert st["long"]["reason"] == "window: hard_deadline - restore_reserve = 1.5 s reached during the step"
    assert r["aborted"]["reason"] == "hard_deadline"
    assert st["restore"]["status"] == "measured"
    d = out / "steps" / "01-long"
    assert not (d / "verdict.json").exists()
    assert len((d / "requests.jsonl").read_text().splitlines()) >= 1  # legs completed before the cut are kept
    assert {c["status"] for c in r["cells"] if c["step"] == "long"} == {"aborted"}


@pytest.mark.parametrize(("line", "field", "words"), [
    ('flush-max = 8', "step[1].flush-max", "did you mean 'flush_max'"),
    ('fit_on = "wall"', "step[1].fit_on", "must be one of ttft, stream, server"),
    ('sizes = "8k,x"', "step[1].sizes", "bad size"),
    ('flush_repeats = 0', "step[1].flush_repeats", "integer >= 1"),
    ('flush_prefix = ["1k"]', "step[1].flush_prefix", "token count"),
])
def test_bad_probe_keys_name_file_line_and_field(tmp_path, capsys, line, field, words):
    p = write(tmp_path, f'[server]\ntarget = "sim"\n[[step]]\nname = "I"\nkind = "incarnation"\n\n'
                        f'[[step]]\nname = "P"\nkind = "probe"\n{line}\n')
    assert main(["experiment", str(p), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"{p}:7" in err and field in err and words in err


@pytest.mark.timeout(240)
def test_bundled_probe_sizing_example(tmp_path):
    """fixtures/experiments/probe-sizing.toml: floor(N / s) per incarnation, configured bytes, scaled fit."""
    example = Path(__file__).resolve().parents[2] / "fixtures" / "experiments" / "probe-sizing.toml"
    out = tmp_path / "sizing"
    assert main(["experiment", str(example), "--out", str(out), "--quiet"]) == 0
    r = result(out)
    assert [(s["name"], s["status"]) for s in r["steps"]] == [
        ("small", "measured"), ("probe-small", "measured"), ("large", "measured"), ("probe-large", "measured"),
        ("restore", "measured")]
    base, scale = SimConfig(), 0.05
    for step, entries in (("probe-small", 8), ("probe-large", 16)):
        c = cells_of(r, step)
        assert c["min_flush_k"]["value"] == entries // 2  # s = 2 snapshots per missed request
        assert c["bytes_per_token"]["value"] == 4096.0
        # The intercept is the simulated fixed cost plus the client's and the loopback's own per-request
        # cost, which grows when other jobs share the machine (0.084 s for 0.076 s seen under load):
        # exact from below (5%), and at most 15 ms of transport above (the test must not depend on load).
        a_s = c["prefill_fit.a_s"]["value"]
        assert base.prefill_base_s * scale * 0.95 <= a_s <= base.prefill_base_s * scale * 1.05 + 0.015
        assert c["prefill_fit.rate_tokens_per_s"]["value"] == pytest.approx(base.prefill_tokens_per_s / scale,
                                                                            rel=0.05)
        assert all(x["status"] == "measured" for x in c.values())


@pytest.mark.timeout(120)
def test_sigint_during_a_probe_step_aborts_and_restores(tmp_path):
    import os
    import signal
    import time

    example = Path(__file__).resolve().parents[2] / "fixtures" / "experiments" / "probe-sizing.toml"
    out = tmp_path / "int"
    proc = subprocess.Popen([sys.executable, "-m", "kvreplay", "experiment", str(example), "--out", str(out),
                             "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    recs = out / "steps" / "01-probe-small" / "requests.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (recs.exists() and recs.stat().st_size > 0):
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 3, err.decode()
    r = result(out)
    st = {s["name"]: s for s in r["steps"]}
    assert r["aborted"]["reason"] == "interrupt"
    assert (st["probe-small"]["status"], st["probe-small"]["reason"]) == ("aborted", "operator interrupt (signal)")
    assert (st["large"]["status"], st["large"]["reason"]) == ("deferred", "window aborted: interrupt")
    assert (st["probe-large"]["status"], st["probe-large"]["reason"]) == ("deferred", "window aborted: interrupt")
    assert st["restore"]["status"] == "measured"
    assert not (out / "steps" / "01-probe-small" / "verdict.json").exists()
    assert recs.read_text().count("\n") >= 1  # the legs sent before the interrupt are kept
    assert {c["status"] for c in r["cells"] if c["step"] == "probe-small"} == {"aborted"}


@pytest.mark.timeout(120)
def test_probe_step_sends_no_new_leg_after_stop_new_after(tmp_path, capsys):
    # Prefill 4,096 tokens per model second, no fixed cost, time scale 1: the 512-token cold leg
    # takes 0.125 s and its warm leg less, so both end well before stop_new_after = 2 s; the
    # 16k cold leg then runs 4 s, across it. No leg starts after 2 s: the 16k warm leg, the
    # 1k legs and every eviction leg are never sent. Sent: A 512, B 512, A 16k = 3 requests.
    text = """
[server]
target = "sim"
sim = {time_scale = 1, prefill_base_s = 0, prefill_tokens_per_s = 4096, cache_entries = 8}
[window]
stop_new_after = "2s"
[[step]]
name = "I"
kind = "incarnation"
[[step]]
name = "cut"
kind = "probe"
backend = "halogen"
sizes = "512,16k,1k"
flush_max = 16
[[step]]
name = "late"
kind = "probe"
sizes = "1k,2k"
flush_max = 0
[[step]]
name = "restore"
kind = "restore"
"""
    out = tmp_path / "stop"
    assert main(["experiment", str(write(tmp_path, text)), "--out", str(out), "--quiet"]) == 3
    r = result(out)
    st = {s["name"]: s for s in r["steps"]}
    why = "deadline: no new probe requests after 2 s"
    assert [(s["name"], s["status"]) for s in r["steps"]] == [
        ("I", "measured"), ("cut", "aborted"), ("late", "deferred"), ("restore", "measured")]
    assert st["cut"]["reason"] == why
    assert r["aborted"] is None  # a cut at stop_new_after is not the window's abort (as a run step's)
    assert r["step_counts"] == {"measured": 2, "failed": 0, "deferred": 1, "aborted": 1}
    d = out / "steps" / "01-cut"
    recs = [json.loads(x) for x in (d / "requests.jsonl").read_text().splitlines()]
    assert [(x["leg"], x["size_tokens"]) for x in recs] == [("A", 512), ("B", 512), ("A", 16384)]
    v = json.loads((d / "verdict.json").read_text())
    assert v["stopped"] == {"reason": "stop_new_after", "requests": 3, "cold": [2, 3], "warm": [1, 3],
                            "eviction_points": [0, 6]}  # 6 = k 0, 16, 8, 4, 2, 1
    assert v["requests"] == 3 and v["points"] == [] and v["min_flush_k"] is None
    assert st["cut"]["checks"]["stopped"] == v["stopped"]
    assert "**Cut short at stop_new_after** (no new request after it): 3 requests sent; cold legs 2 of 3, " \
           "warm legs 1 of 3, eviction points 0 of up to 6." in (d / "report.md").read_text()
    c = [x for x in r["cells"] if x["step"] == "cut"]
    fit = v["prefill_fit"]
    # two cold sizes answered: a line through two points (r2 1); partial, never measured
    assert fit["r2"] == 1.0
    part_cold = f"partial: 2 of 3 cold legs sent ({why})"
    part_all = f"partial: 3 probe requests sent ({why})"
    assert [(x["metric"], x["status"], x["value"], x["reason"]) for x in c] == [
        ("prefill_fit.a_s", "aborted", fit["a_s"], part_cold),
        ("prefill_fit.rate_tokens_per_s", "aborted", fit["rate_tokens_per_s"], part_cold),
        ("prefill_fit.r2", "aborted", 1.0, part_cold),
        ("cmax_tokens", "aborted", v["cmax_tokens"], part_all),
        ("bytes_per_token", "aborted", v["bytes_per_token"], part_all),
        ("min_flush_k", "deferred", None, f"not run: 0 of up to 6 eviction points measured ({why})"),
    ]
    # the warm 512 leg reused the cold one's prefix: the cut cell still shows what was seen
    assert v["cmax_tokens"] == recs[1]["cached_tokens"] and recs[1]["cached_tokens"] > 0
    # a cut verdict never calibrates the simulator
    assert main(["run", str(Path(__file__).resolve().parents[2] / "fixtures" / "workloads" / "mtbench-52"),
                 "--phase", "c1:forward:c1:first1", "--target", "sim", "--sim-from-verdict",
                 str(d / "verdict.json"), "--out", str(tmp_path / "cal")]) == 2
    assert "the probe was cut short at stop_new_after (verdict 'stopped')" in capsys.readouterr().err
