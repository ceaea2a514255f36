"""``counters.jsonl``: every raw counter series the runner read, kept in the run directory.

kvreplay maps a server's series onto a fixed set of common names; a
server-specific series (a host tier's ``host_compactions_total``, refused
stores, row/page capacity) has no common name, and without this file it would
be lost. The file holds one JSON line per counter read the runner makes (phase
start and end, after each request at C1, each monitor read)::

    {"t_ns": 1234, "phase": "replay", "at": "before", "full": true,
     "series": {NAME: VALUE, ...}}                            first line: every series
    {"t_ns": 5678, "phase": "replay", "at": 3,
     "changed": {NAME: VALUE, ...}, "removed": [NAME, ...]}  later lines: changes only
    {"t_ns": ..., "phase": ..., "at": ..., "violations": [...]}   with a cache-invariant break
    {"t_ns": ..., "truncated": true, "cap_bytes": N}          last line once the cap is reached

``t_ns`` is the read time relative to the run's origin (as records' ``t_*_ns``);
``at`` is ``before`` / ``after`` (the phase's opening and closing reads), the
position of the request just finished (C1 per-request reads), or ``monitor``.
Series names are the server's own (Prometheus series with labels verbatim;
halogen ``/cache`` keys, with ``/metrics/NAME`` for its Prometheus side); values
are the numbers (or lists) the server printed. Nothing is written once the file
reaches ``cap_bytes`` (default ``DEFAULT_CAP_BYTES``, 64 MiB) except one final
``truncated`` line, so a long run cannot fill the disk.

Cache invariants (halogen-style ``/cache``, checked at each read; a break is
stored on that line under ``violations`` with the numbers):

* strict LRU: ``stores - evicted = entries`` as changes between consecutive
  reads (``Δstores - Δevicted = Δentries``), so history before the run does not
  count; a read whose ``entries`` is 0 (a flush) starts a new baseline;
* ``hit_rate = hits / (hits + misses)`` within 1e-6 (halogen prints 6 decimals),
  when ``hits + misses > 0``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import orjson

from kvreplay.runner.backend import COMMON_UNITS, Snapshot
from kvreplay.safe_io import dumps_json

__all__ = [
    "DEFAULT_CAP_BYTES",
    "CounterLog",
    "cache_violations",
    "counter_units",
    "flatten_raw",
    "read_counter_log",
]

DEFAULT_CAP_BYTES = 64 * 1024 * 1024
"""Size cap of counters.jsonl (bytes)."""
HIT_RATE_TOL = 1e-6


def flatten_raw(raw: dict[str, Any]) -> dict[str, Any]:
    """A snapshot's ``raw`` with nested objects flattened (``/metrics`` -> ``/metrics/NAME``)."""
    out: dict[str, Any] = {}
    for k, v in raw.items():
        if isinstance(v, dict):
            for k2, v2 in flatten_raw(v).items():
                out[f"{k}/{k2}"] = v2
        else:
            out[str(k)] = v
    return out


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def cache_violations(prev: dict[str, Any] | None, cur: dict[str, Any]) -> list[dict[str, Any]]:
    """Invariant breaks of one halogen-style ``/cache`` read (module docstring).

    Args:
        prev: The previous read's flat series (None for the first read).
        cur: This read's flat series.

    Returns:
        ``[{"identity": str, "numbers": {name: value}}]``; empty when it holds or
        the keys are not there.
    """
    out: list[dict[str, Any]] = []
    keys = ("stores", "evicted", "entries")
    now = [_num(cur.get(k)) for k in keys]
    if prev is not None and all(x is not None for x in now) and now[2] != 0:
        was = [_num(prev.get(k)) for k in keys]
        if all(x is not None for x in was):
            ds, de, dn = (now[i] - was[i] for i in range(3))  # type: ignore[operator]
            if ds - de != dn:
                out.append({
                    "identity": "stores - evicted = entries",
                    "numbers": {"stores_before": was[0], "stores": now[0],
                                "evicted_before": was[1], "evicted": now[1],
                                "entries_before": was[2], "entries": now[2],
                                "gap": (ds - de) - dn},
                })
    hits, misses, rate = (_num(cur.get(k)) for k in ("hits", "misses", "hit_rate"))
    if hits is not None and misses is not None and rate is not None and hits + misses > 0:
        want = hits / (hits + misses)
        if abs(rate - want) > HIT_RATE_TOL:
            out.append({
                "identity": "hit_rate = hits / (hits + misses)",
                "numbers": {"hits": hits, "misses": misses, "hit_rate": rate,
                            "expected": round(want, 6)},
            })
    return out


class CounterLog:
    """Writes counters.jsonl (format in the module docstring).

    Args:
        path: The file (created or appended to).
        origin_ns: The run clock's origin (ns); ``t_ns`` is relative to it.
        cap_bytes: Size cap (bytes).

    Attributes:
        violations: Every invariant break written, with ``phase`` and ``at``.
    """

    def __init__(self, path: Path, origin_ns: int, cap_bytes: int = DEFAULT_CAP_BYTES) -> None:
        self.path = path
        self.origin_ns = origin_ns
        self.cap_bytes = cap_bytes
        self._f = open(path, "ab", buffering=0)  # noqa: SIM115 - closed in close()
        self.size = path.stat().st_size
        self._last: dict[str, Any] | None = None
        self.truncated = False
        self.violations: list[dict[str, Any]] = []

    def write(self, snap: Snapshot, phase: str, at: str | int) -> None:
        """Log one read: in full the first time, then only what changed."""
        if self.truncated or self._f.closed:
            return
        cur = flatten_raw(snap.raw)
        line: dict[str, Any] = {"t_ns": snap.taken_ns - self.origin_ns, "phase": phase, "at": at}
        if self._last is None:
            line["full"] = True
            line["series"] = cur
        else:
            last = self._last
            changed = {k: v for k, v in cur.items() if k not in last or last[k] != v}
            removed = [k for k in last if k not in cur]
            if changed:
                line["changed"] = changed
            if removed:
                line["removed"] = removed
        bad = cache_violations(self._last, cur)
        if bad:
            line["violations"] = bad
            self.violations += [{**v, "phase": phase, "at": at} for v in bad]
        self._last = cur
        data = dumps_json(line, indent=False) + b"\n"  # the output sink: series labels may echo a secret
        if self.size + len(data) > self.cap_bytes:
            self.truncated = True
            data = orjson.dumps({"t_ns": line["t_ns"], "truncated": True,
                                 "cap_bytes": self.cap_bytes}) + b"\n"
        self._f.write(data)
        self.size += len(data)

    def close(self) -> None:
        """Close the file."""
        self._f.close()


def read_counter_log(path: Path) -> list[dict[str, Any]]:
    """counters.jsonl as dicts; a torn or non-JSON line is skipped; [] when absent."""
    if not path.exists():
        return []
    out = []
    for raw in path.read_bytes().splitlines():
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def counter_units(units: dict[str, str] | None, names: set[str]) -> dict[str, str]:
    """The unit of each common name in ``names``.

    Fixed ones from ``COMMON_UNITS``, the others as the backend's profile declares
    them (absent when it declares none).
    """
    src = dict(units or {})
    out = {}
    for n in sorted(names):
        u = COMMON_UNITS.get(n) or src.get(n)
        if u:
            out[n] = u
    return out
