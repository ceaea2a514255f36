"""Several sweeps on one chart (``kvreplay compare SWEEP_DIR SWEEP_DIR ...``): ``compare-sweeps.html``.

Each sweep is one line per chart, labelled by its directory: throughput, goodput and SLO
attainment against load, and TTFT p99 against throughput. Every point whose cache state
is unverified is circled; a table lists each sweep's knee and cache state. The sweeps
must share their load kind (all ``concurrency`` or all ``rate``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kvreplay.errors import ConfigError
from kvreplay.report.document import plot_html
from kvreplay.report.figures import Plot
from kvreplay.report.html import escape, page
from kvreplay.safe_io import write_html
from kvreplay.sweeps.document import read_sweep

__all__ = ["COMPARE_HTML", "compare_plots", "render_compare_html", "write_compare_sweeps"]

COMPARE_HTML = "compare-sweeps.html"


def compare_plots(sweeps: Sequence[tuple[str, dict[str, Any]]]) -> list[Plot]:
    """The figures of ``(label, sweep.json document)`` pairs (module docstring), in page order."""
    from kvreplay.report.plots import series_png

    kind = sweeps[0][1].get("kind", "concurrency")
    unit = "requests in flight" if kind == "concurrency" else "offered rate (requests/s)"

    def curves(key: str) -> list[tuple[str, list[float], list[float | None]]]:
        out = []
        for label, doc in sweeps:
            pts = sorted(doc.get("points") or [], key=lambda p: p.get(kind) or 0)
            out.append((label, [p[kind] for p in pts], [p.get(key) for p in pts]))
        return out

    def hollow(key: str, x_key: str = kind) -> list[tuple[float, float]]:
        return [(p.get(x_key) or 0.0, p.get(key) or 0.0) for _, doc in sweeps for p in doc.get("points") or []
                if not (p.get("cache") or {}).get("verified")]

    lat = []
    for label, doc in sweeps:
        pts = sorted(doc.get("points") or [], key=lambda p: p.get(kind) or 0)
        lat.append((label, [p.get("throughput_rps") or 0.0 for p in pts],
                    [(p.get("ttft_ms") or {}).get("p99") for p in pts]))
    specs = [
        ("compare-throughput", "throughput against load",
         lambda: series_png("throughput", unit, "requests/s", curves("throughput_rps"),
                            hollow=hollow("throughput_rps"))),
        ("compare-goodput", "goodput against load",
         lambda: series_png("goodput", unit, "requests/s", curves("goodput_rps"), hollow=hollow("goodput_rps"))),
        ("compare-attainment", "SLO attainment against load",
         lambda: series_png("SLO attainment", unit, "share of requests", curves("slo_attainment"),
                            hollow=hollow("slo_attainment"), ylim=(0, 1.02))),
        ("compare-latency", "TTFT p99 (measured ms) against throughput",
         lambda: series_png("TTFT p99 against throughput", "throughput (requests/s)", "ms", lat)),
    ]
    plots = []
    for key, title, draw in specs:
        try:
            plots.append(Plot(key, title, "measured", png=draw()))
        except ImportError as exc:
            plots.append(Plot(key, title, "failed", reason=f"not drawn: {exc}"))
    return plots


def render_compare_html(sweeps: Sequence[tuple[str, dict[str, Any]]]) -> str:
    """compare-sweeps.html of ``(label, document)`` pairs (escaped)."""
    kind = sweeps[0][1].get("kind", "concurrency")
    rows = []
    for label, doc in sweeps:
        knee = doc.get("knee") or {}
        pts = doc.get("points") or []
        n_ok = sum(1 for p in pts if (p.get("cache") or {}).get("verified"))
        rows.append(f'<tr><th scope="row">{escape(label)}</th><td>{escape(doc.get("cache"))}</td>'
                    f"<td>{n_ok} of {len(pts)}</td><td>{escape(knee.get(kind, '–'))}</td>"
                    f"<td>{escape(doc.get('target'))}</td></tr>")
    table = ('<div class="scroll"><table><thead><tr><th scope="col">sweep</th><th scope="col">cache state</th>'
             '<th scope="col">points verified</th><th scope="col">knee</th><th scope="col">target</th></tr>'
             f"</thead><tbody>{''.join(rows)}</tbody></table></div>")
    body = [f"<h1>kvreplay compare: {len(sweeps)} sweeps ({escape(kind)})</h1>", "<h2>Sweeps</h2>", table,
            "<h2>Curves</h2>", *(plot_html(p) for p in compare_plots(sweeps))]
    return page(f"kvreplay compare: {len(sweeps)} sweeps", body)


def write_compare_sweeps(dirs: Sequence[str | Path], out: str | Path) -> Path:
    """Read each sweep directory and write ``out/compare-sweeps.html``; its path.

    Raises:
        ConfigError: a directory that is not a sweep, or sweeps of different load kinds.
    """
    sweeps = [(Path(d).name or str(d), read_sweep(Path(d))) for d in dirs]
    kinds = {doc.get("kind") for _, doc in sweeps}
    if len(kinds) != 1:
        raise ConfigError(f"the sweeps vary different loads ({', '.join(sorted(map(str, kinds)))}); "
                          "compare sweeps of one kind", field="dirs")
    o = Path(out)
    o.mkdir(parents=True, exist_ok=True)
    path = o / COMPARE_HTML
    write_html(path, render_compare_html(sweeps))
    return path
