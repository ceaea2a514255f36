"""report.html for real runs.

The runner against the mock server and the simulator, the demo, a probe,
a Ctrl-C'd run and a killed one; the diagnosis rules triggered by simulator runs."""

import asyncio
import json
import signal
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest
from helpers import ROOT, write_chat_workload
from mockserver import MockServer

from kvreplay.cli import main
from kvreplay.plan import build_plan, parse_phase
from kvreplay.report.diagnose import diagnose
from kvreplay.report.write import write_reports
from kvreplay.rundir import load_run
from kvreplay.runner import RunOptions, execute_plan
from kvreplay.workload import load_workload

try:
    from kvreplay.sim import SimConfig, SimServer  # noqa: F401 - presence check

    HAS_SIM = True
except ImportError:  # pragma: no cover - simulator not built yet
    HAS_SIM = False

needs_sim = pytest.mark.skipif(not HAS_SIM, reason="kvreplay.sim server not available")



def cache_rules(rules: list[str]) -> list[str]:
    """The cache-diagnosis rules, without ``client_bound``.

    These runs put the simulator in the client's own process at time scale 0, so
    on a loaded machine the process can honestly be CPU-bound; that finding is
    tested on its own (tests/unit/report/test_diagnose.py) and is not what these
    runs are about.
    """
    return [r for r in rules if r != "client_bound"]

class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.td, self.plots, self.rules = [], {}, []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "td":
            self.td.append(a.get("data-status"))
        elif tag == "figure":
            self.plots[a.get("data-plot")] = a.get("data-status")
        elif tag == "li" and "data-rule" in a:
            self.rules.append(a["data-rule"])


def page(out: Path) -> Page:
    p = Page()
    p.feed((out / "report.html").read_text())
    return p


def distinct_workload(folder: Path, n: int = 6) -> Path:
    """n bodies with their own system blocks: each is its own cache entry."""
    return write_chat_workload(
        folder,
        [(f"System block {i}: " + "alpha beta gamma delta " * 30, f"q{i}?") for i in range(n)],
    )


def test_mock_run_report_has_every_plot_and_labelled_cells(small_workload, tmp_path):
    out = tmp_path / "run"

    async def go():
        srv = MockServer(tokens=5, itl_s=0.001, delay_s=0.005, cached=16)
        await srv.start()
        try:
            wl = load_workload(small_workload)
            plan = build_plan(
                wl, [parse_phase("prime:forward:c1"), parse_phase("replay:reverse:c2")]
            )
            await execute_plan(
                plan, wl, RunOptions(target_url=srv.base_url, out_dir=out, quiet=True)
            )
        finally:
            await srv.stop()

    asyncio.run(go())
    write_reports(out, html=True)
    p = page(out)
    assert p.td and p.td.count(None) == 0
    for key in ("cdf-ttft", "cdf-itl", "cdf-e2e", "ttft-position:prime", "ttft-position:replay"):
        assert p.plots.get(key) == "measured", key


def sim_run(tmp_path: Path, wl: Path, phases: list[str], *extra: str, capsys=None) -> Path:
    out = tmp_path / "run"
    argv = ["run", str(wl), "--target", "sim", "--sim-time-scale", "0.005", "--out", str(out)]
    for ph in phases:
        argv += ["--phase", ph]
    rc = main(argv + list(extra))
    assert rc == 0
    return out


@needs_sim
def test_sim_churn_rule_and_run_prints_report_path(tmp_path, capsys):
    wl = distinct_workload(tmp_path / "wl")
    out = sim_run(
        tmp_path,
        wl,
        ["prime:forward:c1", "fwd:forward:c1", "rev:reverse:c1"],
        "--sim-cache",
        "entries",
        "--sim-cache-entries",
        "4",
    )
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed[-1] == f"report: {out / 'report.html'}"
    p = page(out)
    assert cache_rules(p.rules) == ["churn"] and p.td.count(None) == 0
    run = load_run(out)
    fwd, rev = run.summary["phases"][1:]
    assert fwd["counter_delta"]["hits"] == 0 and rev["counter_delta"]["hits"] > 0
    # per-request counter table at C1 and the churn picture with the counter overlay
    html = (out / "report.html").read_text()
    assert 'data-table="requests:rev"' in html and "Δ hits" in html
    assert p.plots["ttft-position:rev"] == "measured"


@needs_sim
def test_sim_ineligible_snapshots_give_no_restores(tmp_path):
    # Snapshots larger than the per-entry cap are refused: zero hits in both orders.
    wl = distinct_workload(tmp_path / "wl")
    out = sim_run(
        tmp_path,
        wl,
        ["prime:forward:c1", "fwd:forward:c1", "rev:reverse:c1"],
        "--sim-cache",
        "entries",
        "--sim-max-entry-bytes",
        "1",
        "--quiet",
    )
    assert cache_rules([f.rule for f in diagnose(load_run(out).summary, load_run(out).plan)]) == ["no_restores"]
    assert cache_rules(page(out).rules) == ["no_restores"]


@needs_sim
def test_sim_one_order_zero(tmp_path):
    wl = distinct_workload(tmp_path / "wl")
    out = sim_run(
        tmp_path,
        wl,
        ["prime:forward:c1", "again:forward:c1"],
        "--sim-cache",
        "entries",
        "--sim-cache-entries",
        "4",
        "--quiet",
    )
    assert cache_rules(page(out).rules) == ["one_order_zero"]


@needs_sim
@pytest.mark.slow
def test_demo_ends_with_the_report_path(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out)]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == f"report: {out / 'report.html'}"
    p = page(out)
    assert p.td.count(None) == 0 and len(p.td) > 200
    for key in ("cdf-ttft", "cdf-itl", "cdf-e2e", "ttft-position:prime", "ttft-position:replay"):
        assert p.plots[key] == "measured", key


@needs_sim
def test_probe_verdict_renders(tmp_path):
    out = tmp_path / "probe"
    rc = main(
        [
            "probe",
            "--target",
            "sim",
            "--sim-time-scale",
            "0",
            "--sizes",
            "512,1024",
            "--flush-prefix",
            "1k",
            "--foreign-tokens",
            "128",
            "--flush-max",
            "8",
            "--flush-repeats",
            "1",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    assert rc == 0 and (out / "verdict.json").exists()
    probe_md = (out / "report.md").read_text()
    assert main(["report", str(out), "--html"]) == 0
    assert (out / "report.md").read_text() == probe_md  # the probe's own report is kept
    assert main(["report", str(tmp_path / "empty"), "--html"]) == 2  # nothing there to report
    p = page(out)
    assert p.plots["probe-prefill-fit"] == "measured" and p.plots["probe-bisection"] == "measured"
    assert p.td.count(None) == 0 and not cache_rules(p.rules)
    assert (
        "Diagnosis" not in (out / "report.html").read_text()
    )  # no replay phases in a probe directory


@needs_sim
def test_ctrl_c_leaves_report_html(tmp_path):
    wl = distinct_workload(tmp_path / "wl", 8)
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "kvreplay",
        "run",
        str(wl),
        "--target",
        "sim",
        "--sim-time-scale",
        "0.2",
        "--phase",
        "prime:forward:c1",
        "--phase",
        "replay:reverse:c1",
        "--out",
        str(out),
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            rec = out / "records.jsonl"
            if rec.exists() and rec.read_bytes().count(b"\n") >= 2:
                break
            assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, stderr.decode()[-2000:]
    assert stdout.decode().strip().splitlines()[-1] == f"report: {out / 'report.html'}"
    p = page(out)
    assert p.td.count(None) == 0 and "deferred" in p.td and "measured" in p.td
    assert p.plots["ttft-position:replay"] == "deferred"
    assert "interrupt" in (out / "report.md").read_text()


def test_killed_run_report_command_rebuilds(small_workload, tmp_path, capsys):
    out = tmp_path / "run"

    async def go():
        srv = MockServer(tokens=3)
        await srv.start()
        try:
            wl = load_workload(small_workload)
            plan = build_plan(wl, [parse_phase("a:forward:c1")])
            await execute_plan(
                plan, wl, RunOptions(target_url=srv.base_url, out_dir=out, quiet=True)
            )
        finally:
            await srv.stop()

    asyncio.run(go())
    before = json.loads((out / "summary.json").read_text())
    (out / "summary.json").unlink()
    (out / "report.html").unlink(missing_ok=True)
    assert main(["report", str(out), "--html"]) == 0
    assert "rebuilt from records.jsonl" in capsys.readouterr().out
    after = json.loads((out / "summary.json").read_text())
    a, b = after["phases"][0], before["phases"][0]
    assert (a["ok"], a["tokens"], a["ttft_ms"]["n"]) == (b["ok"], b["tokens"], b["ttft_ms"]["n"])
    assert a["ttft_ms"]["p50"] == b["ttft_ms"]["p50"]  # same records, same histogram
    assert page(out).td.count(None) == 0
