"""Whether an A/B check can resolve its threshold at all (issue 27, item 6).

A bootstrap interval says how the paired ratios scatter, not whether the figures
behind them could tell the arms apart. Four gates, applied to every check that has
an interval (``compare.compare_blocks``), turn a decision into ``no decision`` with
a reason that starts ``below resolution`` or names the disagreement:

- **Histogram resolution.** Latencies are recorded in HdrHistogram at integer µs
  and 3 significant digits: the step at a value ``v`` µs is 1 µs below 1,000 µs and
  ``10^(floor(log10 v) - 2)`` µs above (``step_us``). When the step at the smaller
  arm's median is coarser than half the threshold (relative), the check cannot
  resolve it (an ITL p50 of 2 µs moves in 50% steps: "ok [0%, 0%]" there is the
  histogram's floor, not a measurement).
- **Client self-check.** A decisive outcome (``benefit``, ``regression``) of a
  timing metric (latencies, throughput, output tokens/s: not cached tokens, not counter
  ratios) where the run's client self-check (``metrics.selfmeasure``: the phase's
  ``client.verdict``) read anything but ``quiet`` in any block of the check's phase, in
  either arm: the client's own loop lag or CPU starvation is then part of the figures,
  and on a loaded host it falls unevenly on the arms (identical arms read "regression"
  at C4 ITL under load); likewise where the host was short of CPUs during a block
  (``host_busy``: a task waited for a CPU at least 10% of the phase, or a load average
  above the CPU count), which delays a same-host server while the client's loop stays
  quiet. The reason names the blocks (``client_noise``). ``--accept-busy-host FACTOR``
  lets a person keep such a decision when the host's CPU shortage is the only noise and
  the effect clears the threshold and the spread gate ``FACTOR`` times over with agreeing
  halves (``busy_acceptance``); the check and the verdict then carry the ``host_busy``
  caveat (``busy_caveat``).
- **Spread.** A decisive outcome (``benefit``, ``regression``) whose effect (the
  median change) is not larger than either arm's spread across repetitions
  (``(max - min) / median`` of the arm's values) is noise presented as a decision;
  for a latency from the histograms, not larger than ``SPREAD_FACTOR`` (2) times it.
  Twice, because the range of 3 repetitions understates the noise: C4 ITL p50 of
  identical arms against the in-process simulator moves 5.7-6.4 ms from block to
  block on a quiet host, and a clean-clone run read "regression" (+3% bound) with an
  effect above each arm's range; drawing identical arms from those 12 block values,
  an interval above +3% with the effect above 1x the spreads came out 2.2% of the
  time, above 2x 0.7%.
- **Split-half agreement.** The median change of the first half of the pairs and of
  the second half (by repetition); a decisive outcome whose halves disagree in sign is
  not repeatable. The halves are always stated (``split_half``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from kvreplay.experiments.stats import median
from kvreplay.metrics.selfmeasure import HOST_CPU_WAIT_SHARE, host_busy, host_busy_text
from kvreplay.options.ab import ACCEPT_BUSY_FACTOR

__all__ = ["ACCEPT_BUSY_FACTOR", "HOST_CPU_WAIT_SHARE", "NOT_COMPUTED", "SPREAD_FACTOR", "busy_acceptance",
           "busy_caveat", "client_noise", "host_busy", "host_busy_text", "protected_width", "resolution_gate",
           "split_half", "spread_pct", "step_us", "untimed_reason"]

_DECISIVE = ("benefit", "regression")

SPREAD_FACTOR = 2.0
"""A decisive latency effect must exceed this many times the larger arm's spread (module docstring)."""


def step_us(value_us: float) -> float:
    """The HdrHistogram step (µs) at ``value_us`` with 3 significant digits and a 1 µs unit."""
    if value_us < 1000:
        return 1.0
    return float(10 ** (math.floor(math.log10(value_us)) - 2))


def spread_pct(values: list[float]) -> float | None:
    """``(max - min) / median`` of one arm's values across repetitions, in percent; None below 2 or at 0."""
    if len(values) < 2:
        return None
    m = median(values)
    return None if m == 0 else (max(values) - min(values)) / abs(m) * 100


def split_half(ratios: list[float]) -> dict[str, Any] | None:
    """The median change (%) of the first and the second half of the paired ratios, and whether they agree.

    With an odd count the middle pair goes to the second half. None below 2 pairs.
    Agreement: the same sign, or both within 0.5% of no change.
    """
    if len(ratios) < 2:
        return None
    h = len(ratios) // 2
    a, b = (median(ratios[:h]) - 1) * 100, (median(ratios[h:]) - 1) * 100
    agree = (a > 0) == (b > 0) or (abs(a) < 0.5 and abs(b) < 0.5)
    return {"first_pct": round(a, 3), "second_pct": round(b, 3), "agree": agree}


def client_noise(blocks: list[dict[str, Any]]) -> str | None:
    """Why the client's self-check makes a timing comparison unsafe, or None when every block was quiet.

    Args:
        blocks: One entry per block of the check's phase that the comparison uses:
            ``{"side": "baseline" | "candidate", "rep": int, "client": the phase's ``client``
            figures from summary.json (``verdict``, ``loop_lag_p99_ms``) or None}``. A block
            without a verdict (a run older than the self-check) counts as quiet.

    Returns:
        ``"client not quiet: the run's client self-check read client_bound in baseline rep 0,
        host_stalls in candidate rep 2 (loop lag p99 up to 15.8 ms); rerun on a quieter host"``.
    """
    loud = [(b, (b.get("client") or {})) for b in blocks
            if (b.get("client") or {}).get("verdict") not in (None, "quiet") or host_busy(b.get("client"))]
    if not loud:
        return None

    def what(c: dict[str, Any]) -> str:
        if c.get("verdict") not in (None, "quiet"):
            return str(c["verdict"])
        return host_busy_text(c) or ""

    named = ", ".join(f"{what(c)} in {b['side']} rep {b['rep']}" for b, c in loud)
    lags = [c["loop_lag_p99_ms"] for _, c in loud if isinstance(c.get("loop_lag_p99_ms"), (int, float))]
    lag = f" (loop lag p99 up to {max(lags):.3g} ms)" if lags else ""
    return f"client not quiet: the run's client self-check read {named}{lag}; rerun on a quieter host"




def busy_caveat(blocks: list[dict[str, Any]]) -> str | None:
    """The ``host_busy`` caveat when the host's CPU shortage is the only noise in these blocks, else None.

    Args:
        blocks: As ``client_noise``'s.

    Returns:
        ``"host_busy (a task on the host waited for a CPU 40% of the phase) in candidate rep 0"``
        (one clause per busy block, with its client verdict when not quiet), or None when no
        block was busy, or when a block was loud without the host being busy (the client's own
        loop, not the host, then moved the figures: never accepted).
    """
    loud = [b for b in blocks
            if (b.get("client") or {}).get("verdict") not in (None, "quiet") or host_busy(b.get("client"))]
    if not loud or not all(host_busy(b.get("client")) for b in loud):
        return None

    def what(c: dict[str, Any]) -> str:
        v = c.get("verdict")
        return (host_busy_text(c) or "") + (f", client {v}" if v not in (None, "quiet") else "")

    return ", ".join(f"{what(b.get('client') or {})} in {b['side']} rep {b['rep']}" for b in loud)


def busy_acceptance(entry: dict[str, Any], threshold_pct: float, ci_change_pct: list[float], latency: bool,
                    factor: float) -> str | None:
    """Why a decisive outcome on a busy host does *not* clear every gate ``factor`` times over; None if it does.

    ``--accept-busy-host FACTOR`` lets a person accept a ``benefit`` or ``regression`` that
    the ``host_busy`` gate withholds when the effect is too large for the host's noise to
    have made it. The outcome must already pass the other gates (``resolution_gate`` with no
    client noise); then, with ``t`` the threshold, ``s`` the larger arm's spread across
    repetitions (``spread_pct``) and ``k`` the spread gate's factor (``SPREAD_FACTOR`` for a
    latency, 1 otherwise):

    - the interval's edge nearer to no change is at least ``factor * |t|`` away from it;
    - the median change is over ``factor * k * s``;
    - the split halves agree (``split_half``).

    Example: +67.6% with the interval [+62.9%, +87.6%] at a 5% threshold and spreads under
    10% clears factor 3 (62.9 >= 15; 67.6 > 3 x 2 x 10 = 60).

    Args:
        entry: The metric's entry of ``compare_blocks``.
        threshold_pct: The check's signed threshold (percent).
        ci_change_pct: The interval of the change ``[lo, hi]`` (percent).
        latency: A latency from the histograms (the spread gate's factor is ``SPREAD_FACTOR``).
        factor: The person's factor (> 0).
    """
    lo, hi = ci_change_pct
    near = min(abs(lo), abs(hi)) if (lo > 0) == (hi > 0) else 0.0
    if near < factor * abs(threshold_pct):
        return (f"the interval [{lo:+.3g}%, {hi:+.3g}%] comes within {near:.3g}% of no change, under {factor:g}x "
                f"the {abs(threshold_pct):g}% threshold")
    change = abs(entry.get("change_pct") or 0.0)
    spreads = [s for s in (spread_pct(entry.get("values_baseline") or []),
                           spread_pct(entry.get("values_candidate") or [])) if s is not None]
    k = SPREAD_FACTOR if latency else 1.0
    if spreads and change <= factor * k * max(spreads):
        return (f"the effect ({change:.3g}%) is not over {factor:g}x the spread gate ({k:g} x the arms' spread "
                f"{max(spreads):.3g}%)")
    halves = split_half(entry.get("ratios") or [])
    if halves is not None and not halves["agree"]:
        return f"the two halves disagree ({halves['first_pct']:+.3g}% and {halves['second_pct']:+.3g}%)"
    return None


def resolution_gate(entry: dict[str, Any], threshold_pct: float, decision: str,
                    latency: bool, client: str | None = None) -> tuple[str, str | None]:
    """A check's decision after the four gates (module docstring), and why it changed (None: unchanged).

    Args:
        entry: The metric's entry of ``compare_blocks`` (``values_baseline``, ``values_candidate``,
            ``ratios``, ``change_pct``).
        threshold_pct: The check's signed threshold (percent).
        decision: The decision from the interval (``compare._decide``).
        latency: True for a metric in ms from the latency histograms (the resolution gate applies).
        client: ``client_noise``'s reason for the check's phase when the metric is a timing
            one (None: every block quiet, or a metric the client's speed does not move).
    """
    base, cand = entry.get("values_baseline") or [], entry.get("values_candidate") or []
    if latency and base and cand:
        low_ms = min(median(base), median(cand))
        if low_ms > 0:
            st = step_us(low_ms * 1000)
            rel = st / (low_ms * 1000) * 100
            if rel > abs(threshold_pct) / 2:
                return "no decision", (f"below resolution: {entry['metric']} is {low_ms * 1000:.3g} µs, where the "
                                       f"histogram's step is {st:g} µs ({rel:.3g}%), coarser than half the "
                                       f"{abs(threshold_pct):g}% threshold")
    if decision not in _DECISIVE:
        return decision, None
    if client is not None:
        return "no decision", client
    change = abs(entry.get("change_pct") or 0.0)
    spreads = [s for s in (spread_pct(base), spread_pct(cand)) if s is not None]
    factor = SPREAD_FACTOR if latency else 1.0
    if spreads and factor * max(spreads) >= change:
        return "no decision", (f"below resolution: the effect ({change:.3g}%) is not over "
                               f"{'twice ' if factor == SPREAD_FACTOR else ''}the arms' spread across "
                               f"repetitions ({max(spreads):.3g}%)")
    halves = split_half(entry.get("ratios") or [])
    if halves is not None and not halves["agree"]:
        return "no decision", (f"not repeatable: the two halves of the repetitions disagree "
                               f"({halves['first_pct']:+.3g}% and {halves['second_pct']:+.3g}%)")
    return decision, None


NOT_COMPUTED = "not computed"
"""A timing metric's cells and checks when a block ran at simulator time scale 0."""


def untimed_reason(pairs: list[dict[str, Any]]) -> str | None:
    """Why timing metrics are not computed for these pairs: a block ran the simulator at time scale 0.

    A block's scale is its plan.json ``run.sim_time_scale`` (``kvreplay ab --target sim``);
    at 0 the simulator sleeps for nothing, so a latency is the client's and the host's
    scheduling, not the arm's: a 1.5x slower prefill read TTFT p50 -15.84%. Only counted
    metrics (``cached_tokens``, ``ratio:...``) are compared then (``compare.compare_blocks``).

    Args:
        pairs: ``compare.load_pairs``' pairs (each side's ``dir`` and ``plan``).

    Returns:
        ``"the simulator ran at time scale 0 (no modelled time) in 00-off, 01-on: latencies
        and rates are the host's scheduling, not the arms'; only counted metrics (cached_tokens,
        ratio:...) are compared"`` (four block directories named, then a count), or None.
    """
    dirs = []
    for pr in pairs:
        for side in ("baseline", "candidate"):
            blk = pr[side]
            scale = ((blk.get("plan") or {}).get("run") or {}).get("sim_time_scale")
            if isinstance(scale, (int, float)) and not isinstance(scale, bool) and scale == 0:
                dirs.append(Path(str(blk["dir"])).name)
    if not dirs:
        return None
    named = ", ".join(dirs[:4]) + (f" and {len(dirs) - 4} more" if len(dirs) > 4 else "")
    return (f"the simulator ran at time scale 0 (no modelled time) in {named}: latencies and rates are the "
            "host's scheduling, not the arms'; only counted metrics (cached_tokens, ratio:...) are compared")


def protected_width(threshold_pct: float, ci_change_pct: list[float]) -> str | None:
    """Why a protected check's ``ok`` cannot stand: its interval is wider than its bound; else None.

    Args:
        threshold_pct: The protected check's signed bound (percent, e.g. +3).
        ci_change_pct: The interval of the change ``[lo, hi]`` (percent).

    Returns:
        ``"the interval [-40.00%, +2.00%] is 42% wide, wider than the 3% bound: it cannot show
        that the change stays within it"`` when ``hi - lo`` exceeds ``|threshold_pct|``.
    """
    lo, hi = ci_change_pct
    width = hi - lo
    if width <= abs(threshold_pct):
        return None
    return (f"the interval [{lo:+.2f}%, {hi:+.2f}%] is {width:.3g}% wide, wider than the {abs(threshold_pct):g}% "
            "bound: it cannot show that the change stays within it")
