"""An experiment file's ``[fleet]`` (issue 33 item 1): parsed by ``runner.fleet``, refusals name file, line, field."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvreplay.cli import main
from kvreplay.errors import ConfigError
from kvreplay.experiments.window.frozen import freeze
from kvreplay.experiments.window.spec import load_experiment
from kvreplay.runner.fleet import Replica
from kvreplay.workload import load_workload

ROOT = Path(__file__).resolve().parents[3]
WL = ROOT / "fixtures" / "workloads" / "mtbench-52"
R = "http://127.0.0.1:9000"
U1, U2 = "http://127.0.0.1:9001", "http://127.0.0.1:9002"
RUN = '[[step]]\nname = "A"\nkind = "run"\nphases = ["p:forward:c1"]\n'


def write(tmp_path: Path, fleet: str, *, server: str = f'target = "{R}"\n', steps: str = RUN) -> Path:
    # line 1 workload, 2 [server], 3 its key, 4 [fleet], 5.. the fleet's keys, then the steps
    p = tmp_path / "e.toml"
    p.write_text(f'workload = "{WL}"\n[server]\n{server}[fleet]\n{fleet}\n{steps}')
    return p


def test_fleet_is_read_by_runner_fleet_and_frozen_only_when_set(tmp_path):
    p = write(tmp_path, f'replicas = ["{U1}", {{url = "{U2}", backend = "llamacpp", profile = "x.toml"}}]')
    spec = load_experiment(p).server
    assert spec.target == R
    assert spec.replicas == (Replica(url=U1), Replica(url=U2, backend="llamacpp", profile="x.toml"))
    assert spec.to_json()["fleet"] == {"replicas": [{"url": U1, "backend": None, "profile": None},
                                                    {"url": U2, "backend": "llamacpp", "profile": "x.toml"}]}
    # without [fleet] the server's JSON has no fleet key: experiment.json unchanged byte for byte
    q = tmp_path / "plain.toml"
    q.write_text(f'workload = "{WL}"\n[server]\ntarget = "{R}"\n{RUN}')
    plain = load_experiment(q)
    assert plain.server.replicas == () and "fleet" not in plain.server.to_json()
    doc, _ = freeze(plain, load_workload(WL), plain.window)
    assert list(doc["server"]) == ["target", "backend", "profile", "api_key_env", "identity", "sim", "start",
                                   "stop", "restore", "ready"]
    doc, _ = freeze(load_experiment(p), load_workload(WL), plain.window)
    assert [r["url"] for r in doc["server"]["fleet"]["replicas"]] == [U1, U2]


def test_router_key_is_the_target_when_server_names_none(tmp_path):
    p = write(tmp_path, f'router = "{R}"\nreplicas = ["{U1}", "{U2}"]', server='backend = "halogen"\n')
    assert load_experiment(p).server.target == R
    p = write(tmp_path, f'router = "{R}/"\nreplicas = ["{U1}"]')  # the same router, given twice: accepted
    assert load_experiment(p).server.target == R


@pytest.mark.parametrize(("fleet", "server", "field", "msg"), [
    (f'replicas = "{U1}"', None, "fleet.replicas", "replicas must be a list"),
    ('replicas = ["ftp://127.0.0.1:9001"]', None, "fleet.replicas[0]", "is not a replica URL"),
    (f'replicas = ["{U1}", "127.0.0.1:9002"]', None, "fleet.replicas[1]", "is not a replica URL"),
    (f'replicas = ["{U1},backend"]', None, "fleet.replicas[0]", "expected backend=NAME"),
    (f'replicas = [{{url = "{U1}", weight = "2"}}]', None, "fleet.replicas[0]", "a replica table has url"),
    (f'replicas = ["{U1}"]\nweights = [1]', None, "fleet", r"unknown keys \['weights'\]"),
    ("replicas = []", None, "fleet.replicas", "a fleet needs replicas"),
    (f'replicas = ["{U1}", "{U1}/"]', None, "fleet.replicas", "listed twice"),
    (f'replicas = ["{R}"]', None, "fleet.replicas", "is the router itself"),
    (f'router = "http://127.0.0.1:9999"\nreplicas = ["{U1}"]', None, "fleet.router", r"is not \[server\] target"),
    (f'replicas = ["{U1}"]', 'target = "sim"\n', "server.target", "must be its fixed http"),
    (f'replicas = ["{U1}"]', 'target = "http://127.0.0.1:{port}"\nstart = "x"\n', "server.target",
     "must be its fixed http"),
])
def test_bad_fleet_names_file_line_field(tmp_path, fleet, server, field, msg):
    p = write(tmp_path, fleet, **({"server": server} if server else {}))
    with pytest.raises(ConfigError, match=msg) as ei:
        load_experiment(p)
    assert (ei.value.path, ei.value.field) == (p, field)
    assert ei.value.line == p.read_text().splitlines().index("[fleet]") + 1


def test_fleet_not_a_table(tmp_path):
    p = tmp_path / "e.toml"
    p.write_text(f'workload = "{WL}"\nfleet = ["{U1}"]\n[server]\ntarget = "{R}"\n{RUN}')
    with pytest.raises(ConfigError, match="must be a table") as ei:
        load_experiment(p)
    assert (ei.value.path, ei.value.line, ei.value.field) == (p, 2, "fleet")


def test_a_probe_step_on_a_fleet_is_refused_at_load(tmp_path):
    steps = RUN + '[[step]]\nname = "P"\nkind = "probe"\nsizes = "1k"\n'
    p = write(tmp_path, f'replicas = ["{U1}"]', steps=steps)
    with pytest.raises(ConfigError, match="a probe measures one server's cache") as ei:
        load_experiment(p)
    line = [i + 1 for i, ln in enumerate(p.read_text().splitlines()) if ln == "[[step]]"][1]
    assert (ei.value.path, ei.value.line, ei.value.field) == (p, line, "step[1].kind")


def test_cli_exit_2_names_the_file_line_and_field(tmp_path, capsys):
    p = write(tmp_path, f'replicas = ["{U1}", "nope"]')
    assert main(["experiment", str(p), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert f"{p}:4" in err and "fleet.replicas[1]" in err


def test_dry_run_shows_the_fleet(tmp_path, capsys):
    p = write(tmp_path, f'replicas = ["{U1}", {{url = "{U2}", backend = "llamacpp"}}]')
    assert main(["experiment", str(p), "--dry-run", "--out", str(tmp_path / "x")]) == 0
    out = capsys.readouterr().out
    assert (f"fleet: requests to the router {R}; counters, identity and drain from 2 replicas: "
            f"{U1}, {U2} backend=llamacpp") in out
    assert not (tmp_path / "x").exists()
