"""Issue 27 item 5: a window killed with SIGKILL is rebuilt by ``kvreplay report`` and finished by
``kvreplay experiment --resume``.

The window runs in a subprocess against the embedded simulator; the test waits (bounded) until
``progress.json`` says step A is running and its records file holds two records, then sends
SIGKILL. What happened is read back from disk, never assumed from timing: the step that was
running when the kill came is the interrupted one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import kvreplay
from kvreplay.cli import main

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD = ROOT / "fixtures" / "workloads" / "mtbench-52"
STEPS = ["A0", "A", "B", "restore"]


def _file(tmp_path: Path) -> Path:
    p = tmp_path / "w.toml"
    p.write_text(f"""
workload = "{WORKLOAD}"
[server]
target = "sim"
backend = "vllm"
[server.sim]
cache = "radix"
device_blocks = 215
host_rows = 52
time_scale = 0.02
[window]
stop_new_after = "300s"
[[step]]
name = "A0"
kind = "incarnation"
fresh = true
[[step]]
name = "A"
kind = "run"
phases = ["prime:forward:c1:first12", "replay:reverse:c1:first12"]
[[step]]
name = "B"
kind = "run"
phases = ["again:forward:c1:first2"]
[[step]]
name = "restore"
kind = "restore"
""")
    return p


def _progress(out: Path) -> dict:
    try:
        return json.loads((out / "progress.json").read_text())
    except (OSError, ValueError):
        return {}


def _records(path: Path) -> int:
    try:
        return len(path.read_bytes().splitlines())
    except OSError:
        return 0


def _kill_mid_a(tmp_path: Path) -> Path:
    """A window killed (SIGKILL) while step A runs, with two of its records written."""
    out = tmp_path / "x"
    proc = subprocess.Popen([sys.executable, "-m", "kvreplay", "experiment", str(_file(tmp_path)), "--out", str(out),
                             "--quiet"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=os.environ.copy())
    try:
        t_end = time.monotonic() + 60
        while time.monotonic() < t_end and proc.poll() is None:
            st = (_progress(out).get("steps") or {}).get("A") or {}
            if st.get("status") == "running" and _records(out / "steps" / "01-A" / "records.jsonl") >= 2:
                break
            time.sleep(0.02)
        assert proc.poll() is None, "the window ended before it could be killed mid-step"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert not (out / "result.json").exists()
    on_disk = _progress(out)["steps"]
    running = [n for n, s in on_disk.items() if s["status"] == "running"]
    assert running == ["A"]
    return out


@pytest.fixture(scope="module")
def killed(tmp_path_factory) -> Path:
    return _kill_mid_a(tmp_path_factory.mktemp("killed"))


def _copy(src: Path, tmp_path: Path) -> Path:
    import shutil

    shutil.copytree(src, tmp_path / "x")
    return tmp_path / "x"


@pytest.mark.timeout(120)
def test_sigkill_mid_window_then_report_then_resume(killed, tmp_path):
    out = _copy(killed, tmp_path)

    # kvreplay report rebuilds the publication: A interrupted, what never ran not_run
    assert main(["report", str(out)]) == 0
    r = json.loads((out / "result.json").read_text())
    assert [s["name"] for s in r["steps"]] == STEPS
    st = {s["name"]: s for s in r["steps"]}
    assert st["A0"]["status"] == "measured"
    assert (st["A"]["status"], st["A"]["reason"]) == ("aborted", "interrupted: the window was killed during this step")
    for name in ("B", "restore"):
        assert (st[name]["status"], st[name]["reason"]) == (
            "not_run", "not run: the window was killed before this step")
    assert r["aborted"]["reason"] == "killed" and r["status"] == "incomplete"
    assert (out / "report.md").exists() and (out / "report.html").exists()
    # issue 42 item 3: the attempt, killed during A with its partial records counted
    n_rec = _records(out / "steps" / "01-A" / "records.jsonl")
    (att,) = r["attempts"]
    assert (att["n"], att["how"], att["ended"]) == (1, "killed", _progress(out)["updated"])
    assert [(s["name"], s["status"]) for s in att["steps"]] == [("A0", "measured"), ("A", "aborted")]
    part = att["steps"][1]["partial"]
    assert part == {"dir": "steps/01-A", "records": n_rec, "sent": part["sent"], "planned": 24}
    assert part["sent"] >= n_rec  # a position is sent before its record is written
    killed_line = (f"killed during step A after {part['sent']} of 24 requests ({n_rec} records kept in steps/01-A) "
                   f"(last progress {att['ended']})")
    assert f"- history: attempt 1: started {att['started']}; {killed_line}\n" in (out / "report.md").read_text()
    assert "1 step not_run" not in (out / "report.md").read_text()  # two of them
    assert "2 steps not_run" in (out / "report.md").read_text()
    # the interrupted step's run was rebuilt from its records: its cells are partial, never measured
    a_cells = [c for c in r["cells"] if c["step"] == "A"]
    assert a_cells and "measured" not in {c["status"] for c in a_cells}

    # --resume runs A0 (A followed it) and A again from the start, then B and the restore
    assert main(["experiment", "--resume", str(out), "--quiet"]) == 0
    r = json.loads((out / "result.json").read_text())
    assert [s["name"] for s in r["steps"]] == STEPS
    assert {s["name"]: s["status"] for s in r["steps"]} == dict.fromkeys(STEPS, "measured")
    assert r["status"] == "complete" and r["aborted"] is None
    assert (out / "steps" / "01-A.interrupted" / "records.jsonl").exists()
    assert (out / "steps" / "00-A0.interrupted").exists()
    summary = json.loads((out / "steps" / "01-A" / "summary.json").read_text())
    assert [(p["name"], p["sent"], p["not_sent"]) for p in summary["phases"]] == [("prime", 12, 0), ("replay", 12, 0)]
    assert len(_progress(out)["resumed"]) == 1
    # the history is kept: the kill, the resume, A0 and A re-run on a fresh incarnation
    a1, a2 = r["attempts"]
    assert (a1["how"], a2["how"], a2["n"]) == ("killed", "completed", 2)
    assert a1["steps"][1]["partial"]["dir"] == "steps/01-A.interrupted"
    assert [(s["name"], s["status"]) for s in a2["steps"]] == [(n, "measured") for n in STEPS]
    md = (out / "report.md").read_text()
    assert f"- history: attempt 1: started {a1['started']}; killed during step A after " in md
    assert (f"- history: attempt 2: resumed {a2['started']}; ran A0, A, B, restore (on a fresh incarnation where "
            f"it followed one); completed {a2['ended']}\n") in md
    html = (out / "report.html").read_text()
    assert f"History: attempt 1: started {a1['started']}; killed during step A after " in html
    assert html.index("History: attempt 1") < html.index("Started <b>")  # the report opens with it


def test_resume_through_the_api_equals_the_cli(killed, tmp_path):
    """``kvreplay.resume_experiment`` is what ``--resume`` runs: same steps, statuses and set-aside folders."""
    a, b = _copy(killed, tmp_path / "cli"), _copy(killed, tmp_path / "api")
    assert main(["experiment", "--resume", str(a), "--quiet"]) == 0
    said: list[str] = []
    r = kvreplay.resume_experiment(b, say=said.append)
    ra = json.loads((a / "result.json").read_text())
    assert r == json.loads((b / "result.json").read_text())
    assert [(s["name"], s["status"]) for s in r["steps"]] == [(s["name"], s["status"]) for s in ra["steps"]]
    assert {s["name"]: s["status"] for s in r["steps"]} == dict.fromkeys(STEPS, "measured")
    assert said[0] == f"resuming {b}: interrupted at A; running again: A0, A, B, restore"
    assert sorted(p.name for p in (b / "steps").iterdir()) == sorted(p.name for p in (a / "steps").iterdir())


def _rewrite_progress(out: Path, **changes) -> None:
    doc = _progress(out)
    doc.update(changes)
    (out / "progress.json").write_text(json.dumps(doc))


@pytest.mark.timeout(60)
def test_resume_past_stop_new_after_runs_only_the_restore(killed, tmp_path):
    out = _copy(killed, tmp_path)
    # the window started ten minutes ago (wall clock): stop_new_after (300 s) has passed
    _rewrite_progress(out, wall_anchor_ns=_progress(out)["wall_anchor_ns"] - 600 * 10**9)
    assert main(["experiment", "--resume", str(out), "--quiet"]) == 3
    r = json.loads((out / "result.json").read_text())
    st = {s["name"]: s for s in r["steps"]}
    assert list(st) == STEPS
    assert st["restore"]["status"] == "measured"
    # issue 42 item 3: what ran before the kill stays: A0 measured, A aborted with its partial run
    # (the .interrupted folder) referenced; only B, which never started, is deferred
    assert st["A0"]["status"] == "measured" and st["A0"]["reason"] is None
    assert st["A"]["status"] == "aborted" and st["A"]["run_dir"] == "steps/01-A.interrupted"
    assert st["A"]["reason"].startswith("interrupted: the window was killed during this step; not run again: "
                                        "window: no step starts after stop_new_after = 300 s (elapsed ")
    assert st["B"]["status"] == "deferred" and "stop_new_after = 300 s" in st["B"]["reason"]
    # A's cells read from the partial records: the cut phase aborted with its count, the phase never
    # reached deferred with the kill as its reason; none measured
    sent = json.loads((out / "steps" / "01-A.interrupted" / "summary.json").read_text())["phases"][0]["sent"]
    a_cells = {(c["metric"].split(".")[0], c["status"], c["reason"]) for c in r["cells"] if c["step"] == "A"}
    assert a_cells == {("prime", "aborted", f"partial: {sent} of 12 positions sent ({st['A']['reason']})"),
                       ("replay", "deferred", st["A"]["reason"])}
    assert [(a["n"], a["how"]) for a in r["attempts"]] == [(1, "killed"), (2, "deadline")]
    assert [(s["name"], s["status"]) for s in r["attempts"][1]["steps"]] == [("B", "deferred"), ("restore", "measured")]


@pytest.mark.timeout(60)
def test_resume_refuses_a_server_whose_identity_changed(killed, tmp_path, capsys):
    out = _copy(killed, tmp_path)
    other = {"models": ["another-model"], "version": {"build": "x"}}
    _rewrite_progress(out, snapshot_identity=other, identity=other)
    before = _tree(out)
    assert main(["experiment", "--resume", str(out), "--quiet"]) == 2
    assert "identity changed since the window was interrupted" in capsys.readouterr().err
    assert not (out / "result.json").exists()
    # refused before anything on disk changed: the partial step folders keep their names, progress.json
    # its bytes (a later resume against the right server still finds the interrupted step)
    assert _tree(out) == before
    assert (out / "steps" / "01-A").is_dir() and not (out / "steps" / "01-A.interrupted").exists()


def _tree(out: Path) -> dict[str, bytes | None]:
    """Every path under ``out`` -> its bytes (None for a folder)."""
    return {str(p.relative_to(out)): None if p.is_dir() else p.read_bytes() for p in sorted(out.rglob("*"))}


def test_resume_refuses_a_directory_without_a_window(tmp_path, capsys):
    (tmp_path / "d").mkdir()
    assert main(["experiment", "--resume", str(tmp_path / "d")]) == 2
    assert main(["experiment", str(tmp_path / "w.toml"), "--resume", str(tmp_path / "d")]) == 2


def test_report_after_a_kill_before_the_first_step(tmp_path):
    # experiment.json written, the window killed before its first progress line: every step not_run
    f = _file(tmp_path)
    out = tmp_path / "early"
    kvreplay.Experiment.from_file(f).freeze(out)  # experiment.json alone (--dry-run writes nothing)
    assert main(["report", str(out)]) == 0
    r = json.loads((out / "result.json").read_text())
    assert [(s["name"], s["status"], s["reason"]) for s in r["steps"]] == [
        (n, "not_run", "not run: the window was killed before this step") for n in STEPS]
    assert r["aborted"]["reason"] == "killed"


def _tamper(out: Path, name: str, step: str, **changes) -> None:
    doc = json.loads((out / name).read_text())
    for st in doc["steps"]:
        if st["name"] == step:
            st.update(changes)
    (out / name).write_text(json.dumps(doc))


@pytest.mark.timeout(60)
def test_a_tampered_directory_is_refused_in_one_line_and_nothing_is_written_outside(killed, tmp_path, capsys):
    """Issue 44 lows: a step ``dir`` of ``../outside`` made ``report`` write a summary there (the interrupted
    step's run rebuilt); an unknown step kind was a KeyError traceback; a truncated progress.json read as
    missing (every step not_run, the records on disk hidden; ``--resume``: "no progress.json")."""
    out = _copy(killed, tmp_path)
    outside = tmp_path / "outside"
    import shutil

    shutil.copytree(out / "steps" / "01-A", outside)
    before = _tree(outside)
    _tamper(out, "experiment.json", "A", dir="../outside")
    for argv in (["report", str(out)], ["experiment", "--resume", str(out), "--quiet"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert (f"kvreplay: error: {out / 'experiment.json'}, field 'steps[1].dir': '../outside' is not a folder "
                "inside the experiment directory") in err, err
    assert _tree(outside) == before and not (out / "result.json").exists()

    out = _copy(killed, tmp_path / "kind")
    _tamper(out, "experiment.json", "B", kind="bogus")
    assert main(["report", str(out)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "no step kind 'bogus'; registered: incarnation, run" in err, err

    out = _copy(killed, tmp_path / "truncated")
    text = (out / "progress.json").read_text()
    (out / "progress.json").write_text(text[: len(text) // 2])
    for argv in (["report", str(out)], ["experiment", "--resume", str(out), "--quiet"]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"kvreplay: error: {out / 'progress.json'}: not a readable JSON object (truncated" in err, err
    assert not (out / "result.json").exists()
