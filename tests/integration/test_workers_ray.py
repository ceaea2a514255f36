"""--ray ADDRESS: the --workers runner as Ray actors, against a local Ray instance on this machine.

One Ray instance serves the module (started here, stopped by ``ray.shutdown()``,
which ends the processes it started). The load goes to servers on 127.0.0.1;
Ray's own services bind the host's address (Ray refuses loopback by design).
"""

import asyncio
import json
import os
import subprocess
import sys
from functools import partial

import pytest
from helpers import INTERLEAVE_SIM, SlowSSE, check_live_progress, interleave_scenario, write_chat_workload

from kvreplay.cli import main
from kvreplay.commands.run import open_backend
from kvreplay.metrics.histograms import LatencySet
from kvreplay.plan import build_plan, parse_phase
from kvreplay.report.markdown import render_markdown
from kvreplay.runner import RunOptions
from kvreplay.workload import load_workload

ray = pytest.importorskip("ray")

from kvreplay.runner.rayrun import Coordinator, execute_plan_ray  # noqa: E402

pytestmark = [pytest.mark.ray, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def ray_instance():
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False,
             configure_logging=False)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


async def _run_ray(wl_path, phases, out, workers, **opts):
    loop = asyncio.get_running_loop()
    srv = await loop.create_server(SlowSSE, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        wl = load_workload(wl_path)
        plan = build_plan(wl, [parse_phase(p) for p in phases])
        return await execute_plan_ray(
            plan, wl,
            RunOptions(target_url=f"http://127.0.0.1:{port}", out_dir=out, quiet=True, **opts),
            workers=workers, address="auto", render_report=render_markdown,
        )
    finally:
        srv.close()


def _records(out):
    return [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]


def test_coordinator_hands_out_each_position_once_and_the_rest_after_a_stop():
    async def body():
        c = Coordinator([5, 2], workers=2)
        got = [await c.claim(0) for _ in range(3)]
        await c.stop("deadline")
        rest = await c.claim(0)
        after = await c.claim(0)
        other = await c.claim(1)
        return got, rest, after, other

    got, rest, after, other = asyncio.run(body())
    assert got == [(0, 1, ""), (1, 2, ""), (2, 3, "")]
    assert rest == (3, 5, "deadline")  # every remaining position at once, to be recorded as not sent
    assert after == (5, 5, "deadline")
    assert other == (0, 2, "deadline")


def test_coordinator_barrier_waits_for_every_worker_and_breaks():
    async def body():
        c = Coordinator([1], workers=2)
        first = asyncio.ensure_future(c.barrier("0:start"))
        await asyncio.sleep(0.05)
        waited = not first.done()
        second = await c.barrier("0:start")
        late = asyncio.ensure_future(c.barrier("0:end"))
        await asyncio.sleep(0.05)
        await c.break_barriers()
        return waited, await first, second, await late, await c.barrier("1:start")

    assert asyncio.run(body()) == (True, True, True, False, False)


def test_sends_follow_position_across_actors_and_are_never_a_static_split(ray_instance, tmp_path):
    # Position 0 is slow (2 s): the actor that took it is busy, so the other takes every later one.
    bodies = [("s", "SLOW first")] + [("s", f"q{i}") for i in range(1, 16)]
    wl = write_chat_workload(tmp_path / "wl", bodies)
    out = tmp_path / "o"
    summary = asyncio.run(_run_ray(wl, ["a:forward:c2"], out, 2))
    recs = _records(out)
    assert [r["position"] for r in recs] == list(range(16))
    assert {r["status"] for r in recs} == {"ok"}
    slow = recs[0]["worker"]
    assert {r["worker"] for r in recs[1:]} == {1 - slow}
    for w in (0, 1):
        mine = [r["t_sent_ns"] for r in recs if r["worker"] == w]
        assert mine == sorted(mine)
    # Claims are answered in position order; each actor stamps its send when the answer
    # arrives, so two actors' stamps may invert by the answer's transit, never by a request.
    sent = [r["t_sent_ns"] for r in recs]
    assert all(b - a > -50e6 for a, b in zip(sent, sent[1:], strict=False))
    assert summary["workers"] == 2 and summary["phases"][0]["ok"] == 16
    hosts = summary["ray"]["hosts"]
    assert [h["worker"] for h in hosts] == [0, 1]
    assert {h["clock"] for h in hosts} == {"shared"} and len({h["pid"] for h in hosts}) == 2
    assert os.getpid() not in {h["pid"] for h in hosts}
    assert "host clock" in (out / "report.md").read_text()
    assert not (out / "workers").exists()


def test_merged_histograms_equal_one_histogram_of_all_records(ray_instance, tmp_path):
    wl = write_chat_workload(tmp_path / "wl", [("s", f"q{i}") for i in range(30)])
    out = tmp_path / "o"
    summary = asyncio.run(_run_ray(wl, ["a:forward:c4", "b:reverse:c3"], out, 2))
    recs = _records(out)
    assert len(recs) == 60 and {r["worker"] for r in recs} == {0, 1}
    for ph in summary["phases"]:
        mine = [r for r in recs if r["phase"] == ph["name"]]
        assert [r["position"] for r in mine] == list(range(30))
        ls = LatencySet()
        for r in mine:
            ls.record_ns(r["ttft_ns"])
        assert ph["ttft_ms"] == ls.summary_ms()  # HdrHistogram add across actors is exact
        assert ph["tokens"]["completion"] == 4 * 30
    assert json.loads((out / "plan.json").read_text())["run"]["ray"]["address"] == "auto"


def test_a_deadline_stops_every_actor_and_every_position_is_accounted_once(ray_instance, tmp_path):
    wl = write_chat_workload(tmp_path / "wl", [("s", f"SLOW {i}") for i in range(10)])
    out = tmp_path / "o"
    summary = asyncio.run(_run_ray(wl, ["a:forward:c2", "b:forward:c2"], out, 2, stop_new_after_s=2.5))
    recs = _records(out)
    assert sorted((r["phase"], r["position"]) for r in recs) == [(p, i) for p in "ab" for i in range(10)]
    a, b = summary["phases"]
    assert a["sent"] + a["not_sent"] == 10 and a["not_sent"] >= 1
    assert b["sent"] == 0 and b["deferred"] is True
    assert summary["aborted"] == {"reason": "deadline", "message": "no new requests after 2.5 s"}
    assert {r["error"] for r in recs if not r["sent"]} == {"deadline"}


def test_open_loop_is_one_schedule_across_actors(ray_instance, tmp_path):
    wl = write_chat_workload(tmp_path / "wl", [("s", f"q{i}") for i in range(12)])
    out = tmp_path / "o"
    asyncio.run(_run_ray(wl, ["o:forward:c4:r40:poisson3"], out, 2))
    offsets = [item["intended_ns"] for item in json.loads((out / "plan.json").read_text())["phases"][0]["sequence"]]
    recs = _records(out)
    assert {r["worker"] for r in recs} == {0, 1}
    t0 = recs[0]["t_intended_ns"] - offsets[0]
    assert [r["t_intended_ns"] - t0 for r in recs] == offsets


def test_workers_on_another_host_align_their_clock_through_the_wall_clock(ray_instance, tmp_path, monkeypatch):
    """A driver whose boot id differs from the actors' (as on another host): the actors
    align their run origin through time.time_ns, say so, and latencies stay exact."""
    import kvreplay.runner.rayrun as rayrun

    monkeypatch.setattr(rayrun, "boot_id", lambda: "another-host")
    wl = write_chat_workload(tmp_path / "wl", [("s", f"q{i}") for i in range(8)])
    out = tmp_path / "o"
    summary = asyncio.run(_run_ray(wl, ["a:forward:c2"], out, 2))
    assert {h["clock"] for h in summary["ray"]["hosts"]} == {"wall-aligned"}
    assert "wall-aligned" in (out / "report.md").read_text()
    recs = _records(out)
    assert [r["position"] for r in recs] == list(range(8)) and {r["status"] for r in recs} == {"ok"}
    for r in recs:
        assert 0 < r["ttft_ns"] <= r["e2e_ns"]
        # run-relative send times stay within the wall/monotonic skew (well under 1 s) of the run
        assert 0 <= r["t_sent_ns"] < (summary["wall_s"] + 1) * 1e9


@pytest.mark.slow
def test_cli_connects_to_a_ray_address_and_keeps_counters_on_worker_0(ray_instance, tmp_path):
    """A second driver (a new process) joins the running instance by its GCS address."""
    wl = write_chat_workload(tmp_path / "wl", [("You are terse. " * 30, f"q{i}?") for i in range(6)])
    out = tmp_path / "o"
    proc = subprocess.run(
        [sys.executable, "-m", "kvreplay", "run", str(wl), "--target", "sim", "--sim-time-scale", "0",
         "--phase", "prime:forward:c1", "--phase", "load:forward:c2", "--workers", "2",
         "--ray", ray_instance, "--out", str(out), "--quiet"],
        capture_output=True, text=True, timeout=200,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    prime, load = summary["phases"]
    assert prime["ok"] == 6 and load["ok"] == 6 and summary["ray"]["address"] == ray_instance
    assert prime["attribution"] == "per_request" and load["attribution"] == "phase_only"
    recs = _records(out)
    assert {r["worker"] for r in recs if r["phase"] == "prime"} == {0}  # C1: worker 0 holds the one slot
    assert all(r["counter_delta"] is not None for r in recs if r["phase"] == "prime")
    assert {r["attribution"] for r in recs if r["phase"] == "load"} == {"phase_only"}  # every worker
    assert load["tokens"]["cached"] > 0
    # The reports the CLI leaves say where each worker ran and with which clock.
    assert "w1@" in (out / "report.md").read_text() and "host clock" in (out / "report.md").read_text()
    assert "(shared clock)" in (out / "report.html").read_text()  # the prime phase left the shared prefix in the cache


@pytest.mark.slow
def test_two_interrupts_cancel_in_flight_and_every_position_has_a_record(ray_instance, tmp_path):
    """First SIGINT: no new sends anywhere; second: requests in flight are cancelled. The
    actors still return their records, so the run directory is complete (exit 3)."""
    import signal
    import time

    from helpers import MTBENCH

    out = tmp_path / "o"
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvreplay", "run", str(MTBENCH), "--target", "sim", "--sim-time-scale", "1",
         "--phase", "a:forward:c4", "--phase", "b:reverse:c1", "--workers", "2", "--ray", ray_instance,
         "--out", str(out), "--quiet"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 90
        while not (out / "plan.json").exists() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)
        time.sleep(3.0)  # actors started and requests in flight
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 3, err[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["aborted"]["reason"] == "interrupt"
    assert summary["aborted"]["message"].startswith("operator interrupt (signal)")
    recs = _records(out)
    assert sorted((r["phase"], r["position"]) for r in recs) == [(p, i) for p in "ab" for i in range(52)]
    assert any(r["status"] == "aborted" for r in recs)  # cancelled in flight, still recorded
    assert summary["phases"][1]["sent"] == 0


def test_interleaved_workloads_ship_to_the_actors(ray_instance, tmp_path):
    """Actors get the bound workload from the driver (interleaved bodies appended), not paths."""
    wl, plan = interleave_scenario(tmp_path)
    out = tmp_path / "o"
    rc = main(["run", str(wl), "--plan", str(plan), *INTERLEAVE_SIM, "--workers", "2", "--ray", "auto",
               "--out", str(out), "--quiet"])
    assert rc == 0
    phases = {p["name"]: p for p in json.loads((out / "summary.json").read_text())["phases"]}
    assert {n: p["counter_delta"]["hits"] for n, p in phases.items()} == {"forward": 0, "grouped": 12, "mixed": 8}
    assert phases["mixed"]["ok"] == 24


def test_without_ray_the_flag_is_a_clean_error(tmp_path, monkeypatch, capsys):
    wl = write_chat_workload(tmp_path / "wl", [("s", "q")])
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    rc = main(["run", str(wl), "--phase", "a:forward:c1", "--ray", "auto", "--workers", "2",
               "--out", str(tmp_path / "o"), "--quiet"])
    assert rc == 2
    assert "kvreplay[ray]" in capsys.readouterr().err


def test_an_address_nothing_listens_at_is_a_quick_clean_error(tmp_path):
    """ray.init retries an unreachable GCS without end; kvreplay checks the address first."""
    import socket
    import time

    from kvreplay.errors import ConfigError
    from kvreplay.runner.rayrun import check_address

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    with pytest.raises(ConfigError, match="cannot reach Ray"):
        check_address(f"127.0.0.1:{port}")
    with pytest.raises(ConfigError, match="give auto, local"):
        check_address("nonsense")
    wl = write_chat_workload(tmp_path / "wl", [("s", "q")])
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "kvreplay", "run", str(wl), "--phase", "a:forward:c1", "--workers", "2",
         "--ray", f"ray://127.0.0.1:{port}", "--out", str(tmp_path / "o"), "--quiet"],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2 and "cannot reach Ray" in proc.stderr
    assert time.monotonic() - t0 < 30


def test_the_coordinator_shows_worker_progress_while_the_run_goes_on(tmp_path, ray_instance):
    check_live_progress(tmp_path, execute_plan_ray, address="auto")


def test_a_failed_worker_fails_the_run_but_keeps_every_record_written(ray_instance, tmp_path):
    """Worker 0 cannot build its counter adapter (an unknown backend name): the run fails,
    and the records the other worker wrote come home before the actors' folders go."""
    wl = write_chat_workload(tmp_path / "wl", [("s", f"q{i}") for i in range(6)])
    out = tmp_path / "o"

    async def body():
        w = load_workload(wl)
        plan = build_plan(w, [parse_phase("a:forward:c2")])
        opts = RunOptions(target_url="http://127.0.0.1:9", out_dir=out, quiet=True)
        return await execute_plan_ray(plan, w, opts, workers=2, address="auto",
                                      backend_factory=partial(open_backend, "no-such-backend",
                                                              "http://127.0.0.1:9", None))

    with pytest.raises(RuntimeError, match="worker 0 failed") as ei:
        asyncio.run(body())
    assert "no-such-backend" in str(ei.value)
    recs = [json.loads(x) for x in (out / "workers" / "w1" / "records.jsonl").read_text().splitlines()]
    assert sorted(r["position"] for r in recs) == list(range(6)) and not any(r["sent"] for r in recs)
    assert (out / "plan.json").exists()
