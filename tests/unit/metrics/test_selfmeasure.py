"""Client self-measurement: loop lag of a blocked loop, thresholds, merge across workers."""

import asyncio
import time

from kvreplay.metrics.selfmeasure import (
    CPU_UTILISATION,
    LOOP_LAG_P99_MS,
    MIN_LAG_SAMPLES,
    STALL_SHARE,
    STARVATION_SHARE,
    ClientMonitor,
    SchedStat,
    classify,
    merge_client,
    thresholds,
)


def test_blocked_loop_shows_lag_and_is_not_labelled_without_cpu_or_starvation():
    async def go():
        mon = ClientMonitor(interval_s=0.002)
        mon.start()
        for _ in range(6):
            await asyncio.sleep(0.003)  # let the probe re-arm
            time.sleep(0.05)  # the loop is blocked (off-CPU) for 50 ms: the probe fires >= ~45 ms late
        mon.stop()
        return mon

    mon = asyncio.run(go())
    j = mon.to_json()
    # Each stall is backfilled: >= 20 samples at 2 ms each (lower bounds: the probe may have
    # been armed up to one 3 ms sleep before the stall; sleep never returns early).
    assert j["loop_lag_samples"] >= 6 * 20
    assert j["loop_lag_max_ms"] >= 45.0
    assert j["loop_lag_p99_ms"] >= LOOP_LAG_P99_MS
    assert j["loop_late_s"] >= 6 * 0.04
    # Asleep in time.sleep: not running during the stalls.
    assert j["stall_cpu_share"] < STALL_SHARE
    # Not waiting for a CPU either, on a quiet machine: then the verdict is host_stalls. With
    # other jobs beside the suite the thread may really wait for a CPU (scheduler figures);
    # then, and only then, the label is client_bound (the test must not depend on the load).
    starved = ((j["starvation_share"] or 0.0) >= STARVATION_SHARE
               or (j["stall_wait_share"] or 0.0) >= STALL_SHARE)
    assert j["verdict"] == ("client_bound" if starved else "host_stalls")
    assert j["bound"] is starved
    assert j["late_sends"] is None and j["late_send_share"] is None  # closed loop


def test_a_stall_is_backfilled_as_stall_over_interval_samples():
    mon = ClientMonitor(interval_s=0.005)
    mon.mark(0, 0, 0)
    mon.observe(3_005_000_000, 0, 0)  # due at 5 ms, ran at 3.005 s: 3 s late
    j = mon.to_json()
    # 3000, 2995, ..., 5 ms: 3 s / 5 ms = 600 samples.
    assert j["loop_lag_samples"] == 600
    # HdrHistogram (3 significant digits) reports a bucket's highest equivalent value:
    # 3,000,000 us lies in the 2,048 us-wide bucket [2,998,272, 3,000,319].
    assert j["loop_lag_max_ms"] == 3000.319
    # p99: the int(0.99 * 600 + 0.5) = 594th smallest, 594 * 5 = 2970 ms -> bucket [2,969,600, 2,971,647].
    assert j["loop_lag_p99_ms"] == 2971.647
    # p50: the 300th, 1500 ms -> 1,024 us-wide bucket [1,499,136, 1,500,159].
    assert j["loop_lag_p50_ms"] == 1500.159
    assert j["loop_late_s"] == 3.0
    assert mon.stall_window_s == 3.005


def _starved_c256_phase(run_late_ns: int, wait_late_ns: int, starved_s: float) -> ClientMonitor:
    """A 0.2 s C256 phase (2,000 requests at C256 can take that little): 28 ticks on time at
    5 ms (the loop thread runs 1 ms of each), then one tick 55 ms late whose 60 ms window
    had the thread running ``run_late_ns`` and waiting for a CPU ``wait_late_ns``."""
    mon = ClientMonitor(interval_s=0.005)
    mon.mark(0, 0, 0)
    t = run = wait = 0
    for _ in range(28):
        t += 5_000_000
        run += 1_000_000
        mon.observe(t, run, wait)
    t += 60_000_000
    mon.observe(t, run + run_late_ns, wait + wait_late_ns)
    assert t == 200_000_000
    mon.cpu_s, mon.wall_s, mon.starved_s = 0.04, 0.2, starved_s
    return mon


def test_a_starved_c256_phase_is_client_bound_without_100_samples():
    mon = _starved_c256_phase(6_000_000, 54_000_000, starved_s=0.054)
    j = mon.to_json()
    # 28 on-time samples (0 ns, recorded as 1 us) + 55, 50, ..., 5 ms (11): 39 samples.
    assert j["loop_lag_samples"] == 39
    # p99: the int(0.99 * 39 + 0.5) = 39th = the max, 55 ms -> 32 us-wide bucket [54,976, 55,007].
    assert j["loop_lag_p99_ms"] == 55.007 and j["loop_lag_max_ms"] == 55.007
    assert j["loop_lag_p50_ms"] == 0.001
    assert j["cpu_utilisation"] == 0.2  # 0.04 s / 0.2 s: the client's own CPU stayed low
    assert j["starved_s"] == 0.054 and j["starvation_share"] == 0.27  # 0.054 / 0.2
    assert j["stall_cpu_share"] == 0.1  # 6 ms of the 60 ms window
    assert j["stall_wait_share"] == 0.9  # 54 ms of it
    assert j["loop_late_s"] == 0.055
    assert j["verdict"] == "client_bound" and j["bound"] is True


def test_the_same_lag_while_the_thread_slept_is_host_stalls():
    j = _starved_c256_phase(0, 0, starved_s=0.0).to_json()
    assert j["loop_lag_p99_ms"] == 55.007
    assert (j["stall_cpu_share"], j["stall_wait_share"], j["starvation_share"]) == (0.0, 0.0, 0.0)
    assert j["verdict"] == "host_stalls" and j["bound"] is False


def test_a_quiet_phase_is_not_flagged():
    mon = ClientMonitor(interval_s=0.005)
    mon.mark(0, 0, 0)
    for k in range(1, 41):
        mon.observe(k * 5_000_000 + 2_000_000 * (k % 2), k * 1_000_000, 0)  # every other tick 2 ms late
    mon.cpu_s, mon.wall_s, mon.starved_s = 0.95, 0.2, 0.0
    j = mon.to_json()
    # 40 samples: 20 of 0 (1 us) and 20 of 2 ms -> p99 = 2 ms (a 1 us-wide bucket at 2,000 us).
    assert j["loop_lag_samples"] == 40 and j["loop_lag_p99_ms"] == 2.0
    assert j["loop_late_s"] == 0.0 and j["stall_cpu_share"] is None
    # CPU over its threshold alone does not label a phase whose loop kept time.
    assert j["cpu_utilisation"] == 4.75
    assert j["verdict"] == "quiet" and j["bound"] is False


def test_classify_needs_lag_and_cpu_or_starvation():
    lag = LOOP_LAG_P99_MS
    assert classify(None, 0.99) == "quiet"
    assert classify(lag - 0.001, 0.99, 0.5, 1.0, 1.0) == "quiet"
    assert classify(lag, 0.0, 0.0, 0.0, 0.0) == "host_stalls"
    assert classify(lag, None, None, None, None) == "host_stalls"
    assert classify(lag, CPU_UTILISATION, None) == "client_bound"
    assert classify(lag, CPU_UTILISATION - 0.01, STARVATION_SHARE - 0.01, STALL_SHARE - 0.01,
                    STALL_SHARE - 0.01) == "host_stalls"
    assert classify(lag, 0.1, STARVATION_SHARE) == "client_bound"
    assert classify(lag, 0.1, 0.0, STALL_SHARE) == "client_bound"
    assert classify(lag, 0.1, 0.0, 0.0, STALL_SHARE) == "client_bound"
    t = thresholds()
    assert (t["cpu_utilisation"], t["starvation_share"], t["stall_share"], t["loop_lag_p99_ms"]) == (
        0.9, 0.1, 0.5, 10.0)
    assert t["min_lag_samples"] == MIN_LAG_SAMPLES == 0


def test_schedstat_reads_this_threads_times():
    s = SchedStat()
    if not s.available:  # not Linux: starvation is simply unmeasured
        assert s.read() is None
        return
    run0, wait0 = s.read()
    x = 0
    for i in range(200_000):
        x += i
    run1, wait1 = s.read()
    s.close()
    assert run1 > run0 and wait1 >= wait0 and s.read() is None


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
    assert m["verdict"] == "client_bound"  # parts from before the verdict: from "bound"
    a["verdict"], b["verdict"] = "host_stalls", "quiet"
    a["starved_s"], b["starved_s"] = 0.5, 0.25
    a["starvation_share"], b["starvation_share"] = 0.2, 0.05
    m = merge_client([a, b])
    assert m["verdict"] == "host_stalls" and m["starved_s"] == 0.75 and m["starvation_share"] == 0.2
    assert (m["late_sends"], m["timed_sends"], m["late_send_share"]) == (4, 40, 0.1)
