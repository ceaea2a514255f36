"""The API functions and the commands over them give the same results on the same input (issue 35).

Each command moved into ``kvreplay.api`` is run twice, through ``kvreplay.cli.main``
(its ``--json`` output) and through the API function, and the two must be equal; the
figures checked are independent of the code: the demo workload's 52 bodies hold 190,516
prompt tokens, and an entries cache of two snapshots serves 175,848 of them from cache
(the README's prime phase: 175848/190516).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import kvreplay
from kvreplay.cli import main

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "fixtures" / "workloads" / "mtbench-52"


def _cli_json(capsys, *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_simulate_api_equals_cli(capsys):
    cli = _cli_json(capsys, "simulate", str(DEMO), "--capacities", "1,2,4", "--today", "1")
    api = kvreplay.simulate(DEMO, capacities=[1, 2, 4], today=1)
    assert api == cli
    curve = {p["capacity"]: (p["hit_requests"], p["hit_tokens"]) for p in api["curve"]}
    # capacity 1: each body's snapshot evicts the one the next body needs; 2 keeps it: 51 of 52 hit
    assert curve == {1: (0, 0), 2: (51, 175848), 4: (51, 175848)}
    assert (api["requests"], api["prompt_tokens"], api["recommended"]["capacity"]) == (52, 190516, 2)
    assert "answer" in api and api["answer"] == cli["answer"]


def test_simulate_fleet_api_equals_cli(capsys):
    cli = _cli_json(capsys, "simulate", str(DEMO), "--replicas", "2", "--capacities", "4")
    api = kvreplay.simulate_fleet(DEMO, 2, capacities=[4])
    assert api == cli
    assert api["cache"] == {"model": "entries", "unit": "entries", "per_replica": [4, 4], "merged": 8}
    assert api["policies"]["merged"]["cached_tokens"] == 175848


FIT_ARGS = ["--host-ram-gib", "64", "--weights-gib", "20", "--reserve-gib", "4", "--positions", "131072",
            "--layers", "32", "--kv-heads", "8", "--head-dim", "128", "--max-tok", "32768",
            "--arena-base-gib", "1", "--arena-per-16k-gib", "0.5", "--vision-gib", "1", "--margin-gib", "1",
            "--ctx", "8192", "--reserves", "24,24.5"]


def test_fit_api_equals_cli(capsys):
    cli = _cli_json(capsys, "fit", *FIT_ARGS)
    api = kvreplay.fit(host_ram_gib="64", weights_gib="20", reserve_gib="4", positions=131072, layers=32,
                       kv_heads=8, head_dim=128, max_tok=32768, arena_base_gib="1", arena_per_16k_gib=0.5,
                       vision_gib="1", margin_gib="1", ctx=8192, reserves=["24", 24.5])
    assert api == cli
    # KV: 2 (K, V) x 32 layers x 8 heads x 128 x 2 bytes = 128 KiB a position; x 131072 = 16 GiB;
    # fixed: arena 1 + 0.5 x 32768/16384, vision 1 = 3; budget 64 - 20 - 4 = 40; headroom 40 - 19 - 1 = 20
    assert (api["kv_bytes_per_position"], api["kv_gib"], api["fixed_gib"]) == (131072.0, 16.0, 3.0)
    assert (api["budget_gib"], api["need_gib"], api["headroom_gib"], api["max_reserve_gib"]) == (40.0, 19.0, 20.0, 24.0)
    assert (api["verdict"], api["knife_edge"], api["positions"]) == ("fits", False, 131072)
    # reserve 24.5: budget 19.5 - margin 1 - fixed 3 = 15.5 GiB of KV = 126976 positions of 128 KiB
    assert [(r["verdict"], r["positions"]) for r in api["reserves"]] == [("fits", 131072), ("clamped", 126976)]


def test_snapshot_api_equals_cli_from_a_dump(capsys):
    dump = ROOT / "fixtures" / "metrics" / "vllm" / "nvcr-25.09.prom"
    assert main(["snapshot", "--from-file", str(dump)]) == 0
    cli = json.loads(capsys.readouterr().out)
    api = kvreplay.snapshot(from_file=dump)
    assert api == cli
    # the dump's own lines: vllm:gpu_prefix_cache_queries_total 246.0, hits 80.0, num_gpu_blocks="850"
    assert (api["backend"], api["common"]["query_tokens"], api["common"]["hit_tokens"]) == ("vllm", 246.0, 80.0)
    assert api["identity"]["cache_config"]["num_gpu_blocks"] == "850"


def test_snapshot_unreachable_is_the_same_error_both_ways(capsys):
    import socket

    with socket.socket() as s:  # a port nothing listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
        assert main(["snapshot", "--target", url, "--backend", "vllm", "--timeout", "5"]) == 2
        err = capsys.readouterr().err
        try:
            kvreplay.snapshot(url, backend="vllm", timeout_s=5)
        except kvreplay.BackendError as exc:
            assert err == f"kvreplay snapshot: {exc}\n"
        else:
            raise AssertionError("no BackendError")


AB_ARGS = ["--target", "sim", "--sim-time-scale", "0", "--arm", "off=sim:", "--arm", "on=sim:prefill_scale=1.1",
           "--reps", "2", "--phases", "c4", "--primary", "ttft_p50:-5%", "--quiet"]


def _ab_doc(path: Path) -> dict:
    doc = json.loads((path / "ab.json").read_text())
    return {k: v for k, v in doc.items() if k != "blocks"}


def test_ab_and_compare_api_equal_cli(tmp_path, capsys):
    cli_dir, api_dir = tmp_path / "cli", tmp_path / "api"
    assert main(["ab", str(DEMO), *AB_ARGS, "--out", str(cli_dir)]) == 0
    capsys.readouterr()
    res = kvreplay.ab(DEMO, arms={"off": "sim:", "on": "sim:prefill_scale=1.1"}, reps=2, phases="c4",
                      primary=["ttft_p50:-5%"], sim={"time_scale": 0}, out=api_dir)
    assert res["out"] == str(api_dir)
    # the frozen order, arms, plan hash, thresholds and limits: the same document both ways
    assert _ab_doc(api_dir) == _ab_doc(cli_dir) == {k: v for k, v in res["ab"].items() if k != "blocks"}
    assert [b["arm"] for b in res["ab"]["order"]] == ["off", "on", "on", "off"]  # ABBA, baseline first
    cli_blocks = json.loads((cli_dir / "ab.json").read_text())["blocks"]
    assert [b["plan_sha256"] for b in res["ab"]["blocks"]] == [b["plan_sha256"] for b in cli_blocks]
    for d in (cli_dir, api_dir):
        for blk in ("00-off", "01-on", "02-on", "03-off"):
            r = kvreplay.RunResult.from_dir(d / "blocks" / blk)
            assert (r.records, r.statuses()) == (52, {"ok": 52})
            assert (r.phase("c4").tokens.cached, r.phase("c4").tokens.prompt) == (175848, 190516)
    assert res["reps"] == {"planned": 2, "measured": 2}
    assert res == {**json.loads((api_dir / "compare.json").read_text()), "ab": res["ab"], "out": res["out"]}

    # compare on the CLI's blocks, both ways: the same seed and blocks give the same figures
    assert main(["compare", str(cli_dir), "--out", str(tmp_path / "c-cli")]) == 0
    printed = capsys.readouterr().out
    cmp = kvreplay.compare([cli_dir], out=tmp_path / "c-api")
    assert cmp == json.loads((tmp_path / "c-cli" / "compare.json").read_text())
    assert cmp == json.loads((tmp_path / "c-api" / "compare.json").read_text())
    assert (tmp_path / "c-api" / "compare.md").read_text() == (tmp_path / "c-cli" / "compare.md").read_text()
    assert printed.rstrip("\n") == (tmp_path / "c-cli" / "compare.md").read_text().rstrip("\n")  # what it wrote
    assert [(c["phase"], c["metric"], c["role"]) for c in cmp["checks"]] == [("c4", "ttft_p50", "primary")]
    assert len(cmp["pairs"]) == 2 and cmp["bootstrap"]["seed"] == 0


def test_inspect_api_equals_cli(tmp_path, capsys):
    from helpers import write_chat_workload

    # bodies 0 and 2 are byte-identical; all three share the system message
    wl = write_chat_workload(tmp_path / "wl", [("S", "one"), ("S", "two"), ("S", "one")])
    cli = _cli_json(capsys, "inspect", str(wl))
    api = kvreplay.inspect_workload(wl)
    assert api == cli
    assert (api["bodies"], api["kinds"], api["unique_bodies"]) == (3, {"chat": 3}, [])
    assert api["identical_bodies"] == [[0, 2]]
    assert [(g["links"], g["bodies"]) for g in api["groups"]] == [(1, [0, 1, 2]), (2, [0, 2])]
    # body 1 reuses the system link, body 2 both links: 2 of 3 bodies' bytes partly seen before
    assert [b["reused_links"] for b in api["per_body"]] == [0, 1, 2]
    assert api["expected_reuse"]["bytes"] == api["per_body"][1]["reused_bytes"] + api["per_body"][2]["prefix_bytes"]


def test_the_api_package_imports_nothing_heavy_until_called():
    """``kvreplay.simulate`` and the others load ``kvreplay.api``: its modules import offline, the
    simulator, the backends, the runner and aiohttp only when a function runs (``kvreplay --help``
    and ``import kvreplay`` are held by test_perf_imports)."""
    import subprocess
    import sys

    heavy = ("numpy", "aiohttp", "matplotlib", "kvreplay.offline", "kvreplay.sim", "kvreplay.backends",
             "kvreplay.runner", "kvreplay.experiments", "kvreplay.report")
    code = (f"import sys, kvreplay\nkvreplay.simulate, kvreplay.fit, kvreplay.snapshot, kvreplay.ab, kvreplay.compare\n"
            "kvreplay.inspect_workload, kvreplay.import_workload, kvreplay.export_workload, kvreplay.record\n"
            f"print(sorted(m for m in {heavy!r} if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert r.stdout.strip() == "[]"


def test_import_and_export_api_equal_cli(tmp_path, capsys):
    trace = ROOT / "fixtures" / "traces" / "mooncake_fast25_conversation_trace.jsonl"
    assert main(["import", "mooncake", str(trace), "--out", str(tmp_path / "cli" / "mc.jsonl"), "--limit", "20"]) == 0
    printed = capsys.readouterr().out
    res = kvreplay.import_workload("mooncake", trace, tmp_path / "api" / "mc.jsonl", limit=20)
    assert res["out"] == str(tmp_path / "api" / "mc.jsonl")
    assert "\n".join(res["lines"]).replace(str(tmp_path / "api"), "D") + "\n" == printed.replace(
        str(tmp_path / "cli"), "D")
    names = sorted(p.name for p in (tmp_path / "cli").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "api").iterdir())
    for name in names:
        if name != "mc.plan.toml":  # the bodies and arrivals, byte for byte (the plan names its own path)
            assert (tmp_path / "api" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes()
    bodies = (tmp_path / "api" / "mc.jsonl").read_text().splitlines()
    assert len(bodies) == 20  # --limit 20: the trace's first 20 requests

    assert main(["export", "vllm", str(DEMO), "--out", str(tmp_path / "cli.vllm.jsonl"), "--lossy"]) == 0
    printed = capsys.readouterr().out
    exp = kvreplay.export_workload("vllm", DEMO, tmp_path / "api.vllm.jsonl", lossy=True)
    assert (exp.bodies, exp.lines) == (52, 52)
    assert printed.splitlines()[0] == f"52 bodies as 52 vllm custom lines -> {tmp_path / 'cli.vllm.jsonl'}"
    assert (tmp_path / "api.vllm.jsonl").read_bytes() == (tmp_path / "cli.vllm.jsonl").read_bytes()


# hand-made bodies (odd spacing, an escaped character): retained byte for byte, never re-serialized
REC_A = b'{"model": "m",  "messages":[{"role":"user","content":"first\\u00e9"}], "max_tokens": 2}'
REC_B = b'{"messages": [{"role": "user", "content": "second"}],"max_tokens":3 ,"stream": false}'


class _Proc:
    """A ``python -m kvreplay`` process whose first stdout line names its URL; stderr kept in a file."""

    def __init__(self, tmp: Path, name: str, *argv: str) -> None:
        import subprocess
        import sys

        self.err_path = tmp / f"{name}.stderr"
        with open(self.err_path, "wb") as err:
            self.p = subprocess.Popen([sys.executable, "-m", "kvreplay", *argv], stdout=subprocess.PIPE, stderr=err)
        line = self.p.stdout.readline().decode()
        if "listening on " not in line:
            self.p.kill()
            raise AssertionError(f"{name} did not start: {line!r} {self.err_path.read_text()}")
        self.url = line.split("listening on ")[1].split()[0]

    def stop(self) -> int:
        import signal

        if self.p.poll() is None:
            self.p.send_signal(signal.SIGINT)
        try:
            return self.p.wait(timeout=30)
        finally:
            if self.p.poll() is None:
                self.p.kill()
            self.p.stdout.close()


def _send_three(url: str) -> list[int]:
    """Two chat POSTs (retained) and a GET /metrics (proxied, skipped: path), in that order."""
    import urllib.request

    statuses = []
    for body in (REC_A, REC_B):
        req = urllib.request.Request(url + "/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            r.read()
            statuses.append(r.status)
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        r.read()
        statuses.append(r.status)
    return statuses


def test_record_api_equals_cli_against_serve_sim(tmp_path):
    """``kvreplay record`` (a process, stopped by SIGINT) and ``kvreplay.record`` (stopped by an event)
    in front of one ``kvreplay serve-sim``: 3 requests each, the same 2 bodies retained byte for byte."""
    import asyncio

    sim = _Proc(tmp_path, "sim", "serve-sim", "--port", "0", "--time-scale", "0")
    try:
        cli_out = tmp_path / "cli" / "W"
        rec = _Proc(tmp_path, "rec", "record", "--upstream", sim.url, "--out", str(cli_out))
        assert _send_three(rec.url) == [200, 200, 200]
        assert rec.stop() == 0
        cli_err = rec.err_path.read_text()

        api_out = tmp_path / "api" / "W"
        urls: list[str] = []

        async def go():
            stop = asyncio.Event()
            task = asyncio.ensure_future(kvreplay.record_async(sim.url, api_out, stop=stop, on_listening=urls.append))
            for _ in range(3000):  # on_listening names the URL (30 s at most)
                if urls or task.done():
                    break
                await asyncio.sleep(0.01)
            assert urls, task.result() if task.done() else "on_listening was not called"
            assert await asyncio.to_thread(_send_three, urls[0]) == [200, 200, 200]
            stop.set()
            return await asyncio.wait_for(task, 30)

        res = asyncio.run(go())
    finally:
        sim.stop()
    n = len(REC_A) + len(REC_B)
    assert (res.requests, res.retained, res.retained_bytes, res.skipped, res.refused) == (3, 2, n, {"path": 1}, 1)
    assert res.description == f"2 bodies ({n} bytes) retained; skipped: path 1"
    assert res.url == urls[0] and res.url.startswith("http://127.0.0.1:") and res.upstream == sim.url
    assert (res.workload, res.arrivals, res.plan) == (api_out, api_out.parent / "W.arrivals.json",
                                                      api_out.parent / "W.plan.toml")
    assert res.paths == ("/v1/chat/completions", "/v1/completions") and res.io_error is None
    # the command prints the same figures, from the same result
    assert f"kvreplay record: 3 requests proxied; {res.description}\n" in cli_err
    assert f"kvreplay record: workload {cli_out} (+ W.arrivals.json, W.plan.toml); replay with" in cli_err
    for d in (cli_out, api_out):
        assert sorted(p.name for p in d.iterdir()) == ["000000.json", "000001.json", "capture.jsonl"]
        assert ((d / "000000.json").read_bytes(), (d / "000001.json").read_bytes()) == (REC_A, REC_B)
        assert sorted(p.name for p in d.parent.iterdir()) == ["W", "W.arrivals.json", "W.plan.toml"]
    lines = [[json.loads(x) for x in (d / "capture.jsonl").read_text().splitlines()] for d in (cli_out, api_out)]
    # the same manifest but for times and the sim's answers (its cache is warm the second time)
    keep = ("index", "file", "body_sha256", "body_bytes", "path", "headers", "stream", "status", "outcome")
    assert [[{k: x.get(k) for k in keep} for x in ls] for ls in lines][0] == [
        {k: x.get(k) for k in keep} for x in lines[1]]
    assert [(x["index"], x["body_bytes"], x["status"], x["outcome"]) for x in lines[1]] == [
        (0, len(REC_A), 200, "complete"), (1, len(REC_B), 200, "complete")]
    assert lines[1][0]["body_sha256"] == hashlib.sha256(REC_A).hexdigest()


def test_record_api_refuses_what_the_cli_refuses(tmp_path):
    """A busy port: ``OSError`` naming it and no folder left (the command's exit 2); a bad option: ConfigError;
    a duration with no traffic: an empty result, no sidecars."""
    import socket

    import pytest

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(OSError, match=f"^.*cannot listen on 127.0.0.1:{port}: "):
            kvreplay.record("http://127.0.0.1:9", tmp_path / "g", listen=f"127.0.0.1:{port}", duration=0.01)
    assert not (tmp_path / "g").exists()
    with pytest.raises(kvreplay.ConfigError, match="must be comma-separated URL paths"):
        kvreplay.record("http://127.0.0.1:9", tmp_path / "p", paths=["v1/chat"], duration=0.01)
    with pytest.raises(kvreplay.ConfigError, match="must be an http:// or https:// URL"):
        kvreplay.record("ftp://x", tmp_path / "u", duration=0.01)
    r = kvreplay.record("http://127.0.0.1:9", tmp_path / "e", duration=0.01, max_bytes="1KB")
    assert (r.requests, r.retained, r.retained_bytes, r.skipped, r.arrivals, r.plan) == (0, 0, 0, {}, None, None)
    assert r.description == "0 bodies (0 bytes) retained; skipped: none"


def _ask_four(url: str) -> list[tuple[str, dict]]:
    """Four chat requests, each a different body: ``(x-kvreplay-replica, usage)`` of each answer (the header
    names the replica's URL)."""
    import urllib.request

    out = []
    for i in range(4):
        body = json.dumps({"messages": [{"role": "user", "content": f"question {i} " * (i + 1)}],
                           "max_tokens": i + 1}).encode()
        req = urllib.request.Request(url + "/v1/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            out.append((r.headers["x-kvreplay-replica"], json.loads(r.read())["usage"]))
    return out


def test_serve_sim_api_equals_cli_with_a_random_router(tmp_path):
    """``kvreplay serve-sim --replicas 3 --router random --router-seed 7`` (a process) and
    ``kvreplay.serve_sim(replicas=3, router="random", router_seed=7)``: the same printed flags and
    URLs shape, the same replica picked for each of four requests, the same usage."""
    cli = _Proc(tmp_path, "sim", "serve-sim", "--replicas", "3", "--router", "random", "--router-seed", "7",
                "--time-scale", "0")
    try:
        printed = [cli.p.stdout.readline().decode().rstrip("\n") for _ in range(4)]
        cli_replicas = [line.split("listening on ")[1] for line in printed[:3]]
        assert [line.split(" listening")[0] for line in printed[:3]] == [f"kvreplay-sim replica {i}" for i in range(3)]
        assert printed[3] == "run flags: " + " ".join(
            ["--target", cli.url, *[x for u in cli_replicas for x in ("--replica", u)]])
        cli_answers = [(str(cli_replicas.index(r)), u) for r, u in _ask_four(cli.url)]
    finally:
        assert cli.stop() == 0
    with kvreplay.serve_sim(replicas=3, router="random", router_seed=7, time_scale=0) as s:
        assert (s.router, s.router_seed, len(s.replica_urls), s.config.time_scale) == ("random", 7, 3, 0)
        assert s.target_args == ("--target", s.url, *[x for u in s.replica_urls for x in ("--replica", u)])
        assert s.url.startswith("http://127.0.0.1:") and not s.url.endswith(":0")
        api_answers = [(str(s.replica_urls.index(r)), u) for r, u in _ask_four(s.url)]
    assert api_answers == cli_answers
    assert [u["completion_tokens"] for _, u in api_answers] == [1, 2, 3, 4]
    assert len({r for r, _ in api_answers}) > 1  # seed 7 spreads the four: the order is the router's, not chance
    with kvreplay.serve_sim(time_scale=0) as one:  # one server, no router
        assert (one.router, one.replica_urls, one.target_args) == (None, (), ("--target", one.url))
        import urllib.request

        with urllib.request.urlopen(one.url + "/metrics", timeout=30) as r:
            assert r.status == 200
    import urllib.error

    import pytest

    with pytest.raises(urllib.error.URLError):  # stopped with the block
        urllib.request.urlopen(one.url + "/metrics", timeout=5)


def test_serve_sim_api_refuses_what_the_cli_refuses(tmp_path):
    import socket

    import pytest

    with pytest.raises(kvreplay.ConfigError, match="unknown option 'no_such'"), kvreplay.serve_sim(no_such=1):
        pass
    with pytest.raises(kvreplay.ConfigError, match="must be an integer >= 1"), kvreplay.serve_sim(replicas=0):
        pass
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{port}: "), kvreplay.serve_sim(port=port):
            pass


def test_report_api_equals_cli_on_a_killed_run(tmp_path, capsys):
    """``kvreplay report DIR --html`` and ``kvreplay.write_report(DIR, html=True)`` on two copies of a run whose
    summary.json is gone: both rebuild it, print/return the same files, write the same report.md."""
    import shutil

    import pytest

    a = tmp_path / "a"
    assert main(["run", str(DEMO), "--target", "sim", "--sim-time-scale", "0", "--phase", "p:forward:c1:first4",
                 "--out", str(a), "--quiet"]) == 0
    (a / "summary.json").unlink()
    b = tmp_path / "b"
    shutil.copytree(a, b)
    capsys.readouterr()
    assert main(["report", str(a), "--html"]) == 0
    printed = capsys.readouterr().out
    r = kvreplay.write_report(b, html=True)
    assert (r.kind, r.summary_rebuilt, r.block_errors, r.status) == ("run", str(b / "summary.json"), [], None)
    assert r.files == [str(b / "report.md"), str(b / "report.html")]
    lines = [f"summary.json was missing: rebuilt from records.jsonl: {r.summary_rebuilt}", *r.files]
    assert printed == "\n".join(lines).replace(str(b), str(a)) + "\n"
    assert json.loads((b / "summary.json").read_text())["phases"][0]["ok"] == 4  # first4: four bodies
    assert (b / "report.md").read_text().replace(str(b), str(a)) == (a / "report.md").read_text()
    # nothing there: exit 2 / FileNotFoundError; the other kinds are told by the file they hold
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty")]) == 2
    with pytest.raises(FileNotFoundError):
        kvreplay.write_report(tmp_path / "empty")
    from kvreplay.api.reporting import report_kind

    (tmp_path / "ab").mkdir()
    (tmp_path / "ab" / "ab.json").write_text("{}")
    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "experiment.json").write_text("{}")
    assert [report_kind(tmp_path / n) for n in ("ab", "exp", "empty")] == ["ab", "experiment", "run"]


def test_demo_api_equals_cli(tmp_path, capsys):
    """``kvreplay demo`` and ``kvreplay.demo``: the bundled 52 bodies primed forward then replayed in reverse,
    the same tokens and cached tokens phase by phase (the simulator is deterministic at time scale 0)."""
    assert main(["demo", "--out", str(tmp_path / "cli"), "--sim-time-scale", "0", "--quiet"]) == 0
    capsys.readouterr()
    r = kvreplay.demo(out=tmp_path / "api", sim={"time_scale": 0})
    cli = json.loads((tmp_path / "cli" / "summary.json").read_text())
    api = json.loads((Path(r.run_dir) / "summary.json").read_text())
    assert [p["name"] for p in api["phases"]] == ["prime", "replay"]
    assert [(p["ok"], p["tokens"]) for p in api["phases"]] == [(p["ok"], p["tokens"]) for p in cli["phases"]]
    assert [p["ok"] for p in api["phases"]] == [52, 52]
    assert api["phases"][0]["tokens"]["prompt"] == 190516  # the bundled workload's 52 bodies (module docstring)
    plans = [json.loads((d / "plan.json").read_text()) for d in (tmp_path / "cli", Path(r.run_dir))]
    assert [[x["order"] for x in p["phases"]] for p in plans] == [["forward", "reverse"]] * 2
