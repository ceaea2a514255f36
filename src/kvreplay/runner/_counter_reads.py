"""The runner's counter reads: snapshots, the in-phase monitor, ``abort_if`` bounds, deltas.

Split out of ``kvreplay.runner._runner``: ``CounterReads`` is a mixin of the
runner's ``_Run`` (as ``_contract.ContractChecks`` is), which holds the state it
uses (``backend``, ``opts``, ``progress``, ``nonfinite``, ``restarts``) and the
methods ``log_counters``, ``request_abort`` and ``check_identity``. Counter names
and units: ``runner.backend`` and docs/summary-schema.md.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kvreplay.errors import BackendError
from kvreplay.evidence.vocab import TOKEN_TWINS
from kvreplay.runner.backend import Snapshot, counter_delta
from kvreplay.runner.counters import checked_snapshot, settled_snapshot

__all__ = ["CounterReads"]


class CounterReads:
    """Counter reads of a run (a mixin: ``_Run`` holds the state)."""

    backend: Any
    opts: Any
    restarts: int
    nonfinite: set[str]
    progress: Callable[[str], None]

    if TYPE_CHECKING:  # defined by _Run and ContractChecks; declared here for the type checker

        def log_counters(self, snap: Snapshot, at: str | int) -> None: ...
        def request_abort(self, reason: str, message: str) -> None: ...
        async def check_identity(self) -> None: ...

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

    async def snapshot(self, prev: Snapshot | None = None, at: str | int = "read") -> Snapshot | None:
        if self.backend is None:
            return None
        try:
            snap = await settled_snapshot(self.backend, prev=prev)
        except BackendError as exc:
            self.progress(f"counter read failed: {exc}")
            return None
        snap = checked_snapshot(snap, self.progress, self.nonfinite)
        self.log_counters(snap, at)
        self.check_bounds(snap)
        await self.check_identity()  # at every counter read
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
                snap = await self.backend.snapshot()
            except BackendError as exc:
                self.progress(f"counter read failed: {exc}")
                continue
            snap = checked_snapshot(snap, self.progress, self.nonfinite)
            self.log_counters(snap, "monitor")
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
