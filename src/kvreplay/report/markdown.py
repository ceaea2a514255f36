"""The per-phase table of a run (``report.md``, also what the demo prints)."""

from __future__ import annotations

from typing import Any

__all__ = ["render_markdown", "render_table"]


def _f(v: Any, nd: int = 1) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def _delta(d: dict | None, key: str) -> str:
    if not d or key not in d:
        return "n/a"
    v = d[key]
    return str(int(v)) if isinstance(v, (int, float)) and float(v).is_integer() else _f(v)


def render_table(summary: dict[str, Any]) -> str:
    """Markdown table: one row per phase.

    Columns: requests ok/planned, TTFT p50/p99 (ms), ITL p50 (ms), E2E p50 (ms),
    cached/prompt tokens (usage), and native counter deltas (hits, misses,
    stores, evictions) where the backend reports them. An invalid phase's
    latency cells read ``invalid`` rather than a number.
    """
    head = (
        "| phase | C | ok/planned | failed | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | E2E p50 ms "
        "| cached/prompt tokens | hits Δ | misses Δ | stores Δ | evicted Δ |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    rows = []
    for ph in summary.get("phases", []):
        failed = sum(ph["failed"].values()) if ph.get("failed") else 0
        tok = ph["tokens"]
        cached = f"{tok['cached']}/{tok['prompt']}"
        if tok.get("cached_unknown"):
            cached += f" ({tok['cached_unknown']} unknown)"
        d = ph.get("counter_delta")
        if ph.get("deferred"):
            lat = ["deferred"] * 4
        elif ph.get("valid", True):
            lat = [
                _f(ph["ttft_ms"]["p50"]),
                _f(ph["ttft_ms"]["p99"]),
                _f(ph["itl_ms"]["p50"], 2),
                _f(ph["e2e_ms"]["p50"]),
            ]
        else:
            lat = ["invalid"] * 4
        rows.append(
            f"| {ph['name']} | {ph['concurrency']} | {ph['ok']}/{ph['planned']} | {failed} | "
            + " | ".join(lat)
            + f" | {cached} | {_delta(d, 'hits')} | {_delta(d, 'misses')} | {_delta(d, 'stores')} | "
            f"{_delta(d, 'evictions')} |"
        )
    return head + "\n".join(rows) + "\n"


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
    out.append(render_table(summary))
    for ph in summary.get("phases", []):
        if not ph.get("valid", True):
            out.append(f"- phase `{ph['name']}` invalid: {'; '.join(ph['invalid_reasons'])}")
        if ph.get("drain"):
            dr = ph["drain"]
            out.append(f"- phase `{ph['name']}` drain: {'passed' if dr['passed'] else 'FAILED'} "
                       f"after {dr['waited_s']} s" + (f" ({dr['reason']})" if dr.get("reason") else ""))
    ab = summary.get("aborted")
    if ab:
        out.append(f"\n**Run aborted:** {ab['reason']} — {ab.get('message', '')}")
    return "\n".join(out) + "\n"
