"""Issue 27 item 7: a run's counters.jsonl names its drain and closing reads (``at``)."""

from __future__ import annotations

import json
from pathlib import Path

from kvreplay.cli import main
from kvreplay.rundir import read_counter_log

ROOT = Path(__file__).resolve().parents[2]
MTBENCH = ROOT / "fixtures" / "workloads" / "mtbench-52"


def test_a_run_names_drain_and_phase_end_reads(tmp_path):
    out = tmp_path / "r"
    assert main(["run", str(MTBENCH), "--target", "sim", "--sim-time-scale", "0", "--sim-output-tokens", "4",
                 "--out", str(out), "--quiet", "--report", "none", "--phase", "a:forward:c1:first3",
                 "--phase", "b:forward:c1:first2:drain"]) == 0
    ats = [ln["at"] for ln in read_counter_log(out / "counters.jsonl")]
    n_drain = ats.count("drain")
    assert n_drain >= 2  # two reads at least: drained means two agreeing reads
    assert ats == ["before", 0, 1, 2, "phase_end", *["drain"] * n_drain, "before", 0, 1, "phase_end"]
    recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    assert len(recs) == 5
