"""Reuse by turn of a conversation run: the table and the plot of ``summary.json``'s ``phases[].by_turn``.

One row per (phase, turn index): ok requests, TTFT p50 and p99, cached and prompt
tokens and the hit rate (cached / prompt; absent when an answer of the turn did not
report cached tokens, which are then a floor). The plot draws, per phase, the hit rate
and the TTFT p50 against the turn index: the curve of reuse climbing with the turns
of a conversation, or not. Runs without sessions get neither (``by_turn_table``
returns None, ``by_turn_plots`` nothing).
"""

from __future__ import annotations

from typing import Any

from kvreplay.report import plots  # matplotlib loads on the first drawing call
from kvreplay.report.cells import Cell, absent, measured, phase_gate
from kvreplay.report.figures import Plot
from kvreplay.report.sections import Table
from kvreplay.report.units import sim_time_scale
from kvreplay.rundir import RunData

__all__ = ["by_turn_plots", "by_turn_table"]

_COLUMNS = ["requests", "TTFT p50 (ms)", "TTFT p99 (ms)", "cached tokens", "prompt tokens", "hit rate"]


def _phases(run: RunData) -> list[dict[str, Any]]:
    return [ph for ph in run.summary.get("phases") or [] if ph.get("by_turn")]


def _cached_cells(row: dict[str, Any], unknown: int) -> list[Cell]:
    """The cached-tokens cell: absent when no answer reported it, noted when some did not."""
    if unknown and unknown >= row["requests"]:
        return [absent("the server reported no usage.prompt_tokens_details.cached_tokens")]
    note = f"{unknown} answers without cached_tokens" if unknown else None
    return [measured(f"{row['cached_tokens']:,}", note)]


def _ms(v: float | None, scale: float | None) -> Cell:
    if v is None:
        return Cell("failed", "failed", "no TTFT sample")
    return measured(f"{v / scale if scale else v:.1f}")


def by_turn_table(run: RunData) -> Table | None:
    """The reuse-by-turn table, or None when no phase has ``by_turn``."""
    phases = _phases(run)
    if not phases:
        return None
    scale = sim_time_scale(run.plan, run.summary)
    cols = [c.replace("(ms)", "(model ms)") for c in _COLUMNS] if scale else list(_COLUMNS)
    t = Table("by-turn", cols, corner="phase · turn")
    for ph in phases:
        gate = phase_gate(ph, run.summary)
        for row in ph["by_turn"]:
            head = f"{ph['name']} · {row['turn']}"
            if gate is not None:
                t.rows.append((head, [gate] * len(cols)))
                continue
            ttft = row.get("ttft_ms") or {}
            hit = row.get("hit_rate")
            unknown = int(row.get("cached_unknown") or 0)
            t.rows.append((head, [
                measured(str(row["requests"])), _ms(ttft.get("p50"), scale), _ms(ttft.get("p99"), scale),
                *_cached_cells(row, unknown), measured(f"{row['prompt_tokens']:,}"),
                absent(f"{unknown} of {row['requests']} answers without cached_tokens") if unknown
                else measured(f"{hit:.3f}") if hit is not None else Cell("failed", "failed", "no prompt tokens"),
            ]))
    return t


def by_turn_plots(run: RunData) -> list[Plot]:
    """One ``by-turn:<phase>`` plot per conversation phase: hit rate and TTFT p50 against the turn."""
    out = []
    scale = sim_time_scale(run.plan, run.summary)
    for ph in _phases(run):
        key, title = f"by-turn:{ph['name']}", f"phase {ph['name']}: reuse by turn"
        gate = phase_gate(ph, run.summary)
        if gate is not None:
            out.append(Plot(key, title, gate.status, gate.reason))
            continue
        out.append(Plot(key, title, "measured", None, plots.by_turn_png(ph["name"], ph["by_turn"], scale=scale)))
    return out
