"""Bad values are refused before anything is made or sent (issue 30, lesser items).

Exit 2, the flag or the file and line named, no traceback.

``--sim-time-scale nan`` used to be accepted: every request failed, exit 0. Now exit 2,
the flag named, and no run directory left behind.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvreplay.cli import main

WL = Path(__file__).resolve().parents[2] / "fixtures" / "workloads" / "mtbench-52"


@pytest.mark.parametrize(("flag", "value", "why"), [
    ("--sim-time-scale", "nan", "expected a number >= 0, got 'nan'"),
    ("--sim-time-scale", "inf", "expected a number >= 0, got 'inf'"),
    ("--sim-time-scale", "-0.5", "expected a number >= 0, got '-0.5'"),
    ("--sim-itl-s", "nan", "expected a number >= 0 (s), got 'nan'"),
    ("--sim-prefill-rate", "0", "expected a number > 0 (tokens/s), got '0'"),
    ("--sim-prefill-rate", "nan", "expected a number > 0 (tokens/s), got 'nan'"),
])
def test_bad_simulator_numbers_exit_2_naming_the_flag_and_make_no_run_directory(tmp_path, capsys, flag, value, why):
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as ei:  # refused while the flags are parsed (kvreplay.argtypes)
        main(["run", str(WL), "--target", "sim", "--phase", "a:forward:c1:first1", flag, value,
              "--out", str(out), "--quiet"])
    assert ei.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"kvreplay run: error: argument {flag}: {why}"
    assert not out.exists()


@pytest.mark.parametrize(("key", "value", "why"), [
    ("time_scale", "nan", "must be a finite number >= 0, not nan"),
    ("itl_s", "inf", "must be a finite number >= 0, not inf"),
    ("prefill_tokens_per_s", "nan", "must be a finite number > 0, not nan"),
])
def test_bad_simulator_numbers_in_a_settings_file_name_the_file_and_key(tmp_path, capsys, key, value, why):
    cfg = tmp_path / "sim.toml"
    cfg.write_text(f"{key} = {value}\n")  # TOML has nan and inf; the key's line is named too
    out = tmp_path / "run"
    rc = main(["run", str(WL), "--target", "sim", "--phase", "a:forward:c1:first1", "--sim-config", str(cfg),
               "--out", str(out), "--quiet"])
    assert rc == 2 and not out.exists()
    assert capsys.readouterr().err.strip() == f"kvreplay: error: {cfg}:1, field '{key}': {why}"


@pytest.mark.parametrize("content", [None, b"not a certificate\n"])
def test_a_bad_ca_file_is_exit_2_before_the_run_directory_is_made(tmp_path, capsys, content):
    ca = tmp_path / "ca.pem"
    if content is not None:
        ca.write_bytes(content)
    out = tmp_path / "run"
    rc = main(["run", str(WL), "--target", "https://127.0.0.1:9", "--ca-file", str(ca), "--phase",
               "a:forward:c1:first1", "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and not out.exists()
    assert err.startswith(f"kvreplay: error: {ca}, field '--ca-file': cannot load it as PEM certificates: ")
    assert "Traceback" not in err


def test_a_non_ascii_api_key_is_exit_2_naming_the_flag_and_never_the_key(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("KV_TEST_KEY", "cl\u00e9-\u4e2d-abcdefgh")
    out = tmp_path / "run"
    rc = main(["run", str(WL), "--target", "http://127.0.0.1:9", "--api-key-env", "KV_TEST_KEY", "--backend",
               "none", "--phase", "a:forward:c1:first1", "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and not out.exists()
    assert err.strip() == ("kvreplay: error: field '--api-key-env': --api-key-env: non-ASCII character (code 233) "
                           "at offset 2 of the key; it cannot be sent in a request header")


def test_a_plan_file_that_is_not_utf8_names_its_line(tmp_path, capsys):
    plan = tmp_path / "p.toml"
    plan.write_bytes(b'workload = "w"\n# caf\xe9\n[[phase]]\nname = "a"\n')
    rc = main(["run", "--plan", str(plan), "--out", str(tmp_path / "run"), "--quiet"])
    assert rc == 2
    assert capsys.readouterr().err.strip() == (
        f"kvreplay: error: {plan}:2: not UTF-8 (byte 20: b'\\xe9'); TOML files are UTF-8")


@pytest.mark.parametrize("offsets", ["[0, 1e300]", "[0, -5]", "[1e308, 0]"])
def test_an_absurd_trace_arrival_is_exit_2_naming_its_index(tmp_path, capsys, offsets):
    arr = tmp_path / "arr.json"
    arr.write_text(offsets)
    plan = tmp_path / "p.toml"
    plan.write_text(f'workload = "{WL}"\n[[phase]]\nname = "a"\nselect = "first:2"\narrival = "trace:{arr}"\n')
    out = tmp_path / "run"
    rc = main(["run", "--plan", str(plan), "--target", "sim", "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and not out.exists() and "Traceback" not in err
    assert err.startswith(f"kvreplay: error: {arr}, field 'arrival[1]': offset 1 (")


@pytest.mark.parametrize(("flags", "err"), [
    (["--backend", "vlm"], "field '--backend': unknown backend 'vlm'; one of: auto, halogen, llamacpp, openai, "
                           "prometheus, sglang, vllm"),
    (["--backend", "prometheus"], "field '--profile': the prometheus backend needs --profile (a name or a TOML file)"),
    (["--backend", "prometheus", "--profile", "nosuch"],
     "field '--profile': no built-in profile 'nosuch' (have: example-host-tier, llamacpp, sglang, sim, vllm)"),
    (["--profile", "nosuch"],  # auto: detected later, the profile loaded now
     "field '--profile': no built-in profile 'nosuch' (have: example-host-tier, llamacpp, sglang, sim, vllm)"),
])
def test_a_bad_backend_or_profile_is_exit_2_before_the_run_directory_is_made(tmp_path, capsys, flags, err):
    # it used to leave plan.json, an empty records.jsonl and a summary with no phase and aborted null,
    # and the corrected command was then refused: "run directory already holds records.jsonl"
    out = tmp_path / "run"
    rc = main(["run", str(WL), "--target", "sim", "--sim-time-scale", "0", "--phase", "a:forward:c1:first1",
               *flags, "--out", str(out), "--quiet"])
    assert capsys.readouterr().err.strip() == f"kvreplay: error: {err}"
    assert rc == 2 and not out.exists()


def test_ab_refuses_a_bad_profile_before_ab_json_and_the_first_block(tmp_path, capsys):
    out = tmp_path / "ab"
    rc = main(["ab", str(WL), "--target", "sim", "--arm", "off=sim:", "--arm", "on=sim:", "--reps", "1",
               "--phases", "c1", "--select", "first1", "--sim-time-scale", "0", "--profile", "nosuch",
               "--out", str(out), "--quiet"])
    assert capsys.readouterr().err.strip() == ("kvreplay: error: field '--profile': no built-in profile 'nosuch' "
                                               "(have: example-host-tier, llamacpp, sglang, sim, vllm)")
    assert rc == 2 and not out.exists()


@pytest.mark.parametrize("port", ["99999", "-1", "65536"])
def test_serve_sim_refuses_a_port_outside_0_65535_naming_the_flag(capsys, port):
    # 99999 was an OverflowError traceback from bind(), exit 1
    with pytest.raises(SystemExit) as ei:
        main(["serve-sim", "--port", port, "--duration", "0.1"])
    assert ei.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"kvreplay serve-sim: error: argument --port: expected a whole number >= 0 and <= 65535, got '{port}'")


@pytest.mark.parametrize(("argv", "err"), [
    # tracebacks: IndexError / ValueError from the bootstrap, ValueError from call_later(nan)
    (["compare", "runs/x", "--n-boot", "0"],
     "kvreplay compare: error: argument --n-boot: expected a whole number >= 1, got '0'"),
    (["serve-sim", "--duration", "nan"], "kvreplay serve-sim: error: argument --duration: expected a number > 0 (s), "
                                         "got 'nan'"),
    # accepted, then every body refused as "over the limit of -1"
    (["run", str(WL), "--max-body-bytes", "-1"],
     "kvreplay run: error: argument --max-body-bytes: expected a whole number >= 1 (bytes), got '-1'"),
    (["ab", str(WL), "--arm", "a=sim:", "--arm", "b=sim:", "--max-body-bytes", "0"],
     "kvreplay ab: error: argument --max-body-bytes: expected a whole number >= 1 (bytes), got '0'"),
    (["experiment", "x.toml", "--max-body-bytes", "-5"],
     "kvreplay experiment: error: argument --max-body-bytes: expected a whole number >= 1 (bytes), got '-5'"),
    # written into the plan (time_scale = nan), refused only by the run that read it
    (["import", "mooncake", "t.jsonl", "--out", "w", "--time-scale", "nan"],
     "kvreplay import: error: argument --time-scale: expected a number > 0, got 'nan'"),
    # refused as "field '--block-tokens': --block-tokens and --concurrency must be >= 1, ..."
    (["import", "mooncake", "t.jsonl", "--out", "w", "--concurrency", "0"],
     "kvreplay import: error: argument --concurrency: expected a whole number >= 1, got '0'"),
    (["run", str(WL), "--workers", "-3"],  # ran in one process, exit 0
     "kvreplay run: error: argument --workers: expected a whole number >= 1, got '-3'"),
    (["inspect", str(WL), "--max-groups", "-1"],  # listed none and said "... 2 more" of 1 group
     "kvreplay inspect: error: argument --max-groups: expected a whole number >= 0, got '-1'"),
    (["snapshot", "--target", "http://127.0.0.1:9", "--timeout", "nan"],  # "no answer within nan s"
     "kvreplay snapshot: error: argument --timeout: expected a number > 0 (s), got 'nan'"),
])
def test_counts_and_durations_out_of_range_are_refused_by_the_parser(capsys, argv, err):
    with pytest.raises(SystemExit) as ei:
        main(argv)
    assert ei.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == err


def test_probe_refuses_a_bad_backend_before_its_output_directory_is_made(tmp_path, capsys):
    out = tmp_path / "probe"  # it was made, with an empty requests.jsonl, then exit 2
    rc = main(["probe", "--target", "sim", "--sim-time-scale", "0", "--backend", "vlm", "--out", str(out), "--quiet"])
    assert capsys.readouterr().err.strip() == ("kvreplay: error: field '--backend': unknown backend 'vlm'; one of: "
                                               "auto, halogen, llamacpp, openai, prometheus, sglang, vllm")
    assert rc == 2 and not out.exists()


@pytest.mark.parametrize("name", ["verdict.json", "requests.jsonl"])
def test_probe_refuses_a_folder_that_holds_an_earlier_probe(tmp_path, capsys, name):
    # requests.jsonl is appended to: a second probe mixed its legs with the first's under a new verdict.json
    out = tmp_path / "probe"
    out.mkdir()
    (out / name).write_text("earlier\n")
    rc = main(["probe", "--target", "sim", "--sim-time-scale", "0", "--out", str(out), "--quiet"])
    assert capsys.readouterr().err.strip() == (f"kvreplay: error: {out}, field '--out': directory already holds "
                                               f"{name}; choose a new --out")
    assert rc == 2 and sorted(p.name for p in out.iterdir()) == [name]
    assert (out / name).read_text() == "earlier\n"


def test_from_plan_names_a_file_that_is_not_a_plan_before_asking_for_its_workload(tmp_path, capsys):
    # a run's summary.json was refused with "plan names no workload; give it"
    summary = tmp_path / "summary.json"
    summary.write_text('{"schema_version": 1, "phases": []}')
    out = tmp_path / "run"
    rc = main(["run", "--from-plan", str(summary), "--target", "sim", "--out", str(out), "--quiet"])
    assert capsys.readouterr().err.strip() == (f"kvreplay: error: {summary}, field 'format': not a kvreplay-plan/1 "
                                               "file (give a run directory's plan.json)")
    assert rc == 2 and not out.exists()


def test_a_flag_is_never_taken_for_a_longer_one(capsys):
    # `simulate --out DIR` was read as --output-tokens DIR: "expected a whole number >= 0, got 'DIR'"
    try:
        rc = main(["simulate", str(WL), "--out", "dir"])
    except SystemExit as exc:
        rc = exc.code
    assert rc == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == "kvreplay: error: unrecognized arguments: --out dir"


def test_an_unreachable_target_is_one_error_line(tmp_path, capsys):
    # the reason was printed twice: "abort: target_unusable: ..." then "kvreplay: error: cannot use the target: ..."
    import json
    import socket

    with socket.socket() as s:  # a loopback port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "run"
    rc = main(["run", str(WL), "--target", f"http://127.0.0.1:{port}", "--connect-timeout", "2", "--phase",
               "a:forward:c1:first1", "--out", str(out)])
    lines = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(lines) == 1
    assert lines[0].startswith(f"kvreplay: error: cannot use the target: cannot reach http://127.0.0.1:{port} ")
    assert json.loads((out / "summary.json").read_text())["aborted"]["reason"] == "target_unusable"


def test_compare_names_a_sweep_given_beside_a_run(tmp_path, capsys):
    # it said "runs/sweep: neither an ab directory (ab.json) nor a run directory (summary.json)"
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "sweep.json").write_text('{"points": []}')
    run = Path(__file__).resolve().parent / "rundir" / "data" / "run-dbea9ba"
    rc = main(["compare", str(sweep), str(run)])
    assert rc == 2
    assert capsys.readouterr().err.strip() == (f"kvreplay: error: {sweep}, field 'dirs': a sweep directory "
                                               f"(sweep.json) is compared with sweeps only, not with {run}")


def test_a_settings_file_names_the_line_of_a_bad_key(tmp_path, capsys):
    cfg = tmp_path / "sim.toml"
    cfg.write_text('# the simulator\n[sim]\ncache = "entries"\n"cache_entres" = 8\n')
    rc = main(["run", str(WL), "--target", "sim", "--phase", "a:forward:c1:first1", "--sim-config", str(cfg),
               "--out", str(tmp_path / "run"), "--quiet"])
    assert rc == 2
    assert capsys.readouterr().err.strip() == (f"kvreplay: error: {cfg}:4, field 'cache_entres': unknown simulator "
                                               "setting 'cache_entres'")
