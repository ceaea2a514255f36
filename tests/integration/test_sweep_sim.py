"""``kvreplay sweep`` against the embedded simulator: goodput from the points' own records,
cold points proved empty, the knee of a 4-slot server, an open-loop gamma point, the files."""

import csv
import json
from pathlib import Path

import pytest

from kvreplay.cli import main
from kvreplay.rundir import iter_records, load_run, read_plan, read_summary

ROOT = Path(__file__).resolve().parents[2]
WL = str(ROOT / "fixtures" / "workloads" / "mtbench-52")


def records_of(run_dir: Path):
    return list(iter_records(run_dir / "records.jsonl"))


def test_cold_sweep_goodput_equals_the_points_own_records(tmp_path, capsys):
    out = tmp_path / "sw"
    assert main(["sweep", WL, "--target", "sim", "--sim-time-scale", "0", "--concurrency", "1,4",
                 "--select", "first8", "--cache", "cold", "--slo", "ttft_ms<=3", "--warmup", "2",
                 "--report", "none", "--csv", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "point 1: c1" in printed and "point 2: c4" in printed and "cache cold verified" in printed
    doc = json.loads((out / "sweep.json").read_text())
    assert [p["concurrency"] for p in doc["points"]] == [1, 4]
    for p in doc["points"]:
        run_dir = out / p["run_dir"]
        assert p["run_dir"] == f"points/0{[1, 4].index(p['concurrency']) + 1}-c{p['concurrency']}"
        summary = read_summary(run_dir)
        phase = next(ph for ph in summary["phases"] if ph["name"] == p["phase"])
        recs = [r for r in records_of(run_dir) if r["phase"] == p["phase"]]
        assert len(recs) == 8
        met = sum(1 for r in recs if r["status"] == "ok" and r["ttft_ns"] / 1e6 <= 3)
        assert p["goodput_rps"] == pytest.approx(met / phase["wall_s"], rel=0.01)
        assert p["slo_attainment"] == pytest.approx(met / len(recs), rel=0.01)
        # the warm-up's 2 records are kept, marked by their phase, and out of the figures
        assert [r["phase"] for r in records_of(run_dir)].count("warmup") == 2
        # the first measured request: position 0 at C1; at C4 the least cached of the first
        # wave (positions 0-3, sent together: the one the server admitted first found nothing)
        wave = [r for r in recs if r["position"] < p["concurrency"]]
        first = min(wave, key=lambda r: (r["usage"]["cached_tokens"], r["position"]))
        assert first["usage"]["cached_tokens"] == 0
        assert p["cache"]["evidence"]["first_request"]["position"] == first["position"]
        assert p["cache"]["verified"] is True and p["cache"]["declared"] == "cold"
        assert p["cache"]["evidence"]["first_request"]["cached_tokens"] == 0
        assert p["cache"]["evidence"]["counters_before"] == {"entries": 0, "bytes": 0}
        assert p["cache"]["evidence"]["reset"] == "accepted"
    rows = list(csv.DictReader((out / "points.csv").read_text().splitlines()))
    assert [r["concurrency"] for r in rows] == ["1", "4"]
    assert [r["cache_verified"] for r in rows] == ["True", "True"]
    # a point is an ordinary run directory: the API loads it
    run = load_run(out / doc["points"][1]["run_dir"])
    assert [ph["name"] for ph in run.summary["phases"]] == ["warmup", "c4"]


def test_knee_of_a_four_slot_simulator_is_four(tmp_path):
    out = tmp_path / "knee"
    # every request costs 200 ms of prefill, whatever is cached, and one output token: at C4 the
    # client's turn-around between the two waves (a few ms) stays far inside the 5% tolerance
    sim = ["--sim-time-scale", "1", "--sim-slots", "4", "--sim-prefill-base-s", "0.2", "--sim-hit-base-s", "0.2",
           "--sim-prefill-rate", "1e9", "--sim-restore-s-per-token", "0", "--sim-store-s-per-token", "0",
           "--sim-itl-s", "0", "--sim-output-tokens", "1"]
    assert main(["sweep", WL, "--target", "sim", *sim, "--concurrency", "auto", "--start", "2", "--requests", "8",
                 "--select", "first8", "--cache", "as-is", "--no-per-request-counters", "--report", "none",
                 "--quiet", "--out", str(out)]) == 0
    doc = json.loads((out / "sweep.json").read_text())
    loads = [p["concurrency"] for p in doc["points"]]
    assert loads[:3] == [2, 4, 8] and len(loads) >= 3
    assert doc["knee"]["concurrency"] in (4, 5)
    assert all(p["cache"]["verified"] is False and p["cache"]["reason"].startswith("as-is") for p in doc["points"])


def test_open_loop_gamma_point_and_out_refused_unless_force(tmp_path, capsys):
    out = tmp_path / "rate"
    argv = ["sweep", WL, "--target", "sim", "--sim-time-scale", "0", "--rate", "200", "--arrivals", "gamma:2:3",
            "--requests", "6", "--select", "first3", "--cache", "warm", "--warm-min", "0.5", "--quiet",
            "--out", str(out)]
    assert main([*argv, "--report", "none"]) == 0
    doc = json.loads((out / "sweep.json").read_text())
    (p,) = doc["points"]
    assert (p["rate"], p["phase"], p["prime_phase"], p["records"]) == (200.0, "r200", "prime", 6)
    assert p["cache"]["verified"] is True
    plan = read_plan(out / p["run_dir"])
    assert [ph["name"] for ph in plan["phases"]] == ["prime", "r200"]
    assert plan["phases"][1]["arrival"] == "gamma:2:3"
    capsys.readouterr()
    assert main([*argv, "--report", "none"]) == 2
    assert "give --force" in capsys.readouterr().err
    assert main([*argv, "--report", "none", "--force"]) == 0
    assert json.loads((out / "sweep.json").read_text())["points"]


def test_url_credentials_never_reach_sweep_json(tmp_path, capsys):
    out = tmp_path / "cred"
    # nothing listens there: the point fails, but the document is written with the URL redacted
    code = main(["sweep", WL, "--target", "http://user:s3cret-passw0rd@127.0.0.1:9", "--backend", "none",
                 "--concurrency", "1", "--select", "first1", "--cache", "as-is", "--report", "none",
                 "--connect-timeout", "1", "--quiet", "--out", str(out)])
    assert code in (0, 1, 3)
    text = (out / "sweep.json").read_text()
    assert "s3cret-passw0rd" not in text and "127.0.0.1:9" in text


def test_python_api_sweep_is_typed_and_matches_sweep_json(tmp_path):
    import kvreplay

    s = kvreplay.sweep(WL, concurrency=[1, 2], sim={"time_scale": 0, "cache": "radix"}, select="first3",
                       cache="warm", slo=["e2e_ms<=60000"], out=tmp_path / "api")
    assert isinstance(s, kvreplay.SweepResult) and s.kind == "concurrency" and s.knee is None
    assert [(p.load, p.phase, p.cache_declared, p.cache_verified) for p in s.points] == [
        (1, "c1", "warm", True), (2, "c2", "warm", True)]
    doc = json.loads((tmp_path / "api" / "sweep.json").read_text())
    assert [p.goodput_rps for p in s.points] == [p["goodput_rps"] for p in doc["points"]]
    assert all(p.slo_attainment == 1.0 for p in s.points)
    assert [r["phase"] for r in records_of(s.points[1].run_dir)] == ["prime"] * 3 + ["c2"] * 3


@pytest.mark.parametrize(("extra", "flag"), [
    (["--concurrency", "1", "--phase", "a:forward:c1"], "--phase"),
    (["--concurrency", "1", "--duration", "10s"], "--duration"),
    (["--concurrency", "1", "--select", "middle3"], "--select"),
    (["--concurrency", "1", "--slo", "ttft_ms>=5"], "--slo"),
    (["--rate", "2", "--arrivals", "gamma:0"], "--arrivals"),
    ([], "--concurrency"),
])
def test_bad_sweep_input_exits_2_naming_the_flag_and_makes_nothing(tmp_path, capsys, extra, flag):
    out = tmp_path / "bad"
    assert main(["sweep", WL, "--target", "sim", "--sim-time-scale", "0", *extra, "--out", str(out)]) == 2
    assert flag in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("sel", ["first53", "last53"])
def test_a_sweep_selecting_past_the_workload_is_refused_not_cut(tmp_path, capsys, sel):
    # as a run's phase is (plan._select): first53 of mtbench-52 swept 52 bodies without a word
    out = tmp_path / "bad"
    assert main(["sweep", WL, "--target", "sim", "--sim-time-scale", "0", "--concurrency", "1", "--select", sel,
                 "--out", str(out)]) == 2
    kind = sel[:-2]
    assert capsys.readouterr().err.strip() == (f"kvreplay: error: field '--select': {sel!r} selects {kind}:53 but "
                                               f"the workload has 52 bodies ({kind}:52 or all sends every one)")
    assert not out.exists()


@pytest.mark.parametrize(("sel", "first_body"), [("first52", 0), ("last52", 0), ("last2", 50)])
def test_a_sweep_selecting_up_to_the_whole_workload_sends_it(tmp_path, sel, first_body):
    """N = n is the boundary of the refusal above: ``first52`` and ``last52`` of 52 bodies send every one."""
    out = tmp_path / sel
    assert main(["sweep", WL, "--target", "sim", "--sim-time-scale", "0", "--concurrency", "4", "--select", sel,
                 "--requests", "52", "--warmup", "0", "--cache", "as-is", "--no-per-request-counters",
                 "--report", "none", "--quiet", "--out", str(out)]) == 0
    (p,) = json.loads((out / "sweep.json").read_text())["points"]
    recs = records_of(out / p["run_dir"])
    n = 52 if sel.endswith("52") else 2
    assert sorted(r["body_index"] for r in recs) == sorted((first_body + i % n) for i in range(52))
    assert {r["status"] for r in recs} == {"ok"}


@pytest.mark.parametrize("target", ["http://127.0.0.1:9/?api_key=k3y-in-the-query", "http://127.0.0.1:9#k3y-in-the-query",
                                    "127.0.0.1:9"])
def test_a_target_with_a_query_or_no_scheme_is_refused_before_anything_is_made(tmp_path, capsys, target):
    out = tmp_path / "bad"
    assert main(["sweep", WL, "--target", target, "--backend", "none", "--concurrency", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--target" in err and "k3y-in-the-query" not in err, err
    assert not out.exists()


def test_workers_two_per_point_send_what_one_worker_sends(tmp_path):
    """``--workers 2`` (issue 47 item 6): each point's phases spread over two processes send the same requests
    as one process: per phase the same positions with the same bodies (4 measured, the first 3 bodies cycled,
    after 1 warm-up), all ok, each cold point verified (at C1 with the counters read around its first request)."""
    seen = {}
    for workers in (1, 2):
        out = tmp_path / f"w{workers}"
        assert main(["sweep", WL, "--target", "sim", "--sim-time-scale", "0", "--concurrency", "1,2",
                     "--select", "first3", "--requests", "4", "--warmup", "1", "--cache", "cold",
                     "--workers", str(workers), "--report", "none", "--quiet", "--out", str(out)]) == 0
        doc = json.loads((out / "sweep.json").read_text())
        seen[workers] = doc
        assert [(p["concurrency"], p["records"], p["ok"]) for p in doc["points"]] == [(1, 4, 4), (2, 4, 4)]
        for p in doc["points"]:
            recs = records_of(out / p["run_dir"])
            sent = sorted((r["phase"], r["position"], r["body_index"], r["status"]) for r in recs)
            assert sent == [(p["phase"], 0, 0, "ok"), (p["phase"], 1, 1, "ok"), (p["phase"], 2, 2, "ok"),
                            (p["phase"], 3, 0, "ok"), ("warmup", 0, 0, "ok")]
            assert (p["cache"]["verified"], p["cache"]["evidence"]["first_request"]["cached_tokens"]) == (True, 0)
            # one process: no worker named; two: at C1 worker 0 holds the one slot (and the counter reads)
            named = {r.get("worker") for r in recs}
            if workers == 1 or p["concurrency"] == 1:
                assert named == ({None} if workers == 1 else {0})
            else:
                assert named <= {0, 1} and named
            assert (read_summary(out / p["run_dir"]).get("workers") == 2) is (workers == 2)
        first = doc["points"][0]["cache"]["evidence"]["first_request"]
        assert first["position"] == 0 and first["counter_delta"]["hit_tokens"] == 0
    assert [p["records"] for p in seen[1]["points"]] == [p["records"] for p in seen[2]["points"]]
