"""Issue 28: the whole diagnosis window in one file (``host-cache-window-full.toml``): its variants.

The bundled file itself runs once in test_window_points.py (issue 45: the plan's 31 points,
each checked on that run); here, copies of it with one thing changed: a bound crossed, a pin
that does not hold, a snapshot that differs or fails, arms that answer differently, a false
condition, a changed workload, a failed restore check, and the dry-run previews.
Outcomes asserted here do not depend on how fast the machine is: statuses, conditions on
step statuses, hashes, bytes and command outputs; of ``time_left`` only its bounds.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from window_full import AB, BODY_BYTES, FULL, MAIN, SIM, STEP_NO, STEPS, window_copy

from kvreplay.cli import main
from kvreplay.workload import load_workload


def _json(p: Path) -> dict:
    return json.loads(p.read_text())


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("bound", "n_sent", "message"), [
    # containment: 3 rows a body; the 14th body (13 x 3 + 3 = 42, evicted down to 40) reaches 40
    ("host_rows_used>39", 14, "host_rows_used=40 crossed >39"),
    # growth: 188,743,680 bytes a body; the 8th body takes the tier past 1.5e9 (1,509,949,440)
    ("host_bytes>1.5e9", 8, "host_bytes=1.50995e+09 crossed >1.5e+09")])
def test_abort_if_stops_the_window_on_containment_or_growth(tmp_path, bound, n_sent, message):
    exp_dir = tmp_path / "experiments"
    exp_dir.mkdir()
    shutil.copytree(MAIN, tmp_path / "workloads" / "window-main")
    shutil.copytree(AB, tmp_path / "workloads" / "window-ab-1024")
    text = FULL.read_text().replace('abort_if = ["host_rows_used>40", "host_bytes>34e9"]', f'abort_if = ["{bound}"]')
    f = exp_dir / "window.toml"
    f.write_text(text)
    out = tmp_path / "w"
    assert main(["experiment", str(f), "--out", str(out), "--quiet"]) == 3
    r = _json(out / "result.json")
    assert r["aborted"] == {"reason": "bound", "message": f"step A: {message}"}
    assert [(s["name"], s["status"], s.get("reason")) for s in r["steps"]] == [
        ("quiesce", "measured", None), ("A0", "measured", None), ("A", "aborted", f"bound: {message}"),
        *((n, "deferred", "window aborted: bound") for n in ("B0", "B", "control", "trace")),
        ("restore", "measured", None)]
    prime = _json(out / "steps" / "02-A" / "summary.json")["phases"][0]
    assert (prime["sent"], prime["not_sent"]) == (n_sent, 16 - n_sent)
    assert BODY_BYTES * 8 == 1_509_949_440


@pytest.mark.timeout(120)
def test_the_incumbents_identity_is_verified_before_anything_is_taken_down(tmp_path):
    exp_dir = tmp_path / "experiments"
    exp_dir.mkdir()
    shutil.copytree(MAIN, tmp_path / "workloads" / "window-main")
    shutil.copytree(AB, tmp_path / "workloads" / "window-ab-1024")
    pinned = '"version.cache.host_rows" = 40'
    assert pinned in FULL.read_text()
    f = exp_dir / "window.toml"  # the incumbent has 40 host rows; the plan expects 52
    f.write_text(FULL.read_text().replace(pinned, '"version.cache.host_rows" = 52'))
    out = tmp_path / "w"
    assert main(["experiment", str(f), "--out", str(out), "--quiet"]) == 3
    r = _json(out / "result.json")
    assert r["aborted"] == {"reason": "identity_pins",
                            "message": "before the first step: version.cache.host_rows: '52' -> 40"}
    # nothing was quiesced, unloaded or sent: every step before the restore is deferred
    assert [(s["name"], s["status"], s.get("reason")) for s in r["steps"]] == [
        *((n, "deferred", "window aborted: identity_pins") for n, _k in STEPS[:-1]), ("restore", "measured", None)]
    assert sorted(p.name for p in (out / "steps").iterdir()) == ["07-restore"]
    assert _json(out / "snapshot.json")["identity"]["version"]["cache"]["host_rows"] == 40


SNAPSHOT = """[snapshot]
commands = [
    {name = "router", cmd = "{python} -c \\"print('x' * 5000)\\""},
    {name = "gpu", cmd = "echo token $WINDOW_KEY"},
    {name = "rollback", cmd = "cat {here}/rollback.txt", timeout = "20s"},
]
"""


@pytest.mark.timeout(120)
def test_the_snapshot_is_frozen_before_anything_is_taken_down_and_compared_after_the_restore(tmp_path,
                                                                                               monkeypatch):
    monkeypatch.setenv("WINDOW_KEY", "sk-window-secret-1234")
    text = FULL.read_text()
    text = text[:text.index("[snapshot]")] + SNAPSHOT + text[text.index("\n# P2: 90 minutes"):]
    text = text.replace('target = "sim"\n', 'target = "sim"\napi_key_env = "WINDOW_KEY"\n')
    # the quiesce changes what the rollback snapshot reads: the restore must notice
    text = text.replace("cmd = \"echo 'primary quiesced (stands for: routerctl drain primary)'\"",
                        "cmd = \"echo 'image v2' >> {here}/rollback.txt\"")
    # cut the window short after A's first request (3 host rows > 2) so the restore comes quickly
    text = text.replace('abort_if = ["host_rows_used>40", "host_bytes>34e9"]', 'abort_if = ["host_rows_used>2"]')
    f = window_copy(tmp_path, text)
    (f.parent / "rollback.txt").write_text("image v1\n")
    out = tmp_path / "w"
    assert main(["experiment", str(f), "--out", str(out), "--quiet"]) == 3
    frozen = {c["name"]: c for c in _json(out / "snapshot.json")["commands"]}
    x = "x" * 5000 + "\n"
    # bounded: the first 4,096 bytes kept, all 5,001 hashed
    assert {k: frozen["router"][k] for k in ("rc", "ok", "bytes", "sha256", "truncated")} == {
        "rc": 0, "ok": True, "bytes": 5001, "sha256": hashlib.sha256(x.encode()).hexdigest(), "truncated": True}
    assert frozen["router"]["output"] == x[:4096]
    # redacted: the API key never reaches snapshot.json or the log
    assert frozen["gpu"]["output"] == "token [REDACTED]\n"
    assert (out / "snapshot-gpu.log").read_text() == "token [REDACTED]\n"
    assert "sk-window-secret-1234" not in (out / "snapshot.json").read_text()
    # frozen before the quiesce changed the file
    assert frozen["rollback"]["output"] == "image v1\n"
    r = _json(out / "result.json")
    res = {s["name"]: s for s in r["steps"]}
    assert (res["restore"]["status"], res["restore"]["reason"]) == (
        "failed", "snapshot rollback differs after the restore")
    assert [(c["metric"], c["status"], c["value"], c["reason"]) for c in r["cells"]
            if c["metric"].startswith("snapshot.")] == [
        ("snapshot.router", "measured", True, None), ("snapshot.gpu", "measured", True, None),
        ("snapshot.rollback", "failed", False, "differs after the restore: line 2: '(none)' -> 'image v2'")]
    got = res["restore"]["checks"]["snapshot"][2]
    assert (got["rc_before"], got["rc_after"], got["output"]) == (0, 0, "image v1\nimage v2\n")
    assert (out / "steps" / "07-restore" / "snapshot-rollback.log").read_text() == "image v1\nimage v2\n"


@pytest.mark.timeout(120)
def test_a_snapshot_command_that_fails_aborts_the_window_before_anything_is_taken_down(tmp_path):
    text = FULL.read_text().replace("{name = \"gpu\", cmd = \"echo 'GPU 0", "{name = \"gpu\", cmd = \"exit 5; echo '")
    f = window_copy(tmp_path, text)
    out = tmp_path / "w"
    assert main(["experiment", str(f), "--out", str(out), "--quiet"]) == 3
    r = _json(out / "result.json")
    assert r["aborted"] == {"reason": "snapshot", "message": "command gpu failed (rc 5): nothing was taken down"}
    assert [(s["name"], s["status"]) for s in r["steps"]] == [
        *((n, "deferred") for n, _k in STEPS[:-1]), ("restore", "measured")]
    assert [(c["name"], c["rc"]) for c in _json(out / "snapshot.json")["commands"]] == [
        ("router", 0), ("monitoring", 0), ("gpu", 5), ("rollback", 0), ("configuration", 0)]
    # the restore compares what was frozen: the gpu command fails the same way, so it reads the same
    assert [(c["metric"], c["value"]) for c in r["cells"] if c["metric"].startswith("snapshot.")] == [
        ("snapshot.router", True), ("snapshot.monitoring", True), ("snapshot.gpu", True),
        ("snapshot.rollback", True), ("snapshot.configuration", True)]


@pytest.mark.timeout(120)
def test_the_correctness_gate_fails_an_ab_whose_arms_answer_differently(tmp_path):
    text = FULL.read_text()
    # the window cut to its quiesce, the trace A/B and the restore (quick); the "on" arm answers
    # 4 tokens where the baseline answers 8
    text = text[:text.index("# P9: take the incumbent")] + text[text.index("# P21: the trace"):]
    text = text.replace('compare = [["A/replay", "B/replay"]]', "")
    text = text.replace("when = ['step_ok = \"A\"', 'step_ok = \"B\"']", 'when = "previous_step_ok"')
    text = text.replace('cmd = "sim:prefill_scale=1.1"', 'cmd = "sim:output_tokens=4"')
    f = window_copy(tmp_path, text)
    out = tmp_path / "w"
    assert main(["experiment", str(f), "--out", str(out), "--quiet"]) == 3
    r = _json(out / "result.json")
    first = ("body 0 (sha256 " + load_workload(AB).bodies[0].sha256[:12] + "), arm on, block 01-on, c1: "
             "4 content deltas, arm off's 8")
    assert [(s["name"], s["status"], s.get("reason")) for s in r["steps"]] == [
        ("quiesce", "measured", None), ("trace", "failed", f"correctness: {first}"), ("restore", "measured", None)]
    # 24 answers checked; the 3 "on" blocks' 4 answers each differ
    res = {s["name"]: s for s in r["steps"]}
    assert res["trace"]["checks"]["correctness"] == {"mode": "exact", "ok": False, "checked": 24, "failures": 12,
                                                      "first": first}
    cells = {c["metric"]: c for c in r["cells"] if c["step"] == "trace"}
    assert cells["correctness"] == {"step": "trace", "metric": "correctness", "status": "failed", "value": False,
                                    "reason": first}
    assert cells["verdict"]["status"] == "failed"  # the timings never stand alone


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
    text = text.replace("# P16: the control",
                        '[[step]]\nname = "gate"\nkind = "quiesce"\ncmd = "exit 3"\n\n# P16: the control')
    text = text.replace("when = ['time_left > \"15m\"', \"previous_step_ok\"]", 'when = "previous_step_ok"')
    text = text.replace("cmd = \"test ! -e {dir}/candidate.loaded && echo 'candidate unloaded'\"",
                        "cmd = \"echo 'candidate still loaded'; exit 4\"")
    f = exp_dir / "window.toml"
    f.write_text(text)
    out = tmp_path / "w"
    assert main(["experiment", str(f), "--out", str(out), "--quiet"]) == 3
    r = _json(out / "result.json")
    res = {s["name"]: s for s in r["steps"]}
    assert r["step_counts"] == {"measured": 5, "failed": 3, "deferred": 0, "aborted": 0, "skipped": 1}
    assert (res["gate"]["status"], res["gate"]["reason"]) == ("failed", "quiesce command failed (rc 3)")
    assert (res["control"]["status"], res["control"]["reason"]) == ("skipped", "condition false: previous_step_ok")
    assert res["control"]["condition"] == {"when": ["previous_step_ok"], "holds": False, "false": ["previous_step_ok"],
                                           "seen": {"previous_step": "gate", "previous_status": "failed"}}
    assert res["control"]["run_dir"] is None and not (out / "steps" / "06-control" / "plan.json").exists()
    # issue 42 item 4: a skipped step's cells read skipped with the condition (were "failed")
    ctl_cells = {(c["status"], c["reason"]) for c in r["cells"] if c["step"] == "control"}
    assert ctl_cells == {("skipped", "condition false: previous_step_ok")}
    frozen = load_workload(AB).sha256
    now = load_workload(wl_dir / "window-ab-1024").sha256
    assert (res["trace"]["status"], res["trace"]["reason"]) == (
        "failed", f"fixed_bytes: the workload {(wl_dir / 'window-ab-1024').resolve()} changed since the freeze "
                  f"(sha256 {frozen[:12]} frozen, {now[:12]} now); the step sends nothing")
    assert not (out / "steps" / "07-trace" / "ab.json").exists() and res["trace"]["started"] is None
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
        "gates: body max_tokens = 2048, temperature = 1, top_p = 0.95, reasoning_effort = 'max' (held by all 20 "
        "bodies: checked at the freeze); fixed_bytes on: each sending step re-reads its workload and is refused "
        "if its sha256 changed",
        "deadlines count from the end of step quiesce (quiesce, deadline_from = 'quiesce', once it is measured; "
        "before it, from the experiment's start)",
        "  no step starts, no request is sent after: end of quiesce + 4200 s",
        "  in-flight requests cancelled at: end of quiesce + 5400 - 1200 = 4200 s (hard_deadline - restore_reserve)",
        "  the restore must end by: end of quiesce + 5400 s (hard_deadline)",
        "abort_if: host_rows_used>40, host_bytes>3.4e+10: checked at every counter read of a run, ab or sweep step; "
        "one crossed stops new requests, the window aborts and the restore runs",
        "  $ snapshot router (before the first step; compared after the restore): echo 'pool main: primary weight "
        "100 (stands for: routerctl show primary)'  (timeout 30 s)",
        f"  $ snapshot monitoring (before the first step; compared after the restore): {py} -c \"import "
        "urllib.request as u; t = u.urlopen('http://127.0.0.1:{port}/metrics').read().decode(); print(*sorted("
        "{l.split()[2] for l in t.splitlines() if l.startswith('# TYPE')}), sep=chr(10))\"  (timeout 30 s)",
        "  $ snapshot gpu (before the first step; compared after the restore): echo 'GPU 0: model memory 141 GiB, ECC "
        "on (stands for: nvidia-smi -q)'  (timeout 30 s)",
        "  $ snapshot rollback (before the first step; compared after the restore): echo 'incumbent image "
        "kvreplay-sim (stands for: the rollback artefact digest)'  (timeout 30 s)",
        f"  $ snapshot configuration (before the first step; compared after the restore): {py} -c \"import "
        "urllib.request as u; print(u.urlopen('http://127.0.0.1:{port}/version').read().decode())\"  (timeout 30 s)",
        "step 00 quiesce (quiesce)",
        "  when: always",
        "  $ quiesce: echo 'primary quiesced (stands for: routerctl drain primary)'",
        *(line for inc, run in (("A0", "A"), ("B0", "B")) for line in (
            f"step {STEP_NO[inc]:02d} {inc} (incarnation)",
            "  when: always",
            f"  $ simulator: a new embedded simulator: [server.sim] {SIM} + step sim {{}}",
            f"step {STEP_NO[run]:02d} {run} (run)",
            "  when: always",
            f"  workload: {MAIN} (16 bodies, sha256 {main_wl.sha256})")),
        "step 05 control (run)",
        "  when: time_left > \"15m\" and previous_step_ok (evaluated just before it; false: skipped)",
        f"  workload: {MAIN} (16 bodies, sha256 {main_wl.sha256})",
        "step 06 trace (ab)",
        "  when: step_ok = \"A\" and step_ok = \"B\" (evaluated just before it; false: skipped)",
        f"  workload (its own): {AB} (4 bodies, sha256 {ab_wl.sha256})",
        "  $ arm off: sim:",
        "  $ arm on: sim:prefill_scale=1.1",
        "step 07 restore (restore)",
        "  when: always (a restore always runs)",
        f"  $ simulator: the incumbent simulator started again: [server.sim] {SIM}",
        f"  $ check containment: test ! -e {kept.resolve()}/candidate.loaded && echo 'candidate unloaded'  "
        "(timeout 30 s)",
        f"  $ check monitoring: {py} -c \"import urllib.request as u; print(len(u.urlopen("
        "'http://127.0.0.1:{port}/metrics').read()), 'bytes of metrics')\"  (timeout 30 s)",
        f"  $ check preflight_direct: {py} -c \"import urllib.request as u; print(u.urlopen("
        "'http://127.0.0.1:{port}/v1/models').read().decode())\"  (timeout 30 s)",
        f"  $ check preflight_routed: {py} -c \"import urllib.request as u; print(u.urlopen("
        "'http://127.0.0.1:{port}/v1/models').status, 'via the router')\"  (timeout 30 s)",
        "  $ check readmission: echo 'primary readmitted to the router'  (timeout 30 s)",
        "  $ snapshot router (compared): echo 'pool main: primary weight 100 (stands for: routerctl show primary)'  "
        "(timeout 30 s)",
        f"  $ snapshot monitoring (compared): {py} -c \"import urllib.request as u; t = u.urlopen("
        "'http://127.0.0.1:{port}/metrics').read().decode(); print(*sorted({l.split()[2] for l in t.splitlines() "
        "if l.startswith('# TYPE')}), sep=chr(10))\"  (timeout 30 s)",
        "  $ snapshot gpu (compared): echo 'GPU 0: model memory 141 GiB, ECC on (stands for: nvidia-smi -q)'  "
        "(timeout 30 s)",
        "  $ snapshot rollback (compared): echo 'incumbent image kvreplay-sim (stands for: the rollback artefact "
        "digest)'  (timeout 30 s)",
        f"  $ snapshot configuration (compared): {py} -c \"import urllib.request as u; print(u.urlopen("
        "'http://127.0.0.1:{port}/version').read().decode())\"  (timeout 30 s)",
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
