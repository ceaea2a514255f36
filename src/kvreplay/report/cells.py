"""Report cells: every figure the report shows is measured, failed (why), deferred (not run) or absent.

**absent** is a series the server does not have (a counter its adapter does
not report, usage without cached_tokens, no bytes gauge): nothing was read
because there is nothing to read. **failed** is a read or a request that went
wrong. They look different in both renderings.

A cell never shows an empty value, and never shows a number from an invalid
phase as measured (summary phases carry ``valid`` and ``invalid_reasons``).
The rules, in the order they are applied to a phase's figure:

1. The phase is in the plan but not in the summary, or the summary marks it
   ``deferred``, or it sent nothing: **deferred** ("not run: <abort reason>").
2. The phase is invalid: **failed** ("invalid phase: <reasons>").
3. The phase sent requests but none finished ok: **failed** ("all N failed:
   <class> n, ...").
4. The figure itself has no value (e.g. ITL of one-token answers, a counter
   the backend does not report): **failed** with that reason.
5. Otherwise **measured**; a phase cut short by an abort keeps measured cells
   over what it sent, and says "n of planned" in the cell's note.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from kvreplay.evidence.engine import fmt  # one formatter for cells and evidence texts

__all__ = [
    "Cell",
    "Status",
    "absent",
    "counter_cell",
    "deferred",
    "failed",
    "itl_pacing_note",
    "latency_cell",
    "measured",
    "phase_gate",
    "phases_in_order",
    "record_cells",
    "tokens_cell",
]

Status = Literal["measured", "failed", "deferred", "absent"]


@dataclass(frozen=True, slots=True)
class Cell:
    """One figure of the report.

    Attributes:
        status: ``measured``, ``failed`` or ``deferred``.
        text: What the cell shows: the value when measured, else a short label.
        reason: Why it failed or was deferred (None when measured).
        note: Extra context for a measured value (e.g. partial phase).
    """

    status: Status
    text: str
    reason: str | None = None
    note: str | None = None

    def markdown(self) -> str:
        """The cell in a Markdown table: the value, or ``failed: reason`` / ``deferred: reason``."""
        if self.status == "measured":
            return self.text
        return f"{self.status}: {self.reason}".replace("|", "/")


def measured(text: str, note: str | None = None) -> Cell:
    """A measured value (already formatted)."""
    return Cell("measured", text, None, note)


def failed(reason: str) -> Cell:
    """A figure that could not be measured, with the reason."""
    return Cell("failed", "failed", reason)


def absent(reason: str) -> Cell:
    """A series the server does not have (not a failed read), with what is missing."""
    return Cell("absent", "absent", reason)


def deferred(reason: str) -> Cell:
    """A figure that was not run (abort, deadline, kill)."""
    return Cell("deferred", "deferred", reason)


def _abort_reason(summary: dict[str, Any]) -> str:
    ab = summary.get("aborted") or {}
    return ab.get("reason") or "run ended before this phase"


def phases_in_order(
    summary: dict[str, Any], plan: dict[str, Any] | None
) -> list[dict[str, Any] | str]:
    """Summary phases in plan order; a plan phase missing from the summary is its name (str)."""
    by_name = {p["name"]: p for p in summary.get("phases", [])}
    out: list[dict[str, Any] | str] = []
    seen = set()
    for spec in (plan or {}).get("phases") or []:
        out.append(by_name.get(spec["name"], spec["name"]))
        seen.add(spec["name"])
    out.extend(p for p in summary.get("phases", []) if p["name"] not in seen)
    return out


def phase_gate(ph: dict[str, Any] | str, summary: dict[str, Any]) -> Cell | None:
    """The status every figure of this phase takes, or None when its figures are measurable.

    Args:
        ph: A summary phase, or the name of a plan phase absent from the summary.
        summary: The run summary (for the abort reason).
    """
    if not isinstance(ph, str) and ph.get("check_failed"):
        # A failed drain/fresh check is the phase's failure (issue 14), not a run that ended early.
        return failed(f"check failed, nothing sent: {ph['check_failed']}")
    if isinstance(ph, str) or ph.get("deferred") or ph.get("sent", 0) == 0:
        return deferred(f"not run: {_abort_reason(summary)}")
    if not ph.get("valid", True):
        return failed(
            "invalid phase: " + "; ".join(ph.get("invalid_reasons") or ["(no reason given)"])
        )
    if ph.get("ok", 0) == 0:
        classes = ", ".join(f"{k} {v}" for k, v in (ph.get("failed") or {}).items()) or "unknown"
        return failed(f"all {ph.get('sent', 0)} sent requests failed ({classes})")
    return None


def _partial_note(ph: dict[str, Any]) -> str | None:
    if ph.get("not_sent"):
        return f"over {ph.get('sent')} of {ph.get('planned')} planned requests (the rest not run)"
    return None


ITL_TIMER_FLOOR_MS = 2.0
"""Measured token gaps (ms of this machine's clock) below which ITL percentiles are burst gaps.

The simulator paces tokens with event-loop timers (``sim._responses``: sleeps to absolute
due times), which fire on a ~1 ms grid (uvloop rounds timers to 1 ms): a scaled gap of
0.4 ms (20 ms at time scale 0.02) comes out as bursts of back-to-back tokens and ~1 ms
pauses. The mean gap (TPOT) stays the modelled one, the percentiles do not: the demo read
ITL p50 0.85 model ms against the model's 20 ms (TPOT p50 20.4) at 0.02, and ITL p50
4.211 ≈ TPOT 4.003 real ms at 0.2, where each gap spans four timer ticks."""


def itl_pacing_note(ph: dict[str, Any], scale: float | None) -> str | None:
    """Why a phase's ITL percentiles are not meaningful at this simulator time scale, or None.

    At a simulator time scale (``scale``, 0 < scale) a phase whose measured TPOT p50 is under
    ``ITL_TIMER_FLOOR_MS`` had its tokens paced by timers coarser than its gaps: its ITL
    percentiles are burst gaps, not the simulator's modelled ITL; its TPOT (the mean gap per
    request) is the modelled figure. Real servers (no scale) are never marked.

    Returns:
        ``"not meaningful at sim time scale 0.02: the simulator's scaled token gap (TPOT p50
        0.408 ms measured, 20.40 model ms) is under 2 ms, finer than the event loop's ~1 ms
        timers, so tokens arrive in bursts; TPOT p50 is the modelled gap"``.
    """
    if not scale or scale <= 0:
        return None
    tp = (ph.get("tpot_ms") or {}).get("p50")
    if not isinstance(tp, (int, float)) or isinstance(tp, bool) or tp >= ITL_TIMER_FLOOR_MS:
        return None
    return (f"not meaningful at sim time scale {scale:g}: the simulator's scaled token gap (TPOT p50 {tp:.3f} ms "
            f"measured, {tp / scale:.2f} model ms) is under {ITL_TIMER_FLOOR_MS:g} ms, finer than the event loop's "
            "~1 ms timers, so tokens arrive in bursts; TPOT p50 is the modelled gap")


def latency_cell(
    ph: dict[str, Any] | str,
    summary: dict[str, Any],
    metric: str,
    stat: str,
    *,
    scale: float | None = None,
) -> Cell:
    """A latency percentile of one phase (ms).

    Args:
        ph: A summary phase, or the name of an unrun plan phase.
        summary: The run summary.
        metric: ``ttft``, ``itl``, ``tpot`` or ``e2e``.
        stat: ``p50``, ``p90``, ``p99``, ``mean`` or ``max``.
        scale: The simulator's time scale (``report.units.sim_time_scale``): the
            value is shown in model ms (measured / scale). None for real time.

    An ITL percentile whose phase's tokens came faster than the timers that paced them
    (``itl_pacing_note``) reads ``not meaningful``, the measured figure and why in its note.
    """
    gate = phase_gate(ph, summary)
    if gate is not None:
        return gate
    assert isinstance(ph, dict)
    m = ph.get(f"{metric}_ms") or {}
    v = m.get(stat)
    if v is None:
        if metric == "itl" and summary.get("rebuilt_from_records"):
            return failed(
                "ITL samples are not kept in records and the phase's histogram was never written"
            )
        if metric in ("itl", "tpot"):
            # Nothing failed: a non-streamed (or one-token) answer has no decode interval, so
            # the figure does not exist for this phase (the README's "absent").
            return absent("no samples: no answer streamed two or more tokens (a non-streamed answer "
                          "arrives at once: it has no decode interval)")
        return failed(f"no {metric.upper()} samples")
    nd = 2 if metric in ("itl", "tpot") else 1
    if metric == "itl" and (why := itl_pacing_note(ph, scale)) is not None:
        # the burst gap is not shown as the model's ITL: the cell says so, the figure is in its note
        return measured("not meaningful", f"measured {float(v):.{nd}f} ms; {why}")
    if scale:
        return measured(
            f"{float(v) / scale:.{nd}f}",
            "; ".join(x for x in (f"measured {float(v):.{nd}f} ms", _partial_note(ph)) if x),
        )
    return measured(f"{float(v):.{nd}f}", _partial_note(ph))


def tokens_cell(ph: dict[str, Any] | str, summary: dict[str, Any]) -> Cell:
    """``cached/prompt`` tokens from usage; failed when the server never reported cached tokens."""
    gate = phase_gate(ph, summary)
    if gate is not None:
        return gate
    assert isinstance(ph, dict)
    tok = ph["tokens"]
    if tok.get("cached_unknown") and tok["cached_unknown"] >= ph.get("ok", 0):
        return absent("the server reported no usage.prompt_tokens_details.cached_tokens")
    text = f"{tok['cached']}/{tok['prompt']}"
    note = (
        f"{tok['cached_unknown']} answers without cached_tokens"
        if tok.get("cached_unknown")
        else None
    )
    return measured(text, note or _partial_note(ph))


def counter_cell(ph: dict[str, Any] | str, summary: dict[str, Any], key: str) -> Cell:
    """A native counter delta over a phase."""
    gate = phase_gate(ph, summary)
    if gate is not None:
        return gate
    assert isinstance(ph, dict)
    d = ph.get("counter_delta")
    if ph.get("attribution") == "none" or d is None:
        return failed("no counters (backend none or counter read failed)")
    if d.get("reset"):
        return failed("server restarted during the phase (a counter went down)")
    if key in (d.get("invalid") or {}):
        return failed(f"{key} invalid for deltas: {d['invalid'][key]}")
    if key not in d:
        return absent(f"{key} not reported by this server")
    return measured(fmt(d[key]), _partial_note(ph))


def record_cells(rec: dict[str, Any], counter_keys: list[str]) -> list[Cell]:
    """Per-request cells: status, TTFT and E2E (ms), prompt and cached tokens, counter deltas."""
    if not rec.get("sent", True):
        why = f"not sent: {rec.get('error') or 'aborted'}"
        return [deferred(why)] * (5 + len(counter_keys))
    status = rec.get("status")
    if status != "ok":
        why = f"{status}: {(rec.get('error') or '')[:120]}".rstrip(": ")
        cells = [failed(why)] + [failed(status or "error")] * (4 + len(counter_keys))
        return cells
    u = rec.get("usage") or {}
    cells = [measured("ok")]
    for key in ("ttft_ns", "e2e_ns"):
        v = rec.get(key)
        cells.append(measured(f"{v / 1e6:.1f}") if v is not None else failed("no token arrived"))
    cells.append(
        measured(str(u["prompt_tokens"]))
        if u.get("prompt_tokens") is not None
        else failed("usage has no prompt_tokens")
    )
    cells.append(
        measured(str(u["cached_tokens"]))
        if u.get("cached_tokens") is not None
        else absent("usage has no cached_tokens")
    )
    d = rec.get("counter_delta")
    for key in counter_keys:
        if d is None:
            cells.append(failed("no per-request counter read"))
        elif d.get("reset"):
            cells.append(failed("counter restart"))
        elif key in (d.get("invalid") or {}):
            cells.append(failed(f"{key} invalid for deltas: {d['invalid'][key]}"))
        elif key not in d:
            cells.append(absent(f"{key} not reported by this server"))
        else:
            cells.append(measured(fmt(d[key])))
    return cells
