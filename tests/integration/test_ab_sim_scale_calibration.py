"""``kvreplay ab`` and an experiment's ab step against a time-scaled, calibrated simulator.

Every block is an ordinary run directory: like ``kvreplay run --target sim``, its
``plan.json`` keeps the arm's time scale (``run.sim_time_scale``) and the
``--sim-from-verdict`` calibration (``run.sim_calibration``), so its report gives model
ms (measured / scale, ``report.cells.latency_cell``: 1 decimal for TTFT and E2E, 2 for
ITL) and names the calibration; ``ab.json``, ``compare.md`` and ``report.html`` state both.
"""

from __future__ import annotations

import hashlib
import html
import json
from pathlib import Path

from kvreplay.cli import main

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD = ROOT / "fixtures" / "workloads" / "mtbench-52"


def verdict(path: Path) -> str:
    """A probe verdict with a prefill fit, prompt-cache entries, an entry cap and no flushing k."""
    v = {"format": "kvreplay-probe/1", "backend": "halogen",
         "prefill_fit": {"a_s": 0.05, "rate_tokens_per_s": 2000.0, "source": "ttft"}, "warm": [],
         "bytes_per_token": 100.0, "bytes_per_token_kind": "prompt_cache_entry", "entries_per_request": 2,
         "entry_cap_bytes": 10000, "min_flush_k": None, "eviction_note": "6 foreign requests did not flush"}
    raw = json.dumps(v).encode()
    path.write_bytes(raw)
    return hashlib.sha256(raw).hexdigest()


# sim.calibrate: a -> prefill_base_s, rate -> prefill_tokens_per_s, entries model with
# s = entries_per_request snapshots, the cap, bytes per token rounded, capacity unbounded
CHANGES = {"prefill_base_s": 0.05, "prefill_tokens_per_s": 2000.0, "bytes_per_token": 100, "cache": "entries",
           "snapshots": 2, "max_entry_bytes": 10000, "cache_entries": 1_000_000}


def ttft_cell(report_md: str) -> str:
    """The TTFT p50 cell of the first phase row of a run's report.md."""
    rows = [ln for ln in report_md.splitlines() if ln.startswith("| c1 |")]
    return rows[0].strip("|").split("|")[4].strip()


def test_ab_from_verdict_keeps_the_calibration_and_the_scale(tmp_path, capsys):
    vpath = tmp_path / "verdict.json"
    sha = verdict(vpath)
    out = tmp_path / "ab"
    rc = main(["ab", str(WORKLOAD), "--target", "sim", "--arm", "off=sim:", "--arm", "on=sim:prefill_scale=1.1",
               "--reps", "1", "--phases", "c1", "--primary", "ttft_p50:-5%", "--sim-time-scale", "0.005",
               "--sim-from-verdict", str(vpath), "--sim-snapshots", "1", "--out", str(out), "--quiet"])
    assert rc == 0
    ab = json.loads((out / "ab.json").read_text())
    cal = ab["sim_calibration"]
    assert {k: cal[k] for k in ("source", "sha256", "changes", "capacity", "overridden")} == {
        "source": str(vpath), "sha256": sha, "changes": CHANGES, "capacity": "unbounded",
        "overridden": {"snapshots": 1}}
    assert ab["sim_time_scale"] == {"off": 0.005, "on": 0.005}
    line = (f"from {vpath} (sha256 {sha}); set prefill_base_s = 0.05, prefill_tokens_per_s = 2000,"
            " bytes_per_token = 100, cache = entries, snapshots = 2, max_entry_bytes = 10000,"
            " cache_entries = 1000000; capacity unbounded (the eviction bisection found no flushing k);"
            " overridden by options: snapshots = 1; recorded in ")
    for d in ("00-off", "01-on"):
        b = out / "blocks" / d
        run = json.loads((b / "plan.json").read_text())["run"]
        assert run["sim_calibration"] == cal and run["sim_time_scale"] == 0.005
        summary = json.loads((b / "summary.json").read_text())
        # the arm's simulator serves the calibration in /version, as serve-sim --from-verdict does
        assert summary["identity"]["before"]["version"]["calibration"] == {
            "source": str(vpath), "sha256": sha, "capacity": "unbounded", "changes": CHANGES,
            "overridden": {"snapshots": 1}}
        md = (b / "report.md").read_text()
        assert f"Simulator calibration: {line}plan.json" in md.splitlines()
        p50 = summary["phases"][0]["ttft_ms"]["p50"]
        assert ttft_cell(md) == f"{p50 / 0.005:.1f}"  # model ms
        assert "Latencies in model ms (measured ms / sim time scale 0.005, as in report.html)." in md
    scale_line = ("simulator time scale 0.005: block latencies in model ms (measured / 0.005; the client's own "
                  "overhead is divided too); the ratios below are the same in either unit")
    compare_md = (out / "compare.md").read_text()
    assert compare_md.startswith(f"# kvreplay compare: on vs off\n\n**Verdict: no decision**\n\n- {scale_line}\n"
                                 f"- Simulator calibration: {line}ab.json and each block's plan.json\n\n")
    page = (out / "report.html").read_text()
    assert f'<p data-sim="time-scale">{html.escape("S" + scale_line[1:])}</p>' in page
    assert (f'<p data-sim="calibration">'
            f'{html.escape("Simulator calibration: " + line + "ab.json and each block" + chr(39) + "s plan.json")}'
            f"</p>") in page


def test_ab_without_verdict_or_scale_states_neither(tmp_path):
    out = tmp_path / "ab"
    assert main(["ab", str(WORKLOAD), "--target", "sim", "--arm", "off=sim:", "--arm", "on=sim:", "--reps", "1",
                 "--phases", "c1", "--sim-time-scale", "0", "--out", str(out), "--quiet"]) == 0
    ab = json.loads((out / "ab.json").read_text())
    assert "sim_calibration" not in ab and ab["sim_time_scale"] == {"off": 0.0, "on": 0.0}
    run = json.loads((out / "blocks" / "00-off" / "plan.json").read_text())["run"]
    assert run["sim_time_scale"] == 0.0 and "sim_calibration" not in run
    # scale 0: no model time can be recovered, the figures stay measured ms, and nothing says otherwise
    md = (out / "blocks" / "00-off" / "report.md").read_text()
    assert "| TTFT p50 ms |" in md and "model ms" not in md
    assert "simulator time scale" not in (out / "compare.md").read_text()
    assert "data-sim=" not in (out / "report.html").read_text()


def test_experiment_ab_step_reports_model_ms(tmp_path):
    f = tmp_path / "ab.toml"
    f.write_text(f"""
workload = "{WORKLOAD}"
[server]
target = "sim"
sim = {{time_scale = 0.05}}
[[step]]
name = "I"
kind = "incarnation"
[[step]]
name = "t"
kind = "ab"
reps = 1
select = "first:4"
phases = "c1"
arms = [{{name = "off", cmd = "sim:"}}, {{name = "on", cmd = "sim:prefill_scale=1.1"}}]
primary = ["ttft_p50:-5%"]
""")
    out = tmp_path / "e"
    assert main(["experiment", str(f), "--out", str(out), "--quiet"]) == 0
    d = out / "steps" / "01-t"
    assert json.loads((d / "ab.json").read_text())["sim_time_scale"] == {"off": 0.05, "on": 0.05}
    for b in ("00-off", "01-on"):
        assert json.loads((d / "blocks" / b / "plan.json").read_text())["run"]["sim_time_scale"] == 0.05
        md = (d / "blocks" / b / "report.md").read_text()
        p50 = json.loads((d / "blocks" / b / "summary.json").read_text())["phases"][0]["ttft_ms"]["p50"]
        assert ttft_cell(md) == f"{p50 / 0.05:.1f}"  # model ms, as a run step's report
        assert "| TTFT p50 model ms |" in md
    r = json.loads((out / "result.json").read_text())
    assert r["time"] == {"sim_time_scale": {"t": 0.05}, "latency": (
        "model ms at simulator time scale 0.05 (measured / 0.05; the client's own overhead is divided too): step t")}
    assert f"- latencies: {r['time']['latency']}\n" in (out / "report.md").read_text()
    # the ab step's own report, as standalone `kvreplay ab` writes it, with the scale stated
    assert ('<p data-sim="time-scale">Simulator time scale 0.05: block latencies in model ms (measured / 0.05; '
            "the client&#x27;s own overhead is divided too); the ratios below are the same in either unit</p>"
            ) in (d / "report.html").read_text()
