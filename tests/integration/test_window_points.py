"""Issue 45: the bundled whole window meets the plan's 31 points, each run against the simulator.

The points P1 ... P31 are named in ``fixtures/experiments/host-cache-window-full.toml``'s
comments and listed, with the test that runs each, in docs/tutorials/diagnose-a-cache.md
("The whole window, point by point"). ``test_point`` checks every point on ONE run of the
bundled file (module scope, about 5 s, the file's own settings: time scale 0.001); the
points whose behaviour is a refusal, an abort or a deferral are also run by the variants
named in ``VARIANTS`` (here and in test_experiment_window_full.py, test_experiment_sim.py ...).
Outcomes do not depend on how fast the machine is: statuses, orders, counts, hashes,
bytes and the deadline arithmetic; of ``time_left`` only its bounds.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest
from window_full import (
    AB,
    BODY_BYTES,
    CHECKS,
    FULL,
    M_FETCH,
    MAIN,
    P_CREDIT,
    P_FETCH,
    ROOT,
    SNAPSHOTS,
    STEPS,
    D,
    M,
    window_copy,
)

from kvreplay.cli import main
from kvreplay.workload import load_workload

POINTS: dict[str, tuple[str, Callable[[SimpleNamespace], None]]] = {}


def point(pid: str, what: str) -> Callable[[Callable[[SimpleNamespace], None]], Callable[[SimpleNamespace], None]]:
    def deco(f: Callable[[SimpleNamespace], None]) -> Callable[[SimpleNamespace], None]:
        assert pid not in POINTS, pid
        POINTS[pid] = (what, f)
        return f
    return deco


def _json(p: Path) -> dict:
    return json.loads(p.read_text())


def _records(out: Path, d: str) -> list[dict]:
    return [json.loads(x) for x in (out / "steps" / d / "records.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def w(tmp_path_factory) -> SimpleNamespace:
    """One run of the bundled file, read once: result.json, experiment.json, snapshot.json, records."""
    out = tmp_path_factory.mktemp("window") / "w"
    assert main(["experiment", str(FULL), "--out", str(out), "--quiet"]) == 0
    r, doc = _json(out / "result.json"), _json(out / "experiment.json")
    recs = {name: _records(out, d) for name, d in (("A", "02-A"), ("B", "04-B"), ("control", "05-control"))}
    return SimpleNamespace(
        out=out, r=r, doc=doc, res={s["name"]: s for s in r["steps"]}, steps={s["name"]: s for s in doc["steps"]},
        snap=_json(out / "snapshot.json"), recs=recs,
        sent={k: [(x["phase"], x["body_index"]) for x in v if x.get("sent")] for k, v in recs.items()},
        cells={(c["step"], c["metric"]): c for c in r["cells"]})


def _cell(w: SimpleNamespace, step: str, metric: str) -> tuple[str, object]:
    c = w.cells[(step, metric)]
    return c["status"], c["value"]


def _host_cells(w: SimpleNamespace, step: str, phase: str) -> dict:
    keys = ("hit_tokens", "host_fetched_tokens", "host_lookups", "host_hits", "host_reused_tokens")
    return {k: _cell(w, step, f"{phase}.{k}") for k in keys}


FWD, REV = list(range(16)), list(range(15, -1, -1))


@point("P1", "Quiesce the primary and drain it; every drain bounded at 10 s")
def _p1(w):
    q = w.res["quiesce"]
    assert (q["status"], q["checks"]["command"]["rc"], q["checks"]["command"]["tail"]) == (
        "measured", 0, "primary quiesced (stands for: routerctl drain primary)\n")
    assert (q["checks"]["drain"]["passed"], q["checks"]["drain"]["reason"]) == (True, None)
    assert _cell(w, "quiesce", "quiesced") == ("measured", True)
    assert [(n, w.steps[n]["drain_timeout_s"]) for n in ("quiesce", "A", "B", "control")] == [
        ("quiesce", 10.0), ("A", 10.0), ("B", 10.0), ("control", 10.0)]
    # the quiesce is the first step, and its command the first that acts (after the snapshot's reads)
    names = [json.loads(x)["name"] for x in (w.out / "processes.jsonl").read_text().splitlines()]
    assert names[:6] == [*(f"snapshot-{n}" for n in SNAPSHOTS), "quiesce"]


@point("P2", "The hard deadline, 90 min, counted from the quiesce")
def _p2(w):
    assert (w.doc["window"]["deadline_from"], w.doc["window"]["hard_deadline_s"]) == ("quiesce", 5400.0)
    origin = w.r["deadline_origin"]
    assert (origin["deadline_from"], origin["origin"]["step"]) == ("quiesce", "quiesce")


@point("P3", "No new step or request after 70 min")
def _p3(w):
    assert w.doc["window"]["stop_new_after_s"] == 4200.0
    seen = w.res["control"]["condition"]["seen"]  # time_left counts down to stop_new_after from the quiesce
    assert seen["time_left_until"] == "stop_new_after" and 4200 - 60 < seen["time_left_s"] <= 4200


@point("P4", "20 min kept for the restore: requests in flight cancelled at 90 - 20 min")
def _p4(w):
    win = w.doc["window"]
    assert (win["restore_reserve_s"], win["cancel_in_flight_at_s"]) == (1200.0, 5400.0 - 1200.0)
    # the A/B (the last step before the restore) was handed the time left to 90 - 20 min as
    # its hard deadline, not the time left to 90
    limits = _json(w.out / "steps" / "06-trace" / "ab.json")["limits"]
    assert 4200 - 60 < limits["hard_deadline_s"] <= limits["stop_new_after_s"] <= 4200
    assert w.res["restore"]["status"] == "measured"


@point("P5", "The exact recipe bytes retained and hashed")
def _p5(w):
    assert (w.out / "experiment.toml").read_bytes() == FULL.read_bytes()
    assert w.doc["file"]["sha256"] == hashlib.sha256(FULL.read_bytes()).hexdigest()
    main_wl, ab_wl = load_workload(MAIN), load_workload(AB)
    man = _json(w.out / "workloads.json")["workloads"]
    assert [(m["used_by"], m["path"], m["n_bodies"], m["sha256"]) for m in man] == [
        (["workload"], str(MAIN), 16, main_wl.sha256), (["trace"], str(AB), 4, ab_wl.sha256)]
    assert [b["sha256"] for b in man[0]["bodies"]] == [b.sha256 for b in main_wl.bodies]
    assert [b["sha256"] for b in man[1]["bodies"]] == [b.sha256 for b in ab_wl.bodies]


@point("P6", "The incumbent's identity verified before it is taken down")
def _p6(w):
    ident = w.snap["identity"]  # read before the first step
    assert (ident["models"], ident["version"]["cache"]["host_rows"], ident["version"]["cache"]["host_evict"]) == (
        ["kvreplay-sim"], 40, "leaf-lru")
    assert w.doc["server"]["identity"] == {"models": "kvreplay-sim", "version.cache.host_rows": "40",
                                           "version.cache.host_evict": "leaf-lru"}
    assert w.r["aborted"] is None and w.r["identity"] == ident


@point("P7", "Router, monitoring, GPU, rollback and configuration identities frozen before anything is taken down")
def _p7(w):
    snap = {c["name"]: c for c in w.snap["commands"]}
    assert list(snap) == SNAPSHOTS and all((c["rc"], c["ok"]) == (0, True) for c in snap.values())
    assert snap["router"]["output"] == "pool main: primary weight 100 (stands for: routerctl show primary)\n"
    assert snap["router"]["sha256"] == hashlib.sha256(snap["router"]["output"].encode()).hexdigest()
    version = json.loads(snap["configuration"]["output"])
    assert (version["build"], version["cache"]["host_rows"], version["cache"]["device_blocks"]) == ("sim-1", 40, 37)
    assert "kvreplay_sim:host_rows_used" in snap["monitoring"]["output"].splitlines()
    assert (w.out / "snapshot-gpu.log").read_text() == (
        "GPU 0: model memory 141 GiB, ECC on (stands for: nvidia-smi -q)\n")


@point("P8", "The snapshot compared after the restore, a cell each")
def _p8(w):
    assert [(g["name"], g["same"], g["sha256_before"] == g["sha256_after"])
            for g in w.res["restore"]["checks"]["snapshot"]] == [(n, True, True) for n in SNAPSHOTS]
    assert [_cell(w, "restore", f"snapshot.{n}") for n in SNAPSHOTS] == [("measured", True)] * 5
    assert (w.out / "steps" / "07-restore" / "snapshot-router.log").read_text() == (
        "pool main: primary weight 100 (stands for: routerctl show primary)\n")


def _fresh_prime(w, step: str, inc: str) -> None:
    assert (w.res[inc]["checks"]["fresh"]["passed"], _cell(w, inc, "ready_identity_fresh")) == (
        True, ("measured", True))
    first = w.recs[step][0]["counter_delta"]  # the first request of the incarnation: nothing cached
    assert (first["hit_tokens"], first["host_lookups"], first["host_hits"], first["host_rows_used"]) == (0, 1, 0, 3)
    prime = _json(w.out / "steps" / ("02-A" if step == "A" else "04-B") / "summary.json")["phases"][0]
    # the other 15 hit the system block on the device only; no prime body was sent before in it
    assert (prime["counter_delta"]["hit_tokens"], prime["counter_delta"]["host_lookups"],
            prime["counter_delta"]["host_hits"]) == (15 * D, 16, 0)


@point("P9", "Fresh incarnation A: counters zero, cache empty")
def _p9(w):
    _fresh_prime(w, "A", "A0")
    assert w.res["A"]["incarnation"] == "A0"


@point("P10", "A: forward prime")
def _p10(w):
    assert w.sent["A"][:16] == [("prime", i) for i in FWD]


@point("P11", "A: reverse replay")
def _p11(w):
    assert w.sent["A"][16:] == [("replay", i) for i in REV]
    assert [c["a"] for c in w.r["compare"]] == ["A/replay"]


@point("P12", "Fresh incarnation B: nothing of A's cache reaches B")
def _p12(w):
    _fresh_prime(w, "B", "B0")
    urls = [w.res[n]["checks"]["start"]["sim"]["url"] for n in ("A0", "B0", "restore")]
    assert len(set(urls)) == 3  # a new simulator each time
    assert [(s, w.res[s]["incarnation"]) for s in ("B", "control", "trace")] == [
        ("B", "B0"), ("control", "B0"), ("trace", "B0")]


@point("P13", "B: forward prime")
def _p13(w):
    assert w.sent["B"][:16] == [("prime", i) for i in FWD]


@point("P14", "B: forward replay")
def _p14(w):
    assert w.sent["B"][16:] == [("replay", i) for i in FWD]
    assert [(c["a"], c["b"]) for c in w.r["compare"]] == [("A/replay", "B/replay")]


@point("P15", "The last 12 bodies twice as a control, never comparable")
def _p15(w):
    assert w.sent["control"] == [("control", i) for i in [*range(4, 16), *range(4, 16)]]
    assert {x["comparable"] for x in w.recs["control"]} == {False}
    assert (w.res["control"]["comparable"], w.res["control"]["label"]) == (False, "control: last 12 bodies twice")
    churn = next(f for f in w.r["findings"] if f["rule"] == "row_checkpoint_churn")
    assert [(e["cell"], e["comparable"], e["role"]) for e in churn["evidence"]] == [
        ("B/replay", True, "forward replay"), ("A/replay", True, "reverse replay"),
        ("control/control", False, "control")]


@point("P16", 'The control only "if safe and time permits" (`when`)')
def _p16(w):
    ctl = w.res["control"]["condition"]
    assert {k: ctl[k] for k in ("when", "holds", "false")} == {
        "when": ['time_left > "15m"', "previous_step_ok"], "holds": True, "false": []}
    assert (ctl["seen"]["previous_step"], ctl["seen"]["previous_status"]) == ("B", "measured")
    assert 900 < ctl["seen"]["time_left_s"] <= 4200 and w.res["control"]["status"] == "measured"


@point("P17", "The host tier: 40 leaf-LRU rows, 3 a body, restored by the reverse replay only")
def _p17(w):
    assert w.r["tiers"] == {"host": True, "device": True}
    # the prime fills 3 rows a body up to the pool's 40 and stays there
    assert [x["counter_delta"]["host_rows_used"] for x in w.recs["B"]] == [*range(3, 40, 3), *[40] * 19]
    assert (_cell(w, "A", "replay.host_hits"), _cell(w, "B", "replay.host_hits")) == (
        ("measured", 14.0), ("measured", 0.0))
    assert [f["rule"] for f in w.r["findings"]] == ["row_checkpoint_churn", "ab_verdict"]


@point("P18", "Host lookups, hits and reused tokens as publication cells beside device hits")
def _p18(w):
    # The prime ends holding the last 13 bodies whole (39 rows) plus body 2's m row (40). A's
    # reverse replay meets them before they are evicted: bodies 15..3 hit on p, body 2 on m,
    # bodies 1 and 0 miss: 14 hits of 16 lookups. B's forward replay evicts each body's rows
    # just before it comes round: 0 hits. After it the tier again holds bodies 3..15, so the
    # control (bodies 4..15, twice) hits all 24 on p.
    assert _host_cells(w, "A", "replay") == {
        "hit_tokens": ("measured", 16 * D), "host_fetched_tokens": ("measured", 13 * P_FETCH + M_FETCH),
        "host_lookups": ("measured", 16), "host_hits": ("measured", 14),
        "host_reused_tokens": ("measured", 13 * P_CREDIT + M)}
    assert _host_cells(w, "B", "replay") == {
        "hit_tokens": ("measured", 16 * D), "host_fetched_tokens": ("measured", 0), "host_lookups": ("measured", 16),
        "host_hits": ("measured", 0), "host_reused_tokens": ("measured", 0)}
    assert _host_cells(w, "control", "control") == {
        "hit_tokens": ("measured", 24 * D), "host_fetched_tokens": ("measured", 24 * P_FETCH),
        "host_lookups": ("measured", 24), "host_hits": ("measured", 24),
        "host_reused_tokens": ("measured", 24 * P_CREDIT)}


@point("P19", "Every body holds the same sampling settings (body gate)")
def _p19(w):
    gate = {"max_tokens": 2048, "temperature": 1, "top_p": 0.95, "reasoning_effort": "max"}
    assert w.doc["gates"]["body"] == gate
    # every body sent, by its hash, is one of the 20 the gate passed, and holds the settings
    bodies = {b.sha256: json.loads(b.raw) for wl in (MAIN, AB) for b in load_workload(wl).bodies}
    sent = {x["body_sha256"] for v in w.recs.values() for x in v if x.get("sent")}
    for blk in sorted((w.out / "steps" / "06-trace" / "blocks").iterdir()):
        sent |= {json.loads(x)["body_sha256"] for x in (blk / "records.jsonl").read_text().splitlines()}
    assert len(sent) == 18 and all({k: bodies[s][k] for k in gate} == gate for s in sent)


@point("P20", "Fixed bytes: each sending step re-reads its workload against the frozen hash")
def _p20(w):
    assert w.doc["gates"]["fixed_bytes"] is True
    main_sha, ab_sha = load_workload(MAIN).sha256, load_workload(AB).sha256
    assert [(n, w.steps[n]["plan"]["workload"]["sha256"]) for n in ("A", "B", "control", "trace")] == [
        ("A", main_sha), ("B", main_sha), ("control", main_sha), ("trace", ab_sha)]
    assert [w.res[n]["status"] for n in ("A", "B", "control", "trace")] == ["measured"] * 4


@point("P21", "The trace-off/on A/B on its own retained 1024-token workload")
def _p21(w):
    ab_wl = load_workload(AB)
    assert w.steps["trace"]["workload"] == {"path": str(AB), "n_bodies": 4, "sha256": ab_wl.sha256}
    assert w.res["trace"]["condition"] == {"when": ['step_ok = "A"', 'step_ok = "B"'], "holds": True, "false": [],
                                           "seen": {"step_ok": {"A": "measured", "B": "measured"}}}
    c1 = [json.loads(x) for x in (w.out / "steps" / "06-trace" / "blocks" / "00-off" / "records.jsonl")
          .read_text().splitlines() if json.loads(x)["phase"] == "c1"]
    assert [(x["body_sha256"], x["counter_delta"]["prompt_tokens"]) for x in c1] == [
        (ab_wl.bodies[0].sha256, 1024), (ab_wl.bodies[1].sha256, 1024)]


@point("P22", "Three repetitions at C1 and C4")
def _p22(w):
    ab = _json(w.out / "steps" / "06-trace" / "ab.json")
    assert (ab["reps"], ab["phases"]) == (3, [{"name": "c1", "concurrency": 1, "requests": 2},
                                              {"name": "c4", "concurrency": 4, "requests": 2}])
    assert [(b["rep"], b["arm"], b["aborted"]) for b in ab["blocks"]] == [
        (0, "off", None), (0, "on", None), (1, "on", None), (1, "off", None), (2, "off", None), (2, "on", None)]
    verdict = next(f for f in w.r["findings"] if f["rule"] == "ab_verdict")
    assert (verdict["reps_planned"], verdict["reps_measured"]) == (3, 3)


@point("P23", "A correctness gate for the A/B: outputs compared, not only timings")
def _p23(w):
    # 6 blocks x (2 bodies at C1 + 2 at C4), each the baseline's answer
    assert w.res["trace"]["checks"]["correctness"] == {"mode": "exact", "ok": True, "checked": 24, "failures": 0,
                                                       "first": None}
    assert w.cells[("trace", "correctness")] == {"step": "trace", "metric": "correctness", "status": "measured",
                                                 "value": True, "reason": None}


@point("P24", "Abort on a containment breach (host rows past the pool)")
def _p24(w):
    assert w.doc["window"]["abort_if"][0] == "host_rows_used>40"
    # read at every request: the tier reaches its 40 rows, never more, so the bound never fires
    levels = [x["counter_delta"]["host_rows_used"] for k in ("A", "B", "control") for x in w.recs[k]]
    assert (max(levels), levels.count(40)) == (40, 19 + 19 + 24)
    assert (w.r["aborted"], w.r["status"]) == (None, "complete")


@point("P25", "Abort on uncontrolled growth (host bytes past 34 GB)")
def _p25(w):
    assert w.doc["window"]["abort_if"][1] == "host_bytes>3.4e+10"
    # each of the first 13 bodies adds its 188,743,680 bytes; the tier stays far below the bound
    assert [x["counter_delta"]["host_bytes"] for x in w.recs["B"][:13]] == [k * BODY_BYTES for k in range(1, 14)]
    assert max(x["counter_delta"]["host_bytes"] for v in w.recs.values() for x in v) < 3.4e10
    assert w.r["step_counts"] == {"measured": 8, "failed": 0, "deferred": 0, "aborted": 0}


@point("P26", "The identity held through the window (a drift stops new requests)")
def _p26(w):
    ident = w.snap["identity"]
    assert [w.res[n]["checks"]["identity"] == ident for n in ("A0", "B0", "restore")] == [True] * 3
    assert [(w.res[n]["checks"]["identity_after"] == ident, w.res[n]["checks"]["phases_invalid"])
            for n in ("A", "B", "control")] == [(True, [])] * 3
    assert not any(x.get("identity_unverified") for v in w.recs.values() for x in v)


@point("P27", "Unload the candidate (containment checked after the restore)")
def _p27(w):
    got = {g["name"]: g for g in w.res["restore"]["checks"]["restore_checks"]}
    assert (got["containment"]["rc"], got["containment"]["output"]) == (0, "candidate unloaded\n")
    assert got["containment"]["cmd"] == f"test ! -e {w.out}/candidate.loaded && echo 'candidate unloaded'"
    assert _cell(w, "restore", "restore_check.containment") == ("measured", True)


@point("P28", "Restore the exact incumbent")
def _p28(w):
    rest = w.res["restore"]
    assert (rest["status"], rest["checks"]["server_restored"]) == ("measured", True)
    assert rest["checks"]["identity"] == w.snap["identity"]
    assert _cell(w, "restore", "identity_restored") == ("measured", True)
    assert [s["name"] for s in w.r["steps"]][-1] == "restore"
    # the restore's cells: the incumbent's identity, then each check, then each snapshot
    assert [c["metric"] for c in w.r["cells"] if c["step"] == "restore"] == [
        "identity_restored", *(f"restore_check.{n}" for n in CHECKS), *(f"snapshot.{n}" for n in SNAPSHOTS)]


@point("P29", "Monitoring, direct and routed preflight of the restored incumbent")
def _p29(w):
    got = {g["name"]: g for g in w.res["restore"]["checks"]["restore_checks"]}
    assert list(got) == CHECKS
    port = w.res["restore"]["checks"]["start"]["sim"]["url"].rsplit(":", 1)[1]
    for n in ("monitoring", "preflight_direct", "preflight_routed"):  # against the restored server's port
        assert f"127.0.0.1:{port}/" in got[n]["cmd"] and got[n]["rc"] == 0
    assert re.fullmatch(r"[1-9][0-9]* bytes of metrics\n", got["monitoring"]["output"])
    assert [m["id"] for m in json.loads(got["preflight_direct"]["output"])["data"]] == ["kvreplay-sim"]
    log = (w.out / "steps" / "07-restore" / "check-preflight_direct.log").read_text()
    assert [m["id"] for m in json.loads(log)["data"]] == ["kvreplay-sim"]
    assert got["preflight_routed"]["output"] == "200 via the router\n"
    assert [_cell(w, "restore", f"restore_check.{n}") for n in CHECKS[1:4]] == [("measured", True)] * 3


@point("P30", "Readmission to the router")
def _p30(w):
    got = {g["name"]: g for g in w.res["restore"]["checks"]["restore_checks"]}
    assert (got["readmission"]["output"], list(got)[-1]) == ("primary readmitted to the router\n", "readmission")
    assert (w.out / "steps" / "07-restore" / "check-readmission.log").read_text() == (
        "primary readmitted to the router\n")
    assert _cell(w, "restore", "restore_check.readmission") == ("measured", True)


@point("P31", "A dry-run preview of every step and lifecycle command, writing nothing")
def _p31(w):
    # the run did what the preview lists: the same steps, in order, from the same frozen file
    assert [(s["name"], s["kind"]) for s in w.doc["steps"]] == STEPS
    assert [(s["name"], s["status"]) for s in w.r["steps"]] == [(n, "measured") for n, _k in STEPS]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("pid", [f"P{i}" for i in range(1, 32)])
def test_point(w, pid):
    POINTS[pid][1](w)


# Points whose behaviour is a refusal, an abort, a deferral or a preview: the variants that run it.
VARIANTS = {
    "P1": ["tests/unit/experiments/test_window_origin.py::test_a_failed_quiesce_leaves_the_deadlines_counted_from_"
           "the_start"],
    "P2": ["tests/integration/test_window_points.py::test_the_deadlines_count_from_the_end_of_the_quiesce"],
    "P3": ["tests/integration/test_window_points.py::test_no_step_starts_70_minutes_after_the_quiesce",
           "tests/integration/test_experiment_sim.py::test_stop_new_after_defers_later_steps_and_restores"],
    "P4": ["tests/integration/test_experiment_sim.py::test_hard_deadline_cuts_an_ab_step_and_restore_still_runs"],
    "P6": ["tests/integration/test_experiment_window_full.py::test_the_incumbents_identity_is_verified_before_"
           "anything_is_taken_down"],
    "P7": ["tests/integration/test_experiment_window_full.py::test_the_snapshot_is_frozen_before_anything_is_taken_"
           "down_and_compared_after_the_restore",
           "tests/integration/test_experiment_window_full.py::test_a_snapshot_command_that_fails_aborts_the_window_"
           "before_anything_is_taken_down"],
    "P8": ["tests/integration/test_experiment_window_full.py::test_the_snapshot_is_frozen_before_anything_is_taken_"
           "down_and_compared_after_the_restore"],
    "P9": ["tests/integration/test_experiment_sim.py::test_failed_fresh_incarnation_sends_nothing_until_the_next"],
    "P16": ["tests/integration/test_experiment_window_full.py::test_a_false_condition_skips_a_changed_workload_is_"
            "refused_and_a_failed_check_fails_the_restore"],
    "P19": ["tests/integration/test_window_points.py::test_a_body_off_the_sampling_settings_is_refused_before_"
            "anything_is_written"],
    "P20": ["tests/integration/test_experiment_window_full.py::test_a_false_condition_skips_a_changed_workload_is_"
            "refused_and_a_failed_check_fails_the_restore"],
    "P23": ["tests/integration/test_experiment_window_full.py::test_the_correctness_gate_fails_an_ab_whose_arms_"
            "answer_differently"],
    "P24": ["tests/integration/test_experiment_window_full.py::test_abort_if_stops_the_window_on_containment_or_"
            "growth"],
    "P25": ["tests/integration/test_experiment_window_full.py::test_abort_if_stops_the_window_on_containment_or_"
            "growth"],
    "P26": ["tests/integration/test_window_points.py::test_an_incarnation_off_the_pinned_identity_sends_nothing",
            "tests/integration/test_identity_restart_sim.py::test_restart_with_another_build_is_caught_after_the_"
            "request_it_served",
            "tests/integration/test_experiment_fleet.py::test_identity_pins_hold_on_every_replica_or_the_step_aborts"],
    "P27": ["tests/integration/test_experiment_window_full.py::test_a_false_condition_skips_a_changed_workload_is_"
            "refused_and_a_failed_check_fails_the_restore"],
    "P31": ["tests/integration/test_experiment_window_full.py::test_dry_run_prints_every_step_condition_workload_and_"
            "command_and_writes_nothing",
            "tests/integration/test_experiment_window_full.py::test_dry_run_previews_the_lifecycle_commands_of_a_"
            "real_server"],
}

TUTORIAL = ROOT / "docs" / "tutorials" / "diagnose-a-cache.md"


def test_every_point_is_named_in_the_file_has_a_test_and_a_row_in_the_tutorial():
    want = [f"P{i}" for i in range(1, 32)]
    text = FULL.read_text()
    comments = "\n".join(line.split("#", 1)[1] for line in text.splitlines() if "#" in line)
    assert sorted(set(re.findall(r"\bP(\d+)\b", comments)), key=int) == [p[1:] for p in want]
    assert list(POINTS) == want and set(VARIANTS) <= set(want)
    for pid, tests in VARIANTS.items():
        for t in tests:
            path, name = t.split("::")
            assert f"\ndef {name}(" in (ROOT / path).read_text(), (pid, t)
    rows = [line for line in TUTORIAL.read_text().splitlines() if re.match(r"\| P\d+ \|", line)]
    assert [r.split("|")[1].strip() for r in rows] == want
    for pid, row in zip(want, rows, strict=True):
        assert f"test_point[{pid}]" in row, pid
        assert all(t.split("::")[1] in row for t in VARIANTS.get(pid, [])), pid


def test_a_body_off_the_sampling_settings_is_refused_before_anything_is_written(tmp_path, capsys):
    f = window_copy(tmp_path, FULL.read_text())
    body = tmp_path / "workloads" / "window-ab-1024" / "003.json"
    body.write_text(json.dumps({**json.loads(body.read_text()), "top_p": 0.9}))
    out = tmp_path / "w"
    assert main(["experiment", str(f), "--out", str(out), "--quiet"]) == 2
    wl = tmp_path / "workloads" / "window-ab-1024"
    assert capsys.readouterr().err == (
        f"kvreplay: error: {wl.resolve() / '003.json'}, field 'gates.body.top_p': body 3 (003.json) of step "
        f"trace's workload "
        f"{wl.resolve()}: top_p is 0.9, the gate in {f} wants 0.95\n")
    assert not out.exists()


@pytest.mark.timeout(120)
def test_the_deadlines_count_from_the_end_of_the_quiesce(tmp_path, monkeypatch):
    # The window's clock jumps 4,000 s while the quiesce ends (a long drain, without waiting for
    # it). Counted from the experiment's start, 200 s would be left before stop_new_after and the
    # control ("more than 15 minutes left") would be skipped; counted from the quiesce, it runs.
    from kvreplay.experiments.window import execute

    shift = [0]
    real_now, real_origin = execute.now_ns, execute.WindowRun._maybe_origin

    def origin(self, st, res):
        if st.kind == "quiesce":
            shift[0] = 4000 * 10**9
        real_origin(self, st, res)

    monkeypatch.setattr(execute, "now_ns", lambda: real_now() + shift[0])
    monkeypatch.setattr(execute.WindowRun, "_maybe_origin", origin)
    text = FULL.read_text().replace('compare = [["A/replay", "B/replay"]]', "")
    text = (text[:text.index("# P9: take the incumbent")] + text[text.index("# P16: the control"):
            text.index("# P21: the trace")] + text[text.index("# P27: unload"):])
    f = window_copy(tmp_path, text)
    out = tmp_path / "w"
    assert main(["experiment", str(f), "--out", str(out), "--quiet"]) == 0
    r = _json(out / "result.json")
    assert [(s["name"], s["status"]) for s in r["steps"]] == [
        ("quiesce", "measured"), ("control", "measured"), ("restore", "measured")]
    assert r["deadline_origin"]["origin"]["step"] == "quiesce"
    assert 4000 <= r["deadline_origin"]["origin"]["after_start_s"] < 4060
    seen = r["steps"][1]["condition"]["seen"]
    assert seen["time_left_until"] == "stop_new_after" and 4200 - 60 < seen["time_left_s"] <= 4200


@pytest.mark.timeout(120)
def test_no_step_starts_70_minutes_after_the_quiesce(tmp_path, monkeypatch):
    # The window's clock reads 4,200 s more from the moment step A has ended: stop_new_after
    # (70 min from the quiesce) passes exactly between A and B0, however long A took.
    from kvreplay.experiments.window import execute

    real = execute.WindowRun.elapsed

    def elapsed(self) -> float:
        return real(self) + (4200.0 if any(r.name == "A" and r.ended for r in self.results) else 0.0)

    monkeypatch.setattr(execute.WindowRun, "elapsed", elapsed)
    out = tmp_path / "w"
    assert main(["experiment", str(FULL), "--out", str(out), "--quiet"]) == 3
    r = _json(out / "result.json")
    assert [(s["name"], s["status"]) for s in r["steps"]] == [
        ("quiesce", "measured"), ("A0", "measured"), ("A", "measured"), *((n, "deferred") for n in (
            "B0", "B", "control", "trace")), ("restore", "measured")]
    for s in r["steps"][3:7]:
        m = re.fullmatch(r"window: no step starts after stop_new_after = 4200 s \(elapsed (\d+\.\d) s\)", s["reason"])
        assert m is not None and 4200.0 <= float(m.group(1)) < 4260.0, s["reason"]
    summary = _json(out / "steps" / "02-A" / "summary.json")  # A itself ran whole
    assert [(p["name"], p["sent"], p["not_sent"]) for p in summary["phases"]] == [("prime", 16, 0), ("replay", 16, 0)]
    assert (r["status"], r["aborted"]) == ("incomplete", None)


@pytest.mark.timeout(120)
def test_an_incarnation_off_the_pinned_identity_sends_nothing(tmp_path):
    # B's candidate comes up with 52 host rows where the file pins the incumbent's 40: B0 fails
    # on its pins and nothing of B, the control or the A/B is sent; the restore still runs.
    text = FULL.read_text()
    b0 = 'name = "B0"\nkind = "incarnation"\nfresh = true\n'
    assert text.count(b0) == 1
    f = window_copy(tmp_path, text.replace(b0, b0 + "sim = {host_rows = 52}\n"))
    out = tmp_path / "w"
    assert main(["experiment", str(f), "--out", str(out), "--quiet"]) == 3
    r = _json(out / "result.json")
    why = "identity pins do not hold: version.cache.host_rows: '40' -> 52"
    assert [(s["name"], s["status"], s["reason"]) for s in r["steps"]] == [
        ("quiesce", "measured", None), ("A0", "measured", None), ("A", "measured", None), ("B0", "failed", why),
        *((n, "deferred", f"incarnation B0 failed: {why}") for n in ("B", "control", "trace")),
        ("restore", "measured", None)]
    assert sorted(p.name for p in (out / "steps").iterdir()) == ["00-quiesce", "01-A0", "02-A", "03-B0", "07-restore"]
    assert [(c["metric"], c["value"]) for c in r["cells"] if c["step"] == "restore"][0] == ("identity_restored", True)
