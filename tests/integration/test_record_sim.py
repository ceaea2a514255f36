"""``kvreplay record`` in front of the simulator: exact bodies in order, same replay, signals, limits.

The "Done when" flow of issue 19 as written: ``kvreplay serve-sim`` and ``kvreplay record
--upstream URL --listen 127.0.0.1:PORT2 --out W`` as processes, the bundled 52 bodies
replayed through the proxy, then ``kvreplay run W --target sim``.
"""

from __future__ import annotations

import hashlib
import json
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import MTBENCH

from kvreplay.cli import main
from kvreplay.plan import load_plan_toml
from kvreplay.workload import load_workload

ORIGINALS = sorted(MTBENCH.glob("*.json"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Proc:
    """A kvreplay subprocess whose first stdout line names its URL."""

    def __init__(self, tmp: Path, name: str, *argv: str) -> None:
        self.err_path = tmp / f"{name}.stderr"
        self.err = open(self.err_path, "wb")  # noqa: SIM115 - the child writes to it until close()
        self.p = subprocess.Popen([sys.executable, "-m", "kvreplay", *argv], stdout=subprocess.PIPE,
                                  stderr=self.err)
        line = self.p.stdout.readline().decode()
        if "listening on " not in line:
            self.p.kill()
            pytest.fail(f"{name} did not start: {line!r} {self.stderr()}")
        self.url = line.split("listening on ")[1].split()[0]

    def stderr(self) -> str:
        if not self.err.closed:
            self.err.flush()
        return self.err_path.read_text(errors="replace")[-3000:]

    def stop(self, sig: int = signal.SIGINT, timeout_s: float = 30) -> int:
        if self.p.poll() is None:
            self.p.send_signal(sig)
        try:
            return self.p.wait(timeout=timeout_s)
        finally:
            if self.p.poll() is None:
                self.p.kill()
            self.p.stdout.close()
            self.err.close()


def records(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]


def replay(workload: Path, out: Path, *extra: str) -> tuple[list[dict], dict]:
    rc = main(["run", str(workload), "--target", "sim", "--sim-time-scale", "0", "--phase", "prime:forward:c1",
               "--phase", "replay:reverse:c1", "--out", str(out), "--quiet", *extra])
    assert rc == 0
    return records(out), json.loads((out / "summary.json").read_text())


def test_done_when_flow_bundled_bodies_byte_identical_and_replay_equal(tmp_path):
    sim = Proc(tmp_path, "sim", "serve-sim", "--port", "0", "--time-scale", "0")
    port2 = free_port()
    w = tmp_path / "W"
    try:
        rec = Proc(tmp_path, "record", "record", "--upstream", sim.url, "--listen", f"127.0.0.1:{port2}",
                   "--out", str(w))
        assert rec.url == f"http://127.0.0.1:{port2}"
        try:
            assert main(["run", str(MTBENCH), "--target", rec.url, "--phase", "through:forward:c1",
                         "--out", str(tmp_path / "through"), "--quiet"]) == 0
        finally:
            assert rec.stop() == 0, rec.stderr()
    finally:
        sim.stop()
    err = rec.stderr()
    m = re.search(r"(\d+) requests proxied; 52 bodies \(686133 bytes\) retained; skipped: path (\d+)\n", err)
    assert m and int(m[1]) == 52 + int(m[2]), err  # counters, identity: proxied, never retained
    # W holds the 52 bodies, byte-identical and in the same order, and the manifest only.
    files = sorted(p.name for p in w.iterdir())
    assert files == [f"{i:06d}.json" for i in range(52)] + ["capture.jsonl"]
    for i, orig in enumerate(ORIGINALS):
        assert (w / f"{i:06d}.json").read_bytes() == orig.read_bytes(), i
    orig_wl, cap_wl = load_workload(MTBENCH), load_workload(w)
    assert [b.sha256 for b in cap_wl.bodies] == [b.sha256 for b in orig_wl.bodies]
    assert cap_wl.sha256 == orig_wl.sha256
    # The manifest: one line per body, hashes in order, and the usage the client itself saw.
    man = [json.loads(x) for x in (w / "capture.jsonl").read_text().splitlines()]
    assert [m["index"] for m in man] == list(range(52))
    assert [m["body_sha256"] for m in man] == [hashlib.sha256(p.read_bytes()).hexdigest() for p in ORIGINALS]
    client = records(tmp_path / "through")
    assert [m["cached_tokens"] for m in man] == [r["usage"]["cached_tokens"] for r in client]
    assert [m["usage"]["prompt_tokens"] for m in man] == [r["usage"]["prompt_tokens"] for r in client]
    assert sum(m["cached_tokens"] for m in man) > 0  # the comparison is not between zeros
    assert all(m["status"] == 200 and m["outcome"] == "complete" and m["path"] == "/v1/chat/completions"
               for m in man)
    assert all(0 < m["ttft_ms"] <= m["e2e_ms"] for m in man)
    assert all(set(m["headers"]) <= {"content-type", "accept", "user-agent"} for m in man)
    # Arrivals and plan beside W.
    arrivals = json.loads((tmp_path / "W.arrivals.json").read_text())
    assert len(arrivals) == 52 and arrivals[0] == 0.0 and arrivals == sorted(arrivals)
    assert [m["arrival_ms"] for m in man] == arrivals
    specs, top = load_plan_toml(tmp_path / "W.plan.toml")
    assert top["workload"] == str(w)
    assert [(s.name, s.order, s.arrival) for s in specs] == [
        ("capture", "forward", f"trace:{tmp_path / 'W.arrivals.json'}")]
    # Replaying the capture = replaying the original: cached tokens and counter deltas.
    rec_o, sum_o = replay(MTBENCH, tmp_path / "orig")
    rec_c, sum_c = replay(w, tmp_path / "cap")
    assert [r["body_sha256"] for r in rec_c] == [r["body_sha256"] for r in rec_o]
    assert [r["usage"]["cached_tokens"] for r in rec_c] == [r["usage"]["cached_tokens"] for r in rec_o]
    assert [r["counter_delta"] for r in rec_c] == [r["counter_delta"] for r in rec_o]
    for a, b in zip(sum_o["phases"], sum_c["phases"], strict=True):
        assert a["counter_delta"] == b["counter_delta"] and a["tokens"] == b["tokens"]
    assert sum_c["phases"][1]["tokens"]["cached"] > 0


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_signal_mid_capture_leaves_a_workload_run_accepts(tmp_path, sig):
    sim = Proc(tmp_path, "sim", "serve-sim", "--port", "0", "--time-scale", "0.05")
    w = tmp_path / "W"
    client = None
    try:
        rec = Proc(tmp_path, "record", "record", "--upstream", sim.url, "--out", str(w))
        client = subprocess.Popen(
            [sys.executable, "-m", "kvreplay", "run", str(MTBENCH), "--target", rec.url, "--phase", "p:forward:c1",
             "--out", str(tmp_path / "client"), "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 40
        man = w / "capture.jsonl"
        while time.monotonic() < deadline:
            if man.exists() and len(man.read_bytes().splitlines()) >= 4:
                break
            time.sleep(0.02)
        else:
            pytest.fail("no capture lines in time: " + rec.stderr())
        assert rec.stop(sig) == 0, rec.stderr()
    finally:
        if client is not None:
            client.kill()
            client.wait()
        sim.stop()
    wl = load_workload(w)
    n = len(wl)
    assert 4 <= n < 52
    assert [b.raw for b in wl.bodies] == [p.read_bytes() for p in ORIGINALS[:n]]
    assert not [p.name for p in w.iterdir() if p.name.endswith(".tmp")]
    raw = (w / "capture.jsonl").read_bytes()
    assert raw.endswith(b"\n")
    man = [json.loads(x) for x in raw.splitlines()]
    assert sorted(m["index"] for m in man) == list(range(n))  # one line per body, none torn
    assert {m["outcome"] for m in man} <= {"complete", "interrupted", "client_gone"}
    assert len(json.loads((tmp_path / "W.arrivals.json").read_text())) == n
    out = tmp_path / "replay"
    assert main(["run", str(w), "--target", "sim", "--sim-time-scale", "0", "--phase", "r:forward:c1",
                 "--out", str(out), "--quiet"]) == 0
    assert [r["body_sha256"] for r in records(out)] == [b.sha256 for b in wl.bodies]
    assert main(["run", "--plan", str(tmp_path / "W.plan.toml"), "--target", "sim", "--sim-time-scale", "0",
                 "--out", str(tmp_path / "planned"), "--quiet"]) == 0
    assert len(records(tmp_path / "planned")) == n


def test_cli_limits_reach_the_writer_and_are_said(tmp_path):
    sim = Proc(tmp_path, "sim", "serve-sim", "--port", "0", "--time-scale", "0")
    w = tmp_path / "W"
    sizes = [p.stat().st_size for p in ORIGINALS[:4]]
    try:
        rec = Proc(tmp_path, "record", "record", "--upstream", sim.url, "--out", str(w), "--max-bodies", "3",
                   "--max-bytes", str(sizes[0] + sizes[1]), "--paths", "/v1/chat/completions")
        try:
            assert main(["run", str(MTBENCH), "--target", rec.url, "--phase", "p:forward:c1:first4",
                         "--out", str(tmp_path / "client"), "--quiet"]) == 0
        finally:
            assert rec.stop() == 0
    finally:
        sim.stop()
    assert [r["status"] for r in records(tmp_path / "client")] == ["ok"] * 4  # all four were proxied
    err = rec.stderr()
    assert f"kvreplay record: --max-bytes {sizes[0] + sizes[1]} reached: no longer retaining bodies " \
           "(still proxying)\n" in err
    assert f"2 bodies ({sizes[0] + sizes[1]} bytes) retained; skipped: limit 2, path " in err
    assert [b.raw for b in load_workload(w).bodies] == [p.read_bytes() for p in ORIGINALS[:2]]


# Issue 31, "Tests that are missing today": a slow upload through `kvreplay record`. The body goes
# out in 4 pieces, PAUSE_S apart, after the head; the proxy's arrival must be the request's first
# byte, so its TTFT and E2E include the upload (UPLOAD_MS, from the injected sleeps alone).
PAUSE_MS = 150
PAUSE_S = PAUSE_MS / 1000
UPLOAD_MS = 3 * PAUSE_MS  # first byte (head + piece 1) to the last piece sent: >= 450 ms
HEAD_BOUND_MS = 150  # the proxy's arrival is this close to the first byte; an arrival after the body is >= 450
# An earlier test in the same process may have installed uvloop as the event loop policy
# (kvreplay.api does): libuv runs timers in whole ms against a loop time cached at the start
# of each iteration, so a sleep can end slightly early (a clean-clone run measured 449.5 ms
# for the three 150 ms pauses). Allowed per pause:
TIMER_SLACK_MS = 2


async def _post(url: str, body: bytes, *, pieces: int, chunked: bool) -> tuple[int, int, int, bytes]:
    """POST ``body`` on a raw socket: head + first piece at once, then the rest ``PAUSE_S`` apart.

    Returns (first byte sent, last piece sent, response read whole; perf_counter ns) and the response.
    """
    import asyncio

    host, port = url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    frame = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {len(body)}"
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"{frame}\r\nConnection: close\r\n\r\n").encode()
    step = -(-len(body) // pieces)
    parts = [body[i:i + step] for i in range(0, len(body), step)]
    assert len(parts) == pieces
    wire = [b"%x\r\n%s\r\n" % (len(p), p) for p in parts] if chunked else list(parts)
    if chunked:
        wire[-1] += b"0\r\n\r\n"
    first = time.perf_counter_ns()
    writer.write(head + wire[0])
    await writer.drain()
    last = first
    for w in wire[1:]:
        await asyncio.sleep(PAUSE_S)
        last = time.perf_counter_ns()
        writer.write(w)
        await writer.drain()
    resp = await reader.read()  # Connection: close: the whole response, to EOF
    end = time.perf_counter_ns()
    writer.close()
    return first, last, end, resp


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_slow_upload_counts_from_its_first_byte(tmp_path, chunked):
    """Arrival at the first byte; TTFT and E2E include the upload (issue 31).

    Catches: the proxy taking a request's arrival after reading its body (read whole or
    streamed): the slow request's arrival would then be >= 450 ms after its first byte, its
    TTFT a few ms. A reference request sent whole just before fixes the proxy's clock to ours.
    """
    import asyncio

    sim = Proc(tmp_path, "sim", "serve-sim", "--port", "0", "--time-scale", "0")
    w = tmp_path / "W"
    fast, slow = ORIGINALS[0].read_bytes(), ORIGINALS[1].read_bytes()
    try:
        rec = Proc(tmp_path, "record", "record", "--upstream", sim.url, "--listen", f"127.0.0.1:{free_port()}",
                   "--out", str(w))
        try:
            a0, _, a1, ra = asyncio.run(asyncio.wait_for(_post(rec.url, fast, pieces=1, chunked=False), 60))
            b0, b_last, b1, rb = asyncio.run(asyncio.wait_for(_post(rec.url, slow, pieces=4, chunked=chunked), 60))
        finally:
            assert rec.stop() == 0, rec.stderr()
    finally:
        sim.stop()
    assert ra.startswith(b"HTTP/1.1 200 ") and rb.startswith(b"HTTP/1.1 200 "), (ra[:200], rb[:200])
    assert b_last - b0 >= (UPLOAD_MS - 3 * TIMER_SLACK_MS) * 1e6  # the upload really was spread
    assert [p.read_bytes() for p in sorted(w.glob("*.json"))] == [fast, slow]  # retained whole, exact
    ma, mb = [json.loads(x) for x in (w / "capture.jsonl").read_text().splitlines()]
    assert (ma["index"], mb["index"], ma["outcome"], mb["outcome"]) == (0, 1, "complete", "complete")
    ms = 1e-6
    # Arrival: B's arrival minus A's, on the proxy's clock, against the client's own times. Causally
    # arrival_A lies in [a0, a1] and arrival_B >= b0; at the first byte arrival_B <= b0 + HEAD_BOUND_MS.
    gap = mb["arrival_ms"] - ma["arrival_ms"]
    assert (b0 - a1) * ms <= gap <= (b0 - a0) * ms + HEAD_BOUND_MS, (gap, (b0 - a0) * ms, (b0 - a1) * ms)
    # TTFT and E2E include the upload: the simulator cannot answer before the last piece (sent at
    # b_last, measured), and the arrival is within HEAD_BOUND_MS of the first byte (b0), so TTFT >=
    # (b_last - b0) - HEAD_BOUND_MS (about 300 ms; an arrival taken after the body gives a few ms);
    # both end before the client read the response's end.
    assert (b_last - b0) * ms - HEAD_BOUND_MS <= mb["ttft_ms"] <= mb["e2e_ms"] <= (b1 - b0) * ms, (
        mb, (b_last - b0) * ms, (b1 - b0) * ms)
    assert 0 < ma["ttft_ms"] <= ma["e2e_ms"] <= (a1 - a0) * ms, (ma, (a1 - a0) * ms)
