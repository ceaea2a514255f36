"""The runner's counter reads: snapshots, the in-phase monitor, ``abort_if`` bounds, deltas.

Split out of ``kvreplay.runner._runner``: ``CounterReads`` is a mixin of the
runner's ``_Run`` (as ``_contract.ContractChecks`` is), which holds the state it
uses (``backend``, ``opts``, ``progress``, ``nonfinite``, ``restarts``) and the
methods ``log_counters``, ``request_abort`` and ``check_identity``. Counter names
and units: ``runner.backend`` and docs/summary-schema.md.

Cheap reads (issue 31 item 3): the phase's opening and closing reads ask for
every series; the reads inside a phase (per request at C1, the monitor) ask an
adapter with ``partial_reads`` for only the series it maps
(``snapshot(full=False)``). A partial read is logged on top of the last whole
one, so counters.jsonl's changed-only lines carry only what moved; the series
the backend does not use (histogram buckets) are logged at the run's first and
last reads only (``CounterLog(kept=...)``, a ``run_end`` line; issue 42 item 8).
Every read's time and size is kept per phase (``read_costs``) and
summarised in ``phases[].counter_reads`` (``counter_read_summary``).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from kvreplay.clock import now_ns
from kvreplay.errors import BackendError
from kvreplay.evidence.vocab import TOKEN_TWINS
from kvreplay.runner.backend import Snapshot, counter_delta
from kvreplay.runner.counters import checked_snapshot, settled_snapshot

__all__ = ["LOG_IN_THREAD_SERIES", "CounterReads", "counter_read_summary"]

LOG_IN_THREAD_SERIES = 5000
"""A counter read with this many series or more is logged from a thread (``CounterReads.log_read``)."""


def counter_read_summary(costs: list[tuple[int, int]]) -> dict[str, Any] | None:
    """``{n, ms_p50, ms_p99, bytes_per_read}`` of one phase's reads (summary.json ``phases[].counter_reads``).

    Args:
        costs: ``(duration_ns, bytes)`` per read (a settled read counts each of its GETs).

    Returns:
        None without reads; percentiles by nearest rank, ms to 3 decimals, the mean body size in bytes.
    """
    if not costs:
        return None
    ms = sorted(d / 1e6 for d, _ in costs)

    def rank(q: float) -> float:
        return round(ms[max(0, math.ceil(q * len(ms)) - 1)], 3)

    return {"n": len(ms), "ms_p50": rank(0.50), "ms_p99": rank(0.99),
            "bytes_per_read": round(sum(b for _, b in costs) / len(costs))}


class _Reader:
    """The backend as ``settled_snapshot`` sees it: each ``snapshot()`` timed, whole or partial."""

    def __init__(self, owner: CounterReads, full: bool) -> None:
        self.owner = owner
        self.full = full

    async def snapshot(self) -> Snapshot:
        return await self.owner.read_once(full=self.full)


class CounterReads:
    """Counter reads of a run (a mixin: ``_Run`` holds the state)."""

    backend: Any
    opts: Any
    restarts: int
    nonfinite: set[str]
    progress: Callable[[str], None]
    cur_phase: str
    read_costs: dict[str, list[tuple[int, int]]]
    _log_base: dict[str, Any] | None
    log_lock: asyncio.Lock
    replica_lost: str | None = None  # a fleet replica's failed read, until its phase is closed (lost_replica)

    if TYPE_CHECKING:  # defined by _Run and ContractChecks; declared here for the type checker

        def log_counters(self, snap: Snapshot, at: str | int) -> None: ...
        def request_abort(self, reason: str, message: str) -> None: ...
        async def check_identity(self, *, reuse_served: bool = False) -> None: ...

    def lost_replica(self, exc: BackendError) -> None:
        """A fleet whose replica cannot be read: the run stops as a vanished server's does (issue 44 item 5).

        A replica that vanished mid-phase leaves its phase without counters: the abort
        (``replica_lost``, exit 3) names it, and ``Runner`` makes the phase invalid with the
        same reason. One server's failed read is only said (its requests fail too when
        it is gone: ``max_transport_failures``); a replica's requests go on through the
        router, so its failed read is what shows it gone.
        """
        if not self.opts.replicas:
            return
        if self.replica_lost is None:
            self.replica_lost = str(exc)
        self.request_abort("replica_lost", str(exc))

    def check_bounds(self, snap: Snapshot | None) -> None:
        if snap is None:
            return
        for name, op, bound in self.opts.abort_if:
            v = snap.common.get(name)
            if v is None and TOKEN_TWINS.get(name) in snap.common:
                # The old meaning of a lookup name on a server that counts tokens (vLLM's
                # host_hits was its external hit tokens): the bound reads the token name.
                name = TOKEN_TWINS[name]
                v = snap.common[name]
            if v is None:
                continue
            hit = {">": v > bound, ">=": v >= bound, "<": v < bound, "<=": v <= bound}[op]
            if hit:
                self.request_abort("bound", f"{name}={v:g} crossed {op}{bound:g}")

    async def read_once(self, *, full: bool) -> Snapshot:
        """One ``backend.snapshot()``, partial unless ``full`` (where the adapter can); its cost noted when it answers.

        Raises:
            BackendError: from the adapter.
        """
        t0 = now_ns()
        if not full and getattr(self.backend, "partial_reads", False):
            snap: Snapshot = await self.backend.snapshot(full=False)
        else:
            snap = await self.backend.snapshot()
        self.read_costs.setdefault(self.cur_phase, []).append((now_ns() - t0, snap.read_bytes))
        return snap

    async def log_read(self, snap: Snapshot, at: str | int) -> None:
        """Log ``snap``; a partial read on top of the last whole one (module docstring).

        A read of ``LOG_IN_THREAD_SERIES`` series or more is diffed and written in a
        thread (a 50k-series diff is ~20 ms of Python; the switch interval then lets
        the loop in), one at a time, in order.
        """
        base = self._log_base
        if snap.partial and base is not None:
            base = {**base, **snap.raw}
            snap = replace(snap, raw=base, partial=False)
        self._log_base = snap.raw
        if len(snap.raw) < LOG_IN_THREAD_SERIES:
            self.log_counters(snap, at)
            return
        async with self.log_lock:
            await asyncio.to_thread(self.log_counters, snap, at)

    async def snapshot(self, prev: Snapshot | None = None, at: str | int = "read",
                       complete: Callable[[Snapshot], bool] | None = None) -> Snapshot | None:
        """A settled counter read, logged, checked against ``abort_if`` and followed by an identity read.

        Args:
            prev: A read taken just before (the first of the agreeing pair).
            at: ``counters.jsonl``'s ``at``: a position (per-request read) or a word.
            complete: ``counters.expected_after``'s test: a first read that passes it
                is returned without a second one.

        The identity is re-read after every counter read (issue 14), so at C1 a change
        is seen before the next request is sent; a Prometheus adapter takes its info
        series from the counter read it has just parsed, and after a per-request read
        its ``/v1/models`` and ``/version`` from its last read of them while the read
        shows the same server process (``check_identity(reuse_served=True)``; a restart
        changes the start marker; ``backends._prometheus``, "Cheap identity reads").

        Returns:
            The read, or None without a backend or when the read failed (said on progress).
        """
        if self.backend is None:
            return None
        full = not isinstance(at, int)  # the per-request reads (at = position) ask for the mapped series only
        try:
            snap = await settled_snapshot(_Reader(self, full), prev=prev,  # type: ignore[arg-type]
                                          complete=complete)
        except BackendError as exc:
            self.progress(f"counter read failed: {exc}")
            self.lost_replica(exc)
            return None
        snap = checked_snapshot(snap, self.progress, self.nonfinite)
        await self.log_read(snap, at)
        self.check_bounds(snap)
        # at every counter read (issue 14): at C1 before the next request; whole at phase boundaries
        await self.check_identity(reuse_served=not full)
        return snap

    async def monitor(self, first: Snapshot | None) -> None:
        """Read counters every monitor_interval_s while a phase runs.

        For ``abort_if`` bounds, and for ``abort_on_restart`` above C1, where no
        per-request read would otherwise see a restart until the phase ends.
        """
        prev = first
        while True:
            await asyncio.sleep(self.opts.monitor_interval_s)
            try:
                snap = await self.read_once(full=False)
            except BackendError as exc:
                self.progress(f"counter read failed: {exc}")
                self.lost_replica(exc)
                continue
            snap = checked_snapshot(snap, self.progress, self.nonfinite)
            await self.log_read(snap, "monitor")
            self.check_bounds(snap)
            if self.opts.abort_on_restart and prev is not None:
                d = counter_delta(prev, snap)
                if d.reset:
                    self.request_abort("restart", "counters went down: "
                                       + (", ".join(d.reset_names) or "start marker changed"))
            prev = snap

    def delta_json(self, a: Snapshot | None, b: Snapshot | None) -> dict | None:
        if a is None or b is None:
            return None
        d = counter_delta(a, b)
        if d.reset:
            self.restarts += 1
            if self.opts.abort_on_restart:
                self.request_abort("restart",
                                   f"counters went down: {', '.join(d.reset_names) or 'start marker changed'}")
        return d.to_json()
