"""Reports at any scale: records streamed once, plan.json kept compact, per-phase arrays.

``open_run(path)`` reads a run directory for the reports without holding its
records: summary.json, the HdrHistogram logs and a compact plan.json (each
phase's ``sequence`` reduced to its first entry per distinct body, with the full
length in ``sequence_length``), then ``scan(run)`` walks records.jsonl once, line
by line, and keeps only what the report draws:

- per phase, the position, TTFT (ms), usage cached tokens and the overlaid
  counter delta of each ok request as float arrays (8 bytes a value), the
  positions of failed requests, the record count;
- per phase at concurrency 1, the ``table_rows`` lowest positions' records for
  the HTML per-request table (the rest are one click away in records.jsonl);
- the first ``examples`` failed requests (the error list);
- the common counter names seen in per-request deltas, per phase.

Memory is O(records) in 8-byte floats plus O(table_rows) records, never
O(records) parsed dicts; drawing is O(phases + bins) (``report.plots`` bins the
arrays). A 200,000-record run reports in about 2 s of CPU in a process below
150 MB (``bench/bench_report.py``).

``RecordStream(path)`` is the re-iterable, streaming view of records.jsonl that
``diagnose`` receives in place of a list (each iteration reads the file again).
"""

from __future__ import annotations

import heapq
import math
import os
import re
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

__all__ = [
    "PhaseScan",
    "RecordStream",
    "RunScan",
    "compact_plan",
    "iter_records",
    "open_run",
    "scan",
]

TABLE_ROWS = 200
"""Rows of each per-request table in report.html (the lowest positions of the phase)."""
HEAD_ENTRIES = 200
"""Sequence entries a compact plan keeps per phase (the report's plan listing)."""
EXAMPLES = 10
"""Failed requests listed under "Errors by class"."""


def iter_records(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """records.jsonl one dict at a time (a torn or bad line is skipped; a missing file is empty).

    Reads line by line: memory holds one record at a time.
    """
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed in finally; a generator
    except FileNotFoundError:
        return
    try:
        for line in f:
            if not line.strip():
                continue
            try:
                rec = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(rec, dict):
                yield rec
    finally:
        f.close()


class RecordStream:
    """A re-iterable view of records.jsonl: each ``iter()`` streams the file again.

    Truthy (it stands where ``diagnose`` takes a list of records); ``len`` is not
    defined, so nothing sizes it by loading it.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter_records(self.path)

    def __bool__(self) -> bool:
        return True


_SEQ = re.compile(rb'"sequence"\s*:\s*\[')
_SHA = re.compile(rb'"body_sha256"\s*:\s*"([0-9A-Fa-f]*)"')
_POS = re.compile(rb'"position"\s*:\s*(-?\d+)')
_ENTRY = re.compile(rb"\{[^{}]*\}")


def compact_plan(data: bytes) -> dict[str, Any] | None:
    """plan.json parsed with each phase's ``sequence`` reduced to one entry per distinct body.

    A plan's sequence has one entry per planned request (200,000 entries are
    about 30 MB of dicts); the report needs only which bodies a phase sends (the
    replay rule of ``diagnose``), the first entries (the plan listing) and the
    count. Entries are flat objects (``position``, ``body_index``,
    ``body_sha256``, ``repetition``; ``kvreplay.plan``), so each ``sequence``
    array ends at the first ``]`` after it opens.

    Args:
        data: plan.json's bytes.

    Returns:
        The plan with ``sequence`` = the first entry of each distinct body in send
        order, ``sequence_length`` = the full entry count, ``sequence_head`` =
        the first ``HEAD_ENTRIES`` entries and ``sequence_positions: "range"``
        (positions are ``0 .. sequence_length - 1``, as ``kvreplay.plan`` writes
        them; a plan whose positions are not is returned whole); None when the
        bytes are not a JSON object.
    """
    try:
        return _compact_plan(data)
    except (orjson.JSONDecodeError, TypeError, ValueError):
        return None


_Head = tuple[list[dict[str, Any]], list[dict[str, Any]], int, bool]  # (uniq, head, n, in_range)


def _compact_plan(data: bytes) -> dict[str, Any] | None:
    heads: list[_Head] = []
    parts: list[bytes] = []
    pos = 0
    for m in _SEQ.finditer(data):
        end = data.find(b"]", m.end())
        if end < 0:
            return None
        span = data[m.end() : end]
        seen: set[bytes] = set()
        uniq: list[dict[str, Any]] = []
        head: list[dict[str, Any]] = []
        n = 0
        in_range = True
        for em in _ENTRY.finditer(span):
            raw = em.group(0)
            pm = _POS.search(raw)
            in_range = in_range and pm is not None and int(pm.group(1)) == n
            n += 1
            if len(head) < HEAD_ENTRIES:
                head.append(orjson.loads(raw))
            sm = _SHA.search(raw)
            key = sm.group(1) if sm else raw
            if key not in seen:
                seen.add(key)
                uniq.append(orjson.loads(raw))
        heads.append((uniq, head, n, in_range))
        parts.append(data[pos : m.end()])
        pos = end
    parts.append(data[pos:])
    return _assemble(parts, heads, lambda: data)


def compact_plan_file(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """``compact_plan`` of a plan.json file, read line by line where it is indented.

    kvreplay writes plan.json indented (``orjson.OPT_INDENT_2``): each sequence
    entry spans a few short lines, so the file is read one line at a time and
    only the lines outside ``sequence`` arrays, the first ``HEAD_ENTRIES``
    entries and the first entry of each distinct body are kept. A file whose
    sequence does not open on a line of its own (compact JSON) is read whole.

    Returns:
        As ``compact_plan``; None when the file is missing or not a JSON object.

    Raises:
        OSError: the file exists but cannot be read.
    """
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return None
    with f:
        first = f.readline()
        if not first.rstrip().endswith(b"{"):
            return compact_plan(first + f.read())
        parts: list[bytes] = [first]
        heads: list[_Head] = []
        inside = False
        entry: list[bytes] = []
        seen: set[bytes] = set()
        uniq: list[dict[str, Any]] = []
        head: list[dict[str, Any]] = []
        n, in_range = 0, True
        for line in f:
            if not inside:
                parts.append(line)
                st = line.rstrip()
                if st.endswith(b"[") and _SEQ.search(st):
                    inside, seen, uniq, head, n, in_range = True, set(), [], [], 0, True
                continue
            st = line.strip()
            if not entry and st.startswith(b"]"):
                heads.append((uniq, head, n, in_range))
                parts.append(line)
                inside = False
                continue
            entry.append(line)
            if st.startswith(b"}"):
                raw = b"".join(entry).rstrip().rstrip(b",")
                entry = []
                pm = _POS.search(raw)
                in_range = in_range and pm is not None and int(pm.group(1)) == n
                n += 1
                sm = _SHA.search(raw)
                key = sm.group(1) if sm else raw
                if len(head) < HEAD_ENTRIES:
                    head.append(orjson.loads(raw))
                if key not in seen:
                    seen.add(key)
                    uniq.append(orjson.loads(raw))
    if inside:
        return None
    return _assemble(parts, heads, lambda: Path(path).read_bytes())



def _assemble(parts: list[bytes], heads: list[_Head], whole: Callable[[], bytes]) -> dict[str, Any] | None:
    """The compact plan from the kept bytes ``parts`` and one ``(uniq, head, n, in_range)`` per sequence.

    Falls back to a full parse of ``whole()`` (the entire plan's bytes) when a
    "sequence" key stands elsewhere or positions are other than 0..n-1.

    Returns:
        The plan dict, or None when the kept bytes are not a JSON object.
    """
    try:
        plan = orjson.loads(b"".join(parts))
    except orjson.JSONDecodeError:
        return None
    if not isinstance(plan, dict):
        return None
    phases = [p for p in plan.get("phases") or [] if isinstance(p, dict) and "sequence" in p]
    if len(phases) != len(heads) or not all(h[3] for h in heads):
        # a "sequence" key elsewhere, or positions other than 0..n-1: the full parse
        full = orjson.loads(whole())
        return full if isinstance(full, dict) else None
    for ph, (uniq, head, n, _) in zip(phases, heads, strict=True):
        ph["sequence"] = uniq
        ph["sequence_head"] = head
        ph["sequence_length"] = n
        ph["sequence_positions"] = "range"
    return plan


def sequence_length(spec: dict[str, Any]) -> int:
    """Planned requests of a plan phase (compact or full plan)."""
    if "sequence_length" in spec:
        return int(spec["sequence_length"])
    return len(spec.get("sequence") or [])


def sequence_head(spec: dict[str, Any], n: int = 20) -> list[dict[str, Any]]:
    """The first ``n`` entries of a plan phase's sequence (compact or full plan)."""
    if "sequence_head" in spec:
        return list(spec["sequence_head"])[:n]
    return list(spec.get("sequence") or [])[:n]


def open_run(path: str | os.PathLike[str], *, write_rebuilt: bool = False) -> Any:
    """A run directory for the reports, records not loaded (``RunData`` with ``streamed`` set).

    Like ``report.load.load_run`` but ``record_list`` is empty, ``records`` is a
    ``RecordStream`` and plan.json is compact (``compact_plan``). A missing
    summary.json is rebuilt from the records streamed once.

    Raises:
        FileNotFoundError: as ``load_run``.
    """
    from kvreplay.report.load import load_run

    return load_run(Path(path), write_rebuilt=write_rebuilt, stream=True)


@dataclass(slots=True)
class PhaseScan:
    """What the report keeps of one phase's records.

    Attributes:
        n: Records of the phase.
        pos: Positions of ok requests with a first token.
        ttft_ms: Their TTFT (ms).
        cached: Their usage cached_tokens (NaN where unreported).
        restore: Their delta of the overlaid counter (NaN where absent or reset).
        failed_pos: Positions of sent requests that failed.
        rows: The records of the lowest ``table_rows`` positions (C1 phases only), sorted.
        counter_keys: Numeric per-request counter-delta names seen.
        restore_key: The counter overlaid on the churn picture (host restores,
            else device hits; ``sections.restore_key``), or None.
    """

    n: int = 0
    pos: array = field(default_factory=lambda: array("d"))
    ttft_ms: array = field(default_factory=lambda: array("d"))
    cached: array = field(default_factory=lambda: array("d"))
    restore: array = field(default_factory=lambda: array("d"))
    failed_pos: array = field(default_factory=lambda: array("d"))
    rows: list[dict[str, Any]] = field(default_factory=list)
    counter_keys: set[str] = field(default_factory=set)
    restore_key: str | None = None


@dataclass(slots=True)
class RunScan:
    """The one pass over records.jsonl (see the module docstring).

    Attributes:
        phases: Phase name -> ``PhaseScan``.
        examples: The first failed requests (records, at most ``EXAMPLES``).
        table_rows: Row limit of the per-request tables.
    """

    phases: dict[str, PhaseScan] = field(default_factory=dict)
    examples: list[dict[str, Any]] = field(default_factory=list)
    table_rows: int = TABLE_ROWS


def _num(v: Any) -> float:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    return math.nan


def scan(run: Any, *, table_rows: int = TABLE_ROWS, examples: int = EXAMPLES) -> RunScan:
    """Walk a run's records once (streamed, or its loaded ``record_list``).

    Args:
        run: A ``RunData`` (``load_run`` or ``open_run``).
        table_rows: Rows kept per C1 phase for the per-request table.
        examples: Failed requests kept for the error list.

    Returns:
        The ``RunScan``. The overlaid counter is the first of ``HOST_KEYS +
        DEVICE_KEYS`` (``report.diagnose``) seen in any per-request delta of the
        phase; its values are gathered for every candidate key in the same pass
        and the chosen one kept.
    """
    from kvreplay.report.diagnose import DEVICE_KEYS, HOST_KEYS

    cands = tuple(HOST_KEYS) + tuple(k for k in DEVICE_KEYS if k not in HOST_KEYS)
    c1 = {
        p["name"]
        for p in (run.summary.get("phases") or [])
        if isinstance(p, dict) and p.get("concurrency", 1) == 1
    }
    out = RunScan(table_rows=table_rows)
    per_key: dict[str, dict[str, array]] = {}
    heaps: dict[str, list[tuple[float, int, dict[str, Any]]]] = {}
    seen_keys: dict[str, set[str]] = {}
    source = run.record_list if not getattr(run, "streamed", False) else iter_records(
        run.path / "records.jsonl"
    )
    for i, r in enumerate(source):
        name = r.get("phase")
        if not isinstance(name, str):
            continue
        ps = out.phases.get(name)
        if ps is None:
            ps = out.phases[name] = PhaseScan()
            per_key[name] = {k: array("d") for k in cands}
            seen_keys[name] = set()
        ps.n += 1
        sent = r.get("sent", True)
        status = r.get("status")
        d = r.get("counter_delta")
        if isinstance(d, dict):
            for k, v in d.items():
                if k not in ps.counter_keys and isinstance(v, (int, float)) and not isinstance(v, bool):
                    ps.counter_keys.add(k)
            seen_keys[name].update(k for k in cands if k in d)
        else:
            d = None
        position = _num(r.get("position"))
        if sent and status != "ok":
            ps.failed_pos.append(position)
            if len(out.examples) < examples:
                out.examples.append(r)
        if status == "ok" and r.get("ttft_ns") is not None:
            ps.pos.append(position)
            ps.ttft_ms.append(_num(r.get("ttft_ns")) / 1e6)
            ps.cached.append(_num((r.get("usage") or {}).get("cached_tokens")))
            pk = per_key[name]
            reset = d is not None and d.get("reset")
            for k in cands:
                pk[k].append(math.nan if d is None or reset else _num(d.get(k)))
        if name in c1:
            h = heaps.setdefault(name, [])
            item = (-position if not math.isnan(position) else -math.inf, -i, r)
            if len(h) < table_rows:
                heapq.heappush(h, item)
            elif item > h[0]:
                heapq.heapreplace(h, item)
    for name, ps in out.phases.items():
        ps.restore_key = next((k for k in cands if k in seen_keys[name]), None)
        if ps.restore_key is not None:
            ps.restore = per_key[name][ps.restore_key]
        h = heaps.get(name) or []
        ps.rows = [r for _, _, r in sorted(h, key=lambda t: (-t[0], -t[1]))]
    return out
