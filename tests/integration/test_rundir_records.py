"""records.jsonl at run level: flushed per record (kill -9 mid-phase), redacted by its writer.

Kill -9: the simulator runs in this process on its own thread (port 0) and stalls its 6th
generation request for 30 s (fault ``stall@6``); ``kvreplay run`` runs in a subprocess at C1
without counters. At C1 a request is sent only after the previous one's record was written, so
when the simulator has seen request 6, the records of requests 1-5 were written: a SIGKILL then
must leave exactly those 5 records, each a whole JSON line (a writer that buffered them would
leave none: 5 records are about 6 KB, under any stdio buffer). ``kvreplay report`` then rebuilds
the summary: 5 ok of 8 planned, ``aborted: killed``, 3 positions without a record.

Redaction: a server that echoes the ``Authorization`` key back in its stream (text, usage,
timings; ``tests/hostile/server.py`` ``key_echo_content``). The runner redacts a response's
strings before it builds the record; the records writer redacts each line again. The second
test switches the first off, so it fails if the writer skips redaction.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import orjson
import pytest
from helpers import write_chat_workload
from hostile.harness import KEY
from hostile.server import HostileServer

from kvreplay import redaction
from kvreplay.cli import main
from kvreplay.plan import build_plan, parse_phase
from kvreplay.redaction import MARKER
from kvreplay.runner import RunOptions, execute_plan
from kvreplay.sim import SimServer
from kvreplay.sim.config import SimConfig
from kvreplay.sim.faults import parse_fault
from kvreplay.workload import load_workload

N_BODIES = 8
STALLED = 6  # the simulator's 6th generation request never answers in time


class SimThread:
    """A SimServer on its own event loop thread (so this process can watch it while a subprocess runs)."""

    def __init__(self, config: SimConfig) -> None:
        self.srv = SimServer(config)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    def __enter__(self) -> SimServer:
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self.srv.start(host="127.0.0.1", port=0), self.loop).result(10)
        return self.srv

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self.loop).result(15)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    async def _shutdown(self) -> None:
        await self.srv.stop()
        me = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not me]  # the stalled request's handler
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def test_kill_9_mid_phase_leaves_every_completed_record_whole_and_report_rebuilds(tmp_path):
    wl = write_chat_workload(tmp_path / "wl", [("sys", f"question {i}") for i in range(N_BODIES)])
    out = tmp_path / "run"
    cfg = SimConfig(time_scale=0, faults=(parse_fault(f"stall@{STALLED}:s=30"),))
    with SimThread(cfg) as srv:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kvreplay", "run", str(wl), "--target", srv.base_url, "--backend", "none",
             "--phase", "a:forward:c1", "--out", str(out), "--quiet"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 60
            while srv.engine.requests_seen < STALLED:
                assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
                assert time.monotonic() < deadline, "the stalled request never arrived"
                time.sleep(0.02)
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.stderr.close()
    data = (out / "records.jsonl").read_bytes()
    assert data.endswith(b"\n")
    recs = [orjson.loads(line) for line in data.split(b"\n")[:-1]]  # every line a whole JSON record
    assert [(r["position"], r["body_index"], r["status"]) for r in recs] == [(i, i, "ok") for i in range(5)]
    assert not (out / "summary.json").exists()
    assert main(["report", str(out)]) == 0
    summary = orjson.loads((out / "summary.json").read_bytes())
    ph = summary["phases"][0]
    assert (ph["planned"], ph["ok"], ph["not_sent"]) == (N_BODIES, 5, 3)
    assert summary["aborted"]["reason"] == "killed"
    assert "3 of 8 planned positions have no record of being sent" in summary["aborted"]["message"]
    assert (out / "report.md").exists()


def _run_against_echo(tmp_path: Path) -> bytes:
    wl = write_chat_workload(tmp_path / "wl", [("sys", f"question {i}") for i in range(3)])
    out = tmp_path / "run"

    async def go() -> None:
        w = load_workload(wl)
        plan = build_plan(w, [parse_phase("a:forward:c1")])
        await execute_plan(plan, w, RunOptions(target_url=srv.url, out_dir=out, quiet=True,
                                               headers={"Authorization": f"Bearer {KEY}"}))

    redaction.clear()
    try:
        with HostileServer("key_echo_content") as srv:
            asyncio.run(go())
    finally:
        redaction.clear()
    return (out / "records.jsonl").read_bytes()


def _assert_redacted(data: bytes) -> list[dict]:
    recs = [orjson.loads(line) for line in data.splitlines()]
    assert len(recs) == 3 and all(r["status"] == "ok" for r in recs)
    assert KEY.encode() not in data
    for r in recs:  # the echo is there, as the marker
        assert r["usage_raw"][MARKER] == MARKER and r["timings"] == {"note": MARKER}
    return recs


def test_records_of_a_key_echoing_server_hold_the_marker_not_the_key(tmp_path):
    data = _run_against_echo(tmp_path)
    recs = _assert_redacted(data)
    # no 8-character piece either: the key cut by text_head's 256 characters loses its tail too
    parts = {KEY[i:i + 8] for i in range(len(KEY) - 7)}
    assert [p for p in parts if p.encode() in data] == []
    assert all(r["text_head"] == "c" * 240 + MARKER for r in recs)


def test_the_records_writer_redacts_on_its_own(tmp_path, monkeypatch):
    import kvreplay.runner._runner as runner_mod

    # The runner's own pass over the response's strings, off: what reaches the writer holds the
    # key (usage keys and values, timings); the writer replaces every whole occurrence.
    monkeypatch.setattr(runner_mod, "redact_outcome", lambda out: out)
    _assert_redacted(_run_against_echo(tmp_path))


@pytest.fixture(autouse=True)
def _no_secrets_left():
    yield
    redaction.clear()
