"""Client self-measurement: loop lag of a blocked loop, thresholds, merge across workers."""

import asyncio
import time

from kvreplay.metrics.selfmeasure import (
    CPU_UTILISATION,
    LOOP_LAG_P99_MS,
    MIN_LAG_SAMPLES,
    ClientMonitor,
    merge_client,
    thresholds,
)


def test_blocked_loop_shows_lag_and_is_client_bound():
    async def go():
        mon = ClientMonitor(interval_s=0.002)
        mon.start()
        for _ in range(6):
            await asyncio.sleep(0.003)  # let the probe re-arm
            time.sleep(0.05)  # the loop is blocked for 50 ms: the probe fires at least ~45 ms late
        mon.stop()
        return mon

    mon = asyncio.run(go())
    j = mon.to_json()
    assert j["loop_lag_samples"] >= 6
    assert j["loop_lag_max_ms"] >= 40.0  # a lower bound only: time.sleep never returns early
    assert j["loop_lag_p99_ms"] >= LOOP_LAG_P99_MS
    assert j["bound"] is False  # too few samples for a p99 to label the phase
    for _ in range(MIN_LAG_SAMPLES):  # a long phase of such stalls
        mon.lag.record_ns(50_000_000)
    assert mon.to_json()["bound"] is True
    assert j["late_sends"] is None and j["late_send_share"] is None  # closed loop


def test_thresholds_label_by_cpu_or_lag():
    mon = ClientMonitor()
    mon.cpu_s, mon.wall_s = 0.95, 1.0
    assert mon.to_json()["bound"] is True  # CPU over the threshold, no lag samples
    mon.cpu_s = 0.5
    assert mon.to_json()["bound"] is False
    for _ in range(MIN_LAG_SAMPLES):
        mon.lag.record_ns(int(LOOP_LAG_P99_MS * 1e6) + 2_000_000)
    assert mon.to_json()["bound"] is True
    assert thresholds()["cpu_utilisation"] == CPU_UTILISATION


def test_late_sends_counted_in_open_loop():
    mon = ClientMonitor()
    mon.open_loop = True
    mon.note_send(0, 500_000)  # 0.5 ms late: on time
    mon.note_send(0, 3_000_000)  # 3 ms late
    mon.cpu_s, mon.wall_s = 0.1, 1.0
    j = mon.to_json()
    assert (j["timed_sends"], j["late_sends"], j["late_send_share"]) == (2, 1, 0.5)


def test_merge_adds_cpu_and_keeps_the_worst_worker():
    a = {
        "bound": False,
        "cpu_s": 1.0,
        "cpu_utilisation": 0.4,
        "loop_lag_p99_ms": 2.0,
        "loop_lag_samples": 10,
        "timed_sends": 10,
        "late_sends": 1,
        "late_send_share": 0.1,
    }
    b = {
        "bound": True,
        "cpu_s": 2.0,
        "cpu_utilisation": 0.95,
        "loop_lag_p99_ms": 30.0,
        "loop_lag_samples": 5,
        "timed_sends": 30,
        "late_sends": 3,
        "late_send_share": 0.1,
    }
    m = merge_client([a, b])
    assert m["cpu_s"] == 3.0 and m["cpu_utilisation"] == 0.95 and m["loop_lag_p99_ms"] == 30.0
    assert m["bound"] is True and m["loop_lag_samples"] == 15 and m["workers"] == 2
    assert (m["late_sends"], m["timed_sends"], m["late_send_share"]) == (4, 40, 0.1)
