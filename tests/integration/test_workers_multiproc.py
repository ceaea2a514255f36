"""--workers N: one frozen sequence (dynamic claims, sends in position order), lossless merges."""

import asyncio
import json

import pytest
from helpers import INTERLEAVE_SIM, check_live_progress, interleave_scenario, write_chat_workload
from helpers import SlowSSE as _Slow

from kvreplay.cli import main
from kvreplay.metrics.histograms import LatencySet
from kvreplay.plan import build_plan, parse_phase
from kvreplay.runner import RunOptions
from kvreplay.runner.multiproc import execute_plan_workers, slots_of
from kvreplay.workload import load_workload


async def _run_workers(wl_path, phases, out, workers, **opts):
    loop = asyncio.get_running_loop()
    srv = await loop.create_server(_Slow, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    try:
        wl = load_workload(wl_path)
        plan = build_plan(wl, [parse_phase(p) for p in phases])
        return await execute_plan_workers(
            plan,
            wl,
            RunOptions(target_url=f"http://127.0.0.1:{port}", out_dir=out, quiet=True, **opts),
            workers=workers,
        )
    finally:
        srv.close()


def _records(out):
    return [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]


def test_slots_spread_the_concurrency():
    assert [slots_of(5, 2, i) for i in range(2)] == [3, 2]
    assert [slots_of(1, 3, i) for i in range(3)] == [1, 0, 0]
    assert sum(slots_of(256, 3, i) for i in range(3)) == 256


def test_sends_follow_position_and_claims_are_never_a_static_split(tmp_path):
    # Position 0 is slow (2 s). Two workers with one slot each: the one that took 0
    # is busy while the other must take every later position (a static split
    # would leave half of them to the busy worker).
    bodies = [("s", "SLOW first")] + [("s", f"q{i}") for i in range(1, 20)]
    wl = write_chat_workload(tmp_path / "wl", bodies)
    out = tmp_path / "o"
    summary = asyncio.run(_run_workers(wl, ["a:forward:c2"], out, 2))
    recs = _records(out)
    assert [r["position"] for r in recs] == list(range(20))
    assert {r["status"] for r in recs} == {"ok"}
    slow_worker = recs[0]["worker"]
    assert {r["worker"] for r in recs[1:]} == {1 - slow_worker}
    sent = [r["t_sent_ns"] for r in recs]
    assert sent == sorted(sent)  # the plan's order of sends, across processes
    assert summary["workers"] == 2 and summary["phases"][0]["ok"] == 20


def test_merged_histograms_equal_one_histogram_of_all_records(tmp_path):
    wl = write_chat_workload(tmp_path / "wl", [("s", f"q{i}") for i in range(60)])
    out = tmp_path / "o"
    summary = asyncio.run(_run_workers(wl, ["a:forward:c4", "b:reverse:c3:x2"], out, 3))
    recs = _records(out)
    assert len(recs) == 180 and {r["worker"] for r in recs} == {0, 1, 2}
    for ph in summary["phases"]:
        mine = [r for r in recs if r["phase"] == ph["name"]]
        assert [r["position"] for r in mine] == list(range(len(mine)))
        for metric in ("ttft", "e2e"):
            ls = LatencySet()
            for r in mine:
                ls.record_ns(r[f"{metric}_ns"])
            assert (
                ph[f"{metric}_ms"] == ls.summary_ms()
            )  # HdrHistogram add across processes is exact
        assert ph["itl_ms"]["n"] == sum(r["itl"]["n"] for r in mine)
        assert ph["tokens"]["completion"] == 4 * len(mine)
        assert ph["client"]["workers"] == 3 and ph["client"]["cpu_s"] > 0
        assert (out / "histograms" / ph["histograms"]["ttft"]).exists()
    assert not (out / "workers").exists()
    assert json.loads((out / "plan.json").read_text())["run"]["workers"] == 3


@pytest.mark.slow
def test_cli_workers_against_the_simulator_keeps_counters_on_worker_0(tmp_path):
    wl = write_chat_workload(
        tmp_path / "wl", [("You are terse. " * 30, f"q{i}?") for i in range(8)]
    )
    out = tmp_path / "o"
    rc = main(
        [
            "run",
            str(wl),
            "--target",
            "sim",
            "--sim-time-scale",
            "0",
            "--phase",
            "prime:forward:c1",
            "--phase",
            "load:forward:c4",
            "--workers",
            "2",
            "--out",
            str(out),
            "--quiet",
        ]
    )
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    prime, load = summary["phases"]
    assert summary["workers"] == 2 and prime["ok"] == 8 and load["ok"] == 8
    assert prime["attribution"] == "per_request" and load["attribution"] == "phase_only"
    recs = _records(out)
    assert all(r["counter_delta"] is not None for r in recs if r["phase"] == "prime")
    assert {r["worker"] for r in recs if r["phase"] == "prime"} == {
        0
    }  # C1: worker 0 holds the one slot
    assert load["counter_delta"] is not None
    # every worker's records name the phase's attribution, not only worker 0's
    assert {r["attribution"] for r in recs if r["phase"] == "load"} == {"phase_only"}
    # worker 0's counters.jsonl is kept in the run directory (8 C1 reads + before/phase_end x 2)
    log = [json.loads(x) for x in (out / "counters.jsonl").read_text().splitlines()]
    assert log[0]["full"] and [x["at"] for x in log] == [
        "before", *range(8), "phase_end", "before", "phase_end"]


def test_a_deadline_in_one_worker_stops_all_and_every_position_is_accounted(tmp_path):
    wl = write_chat_workload(tmp_path / "wl", [("s", f"SLOW {i}") for i in range(12)])
    out = tmp_path / "o"
    summary = asyncio.run(
        _run_workers(wl, ["a:forward:c2", "b:forward:c2"], out, 2, stop_new_after_s=2.5)
    )
    recs = _records(out)
    assert len(recs) == 24  # sent + not sent == planned, each position once
    assert sorted((r["phase"], r["position"]) for r in recs) == [
        (p, i) for p in "ab" for i in range(12)
    ]
    a, b = summary["phases"]
    assert a["sent"] + a["not_sent"] == 12 and a["not_sent"] >= 1
    assert b["sent"] == 0 and b["deferred"] is True
    assert summary["aborted"] == {"reason": "deadline", "message": "no new requests after 2.5 s"}
    assert {r["error"] for r in recs if not r["sent"]} == {"deadline"}


def test_open_loop_is_one_schedule_across_workers(tmp_path):
    wl = write_chat_workload(tmp_path / "wl", [("s", f"q{i}") for i in range(16)])
    out = tmp_path / "o"
    summary = asyncio.run(_run_workers(wl, ["o:forward:c4:r50:poisson3"], out, 2))
    plan = json.loads((out / "plan.json").read_text())
    offsets = [item["intended_ns"] for item in plan["phases"][0]["sequence"]]
    recs = _records(out)
    assert {r["worker"] for r in recs} == {0, 1}
    t0 = recs[0]["t_intended_ns"] - offsets[0]
    assert [r["t_intended_ns"] - t0 for r in recs] == offsets  # one phase start for both processes
    ph = summary["phases"][0]
    assert ph["client"]["timed_sends"] == 16 and ph["queue_ms"]["n"] == 16


@pytest.mark.slow
def test_interleaved_workloads_run_in_worker_processes(tmp_path):
    """The same plan as one process (test_ab_mitigation_sim) gives the same hits with 2 workers:
    at C1 worker 0 holds the one slot; the interleaved bodies are appended in every worker."""
    wl, plan = interleave_scenario(tmp_path)
    out = tmp_path / "o"
    rc = main(["run", str(wl), "--plan", str(plan), *INTERLEAVE_SIM, "--workers", "2", "--out", str(out), "--quiet"])
    assert rc == 0
    phases = {p["name"]: p for p in json.loads((out / "summary.json").read_text())["phases"]}
    assert {n: p["counter_delta"]["hits"] for n, p in phases.items()} == {"forward": 0, "grouped": 12, "mixed": 8}
    assert phases["mixed"]["ok"] == 24


def test_the_coordinator_shows_worker_progress_while_the_run_goes_on(tmp_path):
    check_live_progress(tmp_path, execute_plan_workers)



def test_plain_progress_lines_come_from_the_workers(tmp_path, capsys):
    """Off a terminal (CI logs), the phase-start lines the workers forward are printed too."""
    wl = write_chat_workload(tmp_path / "wl", [("s", f"q{i}") for i in range(6)])
    rc = main(["run", str(wl), "--sim-time-scale", "0", "--phase", "a:forward:c2", "--workers", "2",
               "--out", str(tmp_path / "o")])
    assert rc == 0
    err = capsys.readouterr().err
    assert "phase a: 6 requests at C2" in err and "phase a: ok 6/6" in err


def _child_cmdlines():
    import contextlib
    from pathlib import Path

    pids = set()
    for task in Path("/proc/self/task").glob("*"):
        pids |= {int(x) for x in (task / "children").read_text().split()}
    out = []
    for pid in pids:
        with contextlib.suppress(OSError):  # already gone
            out.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
    return out


@pytest.mark.skipif(not __import__("os").path.exists("/proc/self/task"), reason="needs Linux /proc")
def test_workers_fork_from_a_fork_server_that_is_gone_after_the_run(tmp_path):
    """The workers fork from a fork server that preloaded the runner; it is stopped and reaped
    at the end, so the next run's workers start from a fresh one (this moment's environment)."""
    wl = write_chat_workload(tmp_path / "wl", [("s", f"q{i}") for i in range(6)])
    summary = asyncio.run(_run_workers(wl, ["a:forward:c2"], tmp_path / "o", 2))
    assert summary["phases"][0]["ok"] == 6 and {r["worker"] for r in _records(tmp_path / "o")} <= {0, 1}
    assert not [c for c in _child_cmdlines() if "forkserver" in c]
