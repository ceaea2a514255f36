"""Cheap counter reads against the simulator (issue 31 item 3): filtered in-phase reads, whole reads at the boundaries.

The simulator's ``/metrics`` honours ``name[]=`` as prometheus_client does. With
``--backend vllm`` at C1 every per-request read asks only for the vLLM profile's
series, so counters.jsonl's per-request lines change only those; series the
profile does not read (``vllm:generation_tokens_total``, the simulator's own)
move only at the phase's closing read.
"""

from __future__ import annotations

import json
from pathlib import Path

from kvreplay.backends import make_backend
from kvreplay.cli import main
from kvreplay.rundir.counterlog import read_counter_log

ROOT = Path(__file__).resolve().parents[2]
MTBENCH = ROOT / "fixtures" / "workloads" / "mtbench-52"


def test_in_phase_reads_carry_only_the_profiles_series(tmp_path: Path) -> None:
    out = tmp_path / "r"
    rc = main(["run", str(MTBENCH), "--target", "sim", "--backend", "vllm", "--out", str(out), "--quiet",
               "--sim-time-scale", "0", "--sim-output-tokens", "6", "--phase", "a:forward:c1:first5"])
    assert rc == 0
    wanted = make_backend("vllm", "http://127.0.0.1:1", None).wanted_names()
    lines = read_counter_log(out / "counters.jsonl")
    # issue 27 item 7; issue 42 item 8: the series the profile does not read come last, once
    assert [ln["at"] for ln in lines][0] == "before" and [ln["at"] for ln in lines[-2:]] == ["phase_end", "run_end"]
    run_end = lines.pop()
    per_request = [ln for ln in lines if isinstance(ln["at"], int)]
    assert sorted({ln["at"] for ln in per_request}) == [0, 1, 2, 3, 4]
    for ln in per_request:
        assert "removed" not in ln  # a partial read is logged on top of the last whole one
        assert {k.split("{")[0] for k in ln.get("changed") or {}} <= wanted
    for ln in lines[1:]:  # after the first (full) line, only the profile's series, even at the closing read
        assert {k.split("{")[0] for k in ln.get("changed") or {}} <= wanted
    gen = 'vllm:generation_tokens_total{engine="0",model_name="kvreplay-sim"}'
    assert run_end["changed"][gen] - lines[0]["series"][gen] == 5 * 6  # 5 x 6 tokens, at the run's end
    assert not {k.split("{")[0] for k in run_end["changed"]} & wanted
    assert run_end["phase"] == "a" and run_end["t_ns"] == lines[-1]["t_ns"]
    # every series of the opening read is still in the log's state at the end (nothing was "removed")
    assert all("removed" not in ln for ln in lines)
    summary = json.loads((out / "summary.json").read_text())
    reads = summary["phases"][0]["counter_reads"]
    # the opening read is a settled pair (two that agree); a per-request read is one read: the
    # simulator's counters already hold the request's usage and its load gauges read 0
    # (runner.counters.expected_after), so no second read is needed; the closing read agrees
    # with the last per-request read, the first of its pair, so it is one read too
    assert reads["n"] == 2 + 5 + 1
    assert reads["ms_p50"] <= reads["ms_p99"]
    assert reads["bytes_per_read"] > 0
    assert summary["phases"][0]["cross_check"]["agree"] is True
