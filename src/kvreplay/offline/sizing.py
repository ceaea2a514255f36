"""Sizing answers from a curve: entries, GiB and loop time at each capacity.

``kvreplay simulate`` gives hits per capacity; an engineer sizing a prompt cache
asks three more things (issue 18): how many entries keep the prefix, what that
costs in memory, and what one pass through the workload (a *loop*) costs at
today's size.

**Memory** at a capacity of ``N`` entries: ``N * entry_bytes``, where
``entry_bytes`` is the per-entry cap (``--max-entry-bytes``: a halogen entry is
allocated at its cap) or, with no cap, the largest snapshot the workload offers
times bytes per token (an upper bound: every entry at most that size). Radix
rows already carry ``capacity_tokens * bytes_per_token`` (``memory_gib``).

**Loop time** (prefill seconds of the counted requests, one pass), with the
simulator's time model (``kvreplay.sim.engine``; docs/simulator.md "Warm TTFT")::

    cold  = requests * a + prompt_tokens / rate
    loop  = cold - hit_requests * (a - hit_base_s) - hit_tokens / rate
                 + hit_tokens * restore_s_per_token

A request with cached tokens pays ``hit_base_s`` (default 0) instead of ``a``,
its uncached tail at ``rate``, and the restore of its cached tokens.
Interleaved foreign requests take cache space but are not part of the loop.
"""

from __future__ import annotations

from collections.abc import Sequence

from kvreplay.offline.report import PrefillModel

__all__ = [
    "DEFAULT_RESTORE_S_PER_TOKEN",
    "add_sizing",
    "answer_line",
    "entry_bytes",
    "loop_seconds",
    "prefill_text",
]

GIB = 1 << 30

DEFAULT_RESTORE_S_PER_TOKEN = 2.0e-5
"""The simulator's default restore cost (s per restored token)."""


def entry_bytes(max_entry_bytes: int | None, largest_snapshot_tokens: int, bytes_per_token: int) -> int:
    """Bytes one entry takes: the cap, else the largest snapshot (bytes).

    Args:
        max_entry_bytes: The per-entry cap (bytes), or None.
        largest_snapshot_tokens: The longest snapshot offered (tokens).
        bytes_per_token: KV bytes per token (bytes).
    """
    if max_entry_bytes is not None:
        return max_entry_bytes
    return largest_snapshot_tokens * bytes_per_token


def loop_seconds(
    *,
    requests: int,
    prompt_tokens: int,
    hit_requests: int,
    hit_tokens: int,
    prefill: PrefillModel,
    hit_base_s: float = 0.0,
    restore_s_per_token: float = DEFAULT_RESTORE_S_PER_TOKEN,
) -> float:
    """Prefill seconds of one loop at a capacity (see module docstring)."""
    cold = requests * prefill.a_s + prompt_tokens / prefill.rate_tokens_per_s
    return (
        cold
        - hit_requests * (prefill.a_s - hit_base_s)
        - hit_tokens / prefill.rate_tokens_per_s
        + hit_tokens * restore_s_per_token
    )


def add_sizing(
    rows: Sequence[dict],
    *,
    unit: str,
    requests: int,
    prompt_tokens: int,
    prefill: PrefillModel | None,
    entry_size: int | None,
    hit_base_s: float = 0.0,
    restore_s_per_token: float = DEFAULT_RESTORE_S_PER_TOKEN,
) -> None:
    """Add ``memory_gib`` (entries: ``capacity * entry_size``), ``loop_s`` and ``loop_s_saved`` to rows.

    ``loop_s_saved`` is the no-cache loop minus ``loop_s`` (s), so it equals the difference
    of the two loop figures shown; ``prefill_s_saved`` (the rows' ``hit_tokens / rate``)
    counts the prefill of cached tokens only, not the per-request base a hit skips nor the
    restore it pays (issue 29).
    """
    for r in rows:
        if unit == "entry" and entry_size is not None:
            r["memory_gib"] = r["capacity"] * entry_size / GIB
        if prefill is not None:
            r["loop_s"] = loop_seconds(
                requests=requests,
                prompt_tokens=prompt_tokens,
                hit_requests=r["hit_requests"],
                hit_tokens=r["hit_tokens"],
                prefill=prefill,
                hit_base_s=hit_base_s,
                restore_s_per_token=restore_s_per_token,
            )
            cold = loop_seconds(
                requests=requests, prompt_tokens=prompt_tokens, hit_requests=0, hit_tokens=0, prefill=prefill
            )
            r["loop_s_saved"] = cold - r["loop_s"]


def answer_line(rep: dict, today: int | None) -> str:
    """One sentence: the capacity that keeps the prefix, its memory, the loop at today's size.

    Args:
        rep: The simulate report (``recommended``, ``curve``, ``prefill_s_cold``).
        today: The capacity run today, or None.
    """
    rec = rep.get("recommended") or {}
    if not rec:
        return "no capacity reaches the target hit ratio"
    unit = "entries" if rep["unit"] == "entry" else rep["unit"] + "s"
    line = f"{rec['capacity']} {unit}"
    if rec.get("memory_gib") is not None:
        line += f" ({rec['memory_gib']:.3f} GiB)"
    line += f" reach {rec['share']:.0%} of the best {rec['metric']} hit ratio"
    if rec.get("loop_s") is not None:
        line += f"; a loop then costs {rec['loop_s']:.1f} s of prefill"
        if rep.get("prefill_s_cold") is not None:
            line += f" (no cache: {rep['prefill_s_cold']:.1f} s)"
    if today is not None:
        row = next((r for r in rep["curve"] if r["capacity"] == today), None)
        if row is not None and row.get("loop_s") is not None:
            line += f"; at today's {today} {unit} a loop costs {row['loop_s']:.1f} s"
            line += f" (hit ratio {100 * row['hit_ratio_requests']:.1f}% of requests)"
    return line + "."


def prefill_text(model: dict) -> str:
    """A prefill model (``PrefillModel.to_json()``) as readable text.

    ``{"a_s": 1.6288, "rate_tokens_per_s": 1362.78624, "r2": 0.9991, "source":
    "v.json"}`` -> ``"a 1.629 s + tokens / 1363 tok/s, from v.json, R^2 0.9991"``:
    ``a`` to 4 significant figures (s per request), the rate (tokens/s) to
    whole tokens from 1000 up, else 4 significant figures; ``source`` shown
    unless ``"flag"``, ``r2`` unless None.
    """
    a, rate = float(model["a_s"]), float(model["rate_tokens_per_s"])
    rate_s = f"{rate:.0f}" if rate >= 1000 else f"{rate:.4g}"
    text = f"a {a:.4g} s + tokens / {rate_s} tok/s"
    if model.get("source") not in (None, "flag"):
        text += f", from {model['source']}"
    if model.get("r2") is not None:
        text += f", R^2 {float(model['r2']):.4f}"
    return text
