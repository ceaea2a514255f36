"""``counters.jsonl``: every raw counter series the runner read, kept in the run directory.

kvreplay maps a server's series onto a fixed set of common names; a
server-specific series (a host tier's ``host_compactions_total``, refused
stores, row/page capacity) has no common name, and without this file it would
be lost. The format (one JSON line per counter read: ``t_ns``, ``phase``,
``at``; the first line ``full`` with every ``series``, later lines only
``changed`` and ``removed``; ``violations``; the final ``truncated`` line) is
documented once, in docs/summary-schema.md ("counters.jsonl"). This module is
its one writer (``CounterLog``) and its one reader (``read_counter_log``,
``raw_changes``, ``read_violations``).

Nothing is written once the file reaches ``cap_bytes`` (default
``DEFAULT_CAP_BYTES``, 64 MiB) except one final ``truncated`` line, so a long
run cannot fill the disk.

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
from typing import Any, Protocol

import orjson

from kvreplay.rundir.names import COUNTERS
from kvreplay.safe_io import dumps_json, open_new

__all__ = [
    "AT_KINDS",
    "DEFAULT_CAP_BYTES",
    "CounterLog",
    "CounterRead",
    "cache_violations",
    "flatten_raw",
    "raw_changes",
    "read_counter_log",
    "read_violations",
    "request_boundaries",
]

DEFAULT_CAP_BYTES = 64 * 1024 * 1024
"""Size cap of counters.jsonl (bytes)."""
HIT_RATE_TOL = 1e-6


def flatten_raw(raw: dict[str, Any]) -> dict[str, Any]:
    """A snapshot's ``raw`` with nested objects flattened (``/metrics`` -> ``/metrics/NAME``).

    A fleet's ``{replica URL: {"/metrics": {...}}}`` reads ``http://HOST:PORT/metrics/NAME``
    (one slash: a key that starts with ``/`` is joined as a path, never ``...//metrics``).
    A flat ``raw`` with string keys is returned as it is (not copied: 50k series cost ~10 ms to copy).
    """
    if not any(isinstance(v, dict) for v in raw.values()) and all(isinstance(k, str) for k in raw):
        return raw
    out: dict[str, Any] = {}
    for k, v in raw.items():
        if isinstance(v, dict):
            for k2, v2 in flatten_raw(v).items():
                out[f"{str(k).rstrip('/')}{k2}" if k2.startswith("/") else f"{k}/{k2}"] = v2
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


class CounterRead(Protocol):
    """What ``CounterLog.write`` takes of a counter read (``kvreplay.runner.backend.Snapshot`` has it)."""

    @property
    def taken_ns(self) -> int:
        """``clock.now_ns()`` when the read's response arrived (ns)."""

    @property
    def raw(self) -> dict[str, Any]:
        """The server's series verbatim (name -> value; nested objects are flattened)."""


class CounterLog:
    """Writes counters.jsonl (format: docs/summary-schema.md, "counters.jsonl").

    Each line is written unbuffered (one ``write``), registered secrets
    (``kvreplay.redaction``) replaced by the marker.

    Args:
        path: The file (created or appended to, never through a symlink):
            ``run_dir / names.COUNTERS``.
        origin_ns: The run clock's origin (ns); ``t_ns`` is relative to it.
        cap_bytes: Size cap (bytes).

    Attributes:
        violations: Every invariant break written, with ``phase`` and ``at``.
    """

    def __init__(self, path: Path, origin_ns: int, cap_bytes: int = DEFAULT_CAP_BYTES) -> None:
        self.path = path
        self.origin_ns = origin_ns
        self.cap_bytes = cap_bytes
        self._f = open_new(path, append=True)  # unbuffered, never through a symlink; closed in close()
        self.size = path.stat().st_size
        self._last: dict[str, Any] | None = None
        self.truncated = False
        self.violations: list[dict[str, Any]] = []

    def write(self, snap: CounterRead, phase: str, at: str | int) -> None:
        """Log one read: in full the first time, then only what changed.

        Args:
            snap: The read (``taken_ns``, ``raw``).
            phase: The phase it belongs to.
            at: Which kind of read (``AT_KINDS``): ``before`` / ``phase_end`` (the
                phase's opening and closing reads), the position of the request just
                finished (C1 per-request reads), ``monitor`` (in-phase watch) or
                ``drain`` (the drain check before the phase).
        """
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


AT_KINDS = ("before", "monitor", "drain", "phase_end")
"""The ``at`` values of counters.jsonl other than a request's position (an int): ``before`` (the
phase's opening read), ``monitor`` (a read while ``--abort-if`` / ``--abort-on-restart`` or the
identity watch runs, between any two requests), ``drain`` (the drain check's reads, before the
phase's opening read) and ``phase_end`` (the phase's closing read; ``after`` in files written
before issue 27). Monitor and drain reads fall between request boundaries: a per-request delta
skips them (``request_boundaries``)."""


def request_boundaries(lines: list[dict[str, Any]]) -> list[tuple[str, str | int, dict[str, Any]]]:
    """The reads a per-request delta is taken between, with the series as they stood at each.

    Every line is applied (the log stores changes), but only the phase's opening read
    (``before``) and the per-request reads (``at`` = the position of the request just
    finished) are returned: monitor and drain reads are not request boundaries, and two
    consecutive lines are therefore not one request's before and after. The delta of the
    request at position ``p`` is its line's series minus the previous boundary's of the
    same phase. Reading stops at a ``truncated`` line.

    Args:
        lines: counters.jsonl as dicts (``read_counter_log``).

    Returns:
        ``[(phase, at, series)]`` in file order (``series``: name -> value, a copy).
    """
    state: dict[str, Any] = {}
    out: list[tuple[str, str | int, dict[str, Any]]] = []
    for ln in lines:
        if ln.get("truncated"):
            break
        if ln.get("full"):
            state = dict(ln.get("series") or {})
        else:
            state.update(ln.get("changed") or {})
            for k in ln.get("removed") or []:
                state.pop(k, None)
        at = ln.get("at")
        if at == "before" or (isinstance(at, int) and not isinstance(at, bool)):
            out.append((str(ln.get("phase", "")), at, dict(state)))
    return out


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


def raw_changes(lines: list[dict[str, Any]]) -> dict[str, dict[str, tuple[Any, Any]]]:
    """Phase -> series -> ``(value at the phase's opening read, value at its last read)``.

    Only series that changed at a read of the phase after its opening read; a
    series that appeared mid-phase starts at None, one that vanished ends at None.
    Reading stops at a ``truncated`` line.

    Args:
        lines: counters.jsonl as dicts (``read_counter_log``).
    """
    state: dict[str, Any] = {}
    moved: dict[str, set[str]] = {}
    start: dict[str, dict[str, Any]] = {}
    end: dict[str, dict[str, Any]] = {}
    for ln in lines:
        if ln.get("truncated"):
            break
        if ln.get("full"):
            state = dict(ln.get("series") or {})
        else:
            state.update(ln.get("changed") or {})
            for k in ln.get("removed") or []:
                state.pop(k, None)
        ph = str(ln.get("phase", ""))
        if ln.get("at") == "drain":
            continue  # before the phase's opening read: neither its start nor its movement
        if ph not in start:
            start[ph] = dict(state)
            moved[ph] = set()
        else:
            moved[ph] |= set(ln.get("changed") or {}) | set(ln.get("removed") or [])
        end[ph] = state if ln is lines[-1] else dict(state)
    return {
        ph: {k: (start[ph].get(k), end[ph].get(k)) for k in sorted(ks)} for ph, ks in moved.items()
    }


def read_violations(run_dir: Path) -> list[dict[str, Any]]:
    """Cache-invariant breaks stored in a run directory's counters.jsonl, each with ``phase`` and ``at``."""
    out = []
    for ln in read_counter_log(run_dir / COUNTERS):
        for v in ln.get("violations") or []:
            out.append({**v, "phase": ln.get("phase"), "at": ln.get("at")})
    return out
