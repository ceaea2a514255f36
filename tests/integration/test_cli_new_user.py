"""Findings of a new-user trial: clean errors, flags as `run` spells them, hints that work."""

import json
import subprocess
import sys

from helpers import write_chat_workload

from kvreplay.cli import main
from kvreplay.offline.report import parse_prefill


def test_report_given_a_file_is_a_clean_error(tmp_path, capsys):
    f = tmp_path / "summary.json"
    f.write_text("{}")
    assert main(["report", str(f)]) == 2
    err = capsys.readouterr().err
    assert "not a run directory (a file)" in err and "Traceback" not in err
    assert main(["report", str(tmp_path / "nowhere")]) == 2
    assert "not a run directory (not found)" in capsys.readouterr().err


def test_snapshot_bad_url_unreachable_and_bad_dump_exit_2(tmp_path, capsys):
    assert main(["snapshot", "--target", "notaurl"]) == 2
    assert "is not a URL" in capsys.readouterr().err
    dump = tmp_path / "dump.txt"
    dump.write_text("{not json")
    assert main(["snapshot", "--from-file", str(dump), "--backend", "halogen"]) == 2
    assert str(dump) in capsys.readouterr().err  # names the file, not only "/cache body"


def test_serve_sim_takes_the_flags_as_run_spells_them(capsys):
    assert main(["serve-sim", "--port", "0", "--duration", "0.05", "--sim-time-scale", "0",
                 "--sim-cache", "radix"]) == 0
    assert "listening on http://127.0.0.1:" in capsys.readouterr().out


def test_import_prints_a_simulator_command_that_finds_the_block_reuse(tmp_path):
    trace = tmp_path / "t.jsonl"
    rows = [{"timestamp": i * 10, "input_length": 1100, "output_length": 4, "hash_ids": [7, 8, 100 + i]}
            for i in range(6)]
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    proc = subprocess.run(
        [sys.executable, "-m", "kvreplay", "import", "mooncake", str(trace), "--out", str(tmp_path / "mc.jsonl")],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    [hint] = [ln for ln in proc.stdout.splitlines() if "--target sim" in ln]
    cmd = hint.split(":  ", 1)[1].split() + ["--sim-time-scale", "0", "--quiet", "--out", str(tmp_path / "run")]
    assert cmd[:2] == ["kvreplay", "run"]
    assert main(cmd[1:]) == 0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert sum(p["tokens"]["cached"] for p in summary["phases"]) > 0  # blocks 7 and 8 are shared


def test_a_probe_of_the_simulator_records_its_time_scale_and_simulate_undoes_it(tmp_path):
    v = tmp_path / "verdict.json"
    v.write_text(json.dumps({"prefill_fit": {"a_s": 0.152, "rate_tokens_per_s": 13700.0, "r2": 0.99},
                             "sim_time_scale": 0.1}))
    m = parse_prefill(str(v))
    assert abs(m.a_s - 1.52) < 1e-9 and abs(m.rate_tokens_per_s - 1370.0) < 1e-6
    assert "time scale 0.1 undone" in m.source
    v.write_text(json.dumps({"prefill_fit": {"a_s": 1.5, "rate_tokens_per_s": 1000.0}}))  # a real server
    assert (parse_prefill(str(v)).a_s, parse_prefill(str(v)).rate_tokens_per_s) == (1.5, 1000.0)


def test_probe_verdict_names_the_simulator_time_scale(tmp_path):
    out = tmp_path / "p"
    rc = main(["probe", "--target", "sim", "--sim-time-scale", "0", "--sizes", "512,1024", "--flush-prefix", "1024",
               "--foreign-tokens", "128", "--flush-max", "4", "--flush-repeats", "1", "--out", str(out), "--quiet"])
    assert rc == 0
    assert json.loads((out / "verdict.json").read_text())["sim_time_scale"] == 0
    wl = write_chat_workload(tmp_path / "wl", [("s", "q")])
    assert main(["simulate", str(wl), "--prefill", str(out / "verdict.json")]) == 2  # time scale 0: no timing


def test_a_csv_trace_is_refused_with_the_reason(tmp_path, capsys):
    """Azure's traces are CSV (timestamps and token counts, no prefix ids)."""
    csv = tmp_path / "azure.csv"
    csv.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n")
    for argv in (["simulate", str(csv)], ["import", "mooncake", str(csv), "--out", str(tmp_path / "x.jsonl")]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "looks like a CSV trace" in err and "hash_ids" in err
