"""A headless Chromium screenshot of report.html shows the TTFT-vs-position plot.

Uses Debian's ``chromium`` package when installed (``apt-get install chromium``);
skipped with a reason elsewhere. Chromium is started with a fresh profile, no
network services, and exits after writing the screenshot.
"""

import asyncio
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from helpers import write_chat_workload
from matplotlib.image import imread
from mockserver import MockServer

from kvreplay.plan import build_plan, parse_phase
from kvreplay.report.write import write_reports
from kvreplay.runner import RunOptions, execute_plan
from kvreplay.workload import load_workload

CHROMIUM = next(
    (p for p in ("/usr/bin/chromium", shutil.which("chromium") or "") if p and Path(p).exists()),
    None,
)
# Under CI=true a missing browser fails the test (make test installs it), never skips it.
pytestmark = pytest.mark.skipif(
    CHROMIUM is None and os.environ.get("CI") != "true",
    reason="chromium not installed (Debian package 'chromium')",
)

# The cached-token area of the position plot: tab:orange (255, 127, 14) at alpha 0.35 on white.
BAR_RGB = np.array([255, 210, 171]) / 255.0


def screenshot(html: Path, out: Path, profile: Path, height: int = 3200) -> np.ndarray:
    """A ``1280 x height`` screenshot of the page's top (headless Chromium ignores #fragments)."""
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        f"--window-size=1280,{height}",
        f"--screenshot={out}",
        html.resolve().as_uri(),
    ]
    subprocess.run(cmd, check=True, timeout=90, capture_output=True)
    return imread(out)[:, :, :3]


def bar_rows(img: np.ndarray) -> np.ndarray:
    """Rows of the screenshot holding cached-token bar pixels."""
    return np.nonzero((np.abs(img - BAR_RGB).max(axis=2) < 4 / 255).sum(axis=1) > 20)[0]


def run_report(tmp_path: Path, cached: int | None) -> Path:
    wl = write_chat_workload(
        tmp_path / "wl", [("You are terse. " * 20, f"question {i}?") for i in range(8)]
    )
    out = tmp_path / "run"

    async def go():
        srv = MockServer(tokens=4, delay_s=0.002, cached=cached)
        await srv.start()
        try:
            w = load_workload(wl)
            plan = build_plan(
                w, [parse_phase("prime:forward:c1"), parse_phase("replay:reverse:c1")]
            )
            await execute_plan(
                plan, w, RunOptions(target_url=srv.base_url, out_dir=out, quiet=True)
            )
        finally:
            await srv.stop()

    asyncio.run(go())
    return write_reports(out, html=True)["html"]


def test_screenshot_shows_ttft_vs_position(tmp_path):
    html = run_report(tmp_path, cached=48)
    img = screenshot(html, tmp_path / "report.png", tmp_path / "profile")
    assert img.shape[:2] == (3200, 1280)
    rows = bar_rows(img)
    # Two position figures (prime, replay), each with ~200 px tall bars, below the CDFs.
    assert len(rows) > 300, len(rows)
    assert rows.min() > 600  # after the header, table and first CDF row
    blue = np.abs(img - np.array([31, 119, 180]) / 255.0).max(axis=2) < 4 / 255
    assert blue[rows.min() : rows.max()].sum() > 200  # the TTFT line drawn over the bars
