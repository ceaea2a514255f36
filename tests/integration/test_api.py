"""The Python API (kvreplay.api) against the CLI it carries: same plans, hashes, records, statuses.

The README's run example (the demo's command) and its probe example are run twice,
through ``kvreplay.cli.main`` and through ``kvreplay.replay`` / ``kvreplay.probe``,
at simulator time scale 0 (the simulator's answers do not depend on time), and the
two run directories must agree. The cached/prompt totals are the README's table's
(175848/190516 for the prime, 181879/190516 for the replay).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import kvreplay
from kvreplay.cli import main

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def _readme_command(prefix: str) -> list[str]:
    """The README's first command starting with ``prefix`` (continuation lines joined), as argv."""
    text = README.replace("\\\n", " ")
    for line in text.splitlines():
        if line.strip().startswith(prefix):
            return shlex.split(line.split("#")[0])[1:]  # without "kvreplay"
    raise AssertionError(f"no {prefix!r} in README.md")


def _api_kwargs(argv: list[str]) -> tuple[str, dict]:
    """``run WORKLOAD --target T --phase P ... --sim-X V`` as ``kvreplay.replay`` arguments."""
    assert argv[0] == "run"
    workload, rest = argv[1], argv[2:]
    kw: dict = {"phases": [], "sim": {}}
    it = iter(rest)
    for flag in it:
        value = next(it)
        if flag == "--phase":
            kw["phases"].append(value)
        elif flag.startswith("--sim-"):
            kw["sim"][flag[len("--sim-"):].replace("-", "_")] = float(value)
        else:
            kw[flag[2:].replace("-", "_")] = value
    return workload, kw


def _plan_without_run_details(run_dir: Path) -> dict:
    plan = json.loads((run_dir / "plan.json").read_text())
    plan["run"] = {k: v for k, v in plan["run"].items() if k != "wall_anchor_ns"}
    return plan


@pytest.mark.slow
def test_readme_run_example_through_the_api_and_the_cli_agree(tmp_path):
    argv = _readme_command("kvreplay run fixtures/workloads/mtbench-52")
    assert argv[:2] == ["run", "fixtures/workloads/mtbench-52"]
    argv[1] = str(ROOT / argv[1])
    # time scale 0: the same answers, without the sleeps (last flag wins in argparse)
    cli_dir, api_dir = tmp_path / "cli", tmp_path / "api"
    assert main([*argv, "--sim-time-scale", "0", "--quiet", "--report", "none", "--out", str(cli_dir)]) == 0
    workload, kw = _api_kwargs(argv)
    kw["sim"]["time_scale"] = 0
    r = kvreplay.replay(workload, out=api_dir, **kw)

    assert r.run_dir == api_dir
    cli = kvreplay.RunResult.from_dir(cli_dir)
    assert _plan_without_run_details(cli_dir) == _plan_without_run_details(api_dir)
    assert r.plan_sha256 == cli.plan_sha256 == json.loads((api_dir / "plan.json").read_text())["plan_sha256"]
    assert r.records == cli.records == 104
    assert r.statuses() == cli.statuses() == {"ok": 104}
    assert [p.name for p in r.phases] == ["prime", "replay"]
    prime, replay = r.phase("prime"), r.phase("replay")
    assert (prime.tokens.cached, prime.tokens.prompt) == (175848, 190516)
    assert (replay.tokens.cached, replay.tokens.prompt) == (181879, 190516)
    assert replay.cached_ratio == 181879 / 190516
    assert replay.tokens == cli.phase("replay").tokens and replay.ok == 52 and replay.ttft_ms.n == 52
    assert "| replay |" in r.table()
    with pytest.raises(KeyError, match="phases: prime, replay"):
        r.phase("nope")
    # load_run reads the same directory back (the notebook reader)
    assert kvreplay.load_run(api_dir).summary["plan_sha256"] == r.plan_sha256


def test_readme_probe_example_through_the_api_and_the_cli_agree(tmp_path):
    argv = _readme_command("kvreplay probe --target sim")
    assert argv[:3] == ["probe", "--target", "sim"]
    small = ["--sim-time-scale", "0", "--sim-cache-entries", "8", "--sizes", "1k,2k", "--flush-max", "0",
             "--cold-repeats", "1"]
    assert main([*argv, *small, "--quiet", "--out", str(tmp_path / "cli")]) == 0
    v = kvreplay.probe("sim", sim={"time_scale": 0, "cache_entries": 8}, sizes="1k,2k", flush_max=0,
                       cold_repeats=1, out=tmp_path / "api")
    cli = json.loads((tmp_path / "cli" / "verdict.json").read_text())
    api = json.loads((tmp_path / "api" / "verdict.json").read_text())
    assert v["out"] == str(tmp_path / "api")
    assert [w["size_tokens"] for w in api["warm"]] == [w["size_tokens"] for w in cli["warm"]] == [1024, 2048]
    assert [w["cached_tokens"] for w in api["warm"]] == [w["cached_tokens"] for w in cli["warm"]]
    assert api["backend"] == cli["backend"] == "halogen"


def test_experiment_freezes_as_the_cli_dry_run(tmp_path):
    spec = ROOT / "fixtures" / "experiments" / "host-cache-diagnosis.toml"
    assert main(["experiment", str(spec), "--dry-run", "--quiet", "--out", str(tmp_path / "cli")]) == 0
    assert not (tmp_path / "cli").exists()  # --dry-run writes nothing
    frozen = kvreplay.Experiment.from_file(spec).freeze(tmp_path / "api")
    dry = kvreplay.Experiment.from_file(spec).prepare(tmp_path / "cli")
    assert frozen.doc["experiment_sha256"] == dry.doc["experiment_sha256"]
    assert json.loads(frozen.frozen_path.read_text())["steps"] == dry.doc["steps"]
    assert dry.frozen_path == tmp_path / "cli" / "experiment.json" and not dry.frozen_path.exists()
    with pytest.raises(kvreplay.ConfigError, match="hard_deadline"):
        kvreplay.Experiment.from_file(spec).freeze(tmp_path / "bad", hard_deadline=1.0)


def test_options_are_the_command_lines(tmp_path):
    wl = kvreplay.DEMO_WORKLOAD
    with pytest.raises(kvreplay.ConfigError, match="unknown option 'no_such_option'"):
        kvreplay.replay(wl, phases=["a:forward:c1"], no_such_option=1, out=tmp_path / "a")
    with pytest.raises(kvreplay.ConfigError, match="unknown simulator option 'warp'"):
        kvreplay.replay(wl, phases=["a:forward:c1"], sim={"warp": 9}, out=tmp_path / "b")
    with pytest.raises(kvreplay.ConfigError, match="list of phase strings"):
        kvreplay.replay(wl, phases="a:forward:c1", out=tmp_path / "c")  # type: ignore[arg-type]
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_import_kvreplay_stays_light_and_exports_the_api():
    code = ("import sys, kvreplay\n"
            "light = 'kvreplay.api' not in sys.modules and 'numpy' not in sys.modules\n"
            "names = sorted(n for n in kvreplay.__all__ if n != '__version__' and getattr(kvreplay, n) is None)\n"
            "print(light, names, 'kvreplay.api' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["True", "[]", "True"]
    import kvreplay.api as api

    assert sorted(api.__all__) == sorted(n for n in kvreplay.__all__ if n != "__version__")
    assert re.fullmatch(r"\d+\.\d+\.\d+", kvreplay.__version__)


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_bundled_experiment_runs_through_the_api(tmp_path):
    # the packaged copy (its workload path is relative to the file: the packaged mtbench-52)
    from kvreplay.bundled import bundled

    result = kvreplay.Experiment.from_file(bundled("experiments/host-cache-diagnosis.toml")).run(out=tmp_path / "d")
    assert result["status"] == "complete" and result["aborted"] is None
    churn = next(f for f in result["findings"] if f["rule"] == "row_checkpoint_churn")
    # the simulator's ground truth of test_experiment_sim: reverse 6670, forward 0, control 5037 host tokens
    assert {e["cell"]: e["value"] for e in churn["evidence"]} == {"B/replay": 0, "A/replay": 6670,
                                                                   "control/control": 5037}
    assert (tmp_path / "d" / "result.json").is_file() and (tmp_path / "d" / "report.html").is_file()
