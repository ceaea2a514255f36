"""The contract the runner asks of a server's counters (the consumer owns it).

``runner/`` never imports a backend; adapters in ``kvreplay.backends`` satisfy
this Protocol. Snapshots carry values under the common counter names of
``kvreplay.evidence.vocab`` (``COUNTER_NAMES``, ``GAUGE_NAMES``, their units and
token twins; re-exported here): a key is *absent*, never 0, when the server does
not report it.

A counter that goes down means the server restarted: its delta is invalid and is
reported as the post-restart value (Prometheus ``increase()`` semantics), never
negative (field case B08).

A value that cannot be differenced exactly (text, a boolean, NaN or an
infinity, an integer outside the 64-bit range ``COUNTER_RANGE``) is *invalid*:
the adapter leaves it out of ``common`` and names it in ``Snapshot.invalid``
with the reason (``counter_problem``); its raw text stays in ``raw`` (and so in
counters.jsonl), and every delta over it is null with that reason
(``CounterDelta.invalid``). The run goes on (issue 30 item 2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from kvreplay.evidence.vocab import COMMON_UNITS, COUNTER_NAMES, GAUGE_NAMES, LOAD_GAUGES, TOKEN_TWINS

__all__ = [
    "COMMON_UNITS",
    "COUNTER_NAMES",
    "COUNTER_RANGE",
    "DUPLICATE_SERIES",
    "GAUGE_NAMES",
    "LOAD_GAUGES",
    "Backend",
    "CounterDelta",
    "Snapshot",
    "TOKEN_TWINS",
    "counter_delta",
    "counter_problem",
    "duplicate_series",
]

COUNTER_RANGE = (-(1 << 63), 1 << 64)
"""``[low, high)``: the values a counter may take and still be differenced (signed and unsigned 64 bits)."""


DUPLICATE_SERIES = "duplicate series"
"""Start of the reason (after ``SERIES: ``) of a common name read from a series the exposition
printed twice with the same labels (``backends._profile.SeriesMap.problem``): the phase is invalid."""


def duplicate_series(invalid: dict[str, str] | None) -> list[str]:
    """The reasons in ``invalid`` (``CounterDelta.invalid``: name -> reason) that are a duplicate series."""
    return [f"{k}: {why}" for k, why in sorted((invalid or {}).items()) if f": {DUPLICATE_SERIES}" in why]


def counter_problem(value: Any) -> str | None:
    """Why ``value`` cannot be a counter's value; None when it can.

    Args:
        value: A value as the server printed it (JSON or exposition parsed).

    Returns:
        None for an int or a finite float inside ``COUNTER_RANGE``; otherwise a
        short reason: ``"not a number (text '...')"``, ``"not a finite number"``,
        ``"outside the 64-bit range"``, ``"not a number (a JSON list)"``.
    """
    if isinstance(value, bool):
        return "not a number (a boolean)"
    if isinstance(value, str):
        return f"not a number (text {value[:40]!r})"
    if isinstance(value, float) and not math.isfinite(value):
        return "not a finite number"
    if isinstance(value, (int, float)):
        return None if COUNTER_RANGE[0] <= value < COUNTER_RANGE[1] else "outside the 64-bit range"
    kind = {dict: "object", list: "list", type(None): "null"}.get(type(value), type(value).__name__)
    return f"not a number (a JSON {kind})"


@dataclass(frozen=True, slots=True, kw_only=True)
class Snapshot:
    """One observation of a server's native counters.

    Attributes:
        taken_ns: ``clock.now_ns()`` when the response arrived (ns).
        raw: Native values verbatim (series name with labels -> value), as the
            server printed them.
        common: Values mapped onto the common names (``evidence.vocab``); absent when unknown.
        started: The server's start marker (``process_start_time_seconds``, a
            ``_created`` value, or a restart epoch), None when it has none.
        settled: True when two consecutive reads agreed before this one was
            returned, False when the settle bound ran out first, None when no
            settling was attempted (``kvreplay.backends.settled_snapshot``).
        invalid: Common name -> why its value cannot be differenced (the series
            and ``counter_problem``'s reason); such a name is not in ``common``.
        partial: True when ``raw`` holds only the series the adapter maps (a
            filtered read: ``snapshot(full=False)``), not every series the server has.
        read_bytes: Size of the bodies read for this snapshot (bytes; 0 when unknown).
        parts: A fleet's read (``runner.fleet``): replica URL -> that replica's own
            snapshot (``common`` is then their sum); None for one server.
    """

    taken_ns: int
    raw: dict[str, Any]
    common: dict[str, float]
    started: float | None = None
    settled: bool | None = None
    invalid: dict[str, str] = field(default_factory=dict)
    partial: bool = False
    read_bytes: int = 0
    parts: dict[str, Snapshot] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CounterDelta:
    """Difference of two snapshots.

    Attributes:
        values: Counter increases by common name (gauges: the later value).
        reset: True when a counter went down or the start marker changed.
        reset_names: The counters that went down.
        elapsed_ns: Time between the two snapshots (ns).
        invalid: Common name -> reason, for names whose delta is null because
            either read's value could not be differenced (``Snapshot.invalid``).
        parts: A fleet's delta: replica URL -> that replica's own delta (not in ``to_json``).
    """

    values: dict[str, float]
    reset: bool = False
    reset_names: tuple[str, ...] = ()
    elapsed_ns: int = 0
    invalid: dict[str, str] = field(default_factory=dict)
    parts: dict[str, CounterDelta] | None = None

    def to_json(self) -> dict:
        """JSON form used in records and summaries.

        ``{name: delta, ...}``, plus ``reset``/``reset_names`` after a restart and
        ``invalid: {name: reason}`` for null deltas (their names are not among the values).
        """
        out: dict[str, Any] = dict(self.values)
        if self.reset:
            out["reset"] = True
            out["reset_names"] = list(self.reset_names)
        if self.invalid:
            out["invalid"] = dict(sorted(self.invalid.items()))
        return out


def counter_delta(a: Snapshot, b: Snapshot) -> CounterDelta:
    """Counter increases from ``a`` to ``b``; gauges take ``b``'s value.

    A counter lower in ``b`` than in ``a``, or a changed ``started`` marker, means
    the server restarted between them: that counter's delta is its value in ``b``
    (what accrued since the restart), and ``reset`` is set (field case B08).

    Args:
        a: Earlier snapshot.
        b: Later snapshot.

    A name invalid in either read (``Snapshot.invalid``) has no value: it is in
    ``invalid`` with ``b``'s reason (else ``a``'s).

    Two fleet reads (both with ``parts``): the sum of each replica's own delta, a
    reset when any replica restarted (``reset_names`` as ``name@URL``, ``start_marker@URL``
    for a replica whose start marker alone changed).

    Returns:
        The delta over the common names present in both (gauges: present in ``b``).
    """
    if a.parts is not None and b.parts is not None:
        return _fleet_delta(a, b)
    invalid = {**a.invalid, **b.invalid}  # b's reason wins
    values: dict[str, float] = {}
    went_down: list[str] = []
    restarted = a.started is not None and b.started is not None and a.started != b.started
    for name, vb in b.common.items():
        if name in b.invalid or (name in a.invalid and name not in GAUGE_NAMES):
            continue
        if name in GAUGE_NAMES:
            values[name] = vb
            continue
        va = a.common.get(name)
        if va is None:
            continue
        if restarted or vb < va:
            if vb < va:
                went_down.append(name)
            values[name] = vb
        else:
            values[name] = vb - va
    return CounterDelta(
        values=values,
        reset=restarted or bool(went_down),
        reset_names=tuple(sorted(went_down)),
        elapsed_ns=b.taken_ns - a.taken_ns,
        invalid={k: v for k, v in invalid.items() if k in b.invalid if k in GAUGE_NAMES}
        | {k: v for k, v in invalid.items() if k not in GAUGE_NAMES
           if (k in a.common or k in a.invalid) and (k in b.common or k in b.invalid)},
    )


def _fleet_delta(a: Snapshot, b: Snapshot) -> CounterDelta:
    pa, pb = a.parts or {}, b.parts or {}
    parts = {u: counter_delta(pa[u], sb) for u, sb in pb.items() if u in pa}
    values: dict[str, float] = {}
    invalid: dict[str, str] = {}
    for u, d in parts.items():
        for k, v in d.values.items():
            values[k] = values.get(k, 0) + v
        for k, why in d.invalid.items():
            invalid.setdefault(k, f"{u}: {why}")
    for k in invalid:
        values.pop(k, None)
    # a replica whose start marker changed without a counter going down is named too
    names = sorted(f"{n}@{u}" for u, d in parts.items() for n in (d.reset_names or (("start_marker",) if d.reset
                                                                                     else ())))
    reset = any(d.reset for d in parts.values())
    return CounterDelta(values=values, reset=reset, reset_names=tuple(names), elapsed_ns=b.taken_ns - a.taken_ns,
                        invalid=invalid, parts=parts)


@runtime_checkable
class Backend(Protocol):
    """What the runner needs from a server family's adapter.

    All methods talk to the server with the runner's aiohttp session and never
    send a generation request.
    """

    name: str

    async def identity(self) -> dict[str, Any]:
        """Model id, version/build and cache configuration fingerprint.

        Raises:
            BackendError: the server could not be read.
        """
        ...

    async def snapshot(self) -> Snapshot:
        """Read the native counters once.

        Raises:
            BackendError: the server could not be read or its answer is malformed.
        """
        ...

    def drained(self, a: Snapshot, b: Snapshot) -> bool:
        """True when load gauges are zero in both and counters did not move from a to b."""
        ...

    async def reset_cache(self) -> bool:
        """Empty the server's prefix cache where it can; False when it cannot."""
        ...

