"""Issue 42 items 1 and 2: the window's process ledger, and an incumbent kept after a failed check.

External ``serve-sim`` incarnations (background start commands, their own process groups)
stand in for real servers. The kill test kills the ``kvreplay experiment`` process alone
(SIGKILL, as an OOM kill would) while step A runs: the serve-sim it started is then an
orphan, read back from ``processes.jsonl`` and from ``/proc``, never assumed from timing.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from kvreplay.cli import main
from kvreplay.experiments.ledger import alive_pids, live_entries, proc_stat, read_ledger

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD = ROOT / "fixtures" / "workloads" / "mtbench-52"
SERVE = "{kvreplay} serve-sim --port {port} --time-scale 0.02"


def _file(tmp_path: Path) -> Path:
    p = tmp_path / "w.toml"
    p.write_text(f"""
workload = "{WORKLOAD}"
[server]
target = "http://127.0.0.1:{{port}}"
backend = "none"
stop_grace = "5s"
start = {{cmd = "{SERVE}", background = true}}
restore = {{cmd = "{SERVE}", background = true}}
stop = {{cmd = "echo stop {{port}} >> {{dir}}/stops.log"}}
[window]
stop_new_after = "300s"
[[step]]
name = "A0"
kind = "incarnation"
[[step]]
name = "A"
kind = "run"
phases = ["prime:forward:c1:first12", "replay:reverse:c1:first12"]
[[step]]
name = "restore"
kind = "restore"
""")
    return p


def _json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _records(path: Path) -> int:
    try:
        return len(path.read_bytes().splitlines())
    except OSError:
        return 0


def _answers(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5) as resp:  # noqa: S310
            return resp.status == 200
    except OSError:
        return False


def _kill_everything(out: Path) -> None:
    for e in read_ledger(out):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if alive_pids(e):
                os.killpg(e["pgid"], signal.SIGKILL)


@pytest.mark.timeout(120)
def test_kill_9_leaves_an_orphan_that_report_names_and_resume_stops(tmp_path, capsys):
    out = tmp_path / "x"
    proc = subprocess.Popen([sys.executable, "-m", "kvreplay", "experiment", str(_file(tmp_path)), "--out", str(out),
                             "--quiet"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=os.environ.copy())
    try:
        t_end = time.monotonic() + 60
        while time.monotonic() < t_end and proc.poll() is None:
            st = (_json(out / "progress.json").get("steps") or {}).get("A") or {}
            if st.get("status") == "running" and _records(out / "steps" / "01-A" / "records.jsonl") >= 2:
                break
            time.sleep(0.02)
        assert proc.poll() is None, "the window ended before it could be killed mid-step"
        proc.send_signal(signal.SIGKILL)  # the experiment process alone: its server is in another group
        proc.wait(timeout=10)
        # the ledger: the background start of A0, written when it started (pid, group, start time, port)
        (start,) = [e for e in read_ledger(out) if e["name"] == "start"]
        assert (start["pgid"], start["dir"], start["attempt"]) == (start["pid"], "steps/00-A0", 1)
        assert start["command"].endswith(f"-m kvreplay serve-sim --port {start['port']} --time-scale 0.02")
        with open(f"/proc/{start['pid']}/stat", "rb") as f:
            assert int(f.read().rsplit(b")", 1)[1].split()[19]) == start["start_ticks"]
        port, pid = start["port"], start["pid"]
        assert _answers(port)  # the orphan serves on

        # kvreplay report names it: pid, port, command and why, in result.json and report.md
        assert main(["report", str(out)]) == 0
        r = _json(out / "result.json")
        (lr,) = r["left_running"]
        assert (lr["pid"], lr["pgid"], lr["port"], lr["command"], lr["url"]) == (
            pid, pid, port, start["command"], None)
        assert lr["why"] == ("started by the window before it was killed and still alive; "
                             "`kvreplay experiment --resume` stops it first")
        md = (out / "report.md").read_text()
        assert (f"- left running: pid {pid} (port {port}, process group {pid}, command {start['command']!r}): "
                f"{lr['why']}; kvreplay does not stop it; stop it with: kill -TERM -{pid}\n") in md

        # --resume stops it first (the configured stop with the orphan's own port, then SIGTERM to the
        # group: the echo does not stop serve-sim), says so, finishes the window and exits 0
        capsys.readouterr()
        assert main(["experiment", "--resume", str(out)]) == 0
        err = capsys.readouterr().err
        # the stops: A0 of attempt 1 (no port yet), the orphan (its own port), A0 again (no port yet),
        # then the restore (the new A0's port)
        stops = (out / "stops.log").read_text().splitlines()
        assert stops[:3] == ["stop {port}", f"stop {port}", "stop {port}"] and len(stops) == 4
        assert (f"experiment: stopped pid {pid} (port {port}, start of attempt 1, left alive by the killed window): "
                "stopped by SIGTERM to its process group in ") in err
        assert alive_pids(start) == [] and not _answers(port)
        r = _json(out / "result.json")
        assert r["status"] == "complete"
        # every stop, in order: the resume's (the orphan), the stop command of A0 (no server yet), the
        # restore's (A0's server by SIGTERM, then the stop command)
        (a0_again,) = [e for e in read_ledger(out) if e["name"] == "start" and e["attempt"] == 2]
        assert [(x["step"], x["how"], x["pid"]) for x in r["stops"]] == [
            ("resume (attempt 2)", "SIGTERM", pid), ("A0", "stop command", None),
            ("restore", "graceful", a0_again["pid"]), ("restore", "stop command", None)]
        # the history keeps the kill, and the resume's first act: the orphan stopped
        a1, a2 = r["attempts"]
        assert (a1["how"], a2["how"]) == ("killed", "completed")
        assert [(x["pid"], x["port"], x["attempt"], x["stop"]["how"]) for x in a2["stopped"]] == [
            (pid, port, 1, "SIGTERM")]
        md = (out / "report.md").read_text()
        assert (f"; first stopped pid {pid} (port {port}, left alive by attempt 1): stopped by SIGTERM to its "
                "process group in ") in md
        # the resumed report still says the window was interrupted, with the attempt's partial counts
        part = a1["steps"][1]["partial"]
        assert (part["dir"], part["planned"]) == ("steps/01-A.interrupted", 24) and part["records"] >= 2
        assert (f"- history: attempt 1: started {a1['started']}; killed during step A after {part['sent']} of 24 "
                f"requests ({part['records']} records kept in steps/01-A.interrupted)") in md
        # what is left is the restored incumbent alone, started in attempt 2 and named
        (lr,) = r["left_running"]
        (inc,) = [e for e in live_entries(out)]
        assert (inc["name"], inc["attempt"], inc["dir"]) == ("restore", 2, "steps/02-restore")
        assert (lr["pid"], lr["port"]) == (inc["pid"], inc["port"])
        assert lr["why"] == "the incumbent server restored by step restore"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        _kill_everything(out)


@pytest.mark.timeout(60)
def test_failed_restore_check_keeps_the_incumbent_running(tmp_path):
    # a routed preflight that fails (exit 4): the restore reads failed with the check's output, the
    # incumbent it brought back keeps serving and is named in left_running with pid and port
    f = tmp_path / "w.toml"
    f.write_text("""
[server]
target = "http://127.0.0.1:{port}"
backend = "none"
start = {cmd = "{kvreplay} serve-sim --port {port} --time-scale 0", background = true}
[server.restore]
cmd = "{kvreplay} serve-sim --port {port} --time-scale 0"
background = true
checks = [{name = "routed", cmd = "echo 'routed preflight: HTTP 503 from the router'; exit 4", timeout = "20s"}]
[[step]]
name = "up"
kind = "incarnation"
[[step]]
name = "restore"
kind = "restore"
""")
    out = tmp_path / "o"
    try:
        assert main(["experiment", str(f), "--out", str(out), "--quiet"]) == 3
        r = _json(out / "result.json")
        st = {s["name"]: s for s in r["steps"]}
        assert st["restore"]["status"] == "failed"
        assert st["restore"]["reason"] == ("restore check routed failed (rc 4): routed preflight: HTTP 503 from the "
                                           "router; the restored incumbent is left running")
        (inc,) = live_entries(out)
        assert (inc["name"], inc["dir"]) == ("restore", "steps/01-restore")
        (lr,) = r["left_running"]
        assert (lr["pid"], lr["port"]) == (inc["pid"], inc["port"])
        assert lr["why"] == ("the incumbent restored by step restore; check routed failed (rc 4: routed preflight: "
                             "HTTP 503 from the router); left running for a person to decide")
        assert _answers(inc["port"])
        cells = {c["metric"]: c for c in r["cells"] if c["step"] == "restore"}
        assert (cells["identity_restored"]["status"], cells["restore_check.routed"]["status"]) == (
            "measured", "failed")
    finally:
        _kill_everything(out)


@pytest.mark.timeout(60)
def test_a_check_that_leaves_a_process_behind_is_reaped(tmp_path):
    f = tmp_path / "w.toml"
    f.write_text("""
[server]
target = "sim"
[server.restore]
checks = [{name = "bg", cmd = "sleep 300 & echo $! > {dir}/left.pid", timeout = "20s"}]
[[step]]
name = "restore"
kind = "restore"
""")
    out = tmp_path / "o"
    assert main(["experiment", str(f), "--out", str(out), "--quiet"]) == 0
    left = int((out / "left.pid").read_text())
    (check,) = read_ledger(out)
    assert (check["name"], check["dir"]) == ("check-bg", "steps/00-restore")
    (rc,) = _json(out / "result.json")["steps"][0]["checks"]["restore_checks"]
    assert (rc["ok"], rc["reaped"]["pids"], rc["reaped"]["how"]) == (True, [left], "SIGTERM")
    st = proc_stat(left)
    assert live_entries(out) == [] and (st is None or st[0] == "Z")  # gone, or a zombie init has not reaped yet


@pytest.mark.timeout(60)
def test_stop_outcomes_are_published_a_dead_server_as_dead(tmp_path):
    # issue 42 item 4: the first server dies of SIGKILL (the quiesce kills it, as the OOM killer
    # would); the next incarnation's stop reports it dead with its signal, not "stopped gracefully
    # in 0.0 s"; the end-of-window stop of the second is in result.json and both reports too
    f = tmp_path / "w.toml"
    f.write_text("""
[server]
target = "http://127.0.0.1:{port}"
backend = "none"
start = {cmd = "exec {kvreplay} serve-sim --port {port} --time-scale 0", background = true}
[[step]]
name = "up"
kind = "incarnation"
[[step]]
name = "oom"
kind = "quiesce"
cmd = "kill -9 $(head -n 1 {dir}/processes.jsonl | sed 's/.*\\"pid\\":\\\\([0-9]*\\\\).*/\\\\1/')"
[[step]]
name = "up2"
kind = "incarnation"
""")
    out = tmp_path / "o"
    try:
        main(["experiment", str(f), "--out", str(out), "--quiet"])
        r = _json(out / "result.json")
        first, second = [e for e in read_ledger(out) if e["name"] == "start"]
        assert [(x["step"], x["pid"], x["port"], x["how"], x["signal"], x["rc"]) for x in r["stops"]] == [
            ("up2", first["pid"], first["port"], "already_ended", "SIGKILL", -9),
            ("end of window", second["pid"], second["port"], "graceful", None, 0)]
        assert r["stops"][0]["text"] == "had already ended before the stop (SIGKILL, rc -9)"
        assert r["stops"][1]["text"].startswith("stopped gracefully in ")
        md = (out / "report.md").read_text()
        assert (f"| up2 | {first['pid']} | {first['port']} | had already ended before the stop (SIGKILL, rc -9) "
                "| -9 |") in md
        assert f"| end of window | {second['pid']} | {second['port']} | stopped gracefully in " in md
        assert "<h2>Stops</h2>" in (out / "report.html").read_text()
        assert r["left_running"] is None and live_entries(out) == []
    finally:
        _kill_everything(out)


@pytest.mark.timeout(90)
def test_a_step_whose_server_is_killed_names_the_death(tmp_path):
    # issue 42 item 4: the server is killed (SIGKILL to its group) once step A has two records;
    # A's reason names the process's death with its signal beside the transport failures
    f = tmp_path / "w.toml"
    f.write_text(f"""
workload = "{WORKLOAD}"
[server]
target = "http://127.0.0.1:{{port}}"
backend = "none"
start = {{cmd = "exec {SERVE}", background = true}}
[window]
max_transport_failures = 1
[[step]]
name = "up"
kind = "incarnation"
[[step]]
name = "A"
kind = "run"
phases = ["prime:forward:c1:first40"]
""")
    out = tmp_path / "o"
    proc = subprocess.Popen([sys.executable, "-m", "kvreplay", "experiment", str(f), "--out", str(out), "--quiet"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        t_end = time.monotonic() + 60
        while time.monotonic() < t_end and proc.poll() is None:
            if _records(out / "steps" / "01-A" / "records.jsonl") >= 2:
                break
            time.sleep(0.02)
        assert proc.poll() is None, "the window ended before its server could be killed"
        (start,) = read_ledger(out)
        os.killpg(start["pgid"], signal.SIGKILL)
        assert proc.wait(timeout=60) == 3
        a = next(s for s in _json(out / "result.json")["steps"] if s["name"] == "A")
        assert a["status"] in ("failed", "aborted")
        assert a["reason"].endswith(f"; the server process (pid {start['pid']}) ended during the step (SIGKILL, rc -9)")
        assert a["checks"]["server_ended"] == {"pid": start["pid"], "rc": -9, "signal": "SIGKILL"}
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        _kill_everything(out)


@pytest.mark.timeout(60)
def test_what_an_arm_command_leaves_running_is_named(tmp_path):
    # an ab arm command (a server switch) that leaves a process in the background: the ledger has
    # it from its start and the publication names it in left_running with pid and why
    f = tmp_path / "w.toml"
    f.write_text(f"""
workload = "{WORKLOAD}"
[server]
target = "http://127.0.0.1:{{port}}"
backend = "none"
start = {{cmd = "{{kvreplay}} serve-sim --port {{port}} --time-scale 0", background = true}}
[[step]]
name = "up"
kind = "incarnation"
[[step]]
name = "ab"
kind = "ab"
arms = [{{name = "off", cmd = "sleep 120 & echo $! > {{dir}}/left.pid"}}, {{name = "on", cmd = "true"}}]
reps = 1
select = "first:1"
""")
    out = tmp_path / "o"
    try:
        main(["experiment", str(f), "--out", str(out), "--quiet"])
        left = int((out / "left.pid").read_text())
        arms = [e for e in read_ledger(out) if e["name"].startswith("arm-")]
        assert [e["dir"] for e in arms] == ["steps/01-ab/commands", "steps/01-ab/commands"]
        (off,) = [e for e in arms if e["command"].startswith("sleep 120 &")]
        (lr,) = _json(out / "result.json")["left_running"]
        assert (lr["pid"], lr["alive"], lr["command"]) == (off["pid"], [left], off["command"])
        assert lr["why"] == f"started by this window ({off['name']}) and still alive at its end"
    finally:
        _kill_everything(out)
