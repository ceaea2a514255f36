"""The per-phase table of a run (``report.md``, also what the demo prints)."""

from __future__ import annotations

from typing import Any

from kvreplay.metrics.selfmeasure import phase_busy_line
from kvreplay.redaction import escape_controls, redact
from kvreplay.report.calibration import calibration_line, sim_calibration
from kvreplay.report.cells import Cell, absent, counter_cell, itl_pacing_note, latency_cell, tokens_cell
from kvreplay.report.units import sim_time_scale

__all__ = ["COUNTER_COLUMNS", "render_markdown", "render_table"]

COUNTER_COLUMNS = ("hits Δ", "hit_tokens Δ", "misses Δ", "stores Δ", "evicted Δ")
"""The terminal table's counter columns; one the server reports in no phase is left out (one line says which)."""


def _short(cell: Cell, phase: str, notes: list[str]) -> str:
    """A cell for the terminal table: the value, else its status with the reason kept as a note."""
    if cell.status == "measured":
        return cell.text
    note = f"{phase}: {cell.status}: {cell.reason}"
    if note not in notes:
        notes.append(note)
    if cell.status == "failed" and (cell.reason or "").startswith("invalid phase"):
        return "invalid"
    return cell.status


def hits_cell(ph: dict[str, Any], summary: dict[str, Any]) -> Cell:
    """The ``hits Δ`` column: cache hits, a count of lookups on every backend (README "units").

    A server that counts only hit tokens (vLLM's ``prefix_cache_hits``, llama-server's
    cached prompt tokens; ``kvreplay.backends``) has no lookup count: the cell is
    absent, and its tokens are in the ``hit_tokens Δ`` column (``hit_tokens_cell``).
    """
    cell = counter_cell(ph, summary, "hits")
    d = ph.get("counter_delta") or {}
    if cell.status == "absent" and isinstance(d.get("hit_tokens"), (int, float)):
        return absent("hits: the server counts no lookups (its hit tokens are in hit_tokens Δ)")
    return cell


def hit_tokens_cell(ph: dict[str, Any], summary: dict[str, Any]) -> Cell:
    """The ``hit_tokens Δ`` column: prompt tokens served from the cache, in tokens."""
    return counter_cell(ph, summary, "hit_tokens")


def render_table(summary: dict[str, Any], scale: float | None = None) -> str:
    """Markdown table: one row per phase, then one note per distinct failed/deferred reason.

    With ``scale``, the simulator's time scale (``report.units.sim_time_scale``),
    latencies are in model ms (measured / scale) as in report.html, and a line
    above the table says so.

    Columns: requests ok/planned, TTFT p50/p99 (ms), ITL p50 (ms), E2E p50 (ms),
    cached/prompt tokens (usage), and native counter deltas (hits in lookups,
    hit_tokens in tokens, misses, stores, evictions; ``hits_cell``,
    ``hit_tokens_cell``). Every figure is a value or a status (``kvreplay.report.cells``):
    ``failed`` or ``deferred`` with its reason in the notes, and ``invalid`` for
    any figure of an invalid phase — never its number. A counter column absent in
    every phase (vLLM has no hits, misses, stores or evictions) is left out, and
    one note line names all such counters. A phase whose host was short of CPUs
    (``client.host_cpu_wait_share`` >= 0.1) has a note in ``kvreplay compare``'s words
    (``metrics.selfmeasure.phase_busy_line``).
    """
    unit = "model ms" if scale else "ms"
    labels = [f"TTFT p50 {unit}", f"TTFT p99 {unit}", f"ITL p50 {unit}", f"E2E p50 {unit}",
              "cached/prompt tokens", *COUNTER_COLUMNS]
    table: list[tuple[dict[str, Any], list[Cell]]] = []
    for ph in summary.get("phases", []):
        cells = [
            latency_cell(ph, summary, "ttft", "p50", scale=scale),
            latency_cell(ph, summary, "ttft", "p99", scale=scale),
            latency_cell(ph, summary, "itl", "p50", scale=scale),
            latency_cell(ph, summary, "e2e", "p50", scale=scale),
            tokens_cell(ph, summary),
            hits_cell(ph, summary),
            hit_tokens_cell(ph, summary),
            *(counter_cell(ph, summary, k) for k in ("misses", "stores", "evictions")),
        ]
        table.append((ph, cells))
    # a counter the server reports in no phase: one line for all of them, not a column and a note each
    gone = [i for i in range(5, len(labels))
            if table and all(cells[i].status == "absent" for _, cells in table)]
    keep = [i for i in range(len(labels)) if i not in gone]
    head = (
        "| phase | C | ok/planned | failed | " + " | ".join(labels[i] for i in keep) + " |\n"
        + "|---" * (4 + len(keep)) + "|\n"
    )
    rows: list[str] = []
    notes: list[str] = []
    for ph, cells in table:
        failed = sum(ph["failed"].values()) if ph.get("failed") else 0
        name = ph["name"]
        tok = ph["tokens"]
        texts = [_short(cells[i], name, notes) for i in keep]
        if cells[4].status == "measured" and tok.get("cached_unknown"):
            texts[4] += f" ({tok['cached_unknown']} unknown)"
        rows.append(
            f"| {name} | {ph['concurrency']} | {ph['ok']}/{ph['planned']} | {failed} | "
            + " | ".join(texts)
            + " |"
        )
    if gone:
        why = " (it counts no lookups: its hit tokens are in hit_tokens Δ)" if (
            5 in gone and (table[0][1][5].reason or "").startswith("hits: the server counts no lookups")) else ""
        notes.insert(0, "not reported by this server in any phase (absent, not zero): "
                     + ", ".join(labels[i].removesuffix(" Δ") for i in gone) + why)
    out = head + "\n".join(rows) + "\n"
    if scale:
        out = (f"Latencies in model ms (measured ms / sim time scale {scale:g}, as in "
               "report.html).\n\n" + out)
    notes += [f"{ph['name']}: ITL p50 {itl_why}" for ph in summary.get("phases", [])
              if isinstance(ph, dict) and (itl_why := itl_pacing_note(ph, scale)) is not None]
    notes += [line for ph in summary.get("phases", []) if (line := phase_busy_line(ph))]
    if notes:
        out += "\n" + "\n".join(f"- {n}" for n in notes) + "\n"
    return out


def ray_line(summary: dict[str, Any]) -> str | None:
    """Where each worker of a ``--ray`` run ran, with which clock; None for other runs."""
    ray = summary.get("ray")
    if not ray:
        return None
    where = ", ".join(f"w{h['worker']}@{h['host']} ({h.get('clock', '?')} clock)" for h in ray.get("hosts", []))
    return f"Ray `{ray.get('address')}`: {where}. {ray.get('clock_note', '')}".rstrip()


def render_markdown(summary: dict[str, Any], plan: dict[str, Any] | None = None) -> str:
    """The whole report.md: header, the table, invalid phases and the abort reason."""
    out = ["# kvreplay run", ""]
    if plan:
        run = plan.get("run", {})
        out.append(
            f"Plan `{plan.get('plan_sha256', '')[:16]}` · workload `{plan['workload']['path']}` "
            f"({plan['workload']['n_bodies']} bodies) · target `{run.get('target')}` · backend "
            f"`{run.get('backend')}` · accountant `{run.get('implementation')}`"
        )
        out.append("")
    if (cal := sim_calibration(plan, summary)) is not None:
        out += [f"Simulator calibration: {calibration_line(*cal)}", ""]
    if line := ray_line(summary):
        out += [line, ""]
    out.append(render_table(summary, sim_time_scale(plan, summary)))
    for ph in summary.get("phases", []):
        if not ph.get("valid", True):
            out.append(f"- phase `{ph['name']}` invalid: {'; '.join(ph['invalid_reasons'])}")
        if ph.get("drain"):
            dr = ph["drain"]
            why = f" ({dr['reason']})" if dr.get("reason") else ""
            out.append(f"- phase `{ph['name']}` drain: {'passed' if dr['passed'] else 'FAILED'} "
                       f"after {dr['waited_s']} s{why}")
    ab = summary.get("aborted")
    if ab:
        out.append(f"\n**Run aborted:** {ab['reason']} — {ab.get('message', '')}")
    # Server text (errors, abort messages) is hostile: no secret, no terminal escape (issue 17).
    return escape_controls(redact("\n".join(out) + "\n"))
