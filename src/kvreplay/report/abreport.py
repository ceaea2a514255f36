"""The report of a ``kvreplay ab`` directory: one self-contained ``report.html``.

Reads ``ab.json`` (arms, frozen order, limits, blocks with their arm command's
exit status, duration and log tail) and ``compare.json`` (checks, metrics,
repetitions measured of planned) and draws, with no script and no network:

- the verdict, and a banner when fewer repetitions than planned were measured
  or the experiment stopped early (the reason);
- the arms and the limits (deadlines, bounds, identity pins); against the
  simulator, its time scale (block latencies in model ms = measured / scale, as
  the run report; the ratios are the same in either unit) and the calibration
  from ``--sim-from-verdict`` (``ab.json`` ``sim_time_scale`` and
  ``sim_calibration``; ``report.calibration.calibration_line``, as the run report);
- every block in run order: its arm command (exit status, duration, timeout,
  log tail), readiness, abort or deferral, and a link to the block's own report;
- the checks, and for each an inline SVG of the paired ratios (candidate /
  baseline, one dot per pair) against its threshold;
- every metric with its median change, interval and per-pair cells.

A directory without ``compare.json`` (a killed experiment) still gets the arms
and blocks, with a banner saying the comparison is missing
(``kvreplay compare DIR`` writes it). ``<td>`` cells carry
``data-status="measured|failed|deferred"`` as in the run report.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kvreplay.report.html import escape as _e
from kvreplay.report.html import page
from kvreplay.rundir import read_json
from kvreplay.safe_io import write_html

__all__ = ["ab_sim_lines", "change_pct_text", "ci_pct_range_text", "render_ab_html", "write_ab_report"]



def _td(text: Any, status: str = "measured", title: str | None = None) -> str:
    t = f' title="{_e(title)}"' if title else ""
    return f'<td data-status="{status}"{t}>{_e(text)}</td>'


def _table(key: str, head: list[str], rows: list[str]) -> str:
    return (f'<table data-table="{_e(key)}"><thead><tr>' + "".join(f'<th scope="col">{_e(h)}</th>' for h in head)
            + "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>")


def change_pct_text(v: float | None) -> str:
    """A median change in percent as compare.md and the A/B report show it: ``+1.23%``, or ``n/a`` for None."""
    return "n/a" if v is None else f"{v:+.2f}%"


def ci_pct_range_text(ci: list[float] | None) -> str:
    """A ``ci_change_pct`` (``[lo, hi]``, percent) as compare.md and the A/B report show it.

    ``[-0.342, 17.471]`` -> ``"-0.34% .. +17.47%"``; None or empty -> ``"n/a"``.
    """
    return "n/a" if not ci else f"{ci[0]:+.2f}% .. {ci[1]:+.2f}%"


def _ratio_svg(check: dict[str, Any], entry: dict[str, Any] | None) -> str:
    """Paired ratios of one check's metric as dots, with the 1.0 line and the threshold line."""
    cells = (entry or {}).get("cells") or []
    ratios = [c for c in cells if isinstance(c, (int, float))]
    key = f"{check['phase']}.{check['metric']}"
    if not ratios:
        return (f'<figure data-plot="{_e(key)}" data-status="deferred"><div>no usable pair</div>'
                f"<figcaption>{_e(key)}</figcaption></figure>")
    thr = 1 + check["threshold_pct"] / 100
    lo, hi = min([*ratios, thr, 1.0]), max([*ratios, thr, 1.0])
    pad = (hi - lo) * 0.1 or 0.05
    lo, hi = lo - pad, hi + pad
    w, h, left = 260, 120, 40

    def y(v: float) -> float:
        return round(h - 10 - (v - lo) / (hi - lo) * (h - 20), 1)

    step = (w - left - 10) / max(1, len(cells))
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" role="img" '
             f'aria-label="{_e(key)} paired ratios">',
             f'<line x1="{left}" x2="{w - 5}" y1="{y(1.0)}" y2="{y(1.0)}" stroke="#888"/>',
             f'<text x="2" y="{y(1.0) + 4}" font-size="10">1.00</text>',
             f'<line x1="{left}" x2="{w - 5}" y1="{y(thr)}" y2="{y(thr)}" stroke="#c33" stroke-dasharray="4 3"/>',
             f'<text x="2" y="{y(thr) + 4}" font-size="10" fill="#c33">{thr:.2f}</text>']
    for i, c in enumerate(cells):
        x = round(left + step * (i + 0.5), 1)
        if isinstance(c, (int, float)):
            parts.append(f'<circle cx="{x}" cy="{y(c)}" r="4" fill="#2a6"><title>pair {i}: {c:.4f}</title></circle>')
        else:
            parts.append(f'<text x="{x - 4}" y="{h - 2}" font-size="9" fill="#999">{_e(c)[:4]}</text>')
    parts.append("</svg>")
    cap = f"{key}: candidate / baseline per pair; dashed: threshold {check['threshold_pct']:+g}%"
    return (f'<figure data-plot="{_e(key)}" data-status="measured">{"".join(parts)}'
            f"<figcaption>{_e(cap)}</figcaption></figure>")


def _block_rows(ab: dict[str, Any], d: Path) -> list[str]:
    done = {b["block"]: b for b in ab.get("blocks", [])}
    rows = []
    for o in ab.get("order", []):
        b = done.get(o["block"], {})
        sw = b.get("switch") or {}
        bdir = d / o["dir"]
        link = next((f for f in ("report.html", "report.md") if (bdir / f).exists()), None)
        where = f'<a href="{_e(o["dir"] + "/" + link)}">{_e(o["dir"])}</a>' if link else _e(o["dir"])
        dur = sw.get("duration_s", sw.get("wall_s"))
        if not b:
            cmd = _td("not reached", "deferred", "the experiment ended before this block")
        elif "sim_build" in sw:
            cmd = _td(f"simulator {sw['sim_build']}")
        elif "rc" not in sw:
            cmd = _td("-")
        elif sw.get("timed_out"):
            cmd = _td(f"timed out after {dur} s", "failed", sw.get("log_tail"))
        elif sw.get("rc") != 0:
            cmd = _td(f"exit {sw.get('rc')} in {dur} s", "failed", sw.get("log_tail"))
        else:
            cmd = _td(f"exit 0 in {dur} s", title=sw.get("log_tail") or None)
        ready = b.get("ready") or {}
        rd = (_td(f"after {ready.get('waited_s')} s ({ready.get('endpoint')})") if ready.get("ready")
              else _td("not ready", "failed", ready.get("last_error")) if ready else _td("-"))
        if b.get("deferred"):
            state = _td("deferred", "deferred", b.get("reason"))
        elif b.get("aborted"):
            ab_ = b["aborted"]
            state = _td(f"aborted: {ab_.get('reason')}", "failed", ab_.get("message"))
        elif b:
            state = _td("ran")
        else:
            state = _td("not reached", "deferred")
        rows.append(f"<tr>{_td(o['block'])}{_td(o['rep'])}{_td(o['arm'])}<td>{where}</td>{cmd}{rd}{state}</tr>")
    return rows


def ab_sim_lines(ab: dict[str, Any]) -> list[tuple[str, str]]:
    """The simulator lines of an ab directory: ``[(key, text)]``, empty against a real server.

    ``("time-scale", "simulator time scale 0.05: block latencies in model ms (measured / 0.05;
    the client's own overhead is divided too); the ratios below are the same in either unit")``
    when every arm ran at one scale other than 0 and 1 (``report.units.sim_time_scale``), one
    line per arm when they differ; ``("calibration", calibration_line(...))`` for a
    ``--sim-from-verdict`` calibration (``ab.json`` ``sim_calibration``).
    """
    from kvreplay.report.calibration import calibration_line
    from kvreplay.report.units import sim_time_scale

    out: list[tuple[str, str]] = []
    scales = ab.get("sim_time_scale")
    if isinstance(scales, dict) and scales:
        usable = {str(k): sim_time_scale({"run": {"sim_time_scale": v}}) for k, v in scales.items()}
        if len(set(usable.values())) == 1:
            sc = next(iter(usable.values()))
            if sc is not None:
                out.append(("time-scale", f"simulator time scale {sc:g}: block latencies in model ms (measured / "
                                          f"{sc:g}; the client's own overhead is divided too); the ratios below "
                                          "are the same in either unit"))
        else:
            out.append(("time-scale", "simulator time scales differ by arm: " + ", ".join(
                f"{k} {scales[k]:g}" if isinstance(scales[k], (int, float)) else f"{k} ?" for k in usable)
                + "; each block's latencies are in its own arm's model ms"))
    cal = ab.get("sim_calibration")
    if isinstance(cal, dict):
        out.append(("calibration", calibration_line(cal, "ab.json and each block's plan.json")))
    return out


def render_ab_html(d: Path, ab: dict[str, Any], cmp: dict[str, Any] | None) -> str:
    """report.html of an ab directory (module docstring)."""
    arms = [a["name"] for a in ab.get("arms", [])] or ["baseline", "candidate"]
    out = [f"<h1>kvreplay A/B: {_e(arms[-1])} vs {_e(arms[0])}</h1>"]
    if cmp is None:
        out.append('<div class="banner" data-banner="no-compare">compare.json is missing (the experiment did '
                   f"not finish): run <code>kvreplay compare {_e(d)}</code> to compare the blocks there are</div>")
    else:
        out.append(f'<p class="verdict" data-verdict="{_e(cmp["verdict"])}">Verdict: {_e(cmp["verdict"])}</p>')
        for cav in cmp.get("caveats") or []:
            out.append(f'<div class="banner" data-caveat="{_e(cav.split(" ", 1)[0])}">Caveat: {_e(cav)}</div>')
        reps = cmp.get("reps") or {"planned": ab.get("reps"), "measured": None}
        if reps.get("measured") is not None:
            fewer = reps["measured"] < reps["planned"]
            out.append(f'<p data-reps-measured="{reps["measured"]}" data-reps-planned="{reps["planned"]}">'
                       f'Repetitions measured: {reps["measured"]} of {reps["planned"]} planned</p>')
            if fewer:
                out.append(f'<div class="banner" data-banner="fewer-reps">Fewer repetitions than planned were '
                           f'measured: {reps["measured"]} of {reps["planned"]}</div>')
        for r in cmp.get("reasons", []):
            out.append(f'<div class="banner">{_e(r)}</div>')
    if ab.get("stopped"):
        out.append(f'<div class="banner" data-banner="stopped">Stopped: {_e(ab["stopped"])}</div>')
    out.append("<h2>Arms</h2>")
    out.append(_table("arms", ["arm", "command", "role"], [
        f"<tr>{_td(a['name'])}<td><code>{_e(a.get('cmd') or '(none)')}</code></td>"
        f"{_td('baseline' if a.get('baseline') else 'candidate')}</tr>" for a in ab.get("arms", [])]))
    lim = ab.get("limits") or {}
    out.append("<dl>" + "".join(
        f"<dt>{_e(k)}</dt><dd><code>{_e(v)}</code></dd>"
        for k, v in [("plan", ab.get("plan_sha256", "")[:16]), ("repetitions planned", ab.get("reps")),
                     ("phases", ", ".join(f"{p['name']} (C{p['concurrency']}, {p['requests']} requests)"
                                          for p in ab.get("phases", []))),
                     ("target", ab.get("target")), *lim.items()]
        if v not in (None, [], "")) + "</dl>")
    for key, text in ab_sim_lines(ab):
        shown = f"Simulator calibration: {text}" if key == "calibration" else text[:1].upper() + text[1:]
        out.append(f'<p data-sim="{key}">{_e(shown)}</p>')
    out.append("<h2>Blocks (frozen order)</h2>")
    out.append(_table("blocks", ["block", "rep", "arm", "run directory", "arm command", "ready", "state"],
                      _block_rows(ab, d)))
    logs = [(b, b.get("switch") or {}) for b in ab.get("blocks", [])]
    logs = [(b, sw) for b, sw in logs if sw.get("log_tail")]
    if logs:
        out.append("<details><summary>Arm command logs (last 4 KiB each)</summary>")
        for b, sw in logs:
            out.append(f"<h3>block {b['block']} ({_e(b['arm'])}): {_e(sw.get('log_path'))}</h3>"
                       f"<pre class=\"log\">{_e(sw['log_tail'])}</pre>")
        out.append("</details>")
    if cmp is not None:
        metrics = cmp.get("metrics", {})
        out.append("<h2>Checks</h2>")
        rows = []
        for c in cmp.get("checks", []):
            st = "measured" if c["decision"] not in ("no decision", "not comparable", "not computed") else "deferred"
            st = "failed" if c["decision"] == "regression" else st
            rows.append(f"<tr>{_td(c['phase'] + '.' + c['metric'] + ' (' + format(c['threshold_pct'], '+g') + '%)')}"
                        f"{_td(c['role'])}{_td(c.get('n', 0))}{_td(change_pct_text(c.get('change_pct')))}"
                        f"{_td(ci_pct_range_text(c.get('ci_change_pct')))}"
                        f"{_td(c['decision'], st, '; '.join(filter(None, [c.get('reason'), *c.get('caveats', ())])))}"
                        "</tr>")
        out.append(_table("checks", ["check", "role", "n", "change (median)", "95% CI", "decision"], rows))
        out += [_ratio_svg(c, metrics.get(f"{c['phase']}.{c['metric']}")) for c in cmp.get("checks", [])]
        out.append("<h2>Metrics</h2>")
        n_pairs = len(cmp.get("pairs", []))
        rows = []
        for key, e in metrics.items():
            cells = "".join(_td(f"{c:.4f}") if isinstance(c, (int, float)) else
                            _td(c, "failed" if c == "failed" else "deferred") for c in e["cells"])
            rows.append(f"<tr>{_td(key)}{_td(e['n'])}{_td(change_pct_text(e.get('change_pct')))}"
                        f"{_td(ci_pct_range_text(e.get('ci_change_pct')))}{cells}</tr>")
        out.append(_table("metrics", ["metric", "n", "change (median)", "95% CI",
                                      *[f"pair {i}" for i in range(n_pairs)]], rows))
        out.append("<p>Pair cells are candidate / baseline ratios; <i>failed</i> = a block aborted or a phase had "
                   "failures, <i>deferred</i> = not run, <i>n/a</i> = missing or zero in the baseline, "
                   "<i>not computed</i> = a timing metric of a block with no modelled time "
                   "(the simulator at scale 0).</p>")
    return page(f"kvreplay A/B: {arms[-1]} vs {arms[0]}", out)


def write_ab_report(ab_dir: str | os.PathLike[str]) -> Path:
    """Write ``report.html`` into an ab directory and return its path.

    Raises:
        FileNotFoundError: no readable ``ab.json`` in ``ab_dir``.
    """
    d = Path(ab_dir)
    ab = read_json(d / "ab.json")
    if not isinstance(ab, dict):
        raise FileNotFoundError(f"{d}: no readable ab.json (not an ab directory)")
    cmp = read_json(d / "compare.json")
    path = d / "report.html"
    write_html(path, render_ab_html(d, ab, cmp if isinstance(cmp, dict) else None))
    return path
