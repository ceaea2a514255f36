"""The API functions and the commands over them give the same results on the same input (issue 35).

Each command moved into ``kvreplay.api`` is run twice, through ``kvreplay.cli.main``
(its ``--json`` output) and through the API function, and the two must be equal; the
figures checked are independent of the code: the demo workload's 52 bodies hold 190,516
prompt tokens, and an entries cache of two snapshots serves 175,848 of them from cache
(the README's prime phase: 175848/190516).
"""

from __future__ import annotations

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
            "kvreplay.inspect_workload, kvreplay.import_workload, kvreplay.export_workload\n"
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

    assert main(["export", "vllm", str(DEMO), "--out", str(tmp_path / "cli.vllm.jsonl")]) == 0
    printed = capsys.readouterr().out
    exp = kvreplay.export_workload("vllm", DEMO, tmp_path / "api.vllm.jsonl")
    assert (exp.bodies, exp.lines) == (52, 52)
    assert printed.splitlines()[0] == f"52 bodies as 52 vllm custom lines -> {tmp_path / 'cli.vllm.jsonl'}"
    assert (tmp_path / "api.vllm.jsonl").read_bytes() == (tmp_path / "cli.vllm.jsonl").read_bytes()
