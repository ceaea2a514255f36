"""Issue 28: the whole diagnosis window in one file (``host-cache-window-full.toml``) against the simulator.

Outcomes asserted here do not depend on how fast the machine is: statuses, conditions on
step statuses, hashes, bytes and command outputs; of ``time_left`` only its bounds.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest

from kvreplay.cli import main
from kvreplay.workload import load_workload

ROOT = Path(__file__).resolve().parents[2]
FULL = ROOT / "fixtures" / "experiments" / "host-cache-window-full.toml"
MAIN = ROOT / "fixtures" / "workloads" / "window-main"
AB = ROOT / "fixtures" / "workloads" / "window-ab-1024"
CHECKS = ["containment", "monitoring", "preflight_direct", "preflight_routed", "readmission"]


def _json(p: Path) -> dict:
    return json.loads(p.read_text())


@pytest.mark.timeout(180)
def test_the_full_window_runs_against_the_simulator(tmp_path):
    out = tmp_path / "w"
    assert main(["experiment", str(FULL), "--out", str(out), "--quiet"]) == 0
    r, doc = _json(out / "result.json"), _json(out / "experiment.json")
    assert r["status"] == "complete"
    assert r["step_counts"] == {"measured": 6, "failed": 0, "deferred": 0, "aborted": 0}
    assert [(s["name"], s["kind"], s["status"]) for s in r["steps"]] == [
        ("quiesce", "quiesce", "measured"), ("candidate", "incarnation", "measured"), ("main", "run", "measured"),
        ("control", "run", "measured"), ("trace", "ab", "measured"), ("restore", "restore", "measured")]
    # the experiment file's exact bytes beside experiment.json, and the hash experiment.json names
    assert (out / "experiment.toml").read_bytes() == FULL.read_bytes()
    assert doc["file"]["sha256"] == hashlib.sha256(FULL.read_bytes()).hexdigest()
    # each workload's manifest of hashes
    main_wl, ab_wl = load_workload(MAIN), load_workload(AB)
    man = _json(out / "workloads.json")["workloads"]
    assert [(m["used_by"], m["path"], m["n_bodies"], m["sha256"]) for m in man] == [
        (["workload"], str(MAIN), 8, main_wl.sha256), (["trace"], str(AB), 4, ab_wl.sha256)]
    assert [b["sha256"] for b in man[1]["bodies"]] == [b.sha256 for b in ab_wl.bodies]
    # the A/B's own workload frozen and hashed into its entry
    steps = {s["name"]: s for s in doc["steps"]}
    assert steps["trace"]["workload"] == {"path": str(AB), "n_bodies": 4, "sha256": ab_wl.sha256}
    assert doc["gates"] == {"body": {"max_tokens": 2048, "temperature": 1, "top_p": 0.95,
                                     "reasoning_effort": "max"}, "fixed_bytes": True}
    assert doc["window"]["deadline_from"] == "quiesce"
    assert (steps["control"]["when"], steps["trace"]["when"]) == (['time_left > "15m"', "previous_step_ok"],
                                                                  ['step_ok = "main"'])
    # deadlines counted from the quiesce
    origin = r["deadline_origin"]
    assert origin["deadline_from"] == "quiesce" and origin["origin"]["step"] == "quiesce"
    # conditions recorded with the values seen
    res = {s["name"]: s for s in r["steps"]}
    ctl = res["control"]["condition"]
    assert {k: ctl[k] for k in ("when", "holds", "false")} == {
        "when": ['time_left > "15m"', "previous_step_ok"], "holds": True, "false": []}
    assert (ctl["seen"]["previous_step"], ctl["seen"]["previous_status"]) == ("main", "measured")
    assert ctl["seen"]["time_left_until"] == "stop_new_after" and 900 < ctl["seen"]["time_left_s"] <= 4200
    assert res["trace"]["condition"] == {"when": ['step_ok = "main"'], "holds": True, "false": [],
                                         "seen": {"step_ok": {"main": "measured"}}}
    assert res["quiesce"]["checks"]["command"]["tail"] == "primary quiesced (stands for: routerctl drain primary)\n"
    # restore checks: output captured, status as cells
    assert [c for c in r["cells"] if c["step"] == "restore"] == [
        {"step": "restore", "metric": "identity_restored", "status": "measured", "value": True, "reason": None},
        *({"step": "restore", "metric": f"restore_check.{n}", "status": "measured", "value": True, "reason": None}
          for n in CHECKS)]
    got = {g["name"]: g for g in res["restore"]["checks"]["restore_checks"]}
    assert list(got) == CHECKS
    assert got["readmission"]["output"] == "primary readmitted to the router\n"
    assert got["containment"]["output"] == "candidate unloaded\n"
    assert '"id":"kvreplay-sim"' in (out / "steps" / "05-restore" / "check-preflight_direct.log").read_text()


@pytest.mark.timeout(180)
def test_a_false_condition_skips_a_changed_workload_is_refused_and_a_failed_check_fails_the_restore(tmp_path):
    exp_dir, wl_dir = tmp_path / "experiments", tmp_path / "workloads"
    exp_dir.mkdir()
    shutil.copytree(MAIN, wl_dir / "window-main")
    shutil.copytree(AB, wl_dir / "window-ab-1024")
    text = FULL.read_text()
    # the quiesce command changes one byte of the A/B's workload after the freeze
    text = text.replace("cmd = \"echo 'primary quiesced (stands for: routerctl drain primary)'\"",
                        "cmd = \"printf ' ' >> {here}/../workloads/window-ab-1024/000.json\"")
    # a step that fails just before the control, whose condition then reads false
    text = text.replace("# R4: the control",
                        '[[step]]\nname = "gate"\nkind = "quiesce"\ncmd = "exit 3"\n\n# R4: the control')
    text = text.replace("when = ['time_left > \"15m\"', \"previous_step_ok\"]", 'when = "previous_step_ok"')
    text = text.replace("cmd = \"test ! -e {dir}/candidate.loaded && echo 'candidate unloaded'\"",
                        "cmd = \"echo 'candidate still loaded'; exit 4\"")
    f = exp_dir / "window.toml"
    f.write_text(text)
    out = tmp_path / "w"
    assert main(["experiment", str(f), "--out", str(out), "--quiet"]) == 3
    r = _json(out / "result.json")
    res = {s["name"]: s for s in r["steps"]}
    assert r["step_counts"] == {"measured": 3, "failed": 3, "deferred": 0, "aborted": 0, "skipped": 1}
    assert (res["gate"]["status"], res["gate"]["reason"]) == ("failed", "quiesce command failed (rc 3)")
    assert (res["control"]["status"], res["control"]["reason"]) == ("skipped", "condition false: previous_step_ok")
    assert res["control"]["condition"] == {"when": ["previous_step_ok"], "holds": False, "false": ["previous_step_ok"],
                                           "seen": {"previous_step": "gate", "previous_status": "failed"}}
    assert res["control"]["run_dir"] is None and not (out / "steps" / "04-control" / "plan.json").exists()
    # issue 42 item 4: a skipped step's cells read skipped with the condition (were "failed")
    ctl_cells = {(c["status"], c["reason"]) for c in r["cells"] if c["step"] == "control"}
    assert ctl_cells == {("skipped", "condition false: previous_step_ok")}
    frozen = load_workload(AB).sha256
    now = load_workload(wl_dir / "window-ab-1024").sha256
    assert (res["trace"]["status"], res["trace"]["reason"]) == (
        "failed", f"fixed_bytes: the workload {(wl_dir / 'window-ab-1024').resolve()} changed since the freeze "
                  f"(sha256 {frozen[:12]} frozen, {now[:12]} now); the step sends nothing")
    assert not (out / "steps" / "05-trace" / "ab.json").exists() and res["trace"]["started"] is None
    assert (res["restore"]["status"], res["restore"]["reason"]) == (
        "failed", "restore check containment failed (rc 4): candidate still loaded")
    cells = {c["metric"]: c for c in r["cells"] if c["step"] == "restore"}
    assert cells["restore_check.containment"] == {"step": "restore", "metric": "restore_check.containment",
                                                  "status": "failed", "value": False,
                                                  "reason": "rc 4: candidate still loaded"}
    assert cells["identity_restored"]["value"] is True and cells["restore_check.readmission"]["value"] is True
    # `kvreplay report` rebuilds the same publication: statuses, conditions and the deadline origin
    assert r["deadline_origin"]["origin"]["step"] == "quiesce"
    assert main(["report", str(out)]) == 0
    again = _json(out / "result.json")
    assert again["deadline_origin"] == r["deadline_origin"] and again["step_counts"] == r["step_counts"]
    assert [s.get("condition") for s in again["steps"]] == [s.get("condition") for s in r["steps"]]


def test_dry_run_prints_every_step_condition_workload_and_command_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "dry"
    assert main(["experiment", str(FULL), "--out", str(out), "--dry-run"]) == 0
    assert not out.exists()
    kept = tmp_path / "kept"  # an existing folder is left as it was
    kept.mkdir()
    (kept / "notes.txt").write_bytes(b"mine\n")
    capsys.readouterr()
    assert main(["experiment", str(FULL), "--out", str(kept), "--dry-run"]) == 0
    assert [(p.name, p.read_bytes()) for p in kept.iterdir()] == [("notes.txt", b"mine\n")]
    printed = capsys.readouterr().out.splitlines()
    main_wl, ab_wl = load_workload(MAIN), load_workload(AB)
    py = __import__("sys").executable
    want = [
        "gates: body max_tokens = 2048, temperature = 1, top_p = 0.95, reasoning_effort = 'max' (held by all 12 "
        "bodies: checked at the freeze); fixed_bytes on: each sending step re-reads its workload and is refused "
        "if its sha256 changed",
        "deadlines count from the end of step quiesce (quiesce, deadline_from = 'quiesce', once it is measured; "
        "before it, from the experiment's start)",
        "  no step starts, no request is sent after: end of quiesce + 4200 s",
        "  in-flight requests cancelled at: end of quiesce + 5400 - 1200 = 4200 s (hard_deadline - restore_reserve)",
        "  the restore must end by: end of quiesce + 5400 s (hard_deadline)",
        "step 00 quiesce (quiesce)",
        "  when: always",
        "  $ quiesce: echo 'primary quiesced (stands for: routerctl drain primary)'",
        "step 01 candidate (incarnation)",
        "  when: always",
        "  $ simulator: a new embedded simulator: [server.sim] {'cache': 'radix', 'time_scale': 0.001, "
        "'output_tokens': 8} + step sim {}",
        "step 02 main (run)",
        "  when: always",
        f"  workload: {MAIN} (8 bodies, sha256 {main_wl.sha256})",
        "step 03 control (run)",
        "  when: time_left > \"15m\" and previous_step_ok (evaluated just before it; false: skipped)",
        f"  workload: {MAIN} (8 bodies, sha256 {main_wl.sha256})",
        "step 04 trace (ab)",
        "  when: step_ok = \"main\" (evaluated just before it; false: skipped)",
        f"  workload (its own): {AB} (4 bodies, sha256 {ab_wl.sha256})",
        "  $ arm off: sim:",
        "  $ arm on: sim:prefill_scale=1.1",
        "step 05 restore (restore)",
        "  when: always (a restore always runs)",
        "  $ simulator: the incumbent simulator started again: [server.sim] {'cache': 'radix', 'time_scale': 0.001, "
        "'output_tokens': 8}",
        f"  $ check containment: test ! -e {kept.resolve()}/candidate.loaded && echo 'candidate unloaded'  "
        "(timeout 30 s)",
        f"  $ check monitoring: {py} -c \"import urllib.request as u; print(len(u.urlopen("
        "'http://127.0.0.1:{port}/metrics').read()), 'bytes of metrics')\"  (timeout 30 s)",
        f"  $ check preflight_direct: {py} -c \"import urllib.request as u; print(u.urlopen("
        "'http://127.0.0.1:{port}/v1/models').read().decode())\"  (timeout 30 s)",
        f"  $ check preflight_routed: {py} -c \"import urllib.request as u; print(u.urlopen("
        "'http://127.0.0.1:{port}/v1/models').status, 'via the router')\"  (timeout 30 s)",
        "  $ check readmission: echo 'primary readmitted to the router'  (timeout 30 s)",
        f"experiment.json: not written (--dry-run writes nothing; it would be {kept / 'experiment.json'})",
    ]
    start = printed.index(want[0])
    assert printed[start:start + len(want)] == want


def test_dry_run_previews_the_lifecycle_commands_of_a_real_server(tmp_path, capsys):
    f = tmp_path / "real.toml"
    f.write_text('[server]\ntarget = "http://127.0.0.1:{port}"\nstop_grace = "45s"\n'
                 'start = {cmd = "exec vllm serve m --port {port}", background = true, timeout = "10m"}\n'
                 'stop = {cmd = "echo unload {dir}", timeout = "30s"}\n'
                 '[server.restore]\ncmd = "exec vllm serve incumbent --port {port}"\nbackground = true\n'
                 'checks = [{name = "preflight", cmd = "curl -sf http://127.0.0.1:{port}/health", timeout = "20s"}]\n'
                 '[[step]]\nname = "cand"\nkind = "incarnation"\n[[step]]\nname = "R"\nkind = "restore"\n')
    out = tmp_path / "o"
    assert main(["experiment", str(f), "--out", str(out), "--dry-run"]) == 0
    assert not out.exists()
    printed = capsys.readouterr().out.splitlines()
    stop = "  $ stop: SIGTERM to the running start command's process group, SIGKILL after 45 s (when it runs in " \
           "the background)"
    want = ["step 00 cand (incarnation)", "  when: always", stop,
            f"  $ stop: echo unload {out.resolve()}",
            "  $ start: exec vllm serve m --port {port}  (background)  (timeout 600 s)",
            "step 01 R (restore)", "  when: always (a restore always runs)", stop,
            f"  $ stop: echo unload {out.resolve()}",
            "  $ restore: exec vllm serve incumbent --port {port}  (background)  (timeout 60 s)",
            "  $ check preflight: curl -sf http://127.0.0.1:{port}/health  (timeout 20 s)"]
    start = printed.index(want[0])
    assert printed[start:start + len(want)] == want
