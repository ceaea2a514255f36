"""User commands: own session, stdin /dev/null, output to a log, bounded, never waiting on a background child."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from kvreplay.errors import ConfigError
from kvreplay.runner.usercmd import LOG_TAIL_BYTES, run_user_command, run_user_command_sync

LOOPS = ["asyncio", "uvloop"]


def _run(coro, loop_kind: str):
    if loop_kind == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        return uvloop.run(coro)
    return asyncio.run(coro)


def _alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _reap_later(pid: int) -> None:
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)  # a process this test started


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_exit_status_and_both_streams_in_the_log(tmp_path, loop_kind):
    res = _run(run_user_command("echo out; echo err >&2; exit 7", name="sw", log_dir=tmp_path,
                                timeout_s=10), loop_kind)
    assert res.exit_status == 7
    assert not res.ok and not res.timed_out
    assert res.log_path == tmp_path / "sw.log"
    assert res.log_path.read_text() == "out\nerr\n"
    assert res.log_tail == "out\nerr\n"
    assert res.command == "echo out; echo err >&2; exit 7"
    assert res.to_json()["exit_status"] == 7 and res.to_json()["log_path"] == str(tmp_path / "sw.log")


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_background_child_does_not_hold_the_command(tmp_path, loop_kind):
    # The field case: './switch.sh on' starts the new server with '&' and exits.
    t0 = time.monotonic()
    res = _run(run_user_command("sleep 120 & echo $!; exit 0", name="bg", log_dir=tmp_path,
                                timeout_s=60), loop_kind)
    took = time.monotonic() - t0
    child = int(res.log_tail.strip())
    try:
        assert res.exit_status == 0 and res.ok
        assert took < 5.0, took
        assert res.duration_s < 5.0
        # The background child keeps running, in the command's own session and group.
        assert _alive(child)
        assert os.getpgid(child) == res.pid
        assert os.getsid(child) == res.pid
        assert os.getsid(child) != os.getsid(0)
    finally:
        _reap_later(child)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_timeout_kills_the_whole_group(tmp_path, loop_kind):
    t0 = time.monotonic()
    res = _run(run_user_command("sleep 60 & echo $!; sleep 60", name="slow", log_dir=tmp_path,
                                timeout_s=0.5, kill_grace_s=0.5), loop_kind)
    took = time.monotonic() - t0
    child = int(res.log_tail.strip())
    deadline = time.monotonic() + 5
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert res.timed_out and res.exit_status is None and not res.ok
    assert 0.5 <= res.duration_s < 4.0
    assert took < 4.0
    assert not _alive(child)


def test_timeout_escalates_to_sigkill_for_a_group_ignoring_sigterm(tmp_path):
    res = run_user_command_sync("trap '' TERM; echo ready; sleep 60; sleep 60", name="stubborn",
                                log_dir=tmp_path, timeout_s=0.3, kill_grace_s=0.3)
    assert res.timed_out and res.exit_status is None
    assert res.log_tail == "ready\n"
    assert not _alive(res.pid)


def test_stdin_is_dev_null_and_session_is_new(tmp_path):
    py = sys.executable
    cmd = (f"readlink /proc/self/fd/0; cat; {py} -c 'import os; print(os.getsid(0) == os.getppid())'")
    res = asyncio.run(run_user_command(cmd, name="io", log_dir=tmp_path, timeout_s=20))
    # cat reads EOF from /dev/null at once; the session leader is the shell itself.
    assert res.log_tail == "/dev/null\nTrue\n"
    assert res.exit_status == 0


def test_env_is_added_to_the_inherited_environment(tmp_path):
    os.environ["KVREPLAY_TEST_INHERITED"] = "yes"
    try:
        res = run_user_command_sync('echo "$KVREPLAY_ARM:$KVREPLAY_TEST_INHERITED"', name="env",
                                    log_dir=tmp_path, timeout_s=10, env={"KVREPLAY_ARM": "on"})
    finally:
        del os.environ["KVREPLAY_TEST_INHERITED"]
    assert res.log_tail == "on:yes\n"


def test_sync_twin_returns_at_shell_exit_with_a_background_child(tmp_path):
    res = run_user_command_sync("sleep 120 & echo $!; exit 3", name="bg", log_dir=tmp_path, timeout_s=60)
    child = int(res.log_tail.strip())
    try:
        assert res.exit_status == 3 and not res.timed_out
        assert res.duration_s < 5.0
        assert _alive(child)
    finally:
        _reap_later(child)


def test_log_tail_keeps_the_last_bytes(tmp_path):
    # 5000 'a' then 'END': the tail is the last 4096 bytes exactly.
    res = run_user_command_sync("head -c 5000 /dev/zero | tr '\\0' a; printf END", name="big",
                                log_dir=tmp_path, timeout_s=10)
    assert len(res.log_tail) == LOG_TAIL_BYTES
    assert res.log_tail == "a" * (LOG_TAIL_BYTES - 3) + "END"
    assert res.log_path.stat().st_size == 5003


def test_cancelling_the_wait_kills_the_group(tmp_path):
    async def main() -> Path:
        task = asyncio.ensure_future(run_user_command("echo $$; sleep 60", name="c", log_dir=tmp_path,
                                                      timeout_s=60))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return tmp_path / "c.log"

    log = asyncio.run(main())
    shell = int(log.read_text().strip())
    assert not _alive(shell)


@pytest.mark.parametrize("name", ["", "a/b", "../x", ".hidden", "sp ace"])
def test_bad_names_are_config_errors(tmp_path, name):
    with pytest.raises(ConfigError, match="command name"):
        run_user_command_sync("true", name=name, log_dir=tmp_path, timeout_s=1)


def test_non_positive_timeout_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="timeout must be > 0"):
        run_user_command_sync("true", name="t", log_dir=tmp_path, timeout_s=0)


@pytest.mark.parametrize("loop_kind", LOOPS)
def test_exit_statuses_survive_the_loops_own_child_watcher(tmp_path, loop_kind):
    # The loop reaps the children it spawned itself; it must not reap (and zero) ours.
    async def main():
        own = await asyncio.create_subprocess_exec("sleep", "0.3")
        res = await asyncio.gather(*[run_user_command(f"sleep 0.0{i}; exit {i}", name=f"c{i}", log_dir=tmp_path,
                                                      timeout_s=10) for i in range(1, 6)])
        await own.wait()
        return [r.exit_status for r in res], own.returncode

    assert _run(main(), loop_kind) == ([1, 2, 3, 4, 5], 0)


def test_log_tail_keeps_the_last_n_bytes_and_replaces_a_split_character(tmp_path):
    from kvreplay.runner.usercmd import LOG_TAIL_BYTES, log_tail

    log = tmp_path / "x.log"
    log.write_bytes(b"a" * 10 + "é".encode() + b"end\n")  # é is 2 bytes: c3 a9
    assert log_tail(log, 4) == "end\n"
    assert log_tail(log, 5) == "\ufffdend\n"  # the tail starts inside é
    assert log_tail(log) == "a" * 10 + "éend\n"  # whole file under the default 4096
    log.write_bytes(b"x" * LOG_TAIL_BYTES + b"yz")
    assert log_tail(log) == "x" * (LOG_TAIL_BYTES - 2) + "yz"
    assert log_tail(tmp_path / "missing.log") == ""


def test_spawn_logged_truncates_or_appends_and_runs_in_its_own_group(tmp_path):
    import os

    from kvreplay.runner.usercmd import spawn_logged

    log = tmp_path / "srv.log"
    log.write_bytes(b"old\n")
    p = spawn_logged("echo new; echo err >&2; ps -o pgid= -p $$", log, append=True)
    assert p.wait(timeout=10) == 0
    old, new, err, pgid = log.read_text().split("\n")[:4]
    assert (old, new, err) == ("old", "new", "err") and int(pgid) == p.pid != os.getpgrp()
    p = spawn_logged("echo only", log)
    assert p.wait(timeout=10) == 0
    assert log.read_text() == "only\n"


def test_a_command_log_is_redacted_quiesce_too(tmp_path):
    """Issue 44 item 8: every user command's log (quiesce.log as check-NAME.log) is rewritten redacted."""
    import asyncio

    from kvreplay import redaction
    from kvreplay.experiments.lifecycle import run_command

    redaction.clear()
    try:
        redaction.register("sk-quiesce-5b1e9d07")
        got = asyncio.run(run_command("echo start; echo key=sk-quiesce-5b1e9d07; echo end", name="quiesce",
                                      log_dir=tmp_path, timeout_s=10))
    finally:
        redaction.clear()
    assert (tmp_path / "quiesce.log").read_text() == "start\nkey=[REDACTED]\nend\n"
    assert got["tail"] == "start\nkey=[REDACTED]\nend\n" and got["rc"] == 0


def test_a_huge_log_is_kept_as_a_bounded_tail_read_from_the_end(tmp_path):
    """A 300 MB output (sparse: no disk) is never read whole: its last bytes after a line break, with a note."""
    import tracemalloc

    from kvreplay.runner.usercmd import keep_log

    log = tmp_path / "check-big.log"
    with open(log, "wb") as f:
        f.truncate(300 << 20)  # 300 MiB of NUL bytes
        f.seek(0, 2)
        f.write(b"cut line\nlast line\n")
    size = (300 << 20) + 19
    tracemalloc.start()
    kept = keep_log(log, keep=15)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    note = f"[kvreplay: the first {size - 10} bytes of this output were dropped; the last 10 are kept]\n"
    assert kept == note + "last line\n"
    assert log.read_text() == kept
    assert peak < 1 << 20
