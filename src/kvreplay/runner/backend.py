"""The contract the runner asks of a server's counters (the consumer owns it).

``runner/`` never imports a backend; adapters in ``kvreplay.backends`` satisfy
this Protocol. Snapshots carry values under the common counter names of
``kvreplay.evidence.vocab`` (``COUNTER_NAMES``, ``GAUGE_NAMES``, their units and
token twins; re-exported here): a key is *absent*, never 0, when the server does
not report it.

A counter that goes down means the server restarted: its delta is invalid and is
reported as the post-restart value (Prometheus ``increase()`` semantics), never
negative (field case B08).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from kvreplay.evidence.vocab import COMMON_UNITS, COUNTER_NAMES, GAUGE_NAMES, LOAD_GAUGES, TOKEN_TWINS

__all__ = [
    "COMMON_UNITS",
    "COUNTER_NAMES",
    "GAUGE_NAMES",
    "LOAD_GAUGES",
    "Backend",
    "CounterDelta",
    "Snapshot",
    "TOKEN_TWINS",
    "counter_delta",
]


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
    """

    taken_ns: int
    raw: dict[str, Any]
    common: dict[str, float]
    started: float | None = None
    settled: bool | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CounterDelta:
    """Difference of two snapshots.

    Attributes:
        values: Counter increases by common name (gauges: the later value).
        reset: True when a counter went down or the start marker changed.
        reset_names: The counters that went down.
        elapsed_ns: Time between the two snapshots (ns).
    """

    values: dict[str, float]
    reset: bool = False
    reset_names: tuple[str, ...] = ()
    elapsed_ns: int = 0

    def to_json(self) -> dict:
        """JSON form used in records and summaries."""
        out: dict[str, Any] = dict(self.values)
        if self.reset:
            out["reset"] = True
            out["reset_names"] = list(self.reset_names)
        return out


def counter_delta(a: Snapshot, b: Snapshot) -> CounterDelta:
    """Counter increases from ``a`` to ``b``; gauges take ``b``'s value.

    A counter lower in ``b`` than in ``a``, or a changed ``started`` marker, means
    the server restarted between them: that counter's delta is its value in ``b``
    (what accrued since the restart), and ``reset`` is set (field case B08).

    Args:
        a: Earlier snapshot.
        b: Later snapshot.

    Returns:
        The delta over the common names present in both (gauges: present in ``b``).
    """
    values: dict[str, float] = {}
    went_down: list[str] = []
    restarted = a.started is not None and b.started is not None and a.started != b.started
    for name, vb in b.common.items():
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
    )


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

