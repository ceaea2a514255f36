"""A sweep's report.html: its curves and its points' table, on the run report's page and plot machinery.

Figures (``data-plot``): ``sweep-latency`` (TTFT and TPOT p50/p99 against throughput),
``sweep-goodput`` (throughput and goodput against load), ``sweep-attainment`` (SLO
attainment against load), ``sweep-cached`` (cached share of prompt tokens against
load). A point whose cache state is unverified is circled on every chart; the knee,
when searched, is a dashed line. The table gives every point's figures and its
cache state (declared, verified or the reason it is not), each row linking to the
point's own run directory.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from kvreplay.report.document import plot_html
from kvreplay.report.figures import Plot
from kvreplay.report.html import escape, page
from kvreplay.safe_io import write_html

__all__ = ["render_sweep_html", "sweep_plots", "write_sweep_report"]

REPORT = "report.html"


def _draw(key: str, title: str, draw: Callable[[], bytes]) -> Plot:
    try:
        return Plot(key, title, "measured", png=draw())
    except ImportError as exc:  # matplotlib not installed
        return Plot(key, title, "failed", reason=f"not drawn: {exc}")


def sweep_plots(doc: dict[str, Any]) -> list[Plot]:
    """The sweep's figures (module docstring), in page order."""
    from kvreplay.report.plots import series_png

    kind = doc.get("kind", "concurrency")
    pts = sorted(doc.get("points") or [], key=lambda p: p.get(kind) or 0)
    if not pts:
        return [Plot("sweep-latency", "latency against throughput", "failed", reason="no point was measured")]
    xs = [p[kind] for p in pts]
    unit = "requests in flight" if kind == "concurrency" else "offered rate (requests/s)"
    knee = doc.get("knee") or {}
    marks = [(float(knee[kind]), f"knee {knee[kind]:g}")] if kind in knee else []
    unverified = [p for p in pts if not (p.get("cache") or {}).get("verified")]

    def stat(p: dict[str, Any], block: str, s: str) -> float | None:
        return (p.get(block) or {}).get(s)

    thr = [p.get("throughput_rps") for p in pts]
    lat_series = [(f"{b.removesuffix('_ms').upper()} {s}", [t or 0.0 for t in thr], [stat(p, b, s) for p in pts])
                  for b in ("ttft_ms", "tpot_ms") for s in ("p50", "p99")]
    plots = [
        _draw("sweep-latency", "latency (measured ms) against throughput",
              lambda: series_png("latency against throughput", "throughput (requests/s)", "ms", lat_series,
                                 hollow=[(p.get("throughput_rps") or 0.0, stat(p, "ttft_ms", "p50") or 0.0)
                                         for p in unverified])),
        _draw("sweep-goodput", "throughput and goodput against load",
              lambda: series_png("throughput and goodput", unit, "requests/s",
                                 [("throughput", xs, thr), ("goodput", xs, [p.get("goodput_rps") for p in pts])],
                                 marks=marks, hollow=[(p[kind], p.get("throughput_rps") or 0.0)
                                                      for p in unverified])),
        _draw("sweep-attainment", "SLO attainment against load",
              lambda: series_png("SLO attainment", unit, "share of requests",
                                 [("SLO attainment", xs, [p.get("slo_attainment") for p in pts])], marks=marks,
                                 hollow=[(p[kind], p.get("slo_attainment") or 0.0) for p in unverified],
                                 ylim=(0, 1.02))),
        _draw("sweep-cached", "cached share of prompt tokens against load",
              lambda: series_png("cached share (cache state marked)", unit, "cached / prompt tokens",
                                 [("cached share", xs, [p.get("cached_share") for p in pts])],
                                 hollow=[(p[kind], p.get("cached_share") or 0.0) for p in unverified],
                                 ylim=(0, 1.02))),
    ]
    return plots


def _fmt(v: Any, nd: int = 4) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.{nd}g}"
    return str(v)


def _points_table(doc: dict[str, Any]) -> str:
    kind = doc.get("kind", "concurrency")
    cols = [kind, "run directory", "throughput (req/s)", "output tok/s", "TTFT p50 / p99 (ms)",
            "TPOT p50 / p99 (ms)", "goodput (req/s)", "SLO attainment", "cached share", "cache state", "limit"]
    out = ['<div class="scroll"><table><thead><tr>']  # plain: the cache state cell wraps
    out += [f'<th scope="col">{escape(c)}</th>' for c in cols]
    out.append("</tr></thead><tbody>")
    for p in doc.get("points") or []:
        cache = p.get("cache") or {}
        ok = cache.get("verified")
        state = f"{cache.get('declared')}: " + ("verified" if ok else f"unverified ({cache.get('reason')})")
        first = (cache.get("evidence") or {}).get("first_request") or {}
        if first.get("cached_tokens") is not None:
            state += (f"; first request (position {first.get('position')}): {first['cached_tokens']} of "
                      f"{first.get('prompt_tokens')} prompt tokens cached")
        before = (cache.get("evidence") or {}).get("counters_before") or {}
        if before:
            state += "; at the start " + ", ".join(f"{k}={v:g}" for k, v in before.items())
        lat = [f"{_fmt((p.get(b) or {}).get('p50'))} / {_fmt((p.get(b) or {}).get('p99'))}"
               for b in ("ttft_ms", "tpot_ms")]
        cells = [
            f'<td><a href="{escape(p.get("run_dir"))}/report.html">{escape(p.get("run_dir"))}</a></td>',
            *(f"<td>{escape(_fmt(p.get(k)))}</td>" for k in ("throughput_rps", "output_tokens_per_s")),
            *(f"<td>{escape(x)}</td>" for x in lat),
            *(f"<td>{escape(_fmt(p.get(k)))}</td>" for k in ("goodput_rps", "slo_attainment", "cached_share")),
            f'<td data-status="{"measured" if ok else "failed"}">{escape(state)}</td>',
            f"<td>{escape(p.get('limit_broken') or '–')}</td>",
        ]
        out.append(f'<tr><th scope="row">{escape(_fmt(p.get(kind)))}</th>{"".join(cells)}</tr>')
    out.append("</tbody></table></div>")
    return "".join(out)


def render_sweep_html(doc: dict[str, Any]) -> str:
    """report.html of a sweep.json document (escaped; written through the sink by ``write_sweep_report``)."""
    kind = doc.get("kind", "concurrency")
    knee = doc.get("knee")
    slos = ", ".join(f"{s['metric']}{s['op']}{s['limit_ms']:g}" for s in doc.get("slos") or []) or "none"
    facts = [("workload", doc.get("workload")), ("target", doc.get("target")), ("load", kind),
             ("cache state per point", doc.get("cache")), ("warm-up requests", doc.get("warmup")),
             ("SLOs (measured ms)", slos), ("arrivals", doc.get("arrivals") or "closed loop"),
             ("stopped", doc.get("stopped") or (doc.get("search") or {}).get("stop_reason") or "after the last load")]
    body = [f"<h1>kvreplay sweep: {escape(kind)}</h1>",
            "<dl>" + "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in facts) + "</dl>"]
    if knee:
        body.append(f'<p class="verdict">knee: {escape(kind)} {escape(_fmt(knee.get(kind)))} '
                    f"({escape(_fmt(knee.get('throughput_rps')))} requests/s)</p><p>{escape(knee.get('reason'))}</p>")
    unverified = [p for p in doc.get("points") or [] if not (p.get("cache") or {}).get("verified")]
    if unverified:
        body.append(f'<p class="banner">{len(unverified)} point(s) ran on a cache state that is not verified '
                    "(circled on the charts; the reason is in the table).</p>")
    body.append("<h2>Curves</h2>")
    body += [plot_html(p) for p in sweep_plots(doc)]
    body += ["<h2>Points</h2>", _points_table(doc)]
    return page(f"kvreplay sweep: {kind}", body)


def write_sweep_report(sweep_dir: Path, doc: dict[str, Any]) -> Path:
    """Write ``sweep_dir/report.html``; its path."""
    path = sweep_dir / REPORT
    write_html(path, render_sweep_html(doc))
    return path
