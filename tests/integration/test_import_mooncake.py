"""kvreplay import mooncake: block texts follow hash_ids; arrivals, plan; simulator hits agree."""

import asyncio
import json
from pathlib import Path

import orjson
import pytest

from kvreplay.cli import main
from kvreplay.plan import PhaseSpec, build_plan, load_plan_toml
from kvreplay.runner import RunOptions, execute_plan
from kvreplay.sim import SimConfig, SimServer
from kvreplay.sim.tokenizer import count_tokens
from kvreplay.workload import load_workload
from kvreplay.workload.importers import block_text, import_mooncake

FIXTURE = (
    Path(__file__).resolve().parents[2]
    / "fixtures"
    / "traces"
    / "mooncake_fast25_conversation_trace.jsonl"
)


def write_trace(path: Path, rows: list[dict]) -> Path:
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in rows) + b"\n")
    return path


def blocks_of(text: str, b: int) -> list[list[str]]:
    words = text.split(" ")[1:]  # every word is space-led
    return [words[i : i + b] for i in range(0, len(words), b)]


SYNTH = [
    {"timestamp": 100, "input_length": 48, "output_length": 4, "hash_ids": [0, 1, 2]},
    {"timestamp": 130, "input_length": 60, "output_length": 5, "hash_ids": [0, 1, 3, 4]},
    {"timestamp": 130, "input_length": 20, "output_length": 6, "hash_ids": [0, 5]},
    {"timestamp": 400, "input_length": 32, "output_length": 7, "hash_ids": [6, 7]},
    {"timestamp": 950, "input_length": 70, "output_length": 8, "hash_ids": [0, 1, 2, 8, 9]},
]


def test_bodies_share_exactly_the_blocks_their_hash_ids_share(tmp_path):
    b = 16
    res = import_mooncake(
        write_trace(tmp_path / "t.jsonl", SYNTH), tmp_path / "w" / "mc", block_tokens=b
    )
    assert res.workload.name == "mc.jsonl" and res.requests == 5
    bodies = [orjson.loads(x) for x in res.workload.read_bytes().splitlines()]
    prompts = [x["prompt"] for x in bodies]
    for row, body, text in zip(SYNTH, bodies, prompts, strict=True):
        assert count_tokens(text) == row["input_length"]  # the simulator's own tokenizer
        assert body["max_tokens"] == row["output_length"] and body["stream"] is True
    blocks = [blocks_of(t, b) for t in prompts]
    for i in range(len(SYNTH)):
        for j in range(i + 1, len(SYNTH)):
            a, c = SYNTH[i]["hash_ids"], SYNTH[j]["hash_ids"]
            k = 0
            while k < min(len(a), len(c)) and a[k] == c[k]:
                k += 1
            for t in range(k):
                n = min(len(blocks[i][t]), len(blocks[j][t]))
                assert blocks[i][t][:n] == blocks[j][t][:n], (i, j, t)
                if t < len(a) - 1 and t < len(c) - 1:
                    assert blocks[i][t] == blocks[j][t]  # full blocks: identical
            if k < min(len(a), len(c)):
                assert blocks[i][k] != blocks[j][k][: len(blocks[i][k])], (
                    i,
                    j,
                    k,
                )  # first different id
    # (0,1,2) in rows 0 and 4: three full blocks of 16 words, identical
    assert prompts[4].startswith(prompts[0])
    assert (
        block_text(7, b) == block_text(7, b)
        and block_text(7, 4) == block_text(7, b)[: len(block_text(7, 4))]
    )


def test_arrivals_and_plan(tmp_path):
    res = import_mooncake(
        write_trace(tmp_path / "t.jsonl", SYNTH),
        tmp_path / "mc.jsonl",
        block_tokens=16,
        concurrency=8,
        time_scale=0.5,
    )
    assert json.loads(res.arrivals.read_text()) == [r["timestamp"] for r in SYNTH]
    specs, settings = load_plan_toml(res.plan)
    assert settings["workload"] == str(res.workload)
    (spec,) = specs
    assert (
        spec.arrival == f"trace:{res.arrivals}" and spec.concurrency == 8 and spec.time_scale == 0.5
    )
    plan = build_plan(load_workload(res.workload), specs)
    assert plan.phases[0].intended_ns == tuple(
        round((r["timestamp"] - 100) * 1e6 * 0.5) for r in SYNTH
    )


def test_cli_import_and_bad_trace(tmp_path, capsys):
    trace = write_trace(tmp_path / "t.jsonl", SYNTH)
    assert (
        main(
            [
                "import",
                "mooncake",
                str(trace),
                "--out",
                str(tmp_path / "o.jsonl"),
                "--limit",
                "3",
                "--block-tokens",
                "16",
                "--chat",
            ]
        )
        == 0
    )
    assert "3 bodies" in capsys.readouterr().out
    wl = load_workload(tmp_path / "o.jsonl")
    assert len(wl) == 3 and {b.kind for b in wl.bodies} == {"chat"}
    bad = write_trace(
        tmp_path / "bad.jsonl",
        [{"timestamp": 0, "input_length": 100, "output_length": 1, "hash_ids": [0]}],
    )
    assert (
        main(
            [
                "import",
                "mooncake",
                str(bad),
                "--out",
                str(tmp_path / "x.jsonl"),
                "--block-tokens",
                "16",
            ]
        )
        == 2
    )
    assert "cannot hold input_length" in capsys.readouterr().err


def _subset_of_fixture() -> list[dict]:
    rows = [json.loads(x) for x in FIXTURE.read_text().splitlines()[:300]]
    keep = set(range(6))
    for j in (133, 137, 191, 261, 280):  # rows that share more than block 0 with an earlier row
        best, arg = 0, None
        for i in range(j):
            a, c = rows[i]["hash_ids"], rows[j]["hash_ids"]
            k = 0
            while k < min(len(a), len(c)) and a[k] == c[k]:
                k += 1
            if k > best:
                best, arg = k, i
        keep |= {arg, j}
    return [rows[i] for i in sorted(keep)]


def _expected_cached(rows: list[dict], b: int) -> list[int]:
    """Radix, C1, no eviction: leading blocks full here and in an earlier prompt, <= (n-1)//B."""

    def full(r, t):
        return t < len(r["hash_ids"]) - 1 or r["input_length"] == len(r["hash_ids"]) * b

    out = []
    for j, r in enumerate(rows):
        best = 0
        for q in rows[:j]:
            k = 0
            while (
                k < min(len(q["hash_ids"]), len(r["hash_ids"]))
                and q["hash_ids"][k] == r["hash_ids"][k]
                and full(q, k)
                and full(r, k)
            ):
                k += 1
            best = max(best, k)
        out.append(min(best, (r["input_length"] - 1) // b) * b)
    return out


@pytest.mark.slow
def test_replay_against_the_simulator_hits_as_the_hash_ids_say(tmp_path):
    rows = _subset_of_fixture()
    expected = _expected_cached(rows, 512)
    assert max(expected) > 512 and expected[0] == 0  # the subset has real reuse beyond block 0
    res = import_mooncake(write_trace(tmp_path / "t.jsonl", rows), tmp_path / "mc.jsonl")
    wl = load_workload(res.workload)

    async def go():
        sim = SimServer(
            SimConfig(cache="radix", block_size=512, device_blocks=100_000, time_scale=0.0)
        )
        await sim.start(host="127.0.0.1", port=0)
        try:
            plan = build_plan(wl, [PhaseSpec(name="replay", concurrency=1)])
            return await execute_plan(
                plan, wl, RunOptions(target_url=sim.base_url, out_dir=tmp_path / "run", quiet=True)
            )
        finally:
            await sim.stop()

    summary = asyncio.run(go())
    recs = [json.loads(x) for x in (tmp_path / "run" / "records.jsonl").read_text().splitlines()]
    assert [r["status"] for r in recs] == ["ok"] * len(rows)
    assert [r["usage"]["prompt_tokens"] for r in recs] == [r["input_length"] for r in rows]
    assert [r["usage"]["cached_tokens"] for r in recs] == expected
    assert summary["phases"][0]["tokens"]["cached"] == sum(expected)
