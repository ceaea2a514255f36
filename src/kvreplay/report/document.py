"""The whole report of a run directory, rendered as Markdown and as self-contained HTML.

``build(run)`` gathers the sections once (tables of labelled cells, plots,
findings); ``to_markdown`` and ``to_html`` render them. The HTML embeds every
plot as a base64 PNG ``data:`` URI and its style inline (``kvreplay.report.html``:
the one template and stylesheet of every page), so it opens with no network.
Every ``<td>`` carries ``data-status="measured|failed|deferred"``, and
failed/deferred cells carry their reason in ``title`` and in the text; every
plot is a ``<figure id="plot-KEY" data-plot=KEY data-status=...>`` (``:`` and other
characters outside ``[A-Za-z0-9_-]`` become ``-`` in the id, so
``report.html#plot-ttft-position-replay`` opens at that figure).
"""

from __future__ import annotations

import base64
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kvreplay.clock import model_time_scale
from kvreplay.metrics.selfmeasure import phase_busy_line
from kvreplay.report.calibration import calibration_line, sim_calibration
from kvreplay.report.cells import Cell, absent, failed, itl_pacing_note, measured
from kvreplay.report.diagnose import Finding, diagnose
from kvreplay.report.figures import Plot, probe_plots, run_plots, simulate_plots
from kvreplay.report.fleet import replica_section, routing_loss_plots, routing_loss_section
from kvreplay.report.html import escape as _e
from kvreplay.report.html import page
from kvreplay.report.markdown import ray_line
from kvreplay.report.rawseries import raw_series_table
from kvreplay.report.sections import (
    Table,
    counter_table,
    drain_table,
    error_examples,
    error_table,
    identity_table,
    phase_table,
    request_tables,
)
from kvreplay.report.stream import RunScan, scan
from kvreplay.report.throughput import throughput_notes, throughput_table
from kvreplay.report.turns import by_turn_plots, by_turn_table
from kvreplay.report.units import sim_time_scale
from kvreplay.rundir import RunData, read_violations, sequence_head, sequence_length

__all__ = ["Report", "build", "plot_html", "to_html", "to_markdown"]


@dataclass(slots=True)
class Report:
    """Everything the report shows, before rendering.

    Attributes:
        run: The loaded run.
        header: ``(label, value)`` lines about the plan and target.
        banners: Run-level warnings (abort, rebuilt summary).
        findings: Diagnosis.
        sections: ``(title, tables, plots, notes)`` in display order.
    """

    run: RunData
    header: list[tuple[str, str]] = field(default_factory=list)
    banners: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    sections: list[tuple[str, list[Table], list[Plot], list[str]]] = field(default_factory=list)


def _opt(v: Any, reason: str, nd: int = 4) -> Cell:
    if v is None:
        return failed(reason)
    if isinstance(v, float):
        return measured(f"{v:.{nd}g}")
    return measured(str(v))


def _probe_table(v: dict[str, Any]) -> Table:
    fit = v.get("prefill_fit") or {}
    t = Table("probe", ["value"], corner="probe figure")
    scale = model_time_scale(v.get("sim_time_scale"))
    t.rows += [
        ("prefill a (s)", [_opt(fit.get("a_s"), "no fit")]),
        (
            "prefill rate (tokens/s)",
            [_opt(fit.get("rate_tokens_per_s"), "no fit, or its slope was not positive")],
        ),
    ]
    if scale is not None:
        a, rate = fit.get("a_s"), fit.get("rate_tokens_per_s")
        t.rows += [
            (
                f"prefill a (model s; simulator time scale {scale:g})",
                [_opt(None if a is None else a / scale, "no fit")],
            ),
            (
                f"prefill rate (tokens per model s; time scale {scale:g})",
                [_opt(None if not rate else rate * scale, "no fit, or its slope was not positive")],
            ),
        ]
    if fit:
        warn = v.get("prefill_fit_warning")
        if "prefill_fit_warning" not in v and isinstance(fit.get("a_s"), (int, float)) and fit["a_s"] < 0:
            warn = f"negative intercept a = {fit['a_s']:.4f} s: a prefill cannot take less than no time"
        t.rows.append(
            ("intercept check", [failed(warn) if warn else measured("a is between 0 and the fastest cold leg")])
        )
    t.rows += [
        ("fit r²", [_opt(fit.get("r2"), "no fit")]),
        ("Cmax (largest cached_tokens seen)", [_opt(v.get("cmax_tokens"), "not in verdict.json")]),
        ("minimum flushing k", [_opt(v.get("min_flush_k"), "bisection did not bracket a flush")]),
        ("flush bracket", [_opt(v.get("flush_bracket"), "not in verdict.json")]),
    ]
    bpt = v.get("bytes_per_token")
    t.rows.append(
        (
            "bytes per token",
            [_opt(bpt, "") if bpt is not None else absent("the server reports no entry or pool bytes")],
        )
    )
    return t


def _simulate_table(sim: dict[str, Any]) -> Table:
    t = Table("simulate", ["value"], corner="simulate figure")
    rec = sim.get("recommended")
    if isinstance(rec, dict):
        for k, v in rec.items():
            t.rows.append((f"recommended {k}", [_opt(v, "not computed")]))
    else:
        t.rows.append(("recommended capacity", [_opt(rec, "no capacity reaches the target share")]))
    t.rows.append(("curve points", [measured(str(len(sim.get("curve") or [])))]))
    return t


def started_utc(run: RunData) -> str | None:
    """The run's UTC start, ``YYYY-MM-DD HH:MM:SS UTC``, or None when unknown.

    From plan.json's ``run.wall_anchor_ns`` (``time.time_ns()`` read when the
    run's clock started, ``kvreplay.clock.RunClock``).
    """
    anchor = ((run.plan or {}).get("run") or {}).get("wall_anchor_ns")
    if not isinstance(anchor, int) or isinstance(anchor, bool) or anchor <= 0:
        return None
    t = datetime.fromtimestamp(anchor / 1e9, tz=UTC)
    return t.strftime("%Y-%m-%d %H:%M:%S UTC")


def build(run: RunData, sc: RunScan | None = None) -> Report:
    """Gather every section of the report for ``run``.

    Args:
        run: The loaded run (``load_run`` or, at any scale, ``report.stream.open_run``).
        sc: The one pass over its records (``report.stream.scan``); made here when None.
    """
    s, plan = run.summary, run.plan or {}
    rep = Report(run)
    rn = plan.get("run") or {}
    wl = plan.get("workload") or {}
    if (start := started_utc(run)) is not None:
        rep.header.append(("started", start))
    if plan:
        rep.header += [
            ("plan", str(plan.get("plan_sha256", ""))),
            (
                "workload",
                f"{wl.get('path')} ({wl.get('n_bodies')} bodies,"
                f" sha256 {str(wl.get('sha256', ''))[:16]})",
            ),
            ("target", str(rn.get("target"))),
            ("backend", str(rn.get("backend"))),
            ("kvreplay", f"{rn.get('kvreplay_version')} (accountant {rn.get('implementation')})"),
        ]
    if s.get("wall_s") is not None:
        rep.header.append(("wall time", f"{s['wall_s']:.1f} s"))
    if (scale := sim_time_scale(run.plan, s)) is not None:
        rep.header.append(
            (
                "simulator time",
                f"time scale {scale:g}: every simulated delay ran {scale:g} x its model length; "
                f"latencies below are in model ms (measured / {scale:g}; the client's own "
                "overhead is divided too)",
            )
        )
    if (cal := sim_calibration(run.plan, s)) is not None:
        rep.header.append(("simulator calibration", calibration_line(*cal)))
    if s.get("workers"):
        rep.header.append(("workers", f"{s['workers']} ({'Ray actors' if s.get('ray') else 'processes'})"))
    if line := ray_line(s):
        rep.banners.append(line)
    if s.get("aborted"):
        ab = s["aborted"]
        rep.banners.append(
            f"Run aborted: {ab.get('reason')} — {ab.get('message', '')}. "
            "Positions never sent are deferred."
        )
    if s.get("rebuilt_from_records"):
        rep.banners.append(
            "summary.json was rebuilt from records.jsonl (it was missing: the run ended without "
            "writing it, or it was removed)."
        )
    for ph in s.get("phases", []):
        if (hist := ph.get("history")) and hist.get("mode") == "live":
            rep.banners.append(
                f"Phase {ph['name']} ran with live history: {hist.get('differs')} of {hist.get('turns')} turns "
                "were sent with this server's own replies in place of the captured assistant messages "
                "(records: sent_sha256 differs from body_sha256, history_differs); its reuse is this "
                "server's conversation, not the captured bytes'."
            )
        if not ph.get("valid", True) and not ph.get("deferred"):
            rep.banners.append(
                f"Phase {ph['name']} is invalid: {'; '.join(ph.get('invalid_reasons') or [])}. "
                "Its figures are shown as failed, not measured."
            )
        if (itl := itl_pacing_note(ph, sim_time_scale(plan, s))) is not None:
            rep.banners.append(f"Phase {ph['name']}: ITL {itl}.")
        if busy := phase_busy_line(ph):  # kvreplay compare's words (metrics.selfmeasure)
            rep.banners.append(busy[:1].upper() + busy[1:])
    if s.get("phases") or plan.get("phases"):
        if sc is None:
            sc = scan(run)
        rep.findings = diagnose(
            s, run.plan, run.records if run.streamed else run.record_list, read_violations(run.path)
        )
        plots = run_plots(run, sc)
        rep.sections.append(
            ("Phases", [phase_table(run)], [p for p in plots if p.key.startswith("cdf-")], [])
        )
        rep.sections.append(
            (
                "TTFT against position (the churn picture)",
                [],
                [p for p in plots if p.key.startswith("ttft-position:")],
                [],
            )
        )
        if (turns := by_turn_table(run)) is not None:
            rep.sections.append(("Reuse by turn (conversations)", [turns], by_turn_plots(run), []))
        rep.sections.append(("Throughput", [throughput_table(run)], [], throughput_notes()))
        rep.sections.append(("Native counter deltas per phase", [counter_table(run)], [], []))
        if (fleet := replica_section(run)) is not None:
            rep.sections.append(("Replicas", fleet[0], [], fleet[1]))
        if (loss := routing_loss_section(run)) is not None:
            rep.sections.append(("Routing loss", loss[0], routing_loss_plots(run), loss[1]))
        if (raw := raw_series_table(run.path)) is not None:
            rep.sections.append(("Raw series that changed per phase (counters.jsonl)", [raw], [], []))
        rq = request_tables(run, sc)
        if rq:
            rep.sections.append(
                ("Per request at C1 (native counter deltas across each request)", rq, [], [])
            )
        rep.sections.append(("Drain checks", [drain_table(run)], [], []))
        rep.sections.append(("Server identity before and after", [identity_table(run)], [], []))
        rep.sections.append(
            ("Errors by class", [error_table(run)], [], error_examples(run, sc=sc))
        )
    if run.verdict is not None:
        rep.sections.append(
            ("Probe (verdict.json)", [_probe_table(run.verdict)], probe_plots(run.verdict), [])
        )
    if run.simulate is not None:
        rep.sections.append(
            (
                "Simulate (miss-ratio curve)",
                [_simulate_table(run.simulate)],
                simulate_plots(run.simulate),
                [],
            )
        )
    return rep


# ---------------------------------------------------------------- Markdown


def _md_table(t: Table) -> str:
    lines = ["| " + " | ".join([t.corner, *t.columns]) + " |", "|" + "---|" * (len(t.columns) + 1)]
    for head, cells in t.rows:
        lines.append(
            "| " + " | ".join([head.replace("|", "/"), *(c.markdown() for c in cells)]) + " |"
        )
    return "\n".join(lines)


def to_markdown(rep: Report) -> str:
    """report.md: header, banners, diagnosis, tables, plot statuses, plan hashes."""
    when = next((f" — started {v}" for k, v in rep.header if k == "started"), "")
    out = [f"# kvreplay run report{when}", ""]
    out += [f"- {k}: `{v}`" for k, v in rep.header]
    out += ["", *(f"> **{b}**" for b in rep.banners)]
    if rep.findings:
        out += ["", "## Diagnosis", ""]
        for f in rep.findings:
            out.append(f"- **{f.rule}**: {f.finding} Next: {f.next_experiment} {f.sources()}".rstrip())
    elif rep.sections:
        out += [
            "",
            "## Diagnosis",
            "",
            "No rule fired (see the rules in `kvreplay.report.diagnose`).",
        ]
    for title, tables, plots, notes in rep.sections:
        out += ["", f"## {title}", ""]
        for t in tables:
            out += [_md_table(t), ""]
        for p in plots:
            state = p.status if p.status == "measured" else f"{p.status}: {p.reason}"
            out.append(f"- figure `{p.key}` ({state}) — in report.html")
        out += [f"- {n}" for n in notes]
    plan = rep.run.plan or {}
    if plan.get("phases"):
        out += ["", "## Plan", ""]
        for ph in plan["phases"]:
            n, head = sequence_length(ph), sequence_head(ph)
            out.append(
                f"- {ph['name']}: {ph.get('order')} C{ph.get('concurrency')} x{ph.get('repeats')}, "
                f"{n} requests, bodies {', '.join(str(x['body_index']) for x in head)}"
                + (" ..." if n > len(head) else "")
            )
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- HTML


def _html_cell(c: Cell) -> str:
    title = c.reason if c.status != "measured" else c.note
    t = f' title="{_e(title)}"' if title else ""
    text = c.text if c.status == "measured" else f"{c.status}: {c.reason}"
    return f'<td data-status="{c.status}"{t}>{_e(text)}</td>'


def _html_table(t: Table) -> str:
    kv = ' class="kv"' if t.key == "identity" else ' class="num"'
    out = [
        f'<div class="scroll"><table{kv} data-table="{_e(t.key)}"><thead><tr>'
        f'<th scope="col">{_e(t.corner)}</th>'
    ]
    out += [f'<th scope="col">{_e(c)}</th>' for c in t.columns]
    out.append("</tr></thead><tbody>")
    for head, cells in t.rows:
        out.append(
            f'<tr><th scope="row">{_e(head)}</th>' + "".join(_html_cell(c) for c in cells) + "</tr>"
        )
    out.append("</tbody></table></div>")
    return "".join(out)


def plot_html(p: Plot) -> str:
    """One ``<figure>`` of a page: the PNG as a ``data:`` URI, or the reason it was not drawn."""
    anchor = "plot-" + re.sub(r"[^A-Za-z0-9_-]", "-", p.key)
    head = f'<figure id="{anchor}" data-plot="{_e(p.key)}" data-status="{p.status}">'
    if p.png is not None:
        src = "data:image/png;base64," + base64.b64encode(p.png).decode("ascii")
        # Intrinsic size from the PNG header (IHDR width/height, big-endian at bytes 16-24), so the
        # layout is final before the image decodes and #plot-... anchors land on their figure.
        w, h = int.from_bytes(p.png[16:20], "big"), int.from_bytes(p.png[20:24], "big")
        body = f'<img alt="{_e(p.title)}" width="{w}" height="{h}" src="{src}">'
    else:
        body = f'<div class="nofig">{_e(p.status)}: {_e(p.reason)}</div>'
    cap = _e(p.title) + (f" — {_e(p.reason)}" if p.reason and p.png is not None else "")
    return f"{head}{body}<figcaption>{cap}</figcaption></figure>"


def _full_data_links(rep: Report) -> str:
    """Links to the whole per-request data beside report.html (records.jsonl, records.parquet)."""
    d = rep.run.path
    links = ['<a href="records.jsonl">records.jsonl</a>']
    if (d / "records.parquet").exists():
        links.append('<a href="records.parquet">records.parquet</a>')
    else:
        links.append(f"Parquet: <code>kvreplay report {_e(d)} --parquet</code>")
    return " · ".join(links)


def _html_request_table(rep: Report, t: Table) -> str:
    """A per-request table: the first rows of the phase, the full data one click away."""
    total = t.total if t.total is not None else len(t.rows)
    shown = (
        f"{total} requests" if total <= len(t.rows) else f"first {len(t.rows)} of {total} requests"
    )
    return (
        f'<details data-requests="{_e(t.key)}"><summary>{_e(t.key.split(":", 1)[1])}: {shown}'
        f"</summary><p>Every request: {_full_data_links(rep)}</p>{_html_table(t)}</details>"
    )


def to_html(rep: Report) -> str:
    """report.html: one self-contained page (inline CSS, plots as data: URIs, no scripts).

    The title block names the run's UTC start (``started_utc``) when plan.json gives it.
    """
    when = next((f" — started {v}" for k, v in rep.header if k == "started"), "")
    out = [f"<h1>kvreplay run report{_e(when)}</h1>"]
    if rep.header:
        out.append(
            "<dl>"
            + "".join(f"<dt>{_e(k)}</dt><dd><code>{_e(v)}</code></dd>" for k, v in rep.header)
            + "</dl>"
        )
    out.append(
        '<p class="legend">Cells: <span style="background:#fff">measured</span>'
        '<span style="background:#fde8e8">failed (reason)</span>'
        '<span style="background:#eee">deferred (not run)</span>'
        '<span style="background:#eef2fb">absent (the server has no such series)</span></p>'
    )
    out += [f'<div class="banner">{_e(b)}</div>' for b in rep.banners]
    if rep.run.summary.get("phases") or (rep.run.plan or {}).get("phases"):
        out.append('<h2 id="diagnosis">Diagnosis</h2>')
        if rep.findings:
            out.append("<ul>")
            for f in rep.findings:
                out.append(
                    f'<li class="finding" data-rule="{_e(f.rule)}"><b>{_e(f.rule)}</b>: '
                    f"{_e(f.finding)} "
                    f'<span class="next">Next: {_e(f.next_experiment)}</span> '
                    f'<span class="sources">{_e(f.sources())}</span></li>'
                )
            out.append("</ul>")
        else:
            out.append("<p>No rule fired.</p>")
    for title, tables, plots, notes in rep.sections:
        out.append(f"<h2>{_e(title)}</h2>")
        if title.startswith("Per request"):
            for t in tables:
                out.append(_html_request_table(rep, t))
        else:
            out += [_html_table(t) for t in tables]
        out += [plot_html(p) for p in plots]
        if notes:
            out.append("<ul>" + "".join(f"<li>{_e(n)}</li>" for n in notes) + "</ul>")
    plan = rep.run.plan or {}
    if plan.get("phases"):
        out.append(
            '<h2>Plan</h2><details data-section="plan"><summary>Frozen order and body hashes '
            f"(plan {_e(str(plan.get('plan_sha256', ''))[:16])})</summary>"
        )
        for ph in plan["phases"]:
            spec = {
                k: v
                for k, v in ph.items()
                if k not in ("sequence", "sequence_head", "sequence_length", "sequence_positions")
            }
            n, head = sequence_length(ph), sequence_head(ph, 200)
            lines = [
                f"{s['position']:>6} {s['body_index']:>6} {s['body_sha256']}"
                f" {s.get('repetition', 0)}"
                for s in head
            ]
            more = (
                f"\n... first {len(head)} of {n} positions; every one is in plan.json"
                if n > len(head)
                else ""
            )
            out.append(
                f"<h3>{_e(ph['name'])}</h3><p><code>{_e(spec)}</code></p>"
                f"<pre>position   body sha256{' ' * 58}rep\n{_e(chr(10).join(lines))}{_e(more)}</pre>"
            )
        out.append("</details>")
    return page(f"kvreplay run report{when}", out)
