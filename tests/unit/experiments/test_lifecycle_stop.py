"""Stopping a started server (issue 31 item 1): the whole process group gets its grace, not the ``sh -c`` wrapper.

The server below is started the way a user's ``start`` command often is: a shell that
runs the server as a child (``python3 srv.py & wait``). On SIGTERM the shell exits at
once while the server takes 0.4 s to shut down and then writes ``clean shutdown``. The
old stop waited for the shell only and sent SIGKILL to the group ~2 ms later: the log
never got its last line.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import time

from kvreplay.experiments.background import _Background, port_answers
from kvreplay.experiments.ledger import group_members

SERVER = r"""
import signal, socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(8)
def term(*_):
    time.sleep(0.4)          # a shutdown that takes a while (vLLM: about 0.8 s)
    s.close()
    print("clean shutdown", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, {handler})
print("listening", flush=True)
while True:
    time.sleep(0.05)
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(tmp_path, handler: str) -> tuple[_Background, str]:
    port = _free_port()
    script = tmp_path / "srv.py"
    script.write_text(SERVER.replace("{handler}", handler))
    bg = _Background.spawn(f"{sys.executable} {script} {port} & wait", name="start", log_dir=tmp_path)
    end = time.monotonic() + 20
    while "listening" not in (tmp_path / "start.log").read_text() and time.monotonic() < end:
        time.sleep(0.02)
    return bg, f"http://127.0.0.1:{port}"


def test_a_server_behind_a_shell_wrapper_is_stopped_gracefully(tmp_path):
    bg, url = _start(tmp_path, "term")
    assert port_answers(url) and len(group_members(bg.proc.pid)) == 2  # the shell and the server
    rec = asyncio.run(bg.stop(grace_s=20.0, url=url))
    log = (tmp_path / "start.log").read_text()
    assert log.splitlines()[-1] == "clean shutdown"  # not killed mid-shutdown
    assert rec["stop"]["graceful"] is True
    assert 0.4 <= rec["stop"]["after_s"] < 20.0
    assert rec["stop"]["text"] == f"stopped gracefully in {rec['stop']['after_s']:.1f} s"
    assert rec["name"] == "stop-start" and rec["stop"]["grace_s"] == 20.0
    assert group_members(bg.proc.pid) == [] and not port_answers(url)


def test_a_server_ignoring_sigterm_is_killed_after_its_grace(tmp_path):
    bg, url = _start(tmp_path, "signal.SIG_IGN")
    rec = asyncio.run(bg.stop(grace_s=0.3, url=url))
    assert rec["stop"]["graceful"] is False
    assert rec["stop"]["text"] == f"killed (SIGKILL to its process group) after 0.3 s grace at {rec['stop']['at']}"
    assert (rec["stop"]["how"], rec["stop"]["signal"], rec["stop"]["port_closed"]) == ("killed", "SIGKILL", True)
    assert rec["stop"]["after_s"] >= 0.3
    assert "clean shutdown" not in (tmp_path / "start.log").read_text()
    assert group_members(bg.proc.pid) == [] and not port_answers(url)


def test_a_server_under_a_wrapper_that_traps_sigterm_is_asked_through_its_group(tmp_path):
    # issue 42 item 4: the wrapper ignores SIGTERM and never passes it on; the server (its child, in
    # the group) is asked by the SIGTERM to the whole group at min(grace / 2, 2 s) and shuts down
    # cleanly: no SIGKILL (the old stop asked the wrapper alone, then killed everything at the grace)
    port = _free_port()
    script = tmp_path / "srv.py"
    script.write_text(SERVER.replace("{handler}", "term"))
    bg = _Background.spawn(f"trap '' TERM; {sys.executable} {script} {port} & wait; wait", name="start",
                           log_dir=tmp_path)
    end = time.monotonic() + 20
    while "listening" not in (tmp_path / "start.log").read_text() and time.monotonic() < end:
        time.sleep(0.02)
    rec = asyncio.run(bg.stop(grace_s=10.0, url=f"http://127.0.0.1:{port}"))
    assert (rec["stop"]["how"], rec["stop"]["term_to_group"], rec["stop"]["signal"]) == ("graceful", True, None)
    assert (tmp_path / "start.log").read_text().splitlines()[-1] == "clean shutdown"
    assert 2.0 <= rec["stop"]["after_s"] < 10.0 and group_members(bg.proc.pid) == []


def test_a_server_dead_before_the_stop_is_reported_dead_not_stopped(tmp_path):
    # issue 42 item 4: a server that died of SIGKILL before the stop is not "stopped gracefully in 0.0 s"
    bg = _Background.spawn("kill -9 $$", name="start", log_dir=tmp_path)
    end = time.monotonic() + 10
    while bg.exited is None and time.monotonic() < end:
        time.sleep(0.01)
    rec = asyncio.run(bg.stop(grace_s=5.0))
    assert rec["rc"] == -9
    assert {k: rec["stop"][k] for k in ("graceful", "how", "signal", "text")} == {
        "graceful": False, "how": "already_ended", "signal": "SIGKILL",
        "text": "had already ended before the stop (SIGKILL, rc -9)"}


def test_group_members_sees_only_live_processes_of_the_group(tmp_path):
    bg = _Background.spawn("sleep 30 & sleep 30 & wait", name="g", log_dir=tmp_path)
    end = time.monotonic() + 10
    while len(group_members(bg.proc.pid)) < 3 and time.monotonic() < end:
        time.sleep(0.02)
    members = group_members(bg.proc.pid)
    assert len(members) == 3 and bg.proc.pid in members and os.getpid() not in members
    rec = asyncio.run(bg.stop(grace_s=5.0))
    assert rec["stop"]["graceful"] is True and group_members(bg.proc.pid) == []


def test_stop_grace_is_read_from_the_server_table_and_frozen_only_when_set(tmp_path):
    import pytest

    from kvreplay.errors import ConfigError
    from kvreplay.experiments.window.spec import STOP_GRACE_S, load_experiment

    wl = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "workloads", "mtbench-52")
    step = '[[step]]\nname = "a"\nkind = "incarnation"\n'
    p = tmp_path / "e.toml"
    p.write_text(f'workload = "{wl}"\n[server]\ntarget = "sim"\nstop_grace = "2.5s"\n{step}')
    spec = load_experiment(p).server
    assert spec.stop_grace_s == 2.5 and spec.to_json()["stop_grace_s"] == 2.5
    p.write_text(f'workload = "{wl}"\n[server]\ntarget = "sim"\n{step}')
    spec = load_experiment(p).server
    assert spec.stop_grace_s == STOP_GRACE_S == 30.0 and "stop_grace_s" not in spec.to_json()
    p.write_text(f'workload = "{wl}"\n[server]\ntarget = "sim"\nstop_grace = "soon"\n{step}')
    with pytest.raises(ConfigError, match="server.stop_grace"):
        load_experiment(p)


WORKER_SERVER = r"""
import os, signal, sys, time
log = open(sys.argv[1], "a", buffering=1)
child = os.fork()
if child == 0:  # the worker: it must be stopped by its server, not signalled directly
    def worker_term(*_):
        log.write("worker got SIGTERM directly\n")
        os._exit(1)
    signal.signal(signal.SIGTERM, worker_term)
    log.write("worker up\n")
    while True:
        time.sleep(0.05)
def term(*_):
    time.sleep(0.2)
    os.kill(child, signal.SIGKILL)   # the server ends its worker itself
    os.waitpid(child, 0)
    log.write("server stopped its worker\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
log.write("server up\n")
while True:
    time.sleep(0.05)
"""


def test_sigterm_goes_to_the_roots_of_the_group_not_to_a_worker_under_a_live_server(tmp_path):
    script = tmp_path / "srv.py"
    script.write_text(WORKER_SERVER)
    events = tmp_path / "events.log"
    bg = _Background.spawn(f"{sys.executable} {script} {events} & wait", name="start", log_dir=tmp_path)
    end = time.monotonic() + 20
    while "worker up" not in (events.read_text() if events.exists() else "") and time.monotonic() < end:
        time.sleep(0.02)
    assert len(group_members(bg.proc.pid)) == 3  # the shell, the server, its worker
    rec = asyncio.run(bg.stop(grace_s=20.0))
    lines = events.read_text().splitlines()
    assert "worker got SIGTERM directly" not in lines  # a SIGTERM to the whole group would hit it
    assert lines[-1] == "server stopped its worker"
    assert rec["stop"]["graceful"] is True and group_members(bg.proc.pid) == []
