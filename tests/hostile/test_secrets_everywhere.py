"""The API key is in no file and on no terminal stream, for every command that writes (issue 26, item 3).

Every command that writes files runs as a user runs it (``python -m kvreplay``
in a subprocess), the key given the way users give it: ``--api-key-env`` and
``--api-key-file`` for run, probe and ab (and ``http://user:KEY@host`` for run), ``[server] api_key_env`` for an
experiment (with every step kind: incarnation, run, probe, ab, restore), the
client's own ``Authorization`` header through ``kvreplay record``, the header
inside a HAR file for ``import``; report, compare, simulate and fit read the
outputs of the others with the key in their environment. The server
(``keyecho.KeyEchoServer``) puts the key back in every answer it can.

Then every file under the output folders, and each command's stdout and
stderr, is searched for the key and for every 8-character piece of it (and of the
``Basic`` credential the URL form sends).
The workloads are 4 bodies at C1 and the probe has two sizes and no eviction
legs, so the whole module takes seconds, not minutes.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from hostile.keyecho import KeyEchoServer

KEY = "sk-echo-7d1e4b9a2c6f8053-LEAKCHECK"
ENV = "KVREPLAY_SECRETS_TEST_KEY"
BASIC = base64.b64encode(f"tok:{KEY}".encode()).decode()  # the header of http://tok:KEY@host
PIECE = 8
PIECES = {s[i:i + PIECE] for s in (KEY, BASIC) for i in range(len(s) - PIECE + 1)}
N_BODIES = 4


def _bodies(folder: Path) -> Path:
    folder.mkdir(parents=True)
    for i in range(N_BODIES):
        (folder / f"{i:03d}.json").write_bytes(orjson.dumps(
            {"model": "m", "stream": True, "max_tokens": 4, "stream_options": {"include_usage": True},
             "messages": [{"role": "user", "content": f"question {i} " + "words " * 20}]}))
    return folder


def _har(path: Path, body_dir: Path) -> Path:
    """A HAR 1.2 capture whose requests carry the key in a header and whose responses echo it."""
    entries = []
    for i, f in enumerate(sorted(body_dir.glob("*.json"))):
        entries.append({
            "startedDateTime": f"2026-01-01T00:00:0{i}.000Z", "time": 10,
            "request": {"method": "POST", "url": "http://127.0.0.1:9/v1/chat/completions", "httpVersion": "HTTP/1.1",
                        "headers": [{"name": "Authorization", "value": f"Bearer {KEY}"},
                                    {"name": "Content-Type", "value": "application/json"}],
                        "queryString": [], "cookies": [], "headersSize": -1, "bodySize": f.stat().st_size,
                        "postData": {"mimeType": "application/json", "text": f.read_text()}},
            "response": {"status": 401, "statusText": "Unauthorized", "httpVersion": "HTTP/1.1",
                         "headers": [{"name": "X-Echo", "value": KEY}], "cookies": [],
                         "content": {"size": 40, "mimeType": "application/json",
                                     "text": json.dumps({"error": {"message": f"bad key {KEY}"}})},
                         "redirectURL": "", "headersSize": -1, "bodySize": -1},
            "cache": {}, "timings": {"send": 0, "wait": 10, "receive": 0}})
    path.write_text(json.dumps({"log": {"version": "1.2", "creator": {"name": "t", "version": "1"},
                                        "entries": entries}}))
    return path


def _experiment(path: Path, url: str, workload: Path) -> Path:
    # The probe step comes first: no run step has registered the key in this process before it.
    path.write_text(f"""
workload = "{workload}"

[server]
target = "{url}"
backend = "vllm"
api_key_env = "{ENV}"
start = {{cmd = "true", timeout = "10s"}}
stop = {{cmd = "true", timeout = "10s"}}
restore = {{cmd = "true", timeout = "10s"}}
ready = {{timeout = "10s"}}

[window]
stop_new_after = "100s"
hard_deadline = "115s"
restore_reserve = "10s"

[[step]]
name = "start"
kind = "incarnation"
fresh = false

[[step]]
name = "P"
kind = "probe"
sizes = "64,128"
flush_max = 0
model = "m"
read_timeout = "5s"

[[step]]
name = "A"
kind = "run"
phases = ["p:forward:c1"]

[[step]]
name = "T"
kind = "ab"
arms = [{{name = "off", cmd = "true"}}, {{name = "on", cmd = "true"}}]
reps = 1
phases = "c1"
cmd_timeout = "10s"
ready_timeout = "10s"

[[step]]
name = "restore"
kind = "restore"
""")
    return path


def _env() -> dict[str, str]:
    return {**os.environ, ENV: KEY, "MPLBACKEND": "Agg"}


def _kvreplay(*argv: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kvreplay", *map(str, argv)], capture_output=True, text=True,
                          timeout=timeout, env=_env())


def _record_through(tmp: Path, url: str, workload: Path, out: Path) -> list[tuple[str, str, str, int]]:
    """``kvreplay record`` in front of the server; ``kvreplay run`` through it with the key in its header."""
    err_path = tmp / "record.stderr"
    with open(err_path, "wb") as err:
        p = subprocess.Popen([sys.executable, "-m", "kvreplay", "record", "--upstream", url,
                              "--out", str(out / "record" / "W")], stdout=subprocess.PIPE, stderr=err, env=_env())
        try:
            first = p.stdout.readline().decode()
            assert "listening on " in first, first + err_path.read_text(errors="replace")
            proxy = first.split("listening on ")[1].split()[0]
            client = _kvreplay("run", workload, "--target", proxy, "--backend", "none", "--phase", "p:forward:c1",
                               "--api-key-env", ENV, "--out", out / "record-client", "--read-timeout", "5s")
            p.send_signal(signal.SIGINT)
            rest, _ = p.communicate(timeout=30)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    return [("record-client", client.stdout, client.stderr, client.returncode),
            ("record", first + rest.decode(errors="replace"), err_path.read_text(errors="replace"), p.returncode)]


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    """Run every command once; ``(out folder, {command: (stdout, stderr, exit status)})``."""
    tmp = tmp_path_factory.mktemp("secrets")
    inputs, out = tmp / "inputs", tmp / "outputs"
    out.mkdir()
    workload = _bodies(inputs / "W")
    key_file = inputs / "key.txt"
    key_file.write_text(KEY + "\n")
    key_file.chmod(0o600)
    streams: dict[str, tuple[str, str, int]] = {}

    def cmd(name: str, *argv: str | Path) -> None:
        p = _kvreplay(*argv)
        streams[name] = (p.stdout, p.stderr, p.returncode)

    with KeyEchoServer(KEY) as srv:
        target = ("--target", srv.url)
        cmd("run", "run", workload, *target, "--backend", "vllm", "--phase", "p:forward:c1",
            "--api-key-env", ENV, "--out", out / "run", "--read-timeout", "5s")
        cmd("run-key-file", "run", workload, *target, "--backend", "none", "--phase", "p:forward:c1",
            "--api-key-file", key_file, "--out", out / "run-file", "--report", "md", "--read-timeout", "5s")
        cmd("run-url-credentials", "run", workload, "--target", srv.url.replace("//", f"//tok:{KEY}@"),
            "--backend", "none", "--phase", "p:forward:c1", "--out", out / "run-url", "--read-timeout", "5s")
        # a sweep of two cold points: each an ordinary run directory, plus sweep.json, points.csv, report.html
        cmd("sweep-url-credentials", "sweep", workload, "--target", srv.url.replace("//", f"//tok:{KEY}@"),
            "--backend", "vllm", "--concurrency", "1,2", "--cache", "cold", "--csv", "--out", out / "sweep",
            "--read-timeout", "5s")
        cmd("sweep-url-query", "sweep", workload, "--target", f"{srv.url}/?api_key={KEY}", "--backend", "vllm",
            "--concurrency", "1", "--out", out / "sweep-query")
        cmd("probe", "probe", *target, "--backend", "vllm", "--model", "m", "--sizes", "64,128", "--flush-max", "0",
            "--api-key-env", ENV, "--out", out / "probe", "--read-timeout", "5")
        cmd("ab", "ab", workload, *target, "--backend", "vllm", "--arm", "off=true", "--arm", "on=true",
            "--reps", "1", "--phases", "c1", "--api-key-env", ENV, "--out", out / "ab",
            "--ready-timeout", "10s", "--cmd-timeout", "10s")
        cmd("experiment", "experiment", _experiment(inputs / "window.toml", srv.url, workload), "--out",
            out / "experiment")
        for name, so, se, rc in _record_through(tmp, srv.url, workload, out):
            streams[name] = (so, se, rc)
    cmd("report", "report", out / "run", "--html")
    cmd("report-ab", "report", out / "ab", "--html")
    cmd("compare", "compare", out / "ab", "--out", out / "compare")
    cmd("import-har", "import", "har", _har(inputs / "capture.har", workload), "--out", out / "import-har" / "W")
    (inputs / "trace.jsonl").write_text("".join(json.dumps({"timestamp": 10 * i, "input_length": 600,
                                                             "output_length": 4, "hash_ids": [i, i + 1]}) + "\n"
                                                for i in range(3)))
    cmd("import-mooncake", "import", "mooncake", inputs / "trace.jsonl", "--out", out / "import-mc" / "mc.jsonl")
    cmd("simulate", "simulate", workload, "--plot", out / "simulate.png")
    cmd("simulate-json", "simulate", workload, "--json")
    cmd("fit", "fit", "--host-ram-gib", "64", "--weights-gib", "10", "--positions", "4096",
        "--kv-bytes-per-position", "1024", "--max-tok", "4096")
    return out, streams


COMMANDS = ["run", "run-key-file", "run-url-credentials", "report", "report-ab", "probe", "ab", "compare",
            "experiment", "record", "record-client", "import-har", "import-mooncake", "simulate", "simulate-json",
            "fit", "sweep-url-credentials"]


def _content(f: Path) -> bytes:
    """A file's bytes, decompressed when it is gzip (counters-raw.jsonl.gz): a secret must not hide in it."""
    data = f.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def _hits(data: bytes) -> list[str]:
    return sorted(p for p in PIECES if p.encode() in data)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", COMMANDS)
def test_the_key_is_on_no_stream(outputs, name):
    _, streams = outputs
    stdout, stderr, rc = streams[name]
    assert "Traceback" not in stderr, stderr[-3000:]
    assert rc in (0, 3), (rc, stderr[-3000:])  # 3: a step or block incomplete (the echoed 500s are failures)
    assert not _hits(stdout.encode()), stdout[-2000:]
    assert not _hits(stderr.encode()), stderr[-2000:]


@pytest.mark.timeout(300)
def test_the_key_is_in_no_file(outputs):
    out, _ = outputs
    files = [f for f in out.rglob("*") if f.is_file()]
    leaks = {str(f.relative_to(out)): _hits(_content(f)) for f in files}
    assert {k: v for k, v in leaks.items() if v} == {}
    names = {str(f.relative_to(out)) for f in files}
    # every command left its outputs (a missing folder would make the search above vacuous)
    for expected in ("run/records.jsonl", "run/report.md", "run/report.html", "run/summary.json",
                     "run-file/report.md", "run-url/report.html", "probe/verdict.json", "probe/report.md",
                     "probe/requests.jsonl",
                     "ab/ab.json", "ab/compare.json", "ab/compare.md", "ab/report.html", "compare/compare.json",
                     "compare/compare.md", "experiment/experiment.json", "experiment/result.json",
                     "experiment/report.md", "experiment/report.html", "record/W.plan.toml",
                     "import-har/W.plan.toml", "import-mc/mc.jsonl", "simulate.png",
                     "sweep/sweep.json", "sweep/points.csv", "sweep/report.html", "sweep/points/01-c1/plan.json",
                     "sweep/points/01-c1/records.jsonl", "sweep/points/01-c1/counters.jsonl",
                     "sweep/points/01-c1/summary.json", "sweep/points/02-c2/records.jsonl",
                     "sweep/points/02-c2/report.html"):
        assert expected in names, sorted(names)
    steps = {Path(n).parts[2] for n in names if n.startswith("experiment/steps/")}
    assert {s.split("-", 1)[1] for s in steps} >= {"A", "P", "T"}, steps
    probe_step = next(s for s in steps if s.endswith("-P"))
    for f in ("verdict.json", "report.md", "requests.jsonl"):
        assert f"experiment/steps/{probe_step}/{f}" in names


@pytest.mark.timeout(300)
def test_the_server_did_echo_the_key(outputs):
    """The outputs hold the marker where the server put the key: the search above is not vacuous."""
    out, _ = outputs
    for f in ("run/records.jsonl", "run-url/records.jsonl", "probe/requests.jsonl", "record/W/manifest.jsonl",
              "sweep/points/01-c1/records.jsonl", "sweep/points/02-c2/records.jsonl"):
        path = out / f
        if not path.exists():
            path = next((out / f).parent.glob("*.jsonl"))
        assert b"[REDACTED]" in path.read_bytes(), f
    step = next((out / "experiment" / "steps").glob("*-P"))
    assert b"[REDACTED]" in (step / "requests.jsonl").read_bytes()


@pytest.mark.timeout(300)
def test_a_sweep_target_with_an_api_key_query_is_refused_naming_no_key(outputs):
    """``kvreplay sweep --target URL/?api_key=KEY``: exit 2 naming --target before anything is made; the key is
    on no stream (and, above, in no file)."""
    out, streams = outputs
    stdout, stderr, rc = streams["sweep-url-query"]
    assert rc == 2 and "--target" in stderr and "Traceback" not in stderr, stderr[-2000:]
    assert not _hits(stdout.encode()) and not _hits(stderr.encode()), stderr[-2000:]
    assert not (out / "sweep-query").exists()


# --- Every URL a user gives (issue 44 item 1) ------------------------------------------------------------------
#
# Credentials planted in each URL-bearing option and file key: user:password@ and ?api_key= in the replicas
# (``--replica``, ``[fleet] replicas`` as a string and as a table), the router (``[fleet] router``,
# ``[server] target``), a user command's URL (a quiesce step's ``cmd``), ``--target`` of probe and snapshot,
# ``--upstream`` of record. The replicas are
# simulators behind the toy round-robin router of the fleet tests; every file and stream is searched.

URL_PASS = "pw-fleet-91c3e7d2-Qx"
URL_KEY = "apikey-fleet-4b8d20f6"
URL_BASIC = base64.b64encode(f"rep:{URL_PASS}".encode()).decode()
CMD_PASS = "cmd-pw-3e8a1c55-Zq"  # only in a user command's URL: registered from the command itself
URL_PIECES = {s[i:i + PIECE] for s in (URL_PASS, URL_KEY, URL_BASIC, CMD_PASS) for i in range(len(s) - PIECE + 1)}
ROUTER = Path(__file__).resolve().parents[1] / "integration" / "toy_router.py"
N_FLEET_BODIES = 8


def _with_pass(url: str) -> str:
    return url.replace("//", f"//rep:{URL_PASS}@", 1)


def _with_key(url: str) -> str:
    return f"{url}/?api_key={URL_KEY}"


def _listening(cmd: list[str]) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=_env())
    line = proc.stdout.readline()  # type: ignore[union-attr]
    assert "listening on" in line, line
    return proc, line.split("listening on ", 1)[1].split()[0]


def _fleet_experiment(path: Path, router: str, reps: list[str], workload: Path, *, router_creds: bool) -> Path:
    router_line = f'router = "{_with_pass(router)}"' if router_creds else ""
    # a URL inside a user command (the dry-run prints the commands; experiment.json keeps them)
    quiesce = (f'[[step]]\nname = "Q"\nkind = "quiesce"\n'
               f'cmd = "curl -sf {router.replace("//", f"//chk:{CMD_PASS}@")}/drain"\n')
    target_line = "" if router_creds else f'target = "{router}"'
    path.write_text(f"""
workload = "{workload}"

[server]
{target_line}
backend = "halogen"

[fleet]
{router_line}
replicas = ["{_with_pass(reps[0])}", {{url = "{_with_key(reps[1])}"}}]

[window]
stop_new_after = "100s"
hard_deadline = "115s"

[[step]]
name = "A"
kind = "run"
phases = ["p:forward:c1"]
{quiesce if router_creds else ""}
""")
    return path


@pytest.fixture(scope="module")
def fleet_outputs(tmp_path_factory):
    """A fleet run, its report and compare, an experiment (and its dry-run), probe, snapshot and record,
    each given URLs with credentials; ``(out folder, {command: (stdout, stderr, status)}, replica URLs)``."""
    tmp = tmp_path_factory.mktemp("url-secrets")
    out = tmp / "outputs"
    out.mkdir()
    global N_BODIES
    n, N_BODIES = N_BODIES, N_FLEET_BODIES
    try:
        workload = _bodies(tmp / "inputs" / "W")
    finally:
        N_BODIES = n
    streams: dict[str, tuple[str, str, int]] = {}

    def cmd(name: str, *argv: str | Path) -> None:
        p = _kvreplay(*argv)
        streams[name] = (p.stdout, p.stderr, p.returncode)

    sims = [_listening([sys.executable, "-m", "kvreplay", "serve-sim", "--port", "0", "--time-scale", "0",
                        "--output-tokens", "4"]) for _ in range(2)]
    reps = [u for _, u in sims]
    procs = [p for p, _ in sims]
    try:
        rp, router = _listening([sys.executable, str(ROUTER), "--upstream", reps[0], "--upstream", reps[1],
                                 "--header", "x-kvreplay-replica"])
        procs.append(rp)
        cmd("fleet-run", "run", workload, "--target", router, "--replica", _with_pass(reps[0]),
            "--replica", _with_key(reps[1]), "--phase", "p:forward:c1", "--out", out / "fleet-run",
            "--read-timeout", "5s")
        cmd("fleet-run-2", "run", workload, "--target", router, "--replica", _with_pass(reps[0]) + ",backend=halogen",
            "--replica", _with_key(reps[1]), "--phase", "p:forward:c1", "--out", out / "fleet-run-2",
            "--read-timeout", "5s")
        cmd("fleet-experiment", "experiment", _fleet_experiment(tmp / "inputs" / "exp.toml", router, reps, workload,
                                                                router_creds=False), "--out", out / "experiment")
        dry = _fleet_experiment(tmp / "inputs" / "dry.toml", router, reps, workload, router_creds=True)
        cmd("fleet-experiment-dry-run", "experiment", dry, "--dry-run")
        cmd("ab-url", "ab", workload, "--target", _with_pass(router), "--backend", "none", "--arm", "off=true",
            "--arm", "on=true", "--reps", "1", "--phases", "c1", "--out", out / "ab", "--ready-timeout", "10s",
            "--cmd-timeout", "10s")
        cmd("sweep-url", "sweep", workload, "--target", _with_pass(router), "--replica", _with_pass(reps[0]),
            "--replica", _with_key(reps[1]), "--concurrency", "1", "--requests", "4", "--out", out / "sweep")
        (out / "synth").mkdir()
        cmd("synth-url", "synth", "--out", out / "synth" / "W.jsonl", "--tokenizer", _with_key(_with_pass(reps[0])),
            "--requests", "4", "--isl", "64", "--osl", "4", "--check", _with_pass(reps[1]))
        (tmp / "inputs" / "trace.jsonl").write_text(
            '{"timestamp": 0, "input_length": 600, "output_length": 4, "hash_ids": [0, 1]}\n')
        cmd("import-url", "import", "mooncake", tmp / "inputs" / "trace.jsonl", "--out", out / "import" / "mc.jsonl",
            "--tokenizer", _with_key(_with_pass(reps[0])))
        cmd("probe-url", "probe", "--target", _with_pass(reps[0]), "--backend", "halogen", "--model", "m",
            "--sizes", "64,128", "--flush-max", "0", "--out", out / "probe", "--read-timeout", "5")
        # a query on a target is refused (requests go to TARGET/v1/...), its key in no message
        cmd("probe-url-query", "probe", "--target", _with_key(reps[0]), "--model", "m", "--out", out / "probe-q")
        cmd("run-url-query", "run", workload, "--target", _with_key(_with_pass(router)), "--phase", "p:forward:c1",
            "--out", out / "run-q")
        cmd("snapshot-url", "snapshot", "--target", _with_key(_with_pass(reps[0])))
        # the proxy's upstream: credentials shown redacted; a query refused (each request's own is forwarded)
        cmd("record-url", "record", "--upstream", _with_pass(reps[1]), "--out", out / "record" / "W",
            "--duration", "1")
        cmd("record-url-query", "record", "--upstream", _with_key(reps[1]), "--out", out / "record-q" / "W")
    finally:
        for p in procs:
            p.terminate()
            p.wait(timeout=10)
            p.stdout.close()  # type: ignore[union-attr]
    cmd("fleet-report", "report", out / "fleet-run", "--html")
    cmd("fleet-compare", "compare", out / "fleet-run", out / "fleet-run-2", "--out", out / "compare")
    return out, streams, reps


def _url_hits(data: bytes) -> list[str]:
    return sorted(p for p in URL_PIECES if p.encode() in data)


@pytest.mark.timeout(300)
def test_no_url_credential_in_any_file_or_stream(fleet_outputs):
    out, streams, _ = fleet_outputs
    for name, (so, se, _) in streams.items():
        assert "Traceback" not in se, (name, se[-3000:])
        assert not _url_hits(so.encode()) and not _url_hits(se.encode()), (name, so[-1500:], se[-1500:])
    assert {k: rc for k, (_, _, rc) in streams.items()} == {
        "fleet-run": 0, "fleet-run-2": 0, "fleet-experiment": 0, "fleet-experiment-dry-run": 0, "ab-url": 3,
        "sweep-url": 0, "synth-url": 0, "import-url": 0,
        "probe-url": 0, "snapshot-url": 0, "probe-url-query": 2, "run-url-query": 2, "record-url": 0,
        "record-url-query": 2, "fleet-report": 0, "fleet-compare": 0}, {
        k: se[-800:] for k, (_, se, rc) in streams.items() if rc}
    files = [f for f in out.rglob("*") if f.is_file()]
    leaks = {str(f.relative_to(out)): _url_hits(_content(f)) for f in files}
    assert {k: v for k, v in leaks.items() if v} == {}
    names = {str(f.relative_to(out)) for f in files}
    for expected in ("fleet-run/plan.json", "fleet-run/records.jsonl", "fleet-run/counters.jsonl",
                     "fleet-run/summary.json", "fleet-run/report.md", "fleet-run/report.html",
                     "experiment/experiment.json", "experiment/result.json", "experiment/report.md",
                     "compare/compare.json", "probe/verdict.json", "ab/ab.json", "sweep/sweep.json",
                     "synth/W.jsonl", "import/mc.jsonl"):
        assert expected in names, sorted(names)
    step = next((out / "experiment" / "steps").glob("*-A"))
    assert (step / "records.jsonl").is_file() and (step / "plan.json").is_file()
    # the toy router answers POST only: ab's readiness check (GET /v1/models) stops its first block (exit 3),
    # after ab.json named the target
    assert json.loads((out / "ab" / "ab.json").read_text())["target"].startswith("http://[REDACTED]@127.0.0.1:")
    for name in ("probe-url-query", "run-url-query"):
        assert "a target URL takes no query or fragment" in streams[name][1], streams[name][1]
        assert "?api_key=[REDACTED]" in streams[name][1], streams[name][1]
    assert " -> http://[REDACTED]@127.0.0.1:" in streams["record-url"][0], streams["record-url"][0]
    assert "an upstream URL takes no query or fragment" in streams["record-url-query"][1]
    assert "?api_key=[REDACTED]" in streams["record-url-query"][1], streams["record-url-query"][1]
    dry_out = streams["fleet-experiment-dry-run"][0]
    assert "[REDACTED]" in dry_out, dry_out
    assert "curl -sf http://[REDACTED]@" in dry_out, dry_out  # the quiesce command, as the plan prints it


@pytest.mark.timeout(300)
def test_replicas_are_named_and_attributed_by_their_redacted_url(fleet_outputs):
    """Every record names its replica (round robin: 0, 1, 0, 1 ...), as the redacted URL, in every output."""
    out, _, reps = fleet_outputs
    names = [reps[0].replace("//", "//[REDACTED]@", 1), f"{reps[1]}/?api_key=[REDACTED]"]
    for run in (out / "fleet-run", next((out / "experiment" / "steps").glob("*-A"))):
        recs = [json.loads(ln) for ln in (run / "records.jsonl").read_text().splitlines()]
        assert [(r["replica"], r["replica_reason"]) for r in recs] == [(names[i % 2], None)
                                                                       for i in range(N_FLEET_BODIES)]
        assert {u for r in recs for u in r["replica_deltas"]} == set(names)
        plan = json.loads((run / "plan.json").read_text())
        assert [r["url"] for r in plan["run"]["fleet"]["replicas"]] == names
        summary = json.loads((run / "summary.json").read_text())
        assert [e["url"] for e in summary["phases"][0]["replicas"]] == names
        assert summary["phases"][0]["fleet"]["unattributed"]["requests"] == 0


# Options whose metavar says URL or whose name is one a URL goes by. A new one fails here until a case
# above plants credentials in it (and it is added to PLANTED).
_URL_DESTS = {"target", "upstream", "router", "replica", "tokenizer", "url"}
PLANTED = {"run --target": "run-url-credentials", "run --replica": "fleet-run",
           "ab --target": "ab-url", "probe --target": "probe-url",
           "snapshot --target": "snapshot-url", "record --upstream": "record-url", "sweep --target": "sweep-url",
           "sweep --replica": "sweep-url", "synth --tokenizer": "synth-url", "synth --check": "synth-url",
           "import --tokenizer": "import-url"}
SAME_PARSER = {"demo": "run"}  # demo declares run's options (commands/demo.py)


def _url_options() -> set[str]:
    import argparse

    from kvreplay.cli import build_parser

    found: set[str] = set()

    def walk(prefix: str, parser: argparse.ArgumentParser) -> None:
        for a in parser._actions:
            if isinstance(a, argparse._SubParsersAction):
                for n, sp in a.choices.items():
                    walk(f"{prefix} {n}".strip(), sp)
                continue
            metavar = " ".join(a.metavar) if isinstance(a.metavar, tuple) else str(a.metavar or "")
            if a.choices is not None or a.nargs == 0:  # a fixed set (serve-sim --router POLICY), a flag
                continue
            if "URL" in metavar.upper() or a.dest in _URL_DESTS or a.dest.endswith("_url"):
                found.add(f"{prefix} {a.option_strings[0] if a.option_strings else a.dest}")

    walk("", build_parser())
    return found


def test_every_url_option_has_credentials_planted():
    found = _url_options()
    aliased = {o for o in found if o.split()[0] in SAME_PARSER}
    for o in aliased:
        cmd, opt = o.split(" ", 1)
        assert f"{SAME_PARSER[cmd]} {opt}" in found, o
    assert found - aliased == set(PLANTED), (
        "an option that takes a URL must have credentials planted in it: add a command to fleet_outputs "
        "giving it http://user:PASSWORD@... (and ?api_key=...), then its name to PLANTED")
