"""A real 3 s stall of the event loop during a phase is measured and flagged (no coordinated omission).

A blocking call is injected on the runner's loop (from the observer, which the runner calls on
the loop) once the phase's third record is in. Busy (CPU-spinning) it is the client's own CPU:
``client_bound``. Asleep (``time.sleep``), the loop thread neither ran nor waited for a CPU:
``host_stalls``, reported with its figures and not labelled client-bound.
"""

import asyncio
import time

import pytest
from helpers import write_chat_workload
from mockserver import MockServer

from kvreplay.metrics.selfmeasure import LAG_INTERVAL_S
from kvreplay.plan import build_plan, parse_phase
from kvreplay.report.diagnose import diagnose
from kvreplay.runner import RunOptions, execute_plan
from kvreplay.runner.observer import NullObserver
from kvreplay.workload import load_workload

STALL_S = 3.0


class Staller(NullObserver):
    def __init__(self, busy: bool) -> None:
        self.busy, self.n = busy, 0

    def on_record(self, rec):
        self.n += 1
        if self.n != 3:
            return
        if self.busy:
            end = time.perf_counter() + STALL_S
            while time.perf_counter() < end:
                pass
        else:
            time.sleep(STALL_S)


def _run(tmp_path, busy):
    wl_path = write_chat_workload(tmp_path / "wl", [("s", f"q{i}") for i in range(40)])
    out = tmp_path / "o"

    async def go():
        srv = MockServer(tokens=4, delay_s=0.005)
        await srv.start()
        try:
            wl = load_workload(wl_path)
            plan = build_plan(wl, [parse_phase("stall:forward:c8")])
            return await execute_plan(plan, wl, RunOptions(target_url=srv.base_url, out_dir=out, quiet=True),
                                      observer=Staller(busy))
        finally:
            await srv.stop()

    return asyncio.run(go())


def _check_stall_figures(c):
    # The probe tick due during the stall runs >= 3 s late; backfilled, the stall is
    # >= 3 s / 5 ms = 600 samples (lower bounds: time.sleep and the spin never end early;
    # a loaded host adds to them). Without the backfill it would be one sample.
    assert c["loop_lag_max_ms"] >= STALL_S * 1e3 - LAG_INTERVAL_S * 1e3
    assert c["loop_lag_samples"] >= int(STALL_S / LAG_INTERVAL_S) - 1
    assert c["loop_late_s"] >= STALL_S - LAG_INTERVAL_S
    assert c["loop_lag_p99_ms"] >= 10.0


@pytest.mark.timeout(120)
def test_busy_3s_stall_is_client_bound(tmp_path):
    s = _run(tmp_path, busy=True)
    (ph,) = s["phases"]
    c = ph["client"]
    _check_stall_figures(c)
    # Spinning: the loop thread ran or waited for a CPU for the whole late window.
    share = c["stall_cpu_share"] + (c["stall_wait_share"] or 0.0)
    assert share >= 0.9
    assert c["verdict"] == "client_bound" and ph["client_bound"] is True
    (f,) = [f for f in diagnose(s, None, []) if f.rule == "client_bound"]
    assert f.finding.startswith(f"phase stall: the client may have added up to {c['loop_lag_max_ms']} ms")


@pytest.mark.timeout(120)
def test_sleeping_3s_stall_is_host_stalls(tmp_path):
    s = _run(tmp_path, busy=False)
    (ph,) = s["phases"]
    c = ph["client"]
    _check_stall_figures(c)
    assert c["stall_cpu_share"] < 0.1  # asleep, not running
    assert c["verdict"] == "host_stalls" and ph["client_bound"] is False
    (f,) = [f for f in diagnose(s, None, []) if f.rule == "host_stalls"]
    assert f.finding.startswith(f"phase stall: host scheduling stalls: its event loop ran late by up to "
                                f"{c['loop_lag_max_ms']} ms")
