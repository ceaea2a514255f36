"""Every phase carries the client's self-measurement (CPU, loop lag, late sends) and its label."""

import asyncio
import json

from helpers import write_chat_workload
from mockserver import MockServer

from kvreplay.plan import build_plan, parse_phase
from kvreplay.rundir import read_hlog
from kvreplay.runner import RunOptions, execute_plan
from kvreplay.workload import load_workload


def test_summary_has_client_figures_and_label(tmp_path):
    wl_path = write_chat_workload(tmp_path / "wl", [("s", f"q{i}") for i in range(12)])
    out = tmp_path / "o"

    async def go():
        srv = MockServer(tokens=4, delay_s=0.01)
        await srv.start()
        try:
            wl = load_workload(wl_path)
            plan = build_plan(
                wl, [parse_phase("closed:forward:c2"), parse_phase("open:forward:c4:r200")]
            )
            return await execute_plan(
                plan, wl, RunOptions(target_url=srv.base_url, out_dir=out, quiet=True)
            )
        finally:
            await srv.stop()

    summary = asyncio.run(go())
    assert set(summary["client_thresholds"]) >= {
        "loop_lag_p99_ms",
        "cpu_utilisation",
        "late_send_ms",
    }
    closed, opened = summary["phases"]
    for ph in (closed, opened):
        c = ph["client"]
        assert isinstance(ph["client_bound"], bool) and ph["client_bound"] == c["bound"]
        assert c["cpu_s"] > 0 and c["cpu_utilisation"] > 0
        assert c["loop_lag_samples"] >= 1
        h = read_hlog(out / "histograms" / c["loop_lag_log"])
        assert h.get_total_count() == c["loop_lag_samples"]
    assert closed["client"]["late_sends"] is None
    assert opened["client"]["timed_sends"] == opened["sent"] == 12
    assert 0 <= opened["client"]["late_sends"] <= 12
    on_disk = json.loads((out / "summary.json").read_text())
    assert on_disk["phases"][1]["client"]["timed_sends"] == 12
