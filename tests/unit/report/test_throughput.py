"""The report's throughput table: wall-clock and service-time req/s, and which includes counter reads."""

import json

from rundirs import plan_json, record, write_run

from kvreplay.report.write import write_reports
from kvreplay.rundir import load_run


def test_c1_counter_reads_are_in_wall_clock_not_service(tmp_path):
    # C1, per-request counter reads: four 100 ms requests sent 250 ms apart (150 ms of reads
    # after each): wall 0.85 s (first send to last done) -> 4 / 0.85 = 4.706 req/s;
    # service 4 / 0.4 s = 10.0 req/s; 16 completion tokens / 0.85 s = 18.8 tokens/s.
    plan = plan_json([("c1", "forward", 1, [0, 1, 2, 3]), ("c2", "forward", 2, [0, 1])])
    recs = [record("c1", i, i, e2e_ms=100.0, t0_ms=250.0 * i, delta={"hit_tokens": 0}) for i in range(4)]
    # C2: two 100 ms requests side by side: wall 0.1 s -> 20.0 req/s; service 2 * 2 / 0.2 s = 20.0.
    recs += [record("c2", i, i, c=2, e2e_ms=100.0, t0_ms=2000.0) for i in range(2)]
    out = write_run(tmp_path / "run", plan, recs, c1={"attribution": "per_request"})
    write_reports(out)
    md = (out / "report.md").read_text()
    assert "| c1 (C1) | 4.706 | 10 | 18.8 | counter read after each request: in wall-clock, not in service |" in md
    assert "| c2 (C2) | 20 | 20 | 80 | none by design |" in md
    assert "service-time req/s = ok requests x C / sum of their E2E" in md


def test_summary_without_the_key_reads(tmp_path):
    plan = plan_json([("c1", "forward", 1, [0])])
    out = write_run(tmp_path / "run", plan, [record("c1", 0, 0, e2e_ms=100.0)])
    s = json.loads((out / "summary.json").read_text())
    del s["phases"][0]["service_throughput_rps"]  # a run from before the key
    (out / "summary.json").write_text(json.dumps(s))
    load_run(out)
    write_reports(out)
    assert "| c1 (C1) | 10 | deferred: not in this summary | 40 | none by design |" in (out / "report.md").read_text()
