"""A sweep's report.html and points.csv from a hand-made sweep.json document."""

import csv

from kvreplay.sweeps.document import csv_rows, points_csv
from kvreplay.sweeps.report import render_sweep_html


def point(c, thr, verified, reason=None):
    return {"concurrency": c, "phase": f"c{c}", "run_dir": f"points/0{c}-c{c}", "records": 4, "ok": 4,
            "wall_s": 4 / thr, "throughput_rps": thr, "output_tokens_per_s": 10 * thr,
            "ttft_ms": {"p50": 10.0 * c, "p90": 11.0 * c, "p99": 12.0 * c, "mean": 10.5 * c, "max": 13.0 * c},
            "tpot_ms": {"p50": 1.0, "p90": 1.0, "p99": 2.0, "mean": 1.0, "max": 2.0}, "itl_ms": None,
            "e2e_ms": None, "goodput_rps": thr / 2, "slo_attainment": 0.5, "cached_share": 0.25,
            "cache": {"declared": "cold", "verified": verified, "reason": reason,
                      "evidence": {"first_request": {"position": 0, "prompt_tokens": 100, "cached_tokens": 0},
                                   "counters_before": {"entries": 0, "bytes": 0}}},
            "limit_broken": None}


DOC = {"kind": "concurrency", "workload": "W", "target": "sim", "cache": "cold", "warmup": 0,
       "slos": [{"metric": "ttft_ms", "op": "<=", "limit_ms": 500.0}],
       "points": [point(1, 10.0, True), point(2, 19.0, False, "the server has no cache reset <x>")],
       "knee": {"concurrency": 2, "throughput_rps": 19.0, "reason": "r"}}


def test_the_page_has_the_four_curves_and_marks_the_unverified_point():
    html = render_sweep_html(DOC)
    for key in ("sweep-latency", "sweep-goodput", "sweep-attainment", "sweep-cached"):
        assert f'data-plot="{key}" data-status="measured"' in html
    assert "knee: concurrency 2" in html
    assert "1 point(s) ran on a cache state that is not verified" in html
    assert "cold: unverified (the server has no cache reset &lt;x&gt;); first request (position 0): 0 of 100 " \
           "prompt tokens cached; at the start entries=0, bytes=0" in html
    assert '<a href="points/01-c1/report.html">' in html


def test_points_csv_has_one_row_per_point():
    rows = list(csv.DictReader(points_csv(csv_rows(DOC)).splitlines()))
    assert [(r["concurrency"], r["throughput_rps"], r["ttft_p99_ms"], r["cache_verified"], r["itl_p50_ms"])
            for r in rows] == [("1", "10.0", "12.0", "True", ""), ("2", "19.0", "24.0", "False", "")]
