"""report.md and report.html from hand-built run directories: labelled cells, every plot."""

import json
import re
from html.parser import HTMLParser

from rundirs import plan_json, record, write_run

from kvreplay.report.write import write_reports


class Cells(HTMLParser):
    """Collects <td> statuses, <figure> plots and any network reference."""

    def __init__(self):
        super().__init__()
        self.td, self.plots, self.remote = [], {}, []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "td":
            self.td.append(a.get("data-status"))
        if tag == "figure":
            self.plots[a.get("data-plot")] = a.get("data-status")
        for k in ("src", "href"):
            if a.get(k) and not a[k].startswith(("data:", "#")):
                self.remote.append(a[k])


def parse(path):
    p = Cells()
    p.feed(path.read_text())
    return p


def three_phase_run(tmp_path, **over):
    plan = plan_json(
        [
            ("prime", "forward", 1, [0, 1, 2]),
            ("replay", "reverse", 1, [2, 1, 0]),
            ("later", "forward", 1, [0, 1, 2]),
        ]
    )
    recs = [
        record(
            "prime",
            i,
            i,
            ttft_ms=100 + i,
            cached=0,
            t0_ms=200 * i,
            delta={"hits": 0, "hit_tokens": 0, "entries": i + 1},
        )
        for i in range(3)
    ]
    recs += [
        record(
            "replay", 0, 2, ttft_ms=20, cached=64, t0_ms=700, delta={"hits": 1, "hit_tokens": 64}
        ),
        record(
            "replay",
            1,
            1,
            status="timeout",
            t0_ms=800,
            error="read idle 120 s",
            attribution="per_request",
        ),
        record("replay", 2, 0, sent=False, error="interrupt"),
    ]
    recs += [record("later", i, i, sent=False, error="interrupt") for i in range(3)]
    out = write_run(tmp_path / "run", plan, recs, **over)
    s = json.loads((out / "summary.json").read_text())
    s["aborted"] = {"reason": "interrupt", "message": "operator interrupt (signal)"}
    for ph in s["phases"]:
        if ph["name"] == "later":
            ph["deferred"] = True
    (out / "summary.json").write_text(json.dumps(s))
    return out


def test_every_cell_labelled_and_every_plot_present(tmp_path):
    out = three_phase_run(tmp_path)
    written = write_reports(out, html=True)
    assert written["html"] == out / "report.html"
    p = parse(out / "report.html")
    assert p.td and None not in p.td, f"{p.td.count(None)} unlabelled cells"
    assert set(p.td) <= {"measured", "failed", "deferred", "absent"}
    assert {"measured", "failed", "deferred"} <= set(p.td)
    # No network reference; only the run directory's own full data, one click away.
    assert set(p.remote) == {"records.jsonl"}
    for key in (
        "cdf-ttft",
        "cdf-itl",
        "cdf-e2e",
        "ttft-position:prime",
        "ttft-position:replay",
        "ttft-position:later",
    ):
        assert key in p.plots, key
    assert p.plots["ttft-position:prime"] == "measured"
    assert p.plots["ttft-position:later"] == "deferred"
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 4  # TTFT/E2E CDFs, prime and replay positions
    assert p.plots["cdf-itl"] == "failed"  # hand-built records keep no token times
    assert (
        '<details data-section="plan">' in html
        and html.count(record("prime", 0, 0)["body_sha256"]) >= 1
    )
    assert "read idle 120 s" in html  # the failed request's reason
    md = (out / "report.md").read_text()
    assert "deferred: not run: interrupt" in md and "| replay (C1) | 1/3 |" in md


def test_invalid_phase_number_is_not_presented_as_measured(tmp_path):
    plan = plan_json([("a", "forward", 1, [0, 1])])
    recs = [record("a", 0, 0, ttft_ms=123.4), record("a", 1, 1, ttft_ms=123.4, t0_ms=300)]
    out = write_run(
        tmp_path / "run",
        plan,
        recs,
        a={"valid": False, "invalid_reasons": ["drain did not pass within 10 s: running 1"]},
    )
    write_reports(out, html=True)
    p = parse(out / "report.html")
    html = (out / "report.html").read_text()
    assert "123.4" not in html
    assert p.plots["ttft-position:a"] == "failed" and p.plots["cdf-ttft"] == "failed"
    assert "measured" not in p.td[:9]  # the phase row of the phase table
    assert "drain did not pass" in html


def test_killed_run_report_rebuilds_summary(tmp_path):
    out = three_phase_run(tmp_path)
    (out / "summary.json").unlink()
    # a kill -9 leaves no histograms of the phase in progress either
    for f in (out / "histograms").glob("replay.*"):
        f.unlink()
    written = write_reports(out, html=True)
    assert "summary" in written and (out / "summary.json").exists()
    p = parse(out / "report.html")
    assert None not in p.td
    assert "rebuilt from records.jsonl" in (out / "report.html").read_text()


def test_probe_and_simulate_sections(tmp_path):
    out = three_phase_run(tmp_path)
    verdict = {
        "prefill_fit": {"a_s": 1.5, "rate_tokens_per_s": 1370.0, "r2": 0.999, "source": "ttft"},
        "prefill_fits": {
            "ttft": {"source": "ttft", "points": [[1000, 2.23], [4000, 4.42], [16000, 13.2]]}
        },
        "warm": [{"size_tokens": 4000, "warm_ttft_s": 0.4}],
        "cmax_tokens": 16000,
        "min_flush_k": 5,
        "flush_bracket": [4, 5],
        "bytes_per_token": None,
        "points": [
            {"k": 8, "flushed": True},
            {"k": 4, "flushed": False},
            {"k": 6, "flushed": True},
            {"k": 5, "flushed": True},
        ],
    }
    (out / "verdict.json").write_text(json.dumps(verdict))
    sim = {
        "curve": [
            {
                "capacity": c,
                "hit_ratio_requests": min(1, c / 8),
                "hit_ratio_tokens": min(1, c / 10),
                "prefill_s_saved": c,
            }
            for c in (1, 2, 4, 8, 16)
        ],
        "recommended": {"capacity": 8, "share": 0.95},
    }
    (out / "simulate.json").write_text(json.dumps(sim))
    write_reports(out, html=True)
    p = parse(out / "report.html")
    assert p.plots["probe-prefill-fit"] == "measured"
    assert p.plots["probe-bisection"] == "measured"
    assert p.plots["simulate-mrc"] == "measured"
    assert None not in p.td
    html = (out / "report.html").read_text()
    assert re.search(
        r'data-status="absent"[^>]*>absent: the server reports no entry or pool bytes', html
    )


def test_sections_skipped_without_their_files(tmp_path):
    out = three_phase_run(tmp_path)
    write_reports(out, html=True)
    p = parse(out / "report.html")
    assert not any(k.startswith(("probe-", "simulate-")) for k in p.plots)


def test_single_request_phase_renders_without_warnings(tmp_path):
    # One sample: a CDF with one value and a one-point position plot (warnings are errors here).
    plan = plan_json([("one", "forward", 1, [0])])
    out = write_run(tmp_path / "run", plan, [record("one", 0, 0, ttft_ms=5.0, cached=None)])
    write_reports(out, html=True)
    p = parse(out / "report.html")
    assert p.plots["cdf-ttft"] == "measured" and p.plots["ttft-position:one"] == "measured"
    assert None not in p.td


def test_report_lists_raw_series_per_phase_units_and_invariant_breaks(tmp_path):
    """counters.jsonl in a run directory: the changed raw series, the cache_invariant
    finding with its numbers, and counter columns with units."""
    from kvreplay.report.document import build, to_markdown
    from kvreplay.rundir import load_run

    plan = plan_json([("a", "forward", 1, [0, 1])])
    recs = [record("a", 0, 0, delta={"hits": 0, "misses": 1}), record("a", 1, 1, t0_ms=50,
            delta={"hits": 1, "misses": 0})]
    out = write_run(tmp_path / "run", plan, recs,
                    a={"counter_delta": {"hits": 1, "misses": 1, "hit_tokens": 0}})
    lines = [
        {"t_ns": 1, "phase": "a", "at": "before", "full": True,
         "series": {"hits": 0, "misses": 0, "stores": 0, "evicted": 0, "entries": 0,
                    "host_compactions_total": 0}},
        {"t_ns": 2, "phase": "a", "at": 0,
         "changed": {"misses": 1, "stores": 2, "entries": 2, "host_compactions_total": 3}},
        {"t_ns": 3, "phase": "a", "at": 1, "changed": {"hits": 1, "stores": 3},
         "violations": [{"identity": "stores - evicted = entries",
                         "numbers": {"stores_before": 2, "stores": 3, "evicted_before": 0,
                                     "evicted": 0, "entries_before": 2, "entries": 2, "gap": 1}}]},
    ]
    (out / "counters.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    md = to_markdown(build(load_run(out)))
    assert "| a · host_compactions_total | 0 | 3 | +3 |" in md
    assert "| a · stores | 0 | 3 | +3 |" in md
    assert ("**cache_invariant**: /cache broke stores - evicted = entries in 1 snapshot(s); "
            "first phase a at 1: stores_before 2, stores 3, evicted_before 0, evicted 0, "
            "entries_before 2, entries 2, gap 1.") in md
    assert "the raw snapshots are in counters.jsonl. From phase a; records at position 1." in md
    # The summary's "units" (the runner writes them) name the column units.
    assert "Δ hit_tokens (tokens)" in md and "Δ hits (events)" in md  # an earlier version
    summary = json.loads((out / "summary.json").read_text())
    summary["units"] = {"hits": "lookups", "hit_tokens": "tokens"}
    (out / "summary.json").write_text(json.dumps(summary))
    assert "Δ hits (lookups)" in to_markdown(build(load_run(out)))


def test_raw_series_values_and_changes_are_exact(tmp_path):
    """Integers in full, floats to 12 significant digits: one decimal drew a hit rate of
    33/34 = 0.970588... as 1.0, and ``%g`` a change of 4326653952 bytes as +4.32665e+09."""
    from kvreplay.report.document import build, to_markdown
    from kvreplay.rundir import load_run

    plan = plan_json([("a", "forward", 1, [0])])
    out = write_run(tmp_path / "run", plan, [record("a", 0, 0)])
    lines = [
        {"t_ns": 1, "phase": "a", "at": "before", "full": True,
         "series": {"bytes": 0, "hit_rate": 0.0, "store_ms_total": 0.0, "x": 2.5}},
        {"t_ns": 2, "phase": "a", "at": 0,
         "changed": {"bytes": 4326653952.0, "hit_rate": 33 / 34, "store_ms_total": 626.085, "x": 2.75}},
    ]
    (out / "counters.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    md = to_markdown(build(load_run(out)))
    assert "| a · bytes | 0 | 4326653952 | +4326653952 |" in md
    assert "| a · hit_rate | 0 | 0.970588235294 | +0.970588235294 |" in md
    assert "| a · store_ms_total | 0 | 626.085 | +626.085 |" in md
    assert "| a · x | 2.5 | 2.75 | +0.25 |" in md
