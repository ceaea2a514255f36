"""``experiments.background._Child``: a background command held by pid only (no Popen to warn at exit)."""

from __future__ import annotations

import os
import signal
import time

from kvreplay.experiments.background import _Child


def wait(child: _Child, timeout_s: float = 10.0) -> int | None:
    end = time.monotonic() + timeout_s
    while child.poll() is None and time.monotonic() < end:
        time.sleep(0.01)
    return child.returncode


def test_exit_status_output_and_session(tmp_path):
    log = tmp_path / "c.log"
    log.write_text("before\n")
    # stdin is /dev/null (read gives EOF at once), stdout and stderr append to the log
    script = "read x; echo out; echo err >&2; echo \"sid $(cut -d' ' -f6 /proc/$$/stat)\"; exit 3"
    c = _Child.spawn(["/bin/sh", "-c", script], log)
    assert wait(c) == 3
    lines = log.read_text().splitlines()
    assert lines[:3] == ["before", "out", "err"]
    assert lines[3].split() == ["sid", str(c.pid)]  # its own session (setsid): kill -- -PID reaches it all
    assert c.poll() == 3  # kept once reaped


def test_killed_by_a_signal_is_negative(tmp_path):
    c = _Child.spawn(["/bin/sh", "-c", "sleep 30"], tmp_path / "k.log")
    assert c.poll() is None
    os.killpg(c.pid, signal.SIGKILL)
    assert wait(c) == -signal.SIGKILL
