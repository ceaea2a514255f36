"""Issue 27 item 1: transport health is part of the contract.

A server that dies (the simulator's ``die`` fault: the connection of the request that
hits it is dropped before any response byte, and every later connection is refused)
makes every later send a *transport* failure. ``max_transport_failures`` (default 3)
consecutive ones abort the run (``aborted.reason: transport``); the positions left are
``sent: false``. ``failed_transport`` / ``failed_output`` split ``failed``;
``--max-error-rate`` counts both, ``--max-output-error-rate`` only the latter.

Expected figures by hand: die@3 at C1 over 8 positions: requests 1-2 ok, request 3
dropped before any response byte on its pooled connection, so the client retries it
once on a new one (``runner.h1``'s stale-connection retry), which is refused
(``connect``, ``reconnects: 1``); 4 and 5 refused: three consecutive -> abort after 5
sends, 3 positions never sent.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

from kvreplay.cli import main

ROOT = Path(__file__).resolve().parents[2]
MTBENCH = ROOT / "fixtures" / "workloads" / "mtbench-52"


def _run(out: Path, *extra: str, phase: str = "a:forward:c1:first8", fault: str = "die@3") -> tuple[int, dict, list]:
    argv = ["run", str(MTBENCH), "--target", "sim", "--sim-time-scale", "0", "--sim-output-tokens", "4",
            "--out", str(out), "--quiet", "--report", "none", "--sim-fault", fault, "--phase", phase, *extra]
    rc = main(argv)
    summary = json.loads((out / "summary.json").read_text())
    recs = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    return rc, summary, recs


def test_dead_server_aborts_after_three_consecutive_transport_failures(tmp_path):
    rc, s, recs = _run(tmp_path / "r")
    assert rc == 3
    ab = s["aborted"]
    assert ab["reason"] == "transport"
    assert (ab["consecutive"], ab["sent"], ab["planned"]) == (3, 5, 8)
    assert "5 of 8 planned requests sent, 2 reached the server" in ab["message"]
    (ph,) = s["phases"]
    assert (ph["ok"], ph["sent"], ph["not_sent"]) == (2, 5, 3)
    assert (ph["failed_transport"], ph["failed_output"]) == (3, 0)
    assert ph["failed"] == {"connect": 3}
    by_pos = {r["position"]: r for r in recs}
    assert [by_pos[i]["status"] for i in range(8)] == ["ok", "ok", "connect", "connect", "connect",
                                                       "aborted", "aborted", "aborted"]
    assert [by_pos[i]["sent"] for i in range(8)] == [True] * 5 + [False] * 3
    assert {by_pos[i]["error"] for i in range(5, 8)} == {"transport"}


def test_max_transport_failures_zero_never_aborts(tmp_path):
    rc, s, _ = _run(tmp_path / "r", "--max-transport-failures", "0")
    (ph,) = s["phases"]
    assert s["aborted"] is None
    assert (ph["ok"], ph["sent"], ph["failed_transport"], ph["failed_output"]) == (2, 8, 6, 0)


def test_a_larger_limit_waits_for_that_many(tmp_path):
    rc, s, _ = _run(tmp_path / "r", "--max-transport-failures", "5")
    (ph,) = s["phases"]
    assert s["aborted"]["reason"] == "transport"
    assert (ph["sent"], ph["not_sent"], ph["failed_transport"]) == (7, 1, 5)


def test_output_error_rate_ignores_transport_failures_max_error_rate_counts_them(tmp_path):
    # 24 positions, the server dead from request 3: 22 transport failures, no output failure.
    phase = "a:forward:c1:first24"
    _, s, _ = _run(tmp_path / "out", "--max-transport-failures", "0", "--max-output-error-rate", "0.1",
                   phase=phase)
    assert s["aborted"] is None
    assert (s["phases"][0]["failed_transport"], s["phases"][0]["failed_output"]) == (22, 0)
    _, s, _ = _run(tmp_path / "all", "--max-transport-failures", "0", "--max-error-rate", "0.1", phase=phase)
    # checked from the 20th send on: 18/20 failed > 10%
    assert s["aborted"]["reason"] == "error_rate"
    assert s["phases"][0]["sent"] == 20


def test_output_failures_count_as_output_not_transport(tmp_path):
    _, s, _ = _run(tmp_path / "r", fault="http401@2")
    (ph,) = s["phases"]
    assert (ph["failed_transport"], ph["failed_output"]) == (0, 1)


def test_refused_port_without_a_backend(tmp_path):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens: every connection is refused
    out = tmp_path / "r"
    rc = main(["run", str(MTBENCH), "--target", f"http://127.0.0.1:{port}", "--backend", "none", "--out", str(out),
               "--quiet", "--report", "none", "--phase", "a:forward:c1:first6", "--connect-timeout", "2"])
    s = json.loads((out / "summary.json").read_text())
    assert rc == 3 and s["aborted"]["reason"] == "transport"
    assert (s["phases"][0]["sent"], s["phases"][0]["not_sent"], s["phases"][0]["failed"]) == (3, 3, {"connect": 3})


def test_deadline_message_has_no_float_noise(tmp_path):
    # a window step's deadline is passed as "time left" plus "time gone"; their sum is the
    # window's deadline to the ms (8 s, never "8.00001 s")
    import asyncio

    from kvreplay.plan import build_plan, parse_phase
    from kvreplay.runner import RunOptions, execute_plan
    from kvreplay.workload import load_workload

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    wl = load_workload(MTBENCH)
    plan = build_plan(wl, [parse_phase("a:forward:c1:first2")])
    opts = RunOptions(target_url=f"http://127.0.0.1:{port}", out_dir=tmp_path / "r", quiet=True,
                      stop_new_after_s=0.0, elapsed_before_s=8.0000099)
    summary = asyncio.run(execute_plan(plan, plan.bind(wl), opts))
    assert summary["aborted"]["message"] == "no new requests after 8 s"
