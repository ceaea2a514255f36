"""Issue 27: a window whose server dies mid-step says so (item 1) and publishes no cell as
measured without records behind it (item 2).

The simulator's ``die`` fault on request 3 (``sim.faults``): requests 1-2 of step A's
prime are answered; request 3's connection is dropped and every later connection is
refused, so sends 3, 4 and 5 fail in transport and (``max_transport_failures`` = 3) the
runner stops: 5 of the step's 10 planned requests sent, 2 reached the server. The
step is ``failed`` with a reason starting ``transport``; B is deferred ("window aborted:
transport"); the restore runs (a fresh simulator).
"""

from __future__ import annotations

import json
from pathlib import Path

from kvreplay.cli import main

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD = ROOT / "fixtures" / "workloads" / "mtbench-52"


def _file(tmp_path: Path, extra: str = "") -> Path:
    p = tmp_path / "w.toml"
    p.write_text(f"""
workload = "{WORKLOAD}"
[server]
target = "sim"
backend = "vllm"
[server.sim]
cache = "radix"
device_blocks = 215
host_rows = 52
time_scale = 0.0
{extra}
[[step]]
name = "A0"
kind = "incarnation"
fresh = true
sim = {{faults = ["die@3"]}}
[[step]]
name = "A"
kind = "run"
phases = ["prime:forward:c1:first6", "replay:reverse:c1:first4"]
[[step]]
name = "B"
kind = "run"
phases = ["again:forward:c1:first2"]
[[step]]
name = "restore"
kind = "restore"
""")
    return p


def _result(out: Path) -> dict:
    return json.loads((out / "result.json").read_text())


def test_server_killed_mid_step_fails_the_step_with_transport(tmp_path):
    out = tmp_path / "x"
    assert main(["experiment", str(_file(tmp_path)), "--out", str(out), "--quiet"]) == 3
    r = _result(out)
    st = {s["name"]: s for s in r["steps"]}
    assert r["aborted"]["reason"] == "transport"
    assert st["A"]["status"] == "failed"
    assert st["A"]["reason"].startswith("transport: 3 consecutive sends did not reach the server")
    assert "5 of 10 planned requests sent, 2 reached the server" in st["A"]["reason"]
    assert (st["B"]["status"], st["B"]["reason"]) == ("deferred", "window aborted: transport")
    assert st["restore"]["status"] == "measured"
    summary = json.loads((out / "steps" / "01-A" / "summary.json").read_text())
    prime, replay = summary["phases"]
    assert (prime["ok"], prime["failed_transport"], prime["not_sent"]) == (2, 3, 1)
    assert (replay["sent"], replay["not_sent"], replay["deferred"]) == (0, 4, True)
    cells = [c for c in r["cells"] if c["step"] == "A"]
    # nothing of the replay was sent: none of its cells is measured
    replay_cells = [c for c in cells if c["metric"].startswith("replay.")]
    assert [c["metric"] for c in replay_cells] == [f"replay.{m}" for m in (
        "requests_ok", "ttft_p50_ms", "e2e_p50_ms", "cached_tokens", "hit_tokens", "host_fetched_tokens",
        "host_lookups", "host_hits", "host_reused_tokens")]
    assert {c["status"] for c in replay_cells} == {"deferred"}
    assert {c["reason"] for c in replay_cells} == {st["A"]["reason"]}
    # the prime was cut short: partial, never measured
    assert {c["status"] for c in cells if c["metric"].startswith("prime.")} == {"aborted"}
    for c in r["cells"]:
        if c["status"] == "failed":
            assert c["reason"], c


def test_max_transport_failures_per_step_overrides_the_window(tmp_path):
    # the window says never (0); the step says 4: sends 3-6 fail, then the abort
    f = _file(tmp_path, "[window]\nmax_transport_failures = 0")
    f.write_text(f.read_text().replace('kind = "run"\nphases = ["prime',
                                       'kind = "run"\nmax_transport_failures = 4\nphases = ["prime', 1))
    out = tmp_path / "x"
    assert main(["experiment", str(f), "--out", str(out), "--quiet"]) == 3
    st = {s["name"]: s for s in _result(out)["steps"]}
    assert st["A"]["reason"].startswith("transport: 4 consecutive")
    assert "6 of 10 planned requests sent" in st["A"]["reason"]


def test_report_on_a_finished_window_renders_it_as_published(tmp_path):
    out = tmp_path / "x"
    assert main(["experiment", str(_file(tmp_path)), "--out", str(out), "--quiet"]) == 3
    before = _result(out)
    (out / "report.md").unlink()
    assert main(["report", str(out)]) == 0
    assert _result(out) == before
    assert "transport: 3 consecutive sends did not reach the server" in (out / "report.md").read_text()
    # the progress on disk lists every step once, each with its final status
    progress = json.loads((out / "progress.json").read_text())
    assert {n: s["status"] for n, s in progress["steps"].items()} == {
        "A0": "measured", "A": "failed", "B": "deferred", "restore": "measured"}
