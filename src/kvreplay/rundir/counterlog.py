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

When the backend names the series it maps (``kept``: vLLM, SGLang and the other
Prometheus profiles read only those at each boundary), counters.jsonl holds only
those; the others (histogram buckets, process and Python series: ~360 series, 40 KB
a read on vLLM) go to ``counters-raw.jsonl.gz`` (``names.COUNTERS_RAW``) twice a run:
the first read in full, and the run's last read's changes against it (``run_end``).
Each is one gzip member (RFC 1952; a file of several members is one stream to
``zcat``) holding one JSON line of the same shape as counters.jsonl's, written when
it is known, so a killed run keeps the first. ``read_counter_log`` splices them back
(the first member's series into the first line, the ``run_end`` line at the end), so
every reader sees one log whatever file the series were kept in (issue 42 item 8).

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

import gzip
import math
import zlib
from pathlib import Path
from typing import Any, Protocol

import orjson

from kvreplay.rundir.names import COUNTERS, COUNTERS_RAW
from kvreplay.safe_io import dumps_json, open_new

__all__ = [
    "AT_KINDS",
    "DEFAULT_CAP_BYTES",
    "WHOLE_RUN",
    "CounterLog",
    "CounterRead",
    "cache_violations",
    "flatten_raw",
    "raw_changes",
    "read_counter_log",
    "read_violations",
    "request_boundaries",
    "series_name",
]

WHOLE_RUN = "(whole run)"
"""``raw_changes``' key for the series kept only at the run's first and last reads (no phase name has parentheses)."""

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
        cap_bytes: Size cap (bytes), of counters.jsonl and its ``COUNTERS_RAW``
            side file together.
        kept: The sample names logged at every read (None: every series); the
            others go to ``path``'s sibling ``COUNTERS_RAW`` (module docstring).

    Attributes:
        violations: Every invariant break written, with ``phase`` and ``at``.
    """

    def __init__(self, path: Path, origin_ns: int, cap_bytes: int = DEFAULT_CAP_BYTES,
                 kept: frozenset[str] | None = None) -> None:
        self.path = path
        self.origin_ns = origin_ns
        self.cap_bytes = cap_bytes
        self.kept = kept
        self._f = open_new(path, append=True)  # unbuffered, never through a symlink; closed in close()
        self.size = path.stat().st_size
        self.raw_path = path.with_name(COUNTERS_RAW)
        self._last: dict[str, Any] | None = None  # the last read's series, as read
        self._logged: dict[str, Any] = {}  # the series as a reader of the file rebuilds them
        self._last_at: tuple[int, str] | None = None  # (t_ns, phase) of the last read
        self.truncated = False
        self.violations: list[dict[str, Any]] = []

    def _is_kept(self, key: str) -> bool:
        """Whether a series is logged at every read: all are without ``kept``; else its sample name is in it."""
        return self.kept is None or series_name(key) in self.kept

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
        raw_line: dict[str, Any] | None = None  # the first read of the series outside ``kept``
        if self._last is None:
            line["full"] = True
            self._logged = dict(cur)
            if self.kept is None:
                line["series"] = cur
            else:
                line["series"] = {k: v for k, v in cur.items() if self._is_kept(k)}
                others = {k: v for k, v in cur.items() if not self._is_kept(k)}
                if others:
                    raw_line = {**line, "series": others}
                    line["raw_in"] = COUNTERS_RAW
        else:
            self._diff_into(line, cur, only_kept=True)
        bad = cache_violations(self._last, cur)
        if bad:
            line["violations"] = bad
            self.violations += [{**v, "phase": phase, "at": at} for v in bad]
        self._last = cur
        self._last_at = (line["t_ns"], phase)
        self._emit(line)
        if raw_line is not None and not self.truncated:
            self._emit_raw(raw_line)

    def _diff_into(self, line: dict[str, Any], cur: dict[str, Any], *, only_kept: bool) -> None:
        """Put into ``line`` what changed and what vanished against the logged series, and log it."""
        logged = self._logged
        keep = self._is_kept if only_kept else (lambda _k: True)
        changed = {k: v for k, v in cur.items() if (k not in logged or logged[k] != v) and keep(k)}
        removed = [k for k in logged if k not in cur and keep(k)]
        if changed:
            line["changed"] = changed
            logged.update(changed)
        if removed:
            line["removed"] = removed
            for k in removed:
                del logged[k]

    def _emit(self, line: dict[str, Any]) -> None:
        data = dumps_json(line, indent=False) + b"\n"  # the output sink: series labels may echo a secret
        if self.size + len(data) > self.cap_bytes:
            self._truncate(line["t_ns"])
            return
        self._f.write(data)
        self.size += len(data)

    def _truncate(self, t_ns: int) -> None:
        """Write the one ``truncated`` line: the cap is reached, nothing more is written."""
        self.truncated = True
        data = orjson.dumps({"t_ns": t_ns, "truncated": True, "cap_bytes": self.cap_bytes}) + b"\n"
        self._f.write(data)
        self.size += len(data)

    def _emit_raw(self, line: dict[str, Any]) -> None:
        """Append one JSON line to ``COUNTERS_RAW`` as its own gzip member (redacted before it is compressed)."""
        data = gzip.compress(dumps_json(line, indent=False) + b"\n", compresslevel=6, mtime=0)
        if self.size + len(data) > self.cap_bytes:
            self._truncate(line["t_ns"])
            return
        with open_new(self.raw_path, append=True) as f:
            f.write(data)
        self.size += len(data)

    def close(self) -> None:
        """Write the ``run_end`` line (the series not kept at every read, as the last read left them), close.

        With ``kept``, the series outside it are logged twice in a run, both times in
        ``COUNTERS_RAW``: the first read in full, and here, with the last read's time and
        phase, only those that changed or vanished; a run whose last read left them as
        the first found them writes no such line (issue 42 item 8: a phase-end read of
        vLLM changes ~320 histogram series, 28 KB a read).
        """
        if self._f.closed:
            return
        if self.kept is not None and self._last is not None and self._last_at is not None and not self.truncated:
            line: dict[str, Any] = {"t_ns": self._last_at[0], "phase": self._last_at[1], "at": "run_end"}
            self._diff_into(line, self._last, only_kept=False)
            if "changed" in line or "removed" in line:
                self._emit_raw(line)
        self._f.close()


def series_name(key: str) -> str:
    """The sample name of a series key: ``name{labels}`` as printed, or ``/path/name{labels}`` flattened."""
    return key.split("{", 1)[0].rsplit("/", 1)[-1]


AT_KINDS = ("before", "monitor", "drain", "phase_end", "run_end")
"""The ``at`` values of counters.jsonl other than a request's position (an int): ``before`` (the
phase's opening read), ``monitor`` (a read while ``--abort-if`` / ``--abort-on-restart`` or the
identity watch runs, between any two requests), ``drain`` (the drain check's reads, before the
phase's opening read), ``phase_end`` (the phase's closing read; ``after`` in files written
before issue 27) and ``run_end`` (no read of its own: the series not kept at every read, as the
run's last read left them; ``CounterLog.close``). Monitor and drain reads fall between request
boundaries: a per-request delta skips them (``request_boundaries``)."""


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


def _json_lines(data: bytes) -> list[dict[str, Any]]:
    """The JSON objects of a JSON Lines text; a torn or non-JSON line is skipped."""
    out = []
    for raw in data.splitlines():
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def _gzip_members(data: bytes) -> list[bytes]:
    """The decompressed members of a gzip file (RFC 1952), in order, up to the first that is torn or not gzip."""
    out = []
    while data:
        d = zlib.decompressobj(wbits=31)
        try:
            body = d.decompress(data)
        except zlib.error:
            break
        if not d.eof:
            break  # torn: the run was killed while this member was written
        out.append(body)
        data = d.unused_data
    return out


def read_counter_log(path: Path) -> list[dict[str, Any]]:
    """counters.jsonl as dicts, with its ``COUNTERS_RAW`` side file spliced in; [] when absent.

    A torn or non-JSON line (or gzip member) is skipped. The side file's first read
    joins the first line's ``series`` and its ``run_end`` line comes last, so the
    result has the shape of a file written with every series in counters.jsonl
    (module docstring).
    """
    if not path.exists():
        return []
    out = _json_lines(path.read_bytes())
    side = path.with_name(COUNTERS_RAW)
    if not side.is_file() or not out:
        return out
    for ln in _json_lines(b"".join(_gzip_members(side.read_bytes()))):
        if ln.get("full") and out[0].get("full") and out[0].get("t_ns") == ln.get("t_ns"):
            out[0] = {**out[0], "series": {**(ln.get("series") or {}), **(out[0].get("series") or {})}}
        elif ln.get("at") == "run_end":
            out.append(ln)
    return out


def raw_changes(lines: list[dict[str, Any]]) -> dict[str, dict[str, tuple[Any, Any]]]:
    """Phase -> series -> ``(value at the phase's opening read, value at its last read)``.

    Only series that changed at a read of the phase after its opening read; a
    series that appeared mid-phase starts at None, one that vanished ends at None.
    The series logged only at the run's first and last reads (a ``run_end`` line) are
    under ``WHOLE_RUN``, from the first read to the last. Reading stops at a
    ``truncated`` line.

    Args:
        lines: counters.jsonl as dicts (``read_counter_log``).
    """
    state: dict[str, Any] = {}
    first: dict[str, Any] | None = None
    moved: dict[str, set[str]] = {}
    start: dict[str, dict[str, Any]] = {}
    end: dict[str, dict[str, Any]] = {}
    for ln in lines:
        if ln.get("truncated"):
            break
        if ln.get("full"):
            state = dict(ln.get("series") or {})
            if first is None:
                first = dict(state)
        else:
            state.update(ln.get("changed") or {})
            for k in ln.get("removed") or []:
                state.pop(k, None)
        ph = str(ln.get("phase", ""))
        if ln.get("at") == "drain":
            continue  # before the phase's opening read: neither its start nor its movement
        if ln.get("at") == "run_end":
            # the series read only at the run's first and last reads: their movement over the run
            ks = set(ln.get("changed") or {}) | set(ln.get("removed") or [])
            if ks and first is not None:
                start[WHOLE_RUN] = first
                moved[WHOLE_RUN] = ks
                end[WHOLE_RUN] = dict(state)
            continue
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
