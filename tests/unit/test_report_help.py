"""``kvreplay report``'s one-line help says what it does: it said "rebuilds summary.json", but a
summary.json that is there is read, never rewritten; only a missing one (a killed run) is rebuilt."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kvreplay.cli import main

OLD = Path(__file__).resolve().parent / "rundir" / "data" / "run-dbea9ba"


def test_report_keeps_an_existing_summary_and_its_help_says_so(tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(OLD, run)
    before = (run / "summary.json").read_bytes()
    assert main(["report", str(run)]) == 0
    assert (run / "summary.json").read_bytes() == before
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert ("report Write report.md (and report.html with --html) for a run, ab, sweep or experiment directory; "
            "a missing summary.json (a killed run) is rebuilt from records.jsonl.") in text
