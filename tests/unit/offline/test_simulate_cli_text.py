"""simulate's text: the prefill model in words, --burst/--every need --interleave,
docs/simulator.md's sizing example from fixtures/workloads/build_sizing.py (new-user item 12)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from kvreplay.cli import main
from kvreplay.offline.sizing import prefill_text

ROOT = Path(__file__).resolve().parents[3]
MTBENCH = ROOT / "fixtures" / "workloads" / "mtbench-52"


def test_prefill_text_exact():
    assert prefill_text({"a_s": 1.6288, "rate_tokens_per_s": 1362.7862400000001, "r2": None, "source": "flag"}) == (
        "a 1.629 s + tokens / 1363 tok/s"
    )
    assert prefill_text({"a_s": 1.52, "rate_tokens_per_s": 1370.0, "r2": 0.99912, "source": "v.json"}) == (
        "a 1.52 s + tokens / 1370 tok/s, from v.json, R^2 0.9991"
    )
    assert prefill_text({"a_s": 0.05, "rate_tokens_per_s": 812.25}) == "a 0.05 s + tokens / 812.2 tok/s"


def test_simulate_prints_the_model_as_text(capsys):
    assert main(["simulate", str(MTBENCH), "--prefill", "a=1.6288,rate=1362.78624"]) == 0
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("prefill with no cache: ")
    assert last.endswith(" s (model a 1.629 s + tokens / 1363 tok/s)")
    assert "{" not in last


@pytest.mark.parametrize("flag", ["burst", "every"])
def test_interleave_flags_without_interleave_exit_2(capsys, flag):
    assert main(["simulate", str(MTBENCH), f"--{flag}", "3"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"kvreplay: error: field '{flag}': --{flag} needs --interleave (it spaces the foreign requests)"
    )


def test_docs_sizing_example_reproduces(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("build_sizing", ROOT / "fixtures" / "workloads" / "build_sizing.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.main(tmp_path)
    args = ["simulate", str(tmp_path / "issues.jsonl"), "--interleave", str(tmp_path / "foreign.jsonl"),
            "--every", "1", "--burst", "9", "--share", "1", "--today", "8", "--prefill", "a=1.52,rate=1370",
            "--bytes-per-token", "2674", "--max-entry-bytes", "116389652"]
    assert main(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == (
        "answer: 20 entries (2.168 GiB) reach 100% of the best tokens hit ratio; a loop then costs 24.3 s of"
        " prefill (no cache: 191.4 s); at today's 8 entries a loop costs 191.4 s (hit ratio 0.0% of requests)."
    )
    assert out[-2] == "prefill with no cache: 191.4 s (model a 1.52 s + tokens / 1370 tok/s)"
    rep_args = [*args, "--json", "--capacities", "19,20"]
    assert main(rep_args) == 0
    rep = json.loads(capsys.readouterr().out)
    # 10 requests, 241,370 prompt tokens: cold = 10 x 1.52 + 241370 / 1370
    assert (rep["requests"], rep["prompt_tokens"]) == (10, 241370)
    assert rep["prefill_s_cold"] == pytest.approx(15.2 + 241370 / 1370, abs=1e-9)
    rows = {r["capacity"]: r["hit_requests"] for r in rep["curve"]}
    assert (rows[19], rows[20]) == (0, 9)  # 2 x (9 + 1) = 20 is the cliff
