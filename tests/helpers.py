"""Plain helpers shared by tests (importable as ``helpers``; tests/ is on pythonpath)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "fixtures"
MTBENCH = FIXTURES / "workloads" / "mtbench-52"


def write_chat_workload(folder: Path, systems_and_users: list[tuple[str, str]], **extra) -> Path:
    """Write one chat body per (system, user) pair as NNN.json; returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    for i, (system, user) in enumerate(systems_and_users):
        body = {"model": "m", "messages": [{"role": "system", "content": system},
                                            {"role": "user", "content": user}],
                "max_tokens": 8, "stream": True, "stream_options": {"include_usage": True}, **extra}
        (folder / f"{i:03d}.json").write_text(json.dumps(body))
    return folder


def sse_stream(n_tokens: int) -> bytes:
    ev = [
        {"choices": [{"index": 0, "delta": {"content": f"t{i}"}, "finish_reason": None}]}
        for i in range(n_tokens)
    ]
    ev.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    ev.append({"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": n_tokens}})
    return b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in ev) + b"data: [DONE]\n\n"


class SlowSSE(asyncio.Protocol):
    """Answers at once, except bodies containing SLOW (after 2 s); 4 tokens, one write per event."""

    def connection_made(self, t):
        self.t, self.buf = t, b""

    def data_received(self, data):
        self.buf += data
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = self.buf[:end].decode().lower()
        n = int(head.split("content-length:")[1].split("\r\n")[0])
        if len(self.buf) < end + 4 + n:
            return
        body = self.buf[end + 4 : end + 4 + n]
        self.buf = self.buf[end + 4 + n :]
        delay = 2.0 if b"SLOW" in body else 0.0
        asyncio.get_running_loop().call_later(delay, self._answer)

    def _answer(self):
        if self.t.is_closing():
            return
        self.t.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n"
        )
        for line in sse_stream(4).split(b"\n\n")[:-1]:
            p = line + b"\n\n"
            self.t.write(b"%x\r\n%s\r\n" % (len(p), p))
        self.t.write(b"0\r\n\r\n")


def interleave_scenario(tmp_path: Path) -> tuple[Path, Path]:
    """A workload of 4 prefix groups and a plan.toml: forward, grouped (by-prefix), and
    grouped with an unrelated workload interleaved every 2nd request (3-entry cache)."""
    bodies = [
        (f"group {i % 4} system block: " + "alpha beta gamma " * (20 + i % 4), f"member {i // 4} of {i % 4}")
        for i in range(16)
    ]
    wl = write_chat_workload(tmp_path / "wl", bodies)
    other = write_chat_workload(
        tmp_path / "other", [(f"unrelated system {j}: " + "river stone " * 15, f"u{j}") for j in range(8)]
    )
    plan = tmp_path / "plan.toml"
    plan.write_text(
        '[[phase]]\nname = "forward"\nreset = true\n\n'
        '[[phase]]\nname = "grouped"\norder = "by-prefix"\nreset = true\n\n'
        f'[[phase]]\nname = "mixed"\norder = "by-prefix"\nreset = true\n'
        f'interleave = {{workload = "{other}", every = 2}}\n'
    )
    return wl, plan


INTERLEAVE_SIM = ["--target", "sim", "--sim-time-scale", "0", "--sim-cache-entries", "3", "--sim-snapshots", "2"]
"""Simulator flags of :func:`interleave_scenario` (hits: forward 0, grouped 12, mixed 8)."""


class TimedObserver:
    """A run observer noting every hook call with ``time.monotonic()``: ``(t, name, *args)``."""

    def __init__(self):
        import time

        self._now = time.monotonic
        self.calls: list[tuple] = []

    def __getattr__(self, name):
        if not name.startswith("on_"):
            raise AttributeError(name)
        return lambda *a: self.calls.append((self._now(), name, *a))

    def times(self, name: str) -> list[float]:
        return [c[0] for c in self.calls if c[1] == name]


def check_live_progress(tmp_path: Path, execute, **kw) -> None:
    """Run 12 requests at C2 in 2 workers with ``execute`` (``execute_plan_workers`` or
    ``execute_plan_ray``; ``kw`` joins its call). Position 0 takes 2 s (SlowSSE): the
    other 11 records must reach the coordinator's observer while it waits."""
    from kvreplay.plan import build_plan, parse_phase
    from kvreplay.runner import RunOptions
    from kvreplay.workload import load_workload

    wl = write_chat_workload(tmp_path / "wl", [("s", "SLOW first")] + [("s", f"q{i}") for i in range(1, 12)])
    obs = TimedObserver()

    async def body():
        loop = asyncio.get_running_loop()
        srv = await loop.create_server(SlowSSE, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        try:
            w = load_workload(wl)
            plan = build_plan(w, [parse_phase("a:forward:c2")])
            opts = RunOptions(target_url=f"http://127.0.0.1:{port}", out_dir=tmp_path / "o", quiet=True)
            return await execute(plan, w, opts, workers=2, observer=obs, **kw)
        finally:
            srv.close()

    asyncio.run(body())
    [(_, _, name, planned, conc)] = [c for c in obs.calls if c[1] == "on_phase_start"]
    assert (name, planned, conc) == ("a", 12, 2)
    recs = obs.times("on_record")
    assert len(recs) == 12 and len(obs.times("on_request_start")) == 12
    [end] = obs.times("on_phase_end")
    assert sum(t < end - 1.0 for t in recs) >= 10  # shown live, not only at the merge
