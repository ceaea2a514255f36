"""Calibrate the simulator from a probe verdict (``--sim-from-verdict verdict.json``).

``kvreplay probe`` measures a real server; this turns its ``verdict.json`` into
simulator settings (``SimConfig`` fields), each with the reason it was chosen:

- **prefill fit**: ``prefill_fit.a_s`` -> ``prefill_base_s``, ``rate_tokens_per_s``
  -> ``prefill_tokens_per_s``; a probe of the simulator itself (``sim_time_scale``
  s) measured ``s x`` model seconds, which is undone (as ``simulate --prefill``).
- **restore cost**: the median over warm legs with cached tokens of
  ``(warm_ttft - (prompt - cached) / rate) / cached`` (s per token, floored at 0),
  the simulator's hit rule (``hit_prefill_base_s`` 0; docs/simulator.md "Warm
  TTFT"). No warm leg with cached tokens: unchanged, said so.
- **cache model**: a prompt-cache verdict (``bytes_per_token_kind`` =
  ``prompt_cache_entry``, or a ``halogen`` backend) gives ``entries``, with
  ``snapshots`` = ``entries_per_request`` (1 or 2), ``max_entry_bytes`` = the
  entry cap the probe found; any other gives ``radix``.
- **block size** (radix): the greatest common divisor of the cached token counts
  the probe saw (warm legs and eviction legs): a block cache credits whole blocks.
  A gcd under 2 is not a block size; the default stays, said so.
- **capacity**, from the eviction bisection (``min_flush_k`` foreign requests of
  ``foreign_tokens`` flush a ``flush_prefix_tokens`` prefix):
  entries: ``implied_entries[0]`` (``s x min_flush_k``; then ``s (k + 1) > N``
  flushes exactly from ``k = min_flush_k``);
  radix: the middle of the bracket, ``ceil((prefix + (min_flush_k - 1/2) x
  foreign) / block)`` blocks. No flushing k found: **unbounded**
  (``UNBOUNDED_ENTRIES`` / ``UNBOUNDED_BLOCKS``), said so.
- **bytes per token**: ``bytes_per_token`` rounded, where the probe measured it.

The calibration names its source (the verdict path and the sha256 of its bytes)
so that a run can keep it: ``kvreplay run --sim-from-verdict`` records
``Calibration.to_json()`` in plan.json (``run.sim_calibration``) and its report
header shows it; ``serve-sim --from-verdict`` serves it in ``/version``
(``calibration``), so a run against that server keeps it in its identity.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path
from typing import Any

from kvreplay.errors import ConfigError

__all__ = ["UNBOUNDED_BLOCKS", "UNBOUNDED_ENTRIES", "Calibration", "calibrate_from_verdict"]

UNBOUNDED_ENTRIES = 1_000_000
"""Entries capacity used when the probe found no flushing k ("unbounded")."""

UNBOUNDED_BLOCKS = 1 << 30
"""Radix capacity (blocks) used when the probe found no flushing k ("unbounded")."""


@dataclass(slots=True)
class Calibration:
    """Settings from one verdict.

    Attributes:
        changes: ``SimConfig`` field -> value.
        notes: One line per setting: what was set and from what.
        capacity: The capacity found (entries or blocks), or ``"unbounded"``.
        source: The verdict path.
        sha256: Hex sha256 of the verdict file's bytes.
    """

    changes: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    capacity: int | str | None = None
    source: str = ""
    sha256: str = ""

    def to_json(self) -> dict:
        """JSON form (recorded beside the run / printed by ``simulate``)."""
        return {
            "source": self.source,
            "sha256": self.sha256,
            "changes": dict(self.changes),
            "capacity": self.capacity,
            "notes": list(self.notes),
        }


def _entries_capacity(v: dict[str, Any], min_k: Any) -> tuple[int | None, str]:
    """Entries capacity from a verdict's eviction bisection, and the note saying how.

    ``s x min_flush_k`` entries (``s`` entries per request): the bracket's top when the
    eviction prefix is over the entry cap (``implied_entries`` = ``s (k - 1) + 1 .. s k``:
    the prefix is one entry), its bottom otherwise (``s k .. s k + s - 1``). An entries
    gauge reading inside the bracket (``max_entries_gauge_seen``, the cache full) is exact
    and wins. ``s`` unknown in the verdict: the eviction points' own stores per foreign
    request, when whole. None (unbounded) only when no flushing k was measured, or ``s``
    cannot be had; the note says which.
    """
    if not isinstance(min_k, int):
        return None, (f"capacity: unbounded ({UNBOUNDED_ENTRIES} entries): the bisection found no"
                      f" flushing k ({v.get('eviction_note') or 'no eviction legs'})")
    s = v.get("entries_per_request")
    src = "per request"
    if not isinstance(s, int) or s < 1:
        ev = (v.get("entries_per_request_evidence") or {}).get("from_eviction_points")
        s = int(ev) if isinstance(ev, (int, float)) and ev >= 1 and ev == int(ev) else None
        src = "per foreign request (the eviction points' stores)"
    if s is None:
        return None, (f"capacity: unbounded ({UNBOUNDED_ENTRIES} entries): min_flush_k {min_k} was measured"
                      " but entries per request is not known"
                      f" ({(v.get('entries_per_request_evidence') or {}).get('evidence') or 'no store counts'})")
    capped = bool(v.get("flush_prefix_capped"))
    lo, hi = (s * (min_k - 1) + 1, s * min_k) if capped else (s * min_k, s * min_k + s - 1)
    basis = f"{s} {src} x min_flush_k {min_k}" + (
        "; the eviction prefix is over the entry cap, so it is one entry" if capped else "")
    gauge = _num(v.get("max_entries_gauge_seen"))
    if gauge is not None and gauge == int(gauge) and lo <= gauge <= hi:
        return int(gauge), (f"capacity: {int(gauge)} entries (the entries gauge, full; inside {lo}..{hi}"
                            f" from {basis})")
    return s * min_k, f"capacity: {s * min_k} entries ({basis}; the bracket is {lo}..{hi})"


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def calibrate_from_verdict(path: str | Path) -> Calibration:
    """Read a probe ``verdict.json`` and derive simulator settings (see module docstring).

    Args:
        path: The verdict file.

    Returns:
        The calibration.

    Raises:
        ConfigError: unreadable file, not a probe verdict, a verdict cut short (``stopped``), or
            no usable prefill fit.
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
        v = json.loads(raw.decode("utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read probe verdict: {exc}", path=p) from exc
    if not isinstance(v, dict) or not str(v.get("format", "")).startswith("kvreplay-probe/"):
        raise ConfigError("not a kvreplay probe verdict (no format kvreplay-probe/N)", path=p, field="format")
    if isinstance(v.get("stopped"), dict):
        raise ConfigError(
            "the probe was cut short at stop_new_after (verdict 'stopped'): a partial verdict is no "
            "evidence; calibrate from a probe that ran to its end", path=p, field="stopped")
    cal = Calibration(source=str(p), sha256=hashlib.sha256(raw).hexdigest())
    ch, notes = cal.changes, cal.notes

    fit = v.get("prefill_fit") or {}
    a, rate = _num(fit.get("a_s")), _num(fit.get("rate_tokens_per_s"))
    if a is None or not rate or rate <= 0:
        raise ConfigError(
            "the verdict has no prefill fit with a positive rate", path=p, field="prefill_fit"
        )
    scale = _num(v.get("sim_time_scale")) or 1.0
    ch["prefill_base_s"] = max(0.0, a / scale)
    ch["prefill_tokens_per_s"] = rate * scale
    notes.append(
        f"prefill: a = {ch['prefill_base_s']:.6g} s, rate = {ch['prefill_tokens_per_s']:.6g} tokens/s"
        f" (prefill_fit, {fit.get('source', '?')})"
        + (f"; simulator time scale {scale:g} undone" if scale != 1.0 else "")
    )

    per_tok = []
    for w in v.get("warm") or []:
        c, n, t = _num(w.get("cached_tokens")), _num(w.get("prompt_tokens")), _num(w.get("warm_ttft_s"))
        if c and n is not None and t is not None:
            per_tok.append(max(0.0, (t / scale - (n - c) / ch["prefill_tokens_per_s"]) / c))
    if per_tok:
        per_tok.sort()
        mid = len(per_tok) // 2
        med = per_tok[mid] if len(per_tok) % 2 else (per_tok[mid - 1] + per_tok[mid]) / 2
        ch["restore_s_per_token"] = med
        ch["hit_prefill_base_s"] = 0.0
        notes.append(
            f"restore: {med:.6g} s per cached token (median of {len(per_tok)} warm legs:"
            " (warm TTFT - tail / rate) / cached)"
        )
    else:
        notes.append("restore: no warm leg with cached tokens; the default restore cost stays")

    bpt = _num(v.get("bytes_per_token"))
    entries_model = v.get("bytes_per_token_kind") == "prompt_cache_entry" or v.get("backend") == "halogen"
    if bpt and bpt > 0:
        ch["bytes_per_token"] = round(bpt)
        notes.append(f"bytes per token: {round(bpt)} ({v.get('bytes_per_token_method')})")
    min_k = v.get("min_flush_k")
    if entries_model:
        ch["cache"] = "entries"
        s = v.get("entries_per_request")
        if s in (1, 2):
            ch["snapshots"] = s
        if v.get("entry_cap_bytes"):
            ch["max_entry_bytes"] = int(v["entry_cap_bytes"])
            notes.append(f"entry cap: {int(v['entry_cap_bytes'])} bytes (legs on the cap)")
        entries, note = _entries_capacity(v, min_k)
        if entries is not None:
            ch["cache_entries"] = entries
            cal.capacity = entries
        else:
            ch["cache_entries"] = UNBOUNDED_ENTRIES
            cal.capacity = "unbounded"
        notes.append(note)
        return cal

    ch["cache"] = "radix"
    seen = [int(w["cached_tokens"]) for w in v.get("warm") or [] if _num(w.get("cached_tokens"))]
    seen += [
        int(pt["cached_second"])
        for pt in v.get("points") or []
        if _num(pt.get("cached_second"))
    ]
    seen += [
        int(pt["cached_first"]) for pt in v.get("points") or [] if _num(pt.get("cached_first"))
    ]
    g = reduce(math.gcd, seen, 0)
    block = g if g >= 2 else None
    if block is not None:
        ch["block_size"] = block
        notes.append(f"block size: {block} tokens (gcd of {len(seen)} cached token counts)")
    else:
        notes.append("block size: not found (cached token counts share no divisor >= 2); default stays")
    b = block or 16
    prefix = _num(v.get("flush_prefix_tokens"))
    foreign = _num((v.get("config") or {}).get("foreign_tokens"))
    if isinstance(min_k, int) and min_k >= 1 and prefix and foreign:
        blocks = math.ceil((prefix + (min_k - 0.5) * foreign) / b)
        ch["device_blocks"] = blocks
        cal.capacity = blocks
        notes.append(
            f"capacity: {blocks} blocks (middle of the bisection bracket: a {int(prefix)}-token prefix"
            f" survives {min_k - 1} and is flushed by {min_k} foreign requests of {int(foreign)} tokens)"
        )
    else:
        ch["device_blocks"] = UNBOUNDED_BLOCKS
        cal.capacity = "unbounded"
        notes.append(
            f"capacity: unbounded ({UNBOUNDED_BLOCKS} blocks): the bisection found no flushing k"
            f" ({v.get('eviction_note') or 'no eviction legs'})"
        )
    return cal
