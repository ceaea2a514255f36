"""The runner against a tiny mock streaming server (no counters)."""

import asyncio
import json
from pathlib import Path

import orjson
from mockserver import MockServer

from kvreplay.plan import build_plan, parse_phase
from kvreplay.report.markdown import render_markdown
from kvreplay.runner import RunOptions, execute_plan
from kvreplay.workload import load_workload


def read_records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]


def run(wl_path, phases, out, **cfg):
    async def go():
        srv = MockServer(**cfg)
        await srv.start()
        try:
            wl = load_workload(wl_path)
            plan = build_plan(wl, [parse_phase(p) for p in phases])
            # report.md as `kvreplay run` has the runner write it (the runner never imports report/)
            summary = await execute_plan(plan, wl, RunOptions(target_url=srv.base_url, out_dir=out, quiet=True),
                                         render_report=render_markdown)
            return srv, summary
        finally:
            await srv.stop()

    return asyncio.run(go())


def test_c4_really_runs_four_at_once(small_workload, tmp_path):
    srv, summary = run(small_workload, ["a:forward:c4"], tmp_path / "o", delay_s=0.15)
    assert srv.peak == 4
    assert summary["phases"][0]["ok"] == 6
    # 6 requests of >= 150 ms at C4 take two rounds, not six.
    assert summary["phases"][0]["wall_s"] < 6 * 0.15


def test_c1_is_serial_and_bodies_are_exact(small_workload, tmp_path):
    srv, _ = run(small_workload, ["a:reverse:c1"], tmp_path / "o", delay_s=0.01)
    assert srv.peak == 1
    files = sorted(small_workload.glob("*.json"))
    assert srv.bodies == [f.read_bytes() for f in reversed(files)]


def test_records_plan_and_summary(small_workload, tmp_path):
    out = tmp_path / "o"
    _, summary = run(small_workload, ["prime:forward:c1", "replay:reverse:c1"], out, tokens=5, itl_s=0.002,
                     delay_s=0.02, cached=7)
    recs = read_records(out)
    assert len(recs) == 12
    prime = [r["body_sha256"] for r in recs if r["phase"] == "prime"]
    replay = [r["body_sha256"] for r in recs if r["phase"] == "replay"]
    assert replay == prime[::-1]
    r = recs[0]
    assert r["status"] == "ok" and r["finish_reason"] == "stop" and r["done_marker"] is True
    assert r["usage"]["completion_tokens"] == 5 and r["usage"]["cached_tokens"] == 7
    assert r["content_deltas"] == 5 and r["text_head"] == "t0 t1 t2 t3 t4 "
    # the 20 ms delay before the first token; libuv (uvloop) timers count whole milliseconds of
    # its cached loop time, so the server's 20 ms sleep can end after 19.x ms of monotonic time
    assert r["ttft_ns"] >= 19_000_000
    assert r["t_sent_ns"] < r["t_first_byte_ns"] <= r["t_first_token_ns"] <= r["t_last_token_ns"] <= r["t_done_ns"]
    assert r["itl"]["n"] == 4
    for key in ("url", "target", "port", "run_id", "out"):
        assert key not in r
    plan = orjson.loads((out / "plan.json").read_bytes())
    assert [s["body_sha256"] for s in plan["phases"][1]["sequence"]] == replay
    assert summary["phases"][0]["tokens"]["cached"] == 42
    assert summary["phases"][0]["ttft_ms"]["n"] == 6 and summary["phases"][0]["itl_ms"]["n"] == 24
    assert (out / "histograms" / "prime.ttft.hlog").exists()
    assert "| prime | 1 | 6/6 |" in (out / "report.md").read_text()


def test_unknown_cached_tokens_is_null_not_zero(small_workload, tmp_path):
    out = tmp_path / "o"
    _, summary = run(small_workload, ["a:forward:c1"], out, cached=None)
    assert all(r["usage"]["cached_tokens"] is None for r in read_records(out))
    assert summary["phases"][0]["tokens"]["cached_unknown"] == 6


def test_http_error_is_a_record_and_auth_aborts(small_workload, tmp_path):
    out = tmp_path / "o"
    _, summary = run(small_workload, ["a:forward:c1"], out, status=500, error_msg="bad thing")
    recs = read_records(out)
    assert [r["status"] for r in recs] == ["http"] * 6
    assert recs[0]["error"] == "bad thing" and recs[0]["http_status"] == 500
    assert summary["aborted"] is None and summary["phases"][0]["failed"] == {"http": 6}
    out2 = tmp_path / "o2"
    _, summary = run(small_workload, ["a:forward:c1"], out2, status=401, error_msg="no key")
    recs = read_records(out2)
    assert recs[0]["status"] == "http" and [r["status"] for r in recs[1:]] == ["aborted"] * 5
    assert all(r["sent"] is False for r in recs[1:])
    assert summary["aborted"]["reason"] == "auth"


def test_oom_error_aborts(small_workload, tmp_path):
    _, summary = run(small_workload, ["a:forward:c1"], tmp_path / "o", status=500,
                     error_msg="CUDA out of memory. Tried to allocate 2.00 GiB")
    assert summary["aborted"]["reason"] == "server_fatal"


def test_cut_stream_is_cut(small_workload, tmp_path):
    out = tmp_path / "o"
    run(small_workload, ["a:forward:c1"], out, tokens=5, cut_after=2)
    recs = read_records(out)
    assert {r["status"] for r in recs} == {"cut"}
    assert recs[0]["content_deltas"] == 2


def test_connect_failure_is_a_record(small_workload, tmp_path):
    async def go():
        wl = load_workload(small_workload)
        plan = build_plan(wl, [parse_phase("a:forward:c1")])
        # Port 9 on loopback: nothing listens there (discard service is not run here). Every position
        # must end as a record, so consecutive transport failures do not abort (None; the default
        # of 3 is tested in tests/integration/test_transport_abort.py).
        return await execute_plan(plan, wl, RunOptions(target_url="http://127.0.0.1:9", out_dir=tmp_path / "o",
                                                       quiet=True, connect_timeout_s=2,
                                                       max_transport_failures=None))

    summary = asyncio.run(go())
    assert summary["phases"][0]["failed"] == {"connect": 6}
