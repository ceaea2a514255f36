"""C1 with per-request counter reads: service-time throughput beside wall-clock throughput.

Against the embedded simulator (halogen counters, read after every request at C1). The
service figure is recomputed by hand from records.jsonl: ok x C / sum of E2E, each E2E
rounded to µs as the histograms record it. The wall-clock figure includes the reads, so
it is lower; the report's Throughput table says which one includes them.
"""

import json

from helpers import write_chat_workload

from kvreplay.cli import main


def test_c1_service_throughput_from_the_records(tmp_path):
    wl = write_chat_workload(tmp_path / "wl", [("a b c d", f"u{i}") for i in range(6)])
    out = tmp_path / "o"
    rc = main(["run", str(wl), "--target", "sim", "--sim-time-scale", "0", "--out", str(out), "--quiet",
               "--phase", "c1:forward:c1"])
    assert rc == 0
    recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    (ph,) = json.loads((out / "summary.json").read_text())["phases"]
    assert ph["attribution"] == "per_request" and ph["ok"] == 6
    sum_us = sum(max(1, (r["e2e_ns"] + 500) // 1000) for r in recs if r["status"] == "ok")
    assert ph["service_throughput_rps"] == round(6 * 1 / (sum_us / 1e6), 3)
    assert ph["service_throughput_rps"] > ph["throughput_rps"]  # the wall clock includes the reads
    md = (out / "report.md").read_text()
    assert "| c1 (C1) |" in md.split("## Throughput")[1].split("##")[0]
    assert "counter read after each request: in wall-clock, not in service" in md
