"""Ctrl-C between a sweep's points, or where no command handles it: one line, exit 130, outputs kept.

A point's own run stops itself on SIGINT (an aborted point, exit 3); a signal outside it
(while a point's entry or report is drawn) raised KeyboardInterrupt with a traceback, exit 130,
and left no sweep.json, so ``kvreplay report DIR`` refused the folder.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kvreplay.cli as cli
import kvreplay.sweeps.points as points
from kvreplay.cli import main

WL = Path(__file__).resolve().parents[2] / "fixtures" / "workloads" / "mtbench-52"


def test_an_interrupt_between_points_keeps_sweep_json_and_exits_130(tmp_path, capsys, monkeypatch):
    real = points.point_entry
    calls = []

    def entry_then_interrupt(*a, **k):
        calls.append(1)
        if len(calls) == 2:  # point 2 measured, its entry being drawn: Ctrl-C
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(points, "point_entry", entry_then_interrupt)
    out = tmp_path / "sw"
    rc = main(["sweep", str(WL), "--target", "sim", "--sim-time-scale", "0", "--concurrency", "1,2,4",
               "--select", "first1", "--report", "none", "--out", str(out), "--quiet"])
    stopped = "interrupted (SIGINT) at point 2; sweep.json keeps the 1 point(s) measured"
    assert capsys.readouterr().err.strip() == (f"kvreplay: sweep {stopped}; sweep directory: {out} "
                                               f"(kvreplay report {out})")
    assert rc == 130
    doc = json.loads((out / "sweep.json").read_text())
    assert doc["stopped"] == stopped
    assert [(p["concurrency"], p["run_dir"]) for p in doc["points"]] == [(1, "points/01-c1")]
    assert main(["report", str(out)]) == 0


def test_an_interrupt_no_command_handles_is_one_line_and_exit_130(capsys, monkeypatch):
    # e.g. Ctrl-C during an A/B's final bootstrap comparison: it was a KeyboardInterrupt traceback
    def interrupted(argv=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "main", interrupted)
    with pytest.raises(SystemExit) as ei:
        cli.entry()
    assert ei.value.code == 130
    assert capsys.readouterr().err == "\nkvreplay: interrupted (SIGINT); what was written before it is kept\n"
