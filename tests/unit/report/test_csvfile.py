"""``kvreplay report --csv``: a run's phases as CSV (kvreplay.report.csvfile)."""

import csv
import json

import pytest

from kvreplay.cli import main
from kvreplay.report.csvfile import phase_rows, rows_csv, write_phases_csv

SUMMARY = {"phases": [
    {"name": "prime", "label": "prime", "concurrency": 1, "planned": 4, "sent": 4, "ok": 3,
     "failed": {"http_error": 1}, "wall_s": 2.0, "throughput_rps": 1.5, "output_tokens_per_s": 30.0,
     "ttft_ms": {"p50": 10.0, "p90": 20.0, "p99": 30.0, "mean": 12.0}, "tokens": {"prompt": 400, "cached": 100,
                                                                                    "completion": 60},
     "valid": True},
    {"name": "load", "concurrency": 8, "offered_rps": 4.0, "planned": 2, "sent": 2, "ok": 2, "failed": {},
     "wall_s": 0.5, "throughput_rps": 4.0, "valid": False},
]}


def test_one_row_per_phase_in_run_order():
    rows = list(csv.DictReader(rows_csv(phase_rows(SUMMARY)).splitlines()))
    assert [(r["phase"], r["label"], r["concurrency"], r["offered_rps"], r["failed"], r["throughput_rps"],
             r["ttft_p99_ms"], r["tpot_p50_ms"], r["cached_tokens"], r["valid"]) for r in rows] == [
        ("prime", "prime", "1", "", "1", "1.5", "30.0", "", "100", "True"),
        ("load", "", "8", "4.0", "0", "4.0", "", "", "", "False")]


def test_report_csv_writes_phases_csv_and_needs_a_summary(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps(SUMMARY))
    assert write_phases_csv(tmp_path).read_text().splitlines()[1].startswith("prime,prime,1,,4,4,3,1,2.0,1.5,")
    with pytest.raises(FileNotFoundError):
        write_phases_csv(tmp_path / "nowhere")
    assert main(["report", str(tmp_path / "nowhere"), "--csv"]) == 2
