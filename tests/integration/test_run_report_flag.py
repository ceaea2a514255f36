"""``kvreplay run --report {html,md,none}``: which files a run leaves."""

from __future__ import annotations

import json

import pytest
from helpers import MTBENCH

from kvreplay.cli import main


def files(d):
    return sorted(p.relative_to(d).as_posix() for p in d.rglob("*") if p.is_file())


@pytest.mark.parametrize(
    ("mode", "reports"),
    [("none", []), ("md", ["report.md"]), ("html", ["report.html", "report.md"])],
)
def test_report_flag_decides_the_report_files(tmp_path, mode, reports):
    out = tmp_path / mode
    rc = main([
        "run", str(MTBENCH), "--target", "sim", "--sim-time-scale", "0", "--sim-output-tokens", "2",
        "--phase", "p:forward:c1:first3", "--phase", "q:forward:c2:first4", "--out", str(out),
        "--report", mode, "--quiet",
    ])
    assert rc == 0
    listed = {f"histograms/{f}" for ph in json.loads((out / "summary.json").read_text())["phases"]
              for f in ph["histograms"].values()}
    assert {"histograms/p.ttft.hlog", "histograms/q.e2e.hlog"} <= listed
    # outside histograms/: exactly the run's files (counters.jsonl: the simulator has
    # counters) and the reports asked for
    top = [f for f in files(out) if not f.startswith("histograms/")]
    assert top == sorted(["counters.jsonl", "plan.json", "records.jsonl", "summary.json", *reports])
    hlogs = {f for f in files(out) if f.startswith("histograms/")}
    assert listed <= hlogs and all(f.endswith(".hlog") for f in hlogs)
    assert len((out / "records.jsonl").read_text().splitlines()) == 7
    if mode == "md":
        assert (out / "report.md").read_text().startswith("# kvreplay run report")
