"""The runner's HTTP/1.1 client and the aiohttp path write the same records (all but times)."""

import asyncio
import json

import pytest
from helpers import write_chat_workload
from mockserver import MockServer

from kvreplay.plan import build_plan, parse_phase
from kvreplay.runner import RunOptions, execute_plan
from kvreplay.workload import load_workload

TIMES = {
    "t_intended_ns",
    "t_sent_ns",
    "t_headers_ns",
    "t_first_byte_ns",
    "t_first_token_ns",
    "t_first_content_ns",
    "t_last_token_ns",
    "t_done_ns",
    "ttft_ns",
    "tpot_ns",
    "e2e_ns",
    "queue_ns",
    "ttft_from_intended_ns",
    "e2e_from_intended_ns",
    "itl",
}


def _run(tmp_path, name, monkeypatch, http, server_cfg):
    if http:
        monkeypatch.setenv("KVREPLAY_HTTP", http)
    else:
        monkeypatch.delenv("KVREPLAY_HTTP", raising=False)
    wl_path = write_chat_workload(tmp_path / "wl", [("s", f"q{i}") for i in range(6)])
    out = tmp_path / name

    async def go():
        srv = MockServer(**server_cfg)
        await srv.start()
        try:
            wl = load_workload(wl_path)
            plan = build_plan(wl, [parse_phase("a:forward:c2")])
            return await execute_plan(
                plan, wl, RunOptions(target_url=srv.base_url, out_dir=out, quiet=True)
            )
        finally:
            await srv.stop()

    summary = asyncio.run(go())
    return summary, [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]


@pytest.mark.parametrize(
    "cfg",
    [{"tokens": 5}, {"status": 500}, {"tokens": 6, "cut_after": 3}],
    ids=["ok", "http500", "cut"],
)
def test_h1_and_aiohttp_records_agree(tmp_path, monkeypatch, cfg):
    s1, fast = _run(tmp_path, "fast", monkeypatch, None, cfg)
    s2, slow = _run(tmp_path, "aiohttp", monkeypatch, "aiohttp", cfg)
    assert len(fast) == len(slow) == 6
    by_pos = {r["position"]: r for r in slow}
    for r in fast:
        other = by_pos[r["position"]]
        assert list(r) == list(other)  # same keys, same order
        assert {k: v for k, v in r.items() if k not in TIMES} == {
            k: v for k, v in other.items() if k not in TIMES
        }
    assert s1["phases"][0]["failed"] == s2["phases"][0]["failed"]
