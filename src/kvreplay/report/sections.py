"""The report's content as data, shared by the Markdown and HTML renderers.

Each table is a ``Table`` of ``Cell`` rows (``kvreplay.report.cells``), so both
outputs label every figure the same way. Plots are drawn only from measured
data: an invalid or unrun phase gets a figure placeholder with its status.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvreplay.evidence.vocab import COUNTER_NAMES, DEVICE_KEYS, GAUGE_NAMES, HOST_KEYS, LOAD_GAUGES
from kvreplay.report.cells import (
    Cell,
    absent,
    counter_cell,
    deferred,
    failed,
    fmt,
    latency_cell,
    measured,
    phase_gate,
    phases_in_order,
    record_cells,
    tokens_cell,
)
from kvreplay.report.stream import RunScan, scan
from kvreplay.report.units import sim_time_scale, unit_of
from kvreplay.rundir import RunData

__all__ = [
    "COUNTER_ORDER",
    "Table",
    "counter_table",
    "drain_table",
    "error_table",
    "identity_table",
    "phase_name",
    "phase_table",
    "request_tables",
]

COUNTER_ORDER = COUNTER_NAMES + tuple(g for g in GAUGE_NAMES if g not in LOAD_GAUGES)
"""Column order of counter tables: the common names of ``evidence.vocab``, counters then gauges."""


@dataclass(slots=True)
class Table:
    """A table: ``rows`` of (row header, cells); every cell carries a status.

    Attributes:
        key: Stable id (``data-table`` in HTML).
        columns: Column headers after the row header.
        rows: ``(row header, cells)`` with ``len(cells) == len(columns)``.
        corner: Header of the row-header column.
        total: Rows the full table would have when ``rows`` holds only the
            first of them (per-request tables); None when ``rows`` is complete.
    """

    key: str
    columns: list[str]
    rows: list[tuple[str, list[Cell]]] = field(default_factory=list)
    corner: str = "phase"
    total: int | None = None


FIRST_COLUMN = "as in the row's first column"


def one_reason(cells: list[Cell], gate: Cell | None) -> list[Cell]:
    """A row with the phase's reason written once: in its first cell that carries it.

    Later cells whose reason starts with the phase's own (``phase_gate``: not
    run, invalid, all failed) keep their status and say ``as in the row's first
    column`` plus anything of their own (an invalid phase's recorded count).
    """
    if gate is None or not gate.reason:
        return cells
    out, seen = [], False
    for c in cells:
        if c.status == gate.status and c.reason and c.reason.startswith(gate.reason):
            if seen:
                rest = c.reason[len(gate.reason):].lstrip("; ")
                c = Cell(c.status, c.text, FIRST_COLUMN + (f"; {rest}" if rest else ""), c.note)
            seen = True
        out.append(c)
    return out


def phase_name(ph: dict[str, Any] | str) -> str:
    """``name (Cn)`` for a summary phase, the bare name for an unrun plan phase."""
    if isinstance(ph, str):
        return ph
    return f"{ph['name']} (C{ph.get('concurrency', 1)})"


def _count_cell(ph: dict[str, Any] | str, summary: dict[str, Any], text: str) -> Cell:
    """A request count: measured; deferred when the phase did not run; failed in an invalid phase.

    In an invalid phase the count is still shown, in the reason, never as a measured figure.
    """
    if isinstance(ph, str) or ph.get("deferred") or ph.get("sent", 0) == 0:
        return phase_gate(ph, summary) or deferred("not run")
    if not ph.get("valid", True):
        gate = phase_gate(ph, summary)
        return failed(f"{gate.reason if gate else 'invalid phase'}; recorded {text}")
    return measured(text)


def phase_table(run: RunData) -> Table:
    """Per-phase figures: counts, TTFT/ITL/TPOT/E2E percentiles (ms), cached/prompt tokens.

    Against the simulator with a time scale (``report.units.sim_time_scale``)
    the latencies are in model ms (measured / scale) and the headers say so.
    """
    s = run.summary
    scale = sim_time_scale(run.plan, s)
    unit = "model ms" if scale else "ms"
    t = Table(
        "phases",
        [
            "ok/planned (requests)",
            "failed (requests)",
            *(
                f"{m} {q} ({unit})"
                for m, q in (("TTFT", "p50"), ("TTFT", "p90"), ("TTFT", "p99"), ("ITL", "p50"),
                             ("TPOT", "p50"), ("E2E", "p50"))
            ),
            "cached/prompt (tokens)",
        ],
    )
    for ph in phases_in_order(s, run.plan):
        if isinstance(ph, str):
            gate = deferred(f"not run: {(s.get('aborted') or {}).get('reason', 'run ended')}")
            t.rows.append((ph, one_reason([gate] * len(t.columns), gate)))
            continue
        nfail = sum((ph.get("failed") or {}).values())
        cells = [
            _count_cell(ph, s, f"{ph['ok']}/{ph['planned']}"),
            _count_cell(ph, s, str(nfail)),
            latency_cell(ph, s, "ttft", "p50", scale=scale),
            latency_cell(ph, s, "ttft", "p90", scale=scale),
            latency_cell(ph, s, "ttft", "p99", scale=scale),
            latency_cell(ph, s, "itl", "p50", scale=scale),
            latency_cell(ph, s, "tpot", "p50", scale=scale),
            latency_cell(ph, s, "e2e", "p50", scale=scale),
            tokens_cell(ph, s),
        ]
        t.rows.append((phase_name(ph), one_reason(cells, phase_gate(ph, s))))
    return t


def _counter_keys(deltas: list[dict[str, Any]]) -> list[str]:
    """Numeric keys present, in ``COUNTER_ORDER``; load gauges are left to the drain table."""
    present = set()
    for d in deltas:
        present |= {
            k
            for k, v in d.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in LOAD_GAUGES
        }
        present |= {k for k in d.get("invalid") or {} if k not in LOAD_GAUGES}
    keys = [k for k in COUNTER_ORDER if k in present]
    return keys + sorted(present - set(keys))


def bytes_per_entry_cell(ph: dict[str, Any] | str, summary: dict[str, Any]) -> Cell:
    """Bytes per held entry at the phase end: the ``bytes`` gauge / the ``entries`` gauge.

    Both are gauges (``evidence.vocab.GAUGE_NAMES``: the phase's ``counter_delta``
    holds their value at the phase end), as halogen's ``GET /cache`` reports them;
    an entry cap shows as this figure sitting on the cap (``max_entry_bytes``).
    Shown with one decimal when the division is not exact.
    """
    cells = [counter_cell(ph, summary, k) for k in ("bytes", "entries")]
    for c in cells:
        if c.status != "measured":
            return c
    assert isinstance(ph, dict)
    d = ph["counter_delta"]
    if not d["entries"]:
        return absent("no entries held at the phase end")
    return measured(fmt(d["bytes"] / d["entries"]), cells[0].note)


def counter_table(run: RunData) -> Table:
    """Native counter deltas per phase (gauges: value at the phase end).

    With both ``entries`` and ``bytes`` (a prompt cache's ``/cache``), a last
    column gives bytes per entry at the phase end (``bytes_per_entry_cell``).
    """
    s = run.summary
    phases = phases_in_order(s, run.plan)
    keys = _counter_keys([p.get("counter_delta") or {} for p in phases if isinstance(p, dict)])
    per_entry = "entries" in keys and "bytes" in keys
    t = Table(
        "counters",
        [f"Δ {k} ({unit_of(k, s)})" for k in keys] + (["bytes per entry (bytes)"] if per_entry else [])
        or ["counters"],
    )
    for ph in phases:
        if keys:
            cells = [counter_cell(ph, s, k) for k in keys]
            if per_entry:
                cells.append(bytes_per_entry_cell(ph, s))
        else:
            cells = [
                phase_gate(ph, s) or failed("no counters (backend none or counter read failed)")
            ]
        t.rows.append((phase_name(ph), one_reason(cells, phase_gate(ph, s))))
    return t


def restore_key(records: list[dict[str, Any]]) -> str | None:
    """The per-request counter to overlay on the churn picture: host restores, else device hits."""
    for k in HOST_KEYS + DEVICE_KEYS:
        if any(k in (r.get("counter_delta") or {}) for r in records):
            return k
    return None


def request_tables(run: RunData, sc: RunScan | None = None) -> list[Table]:
    """Per-request figures for phases with per-request counter attribution (C1).

    Every common counter the phase's deltas carry is a column (host tier
    included), in ``COUNTER_ORDER``; gauges are left out (they are levels, not
    deltas). Each table holds the ``sc.table_rows`` lowest positions of its
    phase; ``Table.total`` says how many records the phase has (all of them are
    in records.jsonl).

    Args:
        run: The loaded run.
        sc: The pass over the records (``report.stream.scan``); made here when None.
    """
    if sc is None:
        sc = scan(run)
    out = []
    for ph in phases_in_order(run.summary, run.plan):
        if isinstance(ph, str) or ph.get("concurrency", 1) != 1:
            continue
        ps = sc.phases.get(ph["name"])
        if ps is None or not ps.rows:
            continue
        keys = [k for k in _counter_keys([dict.fromkeys(ps.counter_keys, 0)])
                if k not in GAUGE_NAMES]
        t = Table(
            f"requests:{ph['name']}",
            ["status", "TTFT (ms)", "E2E (ms)", "prompt (tokens)", "cached (tokens)"]
            + [f"Δ {k} ({unit_of(k, run.summary)})" for k in keys],
            corner="position · body",
        )
        t.total = ps.n
        invalid = phase_gate(ph, run.summary)
        for r in ps.rows:
            head = (
                f"{r.get('position')} · #{r.get('body_index')} {str(r.get('body_sha256', ''))[:12]}"
            )
            cells = record_cells(r, keys)
            if invalid is not None and invalid.status == "failed" and r.get("sent", True):
                # The phase's reason once, in the status cell.
                cells = one_reason([invalid] * len(cells), invalid)
            t.rows.append((head, cells))
        out.append(t)
    return out


def drain_table(run: RunData) -> Table:
    """Drain check before each phase: passed, failed (why), deferred (not requested or not run)."""
    s = run.summary
    specs = {p["name"]: p for p in (run.plan or {}).get("phases") or []}
    t = Table("drain", ["drain before the phase (waited s)"])
    for ph in phases_in_order(s, run.plan):
        name = ph if isinstance(ph, str) else ph["name"]
        dr = None if isinstance(ph, str) else ph.get("drain")
        if dr:
            if dr.get("passed"):
                cell = measured(f"passed after {dr.get('waited_s')} s")
            else:
                cell = failed(f"did not pass after {dr.get('waited_s')} s: {dr.get('reason')}")
        elif specs.get(name, {}).get("drain"):
            cell = phase_gate(ph, s) or failed("drain requested but not checked (no counters)")
        else:
            cell = (
                deferred("no drain check: not requested in the plan")
                if not isinstance(ph, str)
                else deferred("not run")
            )
        t.rows.append((phase_name(ph), [cell]))
    return t


def _flatten(d: Any, prefix: str = "") -> dict[str, str]:
    """Nested identity fields as ``a.b`` -> text (lists joined with ``, ``)."""
    out: dict[str, str] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, dict) and v:
                out.update(_flatten(v, key))
            elif isinstance(v, (list, tuple)):
                out[key] = ", ".join(str(x) for x in v)
            else:
                out[key] = str(v)
    return out


def identity_table(run: RunData) -> Table:
    """Server identity before and after the run as a key/value table; a changed field is failed (drift).

    Nested fields are flattened to one row each (``version.build``), so no row
    holds a whole object on one line.
    """
    ident = run.summary.get("identity") or {}
    before, after = ident.get("before"), ident.get("after")
    t = Table("identity", ["before", "after"], corner="field")
    if not before and not after:
        why = (
            "summary rebuilt from records: identity not kept"
            if run.summary.get("rebuilt_from_records")
            else "no backend identity (backend none or identity read failed)"
        )
        t.rows.append(("identity", [failed(why), failed(why)]))
        return t
    before, after = _flatten(before or {}), _flatten(after or {})
    for k in sorted(set(before) | set(after)):
        b = measured(before[k]) if k in before else failed("not read")
        if k not in after:
            a = failed("not read")
        elif k in before and after[k] != before[k]:
            a = failed(f"changed to {after[k]} (identity drift)")
        else:
            a = measured(after[k])
        t.rows.append((k, [b, a]))
    return t


def error_table(run: RunData) -> Table:
    """Failed requests per phase by class (connect, timeout, http, stream_error, cut, ...)."""
    s = run.summary
    phases = phases_in_order(s, run.plan)
    classes = sorted({c for p in phases if isinstance(p, dict) for c in (p.get("failed") or {})})
    t = Table("errors", [f"{c} (requests)" for c in classes] or ["failed (requests)"])
    for ph in phases:
        if isinstance(ph, str) or ph.get("deferred") or ph.get("sent", 0) == 0:
            gate = phase_gate(ph, s) or deferred("not run")
            t.rows.append((phase_name(ph), one_reason([gate] * len(t.columns), gate)))
            continue
        f = ph.get("failed") or {}
        cells = [_count_cell(ph, s, str(f.get(c, 0))) for c in classes] or [_count_cell(ph, s, "0")]
        t.rows.append((phase_name(ph), one_reason(cells, phase_gate(ph, s))))
    return t


def error_examples(run: RunData, limit: int = 10, sc: RunScan | None = None) -> list[str]:
    """The first ``limit`` failed requests as one line each (phase, position, class, message)."""
    if sc is None:
        sc = scan(run, examples=limit)
    out = []
    for r in sc.examples[:limit]:
        msg = (r.get("error") or "").replace("\n", " ")[:200]
        out.append(
            f"{r['phase']} #{r.get('position')}: {r['status']}"
            + (f" (HTTP {r['http_status']})" if r.get("http_status") else "")
            + (f": {msg}" if msg else "")
        )
    return out


def fmt_value(v: Any) -> str:
    """A value for prose: numbers via ``fmt``, others as str."""
    return fmt(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)
