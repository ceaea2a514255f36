"""A fleet target against simulator replicas behind a toy round-robin router (issue 33 items 1-4, 8).

Each replica is its own ``kvreplay serve-sim`` process on a free port; the router
(``toy_router.py``) forwards each request to the next upstream in turn, so the
assignment is known in advance: at C1 position ``p`` goes to upstream ``p % n``.
"""

from __future__ import annotations

import asyncio
import collections
import json
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from kvreplay.backends import make_backend
from kvreplay.cli import main

ROOT = Path(__file__).resolve().parents[2]
MTBENCH = ROOT / "fixtures" / "workloads" / "mtbench-52"
ROUTER = Path(__file__).with_name("toy_router.py")


def _start(cmd: list[str]) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()  # type: ignore[union-attr]
    assert "listening on" in line, line
    return proc, line.split("listening on ", 1)[1].split()[0]


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(timeout=10)
    if proc.stdout is not None:
        proc.stdout.close()


@pytest.fixture(scope="module")
def replicas():
    """Three simulator replicas (the third is never listed: the 'unlisted' case)."""
    procs = [_start([sys.executable, "-m", "kvreplay", "serve-sim", "--port", "0", "--time-scale", "0",
                     "--output-tokens", "4"]) for _ in range(3)]
    try:
        yield [u for _, u in procs]
    finally:
        for p, _ in procs:
            _stop(p)


def _router(upstreams: list[str], header: str | None = None) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, str(ROUTER)] + [a for u in upstreams for a in ("--upstream", u)]
    return _start(cmd + (["--header", header] if header else []))


def _counters(urls: list[str]) -> dict[str, dict[str, float]]:
    async def read() -> dict[str, dict[str, float]]:
        async with aiohttp.ClientSession() as s:
            return {u: dict((await make_backend("halogen", u, s).snapshot()).common) for u in urls}

    return asyncio.run(read())


def _records(out: Path) -> list[dict]:
    return [json.loads(ln) for ln in (out / "records.jsonl").read_text().splitlines()]


def _run(out: Path, router: str, urls: list[str], phase: str, *extra: str) -> int:
    args = ["run", str(MTBENCH), "--target", router, "--out", str(out), "--quiet", "--phase", phase]
    for u in urls:
        args += ["--replica", u]
    return main(args + list(extra))


def test_c1_round_robin_attribution_matches_each_replicas_own_counters(tmp_path, replicas):
    u1, u2 = replicas[:2]
    proc, router = _router([u1, u2])
    try:
        before = _counters([u1, u2])
        assert _run(tmp_path / "r", router, [u1, u2], "a:forward:c1:first6") == 0
        after = _counters([u1, u2])
    finally:
        _stop(proc)
    recs = _records(tmp_path / "r")
    # round robin: positions 0, 2, 4 on the first upstream, 1, 3, 5 on the second
    assert [r["replica"] for r in recs] == [u1, u2, u1, u2, u1, u2]
    assert {r["replica_source"] for r in recs} == {"counters"} and {r["replica_reason"] for r in recs} == {None}
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    ph = summary["phases"][0]
    by_url = {e["url"]: e for e in ph["replicas"]}
    assert [e["url"] for e in ph["replicas"]] == [u1, u2]
    for u in (u1, u2):
        own = {k: after[u][k] - before[u][k] for k in ("lookups", "hits", "hit_tokens", "stores")}
        # the phase's per-replica delta equals the replica's own counters read directly ...
        assert {k: by_url[u]["counter_delta"][k] for k in own} == own
        # ... and so does the sum of the per-request deltas of the records naming it
        summed = collections.Counter()
        for r in recs:
            if r["replica"] == u:
                summed.update({k: r["replica_deltas"][u][k] for k in own})
        assert dict(summed) == own
        assert own["lookups"] == 3  # one lookup per request, three requests each
        assert by_url[u]["requests"] == 3
    fleet = ph["fleet"]
    assert fleet["requests"] == 6 == sum(e["requests"] for e in ph["replicas"])
    assert fleet["tokens"] == {k: sum(e["tokens"][k] for e in ph["replicas"]) for k in fleet["tokens"]}
    assert fleet["tokens"]["prompt"] == ph["tokens"]["prompt"]
    assert fleet["balance"]["requests_max_over_mean"] == 1.0
    assert fleet["attribution"] == "per_request" and fleet["unattributed"]["requests"] == 0
    plan = json.loads((tmp_path / "r" / "plan.json").read_text())
    assert plan["run"]["fleet"]["replicas"] == [{"url": u1, "backend": None, "profile": None},
                                               {"url": u2, "backend": None, "profile": None}]
    assert plan["run"]["backend"] == "fleet:halogen,halogen"
    report = (tmp_path / "r" / "report.md").read_text()
    assert "## Replicas" in report and u1 in report
    # kvreplay report rebuilds the per-replica totals from records.jsonl alone
    (tmp_path / "r" / "summary.json").unlink()
    assert main(["report", str(tmp_path / "r")]) == 0
    rebuilt = json.loads((tmp_path / "r" / "summary.json").read_text())["phases"][0]
    assert [(e["url"], e["requests"], e["tokens"]) for e in rebuilt["replicas"]] == [
        (e["url"], e["requests"], e["tokens"]) for e in ph["replicas"]]


def test_router_forwarding_to_an_unlisted_replica_is_unattributed(tmp_path, replicas):
    u1, u2, u3 = replicas
    proc, router = _router([u1, u2, u3])  # u3 is not listed
    try:
        assert _run(tmp_path / "r", router, [u1, u2], "a:forward:c1:first6") == 0
    finally:
        _stop(proc)
    recs = _records(tmp_path / "r")
    assert [r["replica"] for r in recs] == [u1, u2, None, u1, u2, None]
    assert [r["replica_reason"] for r in recs] == [None, None, "unattributed", None, None, "unattributed"]
    fleet = json.loads((tmp_path / "r" / "summary.json").read_text())["phases"][0]["fleet"]
    assert fleet["requests"] == 4
    assert fleet["unattributed"] == {"requests": 2, "reasons": {"unattributed": 2},
                                     "tokens": fleet["unattributed"]["tokens"]}
    assert "unattributed 2" in fleet["note"]
    assert "unattributed" in (tmp_path / "r" / "report.md").read_text()


@pytest.mark.parametrize(("workers", "client"), [(1, "h1"), (2, "h1"), (1, "aiohttp"), (2, "ray")])
def test_header_attribution_above_c1(tmp_path, replicas, workers, client, monkeypatch):
    extra = []
    if client == "aiohttp":
        monkeypatch.setenv("KVREPLAY_HTTP", "aiohttp")  # the parity reference client reads the header too
    if client == "ray":
        pytest.importorskip("ray", reason="Ray is an optional extra (pip install 'kvreplay[ray]')")
        extra = ["--ray", "local"]  # two Ray actors on a new local instance
    u1, u2 = replicas[:2]
    proc, router = _router([u1, u2], header="x-kvreplay-replica")
    try:
        assert _run(tmp_path / "r", router, [u1, u2], "a:forward:c4:first12", "--workers", str(workers),
                    *extra) == 0
    finally:
        _stop(proc)
    recs = _records(tmp_path / "r")
    assert collections.Counter(r["replica"] for r in recs) == {u1: 6, u2: 6}
    assert {r["replica_source"] for r in recs} == {"header"}
    ph = json.loads((tmp_path / "r" / "summary.json").read_text())["phases"][0]
    assert [(e["url"], e["requests"]) for e in ph["replicas"]] == [(u1, 6), (u2, 6)]
    assert ph["fleet"]["attribution"] == "header" and ph["fleet"]["requests"] == 12
    # worker 0 reads every replica's counters over the phase: six lookups each
    assert [e["counter_delta"]["lookups"] for e in ph["replicas"]] == [6, 6]


def test_above_c1_without_header_is_phase_only(tmp_path, replicas):
    u1, u2 = replicas[:2]
    proc, router = _router([u1, u2])
    try:
        assert _run(tmp_path / "r", router, [u1, u2], "a:forward:c2:first4") == 0
    finally:
        _stop(proc)
    assert {(r["replica"], r["replica_reason"]) for r in _records(tmp_path / "r")} == {(None, "phase_only")}
    ph = json.loads((tmp_path / "r" / "summary.json").read_text())["phases"][0]
    assert ph["fleet"]["attribution"] == "phase_only" and "per-replica totals" in ph["fleet"]["note"]
    assert [e["counter_delta"]["lookups"] for e in ph["replicas"]] == [2, 2]


def test_bad_fleets_exit_2_before_sending(tmp_path, replicas, capsys):
    u1, u2 = replicas[:2]
    assert _run(tmp_path / "a", u1, [u1, u2], "a:forward:c1:first2") == 2
    assert "is the router itself" in capsys.readouterr().err
    assert _run(tmp_path / "b", "http://127.0.0.1:9", [u1, u1 + "/"], "a:forward:c1:first2") == 2
    assert "listed twice" in capsys.readouterr().err
    proc, router = _router([u1, u2])
    try:
        before = _counters([u1])
        assert _run(tmp_path / "c", router, [u1, "http://127.0.0.1:9"], "a:forward:c1:first2") == 2
        assert "replica http://127.0.0.1:9 does not answer" in capsys.readouterr().err
        assert _counters([u1]) == before  # nothing was sent
    finally:
        _stop(proc)
    assert not (tmp_path / "c").exists()  # refused before the run directory is made


def test_fleet_table_of_a_plan_file(tmp_path, replicas):
    u1, u2 = replicas[:2]
    proc, router = _router([u1, u2], header="x-kvreplay-replica")
    plan = tmp_path / "fleet.toml"
    plan.write_text(f'[fleet]\nrouter = "{router}"\nreplicas = ["{u1}", {{url = "{u2}", backend = "halogen"}}]\n'
                    '[[phase]]\nname = "a"\norder = "forward"\nconcurrency = 1\nselect = "first:4"\ndrain = true\n')
    try:
        rc = main(["run", str(MTBENCH), "--plan", str(plan), "--out", str(tmp_path / "r"), "--quiet"])
    finally:
        _stop(proc)
    assert rc == 0
    assert [r["replica"] for r in _records(tmp_path / "r")] == [u1, u2, u1, u2]  # counters and header agree
    run = json.loads((tmp_path / "r" / "plan.json").read_text())["run"]
    assert run["target"] == router
    assert run["fleet"]["replicas"][1] == {"url": u2, "backend": "halogen", "profile": None}
    ph = json.loads((tmp_path / "r" / "summary.json").read_text())["phases"][0]
    assert ph["drain"]["passed"] is True  # every replica drained


@pytest.mark.parametrize(("spec", "message"), [
    (",backend=none", "backend=none reads no counters"),
    (",backend=bogus", "unknown backend 'bogus'"),
    (",backend=prometheus,profile=/nonexistent/p.toml", "cannot read profile"),
])
def test_a_refused_fleet_config_leaves_no_run_directory(tmp_path, replicas, capsys, spec, message):
    """Issue 44 low: a replica adapter refused is refused before plan.json (or anything) is written."""
    rc = _run(tmp_path / "r", "http://127.0.0.1:9", [replicas[0] + spec], "a:forward:c1:first1")
    assert rc == 2
    err = capsys.readouterr().err
    assert f"field '--replica': replica {replicas[0]}: " in err and message in err, err
    assert not (tmp_path / "r").exists()


def test_a_replica_header_with_cr_lf_is_refused(tmp_path, replicas, capsys):
    assert _run(tmp_path / "r", "http://127.0.0.1:9", [replicas[0]], "a:forward:c1:first1",
                "--replica-header", "x\r\nInjected: 1") == 2
    assert "character code 13 at offset 1" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_identity_pins_hold_on_every_replica(tmp_path, replicas):
    u1, u2 = replicas[:2]
    proc, router = _router([u1, u2])
    try:
        rc = _run(tmp_path / "r", router, [u1, u2], "a:forward:c1:first2", "--expect-identity", "models=nope")
    finally:
        _stop(proc)
    assert rc == 3
    aborted = json.loads((tmp_path / "r" / "summary.json").read_text())["aborted"]
    assert aborted["reason"] == "identity_mismatch"
    assert [c["key"] for c in aborted["changes"]] == [f"replicas.{u1}.models", f"replicas.{u2}.models"]
    assert {r["sent"] for r in _records(tmp_path / "r")} == {False}


@pytest.mark.parametrize(("fault", "reason", "flag"), [
    ("restart@2", "restart", "--abort-on-restart"),
    ("identity@2:what=build", "identity_drift", None),
])
def test_a_replica_that_restarts_or_drifts_aborts_the_run(tmp_path, replicas, fault, reason, flag):
    u1 = replicas[0]
    faulty, u2 = _start([sys.executable, "-m", "kvreplay", "serve-sim", "--port", "0", "--time-scale", "0",
                         "--output-tokens", "4", "--fault", fault])
    proc, router = _router([u1, u2])
    try:
        rc = _run(tmp_path / "r", router, [u1, u2], "a:forward:c1:first6", *([flag] if flag else []))
    finally:
        _stop(proc)
        _stop(faulty)
    assert rc == 3
    aborted = json.loads((tmp_path / "r" / "summary.json").read_text())["aborted"]
    assert aborted["reason"] == reason
    if reason == "restart":
        assert f"@{u2}" in aborted["message"]  # the replica that restarted is named
    else:
        assert [c["key"] for c in aborted["changes"]] == [f"replicas.{u2}.version.build"]
    # u2's second request is position 3: nothing is sent after it
    assert [r["position"] for r in _records(tmp_path / "r") if r["sent"]] == [0, 1, 2, 3]


def test_a_router_that_does_not_answer_is_not_reached(tmp_path, replicas):
    u1, u2 = replicas[:2]
    # the replicas answer, the router's port is closed: three transport failures abort the run
    rc = _run(tmp_path / "r", "http://127.0.0.1:9", [u1, u2], "a:forward:c1:first6")
    assert rc == 3
    sent = [r for r in _records(tmp_path / "r") if r["sent"]]
    assert [(r["status"], r["replica"], r["replica_reason"]) for r in sent] == [("connect", None, "not_reached")] * 3
    fleet = json.loads((tmp_path / "r" / "summary.json").read_text())["phases"][0]["fleet"]
    assert fleet["unattributed"]["reasons"] == {"not_reached": 3}


def test_a_reset_phase_in_a_fleet_run_is_invalid_and_names_the_replica(tmp_path, replicas):
    """Without --abort-on-restart a replica's restart leaves the run going: the phase is invalid,
    its delta a reset naming only the restarted replica, and every request still attributed.

    By hand: the toy router sends position p to upstream p % 2 (u1, u2, u1, ...); ``restart@2``
    restarts u2 before its second request, position 3, whose per-request read on u2 is then its
    value since the restart (above 0: attributed to u2, never lost); u2's first request's counts
    go with the restart."""
    u1 = replicas[0]
    faulty, u2 = _start([sys.executable, "-m", "kvreplay", "serve-sim", "--port", "0", "--time-scale", "0",
                         "--output-tokens", "4", "--fault", "restart@2"])
    proc, router = _router([u1, u2])
    try:
        rc = _run(tmp_path / "r", router, [u1, u2], "a:forward:c1:first6")
    finally:
        _stop(proc)
        _stop(faulty)
    s = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert (rc, s["aborted"]) == (0, None)
    (ph,) = s["phases"]
    assert (ph["sent"], ph["ok"], ph["valid"]) == (6, 6, False)
    assert "server restarted during the phase (a counter went down)" in ph["invalid_reasons"]
    d = ph["counter_delta"]
    # u2 was fresh (0) at the phase's start and counts again from 0 after its restart: no counter
    # went down over the phase, its start marker alone changed
    assert (d["reset"], d["reset_names"]) == (True, [f"start_marker@{u2}"])
    recs = [r for r in _records(tmp_path / "r") if r["sent"]]
    assert [(r["position"], r["replica"]) for r in recs] == [(p, (u1, u2)[p % 2]) for p in range(6)]
    reps = {e["url"]: e for e in ph["replicas"]}
    assert (reps[u1]["requests"], reps[u2]["requests"], ph["fleet"]["requests"]) == (3, 3, 6)
    assert reps[u2]["counter_delta"]["reset"] is True and "reset" not in reps[u1]["counter_delta"]
    # u1 looked up 3 requests (positions 0, 2, 4); u2 counts only the 2 served after its restart (3, 5)
    assert (reps[u1]["counter_delta"]["lookups"], reps[u2]["counter_delta"]["lookups"]) == (3, 2)
