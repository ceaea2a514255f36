"""Runner reliability against the mock server: timeouts, deadlines, error rate, pools, secrets."""

import asyncio
import json
from pathlib import Path

import aiohttp
from helpers import write_chat_workload
from mockserver import MockServer

from kvreplay.cli import main
from kvreplay.plan import build_plan, parse_phase
from kvreplay.runner import RunOptions, execute_plan, send_body
from kvreplay.workload import load_workload


def records(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]


async def _run(wl_path, phases, out, server_cfg, **opts):
    srv = MockServer(**server_cfg)
    await srv.start()
    try:
        wl = load_workload(wl_path)
        plan = build_plan(wl, [parse_phase(p) for p in phases])
        summary = await execute_plan(plan, wl, RunOptions(target_url=srv.base_url, out_dir=out, quiet=True, **opts))
        return srv, summary
    finally:
        await srv.stop()


def test_silent_stream_is_a_read_idle_timeout_and_the_run_goes_on(small_workload, tmp_path):
    out = tmp_path / "o"
    _, summary = asyncio.run(_run(small_workload, ["a:forward:c2"], out, {"tokens": 3, "stall_s": 1.0},
                                  read_idle_timeout_s=0.3))
    recs = records(out)
    assert {r["status"] for r in recs} == {"timeout"}
    assert {r["timeout_kind"] for r in recs} == {"read_idle"}
    assert {r["error"] for r in recs} == {"read_idle_timeout"}  # never an empty reason (B12)
    assert all(r["content_deltas"] == 1 for r in recs)  # what arrived before the silence is kept
    assert summary["phases"][0]["failed"] == {"timeout": 6}


def test_long_prefill_is_not_a_client_failure_by_default(small_workload, tmp_path):
    # B12: no total timeout by default; a slow first token within read-idle succeeds.
    out = tmp_path / "o"
    _, summary = asyncio.run(_run(small_workload, ["a:forward:c1:first2"], out, {"delay_s": 0.4},
                                  read_idle_timeout_s=5))
    assert summary["phases"][0]["ok"] == 2
    assert min(r["ttft_ns"] for r in records(out)) >= 390_000_000  # 0.4 s sleep; timers may fire µs early
    out2 = tmp_path / "o2"
    asyncio.run(_run(small_workload, ["a:forward:c1:first2"], out2, {"delay_s": 0.4}, total_timeout_s=0.1))
    assert {(r["status"], r["error"]) for r in records(out2)} == {("timeout", "client_total_timeout")}


def test_stop_new_deadline_leaves_every_position_accounted(tmp_path):
    wl = write_chat_workload(tmp_path / "wl", [("s", f"q{i}") for i in range(30)])
    out = tmp_path / "o"
    _, summary = asyncio.run(_run(wl, ["a:forward:c1", "b:forward:c1"], out, {"delay_s": 0.05},
                                  stop_new_after_s=0.3))
    recs = records(out)
    assert len(recs) == 60  # ok + failed + not sent == planned
    a, b = summary["phases"]
    assert 1 <= a["ok"] < 30 and a["ok"] + a["not_sent"] == 30
    assert b["sent"] == 0 and b["not_sent"] == 30 and b["deferred"] is True
    assert summary["aborted"]["reason"] == "deadline"


def test_hard_deadline_cancels_in_flight_with_records(tmp_path):
    wl = write_chat_workload(tmp_path / "wl", [("s", f"q{i}") for i in range(8)])
    out = tmp_path / "o"
    _, summary = asyncio.run(_run(wl, ["a:forward:c4"], out, {"delay_s": 5.0}, hard_deadline_s=0.3))
    recs = records(out)
    assert len(recs) == 8
    sent = [r for r in recs if r["sent"]]
    assert len(sent) == 4 and {r["status"] for r in sent} == {"aborted"}
    assert summary["aborted"]["reason"] == "hard_deadline"


def test_max_error_rate_aborts(tmp_path):
    wl = write_chat_workload(tmp_path / "wl", [("s", f"q{i}") for i in range(40)])
    out = tmp_path / "o"
    _, summary = asyncio.run(_run(wl, ["a:forward:c1"], out, {"status": 503}, max_error_rate=0.5,
                                  error_rate_min_requests=5))
    assert summary["aborted"]["reason"] == "error_rate"
    assert summary["phases"][0]["sent"] == 5 and summary["phases"][0]["not_sent"] == 35


def test_c200_is_not_capped_by_the_connection_pool(tmp_path):
    # B11-A: aiohttp's default TCPConnector(limit=100) would cap in-flight at 100.
    wl = write_chat_workload(tmp_path / "wl", [("s", f"q{i}") for i in range(200)])
    out = tmp_path / "o"
    srv, summary = asyncio.run(_run(wl, ["a:forward:c200"], out, {"delay_s": 3.0, "tokens": 1}))
    assert srv.peak == 200
    assert summary["phases"][0]["ok"] == 200
    assert summary["phases"][0]["peak_in_flight"] == 200  # the client's own count agrees


def test_idle_gap_longer_than_server_keepalive(small_workload, tmp_path):
    # B11-B: the server closes idle connections after 0.3 s; a second turn after 0.6 s succeeds.
    async def go():
        srv = MockServer(keepalive_s=0.3)
        await srv.start()
        try:
            raw = (small_workload / "000.json").read_bytes()
            conn = aiohttp.TCPConnector(limit=1, keepalive_timeout=30)
            async with aiohttp.ClientSession(connector=conn) as s:
                url = srv.base_url + "/v1/chat/completions"
                first = await send_body(s, url, raw, headers={"Content-Type": "application/json"})
                await asyncio.sleep(0.6)
                second = await send_body(s, url, raw, headers={"Content-Type": "application/json"})
            return first, second
        finally:
            await srv.stop()

    first, second = asyncio.run(go())
    assert first.status == "ok" and second.status == "ok"
    assert second.reconnects in (0, 1)


def test_api_key_never_written(small_workload, tmp_path, monkeypatch, capsys):
    secret = "sk-test-4f1c2a9e-never-write-me"
    monkeypatch.setenv("KVREPLAY_TEST_KEY", secret)

    async def serve():
        srv = MockServer()
        await srv.start()
        return srv

    loop = asyncio.new_event_loop()
    try:
        srv = loop.run_until_complete(serve())
        out = tmp_path / "o"
        rc = loop.run_until_complete(asyncio.to_thread(
            main, ["run", str(small_workload), "--target", srv.base_url, "--backend", "none",
                   "--phase", "a:forward:c1", "--api-key-env", "KVREPLAY_TEST_KEY", "--out", str(out), "--quiet"]))
        loop.run_until_complete(srv.stop())
    finally:
        loop.close()
    assert rc == 0
    captured = capsys.readouterr()
    assert secret not in captured.out + captured.err
    files = [p for p in out.rglob("*") if p.is_file()]
    assert files
    for p in files:
        assert secret.encode() not in p.read_bytes(), p


def test_exit_codes(small_workload, tmp_path):
    assert main(["run", str(tmp_path / "missing"), "--target", "http://127.0.0.1:9", "--phase", "a:forward:c1",
                 "--out", str(tmp_path / "x"), "--quiet"]) == 2
    assert not (tmp_path / "x").exists()  # bad input: nothing written, nothing sent
    assert main(["run", str(small_workload), "--target", "http://127.0.0.1:9", "--phase", "a:sideways:c1",
                 "--quiet"]) == 2
