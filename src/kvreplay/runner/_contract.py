"""The runner's execution contract: identity pins and drift, malformed aborts, failed checks.

A mixin of the runner's ``_Run`` (kept apart so ``_runner.py`` stays one concept):

- **Identity.** ``start_identity()`` reads the identity before the first request
  (the run's baseline) and checks the pins (``RunOptions.identity_pins``): a
  mismatch, or pins with no identity to check them against, aborts before
  anything is sent (``aborted.reason: identity_mismatch``). ``check_identity()``
  reads it again and aborts on any change from the baseline or a broken pin
  (``identity_drift``), with ``aborted.old``/``new``/``changes``
  (``runner.identity.abort_details``). It runs at every counter read (so at C1
  after every request), between phases, and above C1 (or wherever counters are
  not read per request) every ``identity_interval_s`` (<= 1 s) while a phase runs
  (``identity_monitor``). After a per-request read an adapter with
  ``reuses_served_identity`` may take ``/v1/models`` and ``/version`` from its last
  read of them when the counter read just made shows the same server process
  (``check_identity(reuse_served=True)``; ``backends._prometheus``, "Cheap identity
  reads"): a restart is still seen before the next request, a served model list
  changed inside the same process at the next phase boundary. Such a read vouches
  for the records sent before it (``IdentityGate.matched``) only when the drift
  that ends the run came with a new process; a drift seen with the same process
  marks every record sent since the last whole identity read.
- **Malformed transport.** With ``abort_on_malformed`` the first ``malformed``
  record stops new requests (``aborted.reason: malformed``).
- **Transport health.** ``max_transport_failures`` (default 3) consecutive sends
  that never reached the server (``metrics.summary.failure_kind``: connection
  refused, reset before any response byte, connect timeout) stop new requests
  (``aborted.reason: transport``, with ``aborted.sent``/``planned``/``consecutive``);
  the positions left get ``sent: false`` records, as after any abort. Any other
  outcome resets the count; "consecutive" is in completion order.
- **Failed checks.** A drain or fresh check that fails makes the phase *check
  failed*: with ``on_check_fail = "skip"`` (the default) it sends nothing, and
  each of its positions gets a record ``sent: false, status: "check_failed"``
  with the reason (``fresh: hits=1234 ... (want 0)``); with ``"mark"`` it is sent
  and only marked invalid (the behaviour before issue 14).
"""

from __future__ import annotations

import asyncio
from typing import Any

from kvreplay.clock import now_ns
from kvreplay.errors import BackendError
from kvreplay.metrics.summary import failure_kind
from kvreplay.runner.identity import abort_details, check_pins, identity_changes

__all__ = ["ContractChecks"]

IDENTITY_INTERVAL_MAX_S = 1.0
"""The identity monitor reads at least this often while a phase runs (s)."""


class ContractChecks:
    """Mixin of the runner's ``_Run``.

    It expects ``backend``, ``opts``, ``abort``, ``request_abort``, ``progress``,
    ``identity_before``/``identity_after`` and ``record`` from ``_Run``.
    """

    backend: Any
    opts: Any
    abort: dict[str, Any] | None
    identity_before: dict | None
    identity_after: dict | None

    def abort_with(self, reason: str, message: str, **details: Any) -> None:
        """``request_abort`` plus extra keys in ``summary.json``'s ``aborted`` (only for the first abort)."""
        first = self.abort is None
        self.request_abort(reason, message)  # type: ignore[attr-defined]
        if first and self.abort is not None and self.abort.get("reason") == reason:
            self.abort.update(details)

    async def start_identity(self) -> None:
        """Read the baseline identity and check the pins, before the first request."""
        pins = self.opts.identity_pins
        if self.backend is None:
            if pins and not getattr(self, "counters_elsewhere", False):  # --workers: worker 0 checks them
                self.abort_with("identity_mismatch", "identity pins given but no backend to read the "
                                "server's identity (--backend none?)")
            return
        t0 = self.rel(now_ns())  # type: ignore[attr-defined]
        try:
            self.identity_before = await self.backend.identity()
            self.identity_after = self.identity_before
            self.writer.baseline(t0)  # type: ignore[attr-defined]
        except BackendError as exc:
            self.progress(f"identity read failed: {exc}")  # type: ignore[attr-defined]
            if pins:
                self.abort_with("identity_mismatch", f"identity pins given but the identity could not be read: {exc}")
            return
        bad = check_pins(self.identity_before, pins)
        if bad:
            self.abort_with("identity_mismatch", "server identity is not the pinned one: "
                            + "; ".join(c.describe() for c in bad), **abort_details(bad))

    async def check_identity(self, *, reuse_served: bool = False) -> None:
        """Read the identity; abort on drift from the baseline or a broken pin (module docstring).

        Args:
            reuse_served: Right after a per-request counter read: the adapter may reuse
                its served part while the read shows the same process (module docstring).
        """
        if self.backend is None or self.identity_before is None:
            return
        t0 = self.rel(now_ns())  # type: ignore[attr-defined]
        try:
            how = "read"
            if reuse_served and getattr(self.backend, "reuses_served_identity", False):
                ident = await self.backend.identity(reuse_served=True)
                how = getattr(self.backend, "served_how", "read")
            else:
                ident = await self.backend.identity()
        except BackendError as exc:
            self.writer.unread(t0)  # type: ignore[attr-defined]
            if not getattr(self, "_identity_read_failed", False):  # said once, not at every read
                self._identity_read_failed = True
                self.progress(f"identity read failed: {exc}")  # type: ignore[attr-defined]
            return
        self.identity_after = ident
        changes = identity_changes(self.identity_before, ident)
        known = {c.key for c in changes}
        changes += [c for c in check_pins(ident, self.opts.identity_pins) if c.key not in known]
        # A read that reused /v1/models + /version vouches for the records before it only once a
        # drift is seen with a new process (the old one was seen unchanged up to then); a drift
        # with the same process marks every record since the last whole read.
        reused_to = getattr(self, "_reused_to", None)
        if changes:
            if how == "new_process" and reused_to is not None:
                self.writer.matched(reused_to)  # type: ignore[attr-defined]
            self.writer.drifted(t0)  # type: ignore[attr-defined]
        elif how == "reused":
            self._reused_to = t0
        else:
            self.writer.matched(t0)  # type: ignore[attr-defined]
            self._reused_to = None
        if changes and (self.abort is None or self.abort.get("reason") != "identity_drift"):
            self.abort_with("identity_drift", "server identity changed: "
                            + "; ".join(c.describe() for c in changes), **abort_details(changes),
                            last_match_t_ns=self.writer.verified_ns)  # type: ignore[attr-defined]

    async def identity_monitor(self) -> None:
        """Re-read the identity every ``identity_interval_s`` (at most 1 s) until cancelled."""
        interval = min(IDENTITY_INTERVAL_MAX_S, self.opts.identity_interval_s)
        while True:
            await asyncio.sleep(interval)
            await self.check_identity()

    def check_malformed(self, rec: dict[str, Any]) -> None:
        """With ``abort_on_malformed``: the first malformed record stops new requests."""
        if self.opts.abort_on_malformed and rec.get("status") == "malformed":
            self.abort_with("malformed", f"malformed response at {rec['phase']} position {rec['position']}: "
                            f"{rec.get('error') or ''}", phase=rec["phase"], position=rec["position"])

    def check_transport(self, rec: dict[str, Any]) -> None:
        """Count consecutive transport failures; at ``max_transport_failures`` stop new requests."""
        status = rec.get("status")
        if not rec.get("sent", True) or status in ("aborted", "client_error"):
            return
        if status == "ok" or failure_kind(rec) != "transport":  # ok is never a transport failure
            self.transport_run = 0
            return
        self.transport_run = getattr(self, "transport_run", 0) + 1
        self.transport_failed = getattr(self, "transport_failed", 0) + 1
        lim = self.opts.max_transport_failures
        if lim is not None and self.transport_run >= lim:
            sent = getattr(self, "sent", 0)
            plan: Any = getattr(self, "plan", None)
            planned = sum(len(ph.sequence) for ph in plan.phases) if plan is not None else 0
            self.abort_with("transport", f"{self.transport_run} consecutive sends did not reach the server "
                            f"(last: {rec.get('error') or rec.get('status')}) at {rec['phase']} position "
                            f"{rec['position']}; {sent} of {planned} planned requests sent, "
                            f"{sent - self.transport_failed} reached the server",
                            phase=rec["phase"], position=rec["position"], consecutive=self.transport_run,
                            sent=sent, planned=planned)

    def check_failed_record(self, phase: Any, pos: int, bi: int, rep: int, reason: str,
                            attribution: str) -> dict[str, Any]:
        """The record of a position not sent because its phase's check failed."""
        rec = self.record(phase, pos, bi, rep, None, None, attribution)  # type: ignore[attr-defined]
        rec.update(status="check_failed", error=reason, reason=reason)
        return rec

    def publish_check(self, phase: Any, reason: str | None) -> None:
        """Tell peers the phase's failed-check reason, before the start barrier (one process: nothing)."""

    async def phase_check_result(self, phase: Any, reason: str | None) -> str | None:
        """The phase's failed-check reason as all peers see it, after the start barrier (one process: its own)."""
        return reason

    async def write_check_failed(self, st: Any, phase: Any, seq: Any, reason: str,
                                 attribution: str) -> None:
        """One ``check_failed`` record per position left in ``seq`` (sync or async iterator)."""
        items = [x async for x in seq] if hasattr(seq, "__anext__") else list(seq)
        for pos, (bi, rep) in items:
            rec = self.check_failed_record(phase, pos, bi, rep, reason, attribution)
            self.writer.write(rec)  # type: ignore[attr-defined]
            st.add(rec)
