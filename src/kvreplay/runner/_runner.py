"""Closed-loop execution of a frozen plan.

For each phase, in order: optional reset, drain and fresh checks; a counter
snapshot; N workers each taking the next position of the frozen sequence (so
sends follow ``position``); one record per request appended and flushed as it
completes; a closing snapshot. At concurrency 1 with a backend, counters are
read before and after every request (the "after" once two reads agree), and the
record carries the delta; above C1 the record says attribution is per phase only.

Abort conditions stop new requests (in-flight ones finish) and are recorded in
``summary.json``: authentication failure (HTTP 401/403), a server error naming
out-of-memory / CUDA / Xid, an identity that is not the pinned one before the
first request or that drifts at any counter read or identity-monitor read
(``runner._contract``), a malformed response when ``abort_on_malformed`` is set,
a counter restart when ``abort_on_restart`` is set, ``max_transport_failures``
consecutive sends that never reached the server, and an operator interrupt.
Positions never sent get a record with ``status: "aborted"`` and ``sent: false``;
those of a phase whose drain or fresh check failed get ``status: "check_failed"``.

Conversations (a plan whose phases carry ``turns``): a worker claims a whole session
(its turns are contiguous in the frozen sequence) and sends its turns one after the
other, each after the previous turn's completion (``t_done``) plus its think time, so
concurrency is sessions in flight (open loop: session arrivals, the first turn at its
intended time). Records carry ``session``, ``turn``, ``think_time_planned_s`` and
``think_time_actual_s`` (previous turn's ``t_done_ns`` to this ``t_sent_ns``, s). A turn
that fails ends its session: the later turns get ``sent: false`` records with
``error: "session aborted: turn K failed"``. With ``history = "live"`` a turn's earlier
assistant messages are this server's own replies (``workload.conversations.LiveHistory``,
each retained body parsed once per session, a large one in a thread):
its records add ``history: "live"``, ``sent_sha256`` (the bytes sent; ``body_sha256``
stays the retained bytes') and ``history_differs`` (the two differ).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import signal
from collections.abc import Callable
from typing import Any

import aiohttp

from kvreplay.accounting import IMPLEMENTATION
from kvreplay.clock import RunClock, now_ns
from kvreplay.errors import ConfigError
from kvreplay.metrics.fleet import FleetStats
from kvreplay.metrics.histograms import load_recording
from kvreplay.metrics.hlog import IntervalLogs
from kvreplay.metrics.selfmeasure import ClientMonitor, thresholds
from kvreplay.metrics.summary import SCHEMA_VERSION, PhaseStats, failure_kind
from kvreplay.plan import Phase, Plan
from kvreplay.redaction import escape_controls, has_secrets, redact, register_headers
from kvreplay.rundir import COUNTERS, HISTOGRAMS, RECORDS, CounterLog, RecordWriter
from kvreplay.runner._contract import ContractChecks
from kvreplay.runner._counter_reads import CounterReads, counter_read_summary
from kvreplay.runner._options import RunOptions
from kvreplay.runner._records import RecordMaking
from kvreplay.runner.backend import COMMON_UNITS, Backend, Snapshot, counter_delta, duplicate_series
from kvreplay.runner.counters import check_fresh, expected_after, wait_drained
from kvreplay.runner.fleet import part_deltas, replica_fields
from kvreplay.runner.h1 import H1Client, client_ssl_context
from kvreplay.runner.http import RequestOutcome, send_body
from kvreplay.runner.identity import IdentityGate
from kvreplay.runner.observer import RunObserver
from kvreplay.runner.outcomes import Counts, check_usage, client_error_outcome, redact_outcome
from kvreplay.workload import Workload
from kvreplay.workload.conversations import LIVE_OFF_LOOP_BYTES, LiveHistory
from kvreplay.workload.index import BodyChanged

__all__ = ["RunOptions", "counter_units", "on_interrupt_signals"]


LIVE_TEXT_CHARS = 1 << 22
"""Reply text kept per turn in live history (characters): a 4 Mi-character answer, far over any max_tokens."""
READAHEAD = 8
"""Positions ahead whose body the kernel is asked to start reading (``Workload.readahead``)."""

_FATAL_SERVER_ERROR = re.compile(r"out of memory|\boom\b|cuda|\bxid\b", re.IGNORECASE)


def on_interrupt_signals(loop: asyncio.AbstractEventLoop, handler: Callable[[], None]) -> list[int]:
    """Call ``handler`` on SIGINT and SIGTERM; returns the signals installed (for ``remove_signal_handler``).

    None off the main thread (a Ray actor, a test's thread): ``add_signal_handler``
    refuses there (uvloop with ValueError).
    """
    installed: list[int] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, handler)
            installed.append(sig)
        except (NotImplementedError, RuntimeError, ValueError):
            pass
    return installed


class _Run(RecordMaking, CounterReads, ContractChecks):
    writes_plan = True  # execute_run writes plan.json into opts.out_dir (a worker: no, runner.multiproc)

    def __init__(self, plan: Plan, workload: Workload, opts: RunOptions, backend: Backend | None,
                 observer: RunObserver, clock: RunClock | None = None) -> None:
        self.plan, self.workload, self.opts, self.backend = plan, workload, opts, backend
        self.clock = clock or RunClock.start()
        # plan.sha256 when the caller already took it (execute_plan, from plan.json's content):
        # hashing a plan serialises every position again (~1 us each)
        self.plan_sha256: str | None = None
        self.claim_ns: int | None = None
        self.counters_elsewhere = False  # a peer worker reads this run's counters (--workers, --ray)
        self.lag_hists: dict[str, Any] = {}
        self.stop_new = False
        self.abort: dict[str, str] | None = None
        self.obs = observer
        self.progress = lambda text: observer.on_message(escape_controls(redact(text), newlines=True))
        self.identity_before: dict | None = None
        self.identity_after: dict | None = None
        self.restarts = 0
        self.stats: list[PhaseStats] = []
        self.out = opts.out_dir
        try:
            # records written at once; after a drift, those sent past the last matching identity read
            # are marked identity_unverified (runner.identity, IdentityGate)
            self.writer = IdentityGate(RecordWriter(self.out / RECORDS, on_error=self.on_write_error))
        except OSError as exc:
            raise ConfigError(f"cannot create {RECORDS}: {exc.strerror or exc}; nothing was sent",
                              path=self.out, field="--out") from None
        self.headers = {"Content-Type": "application/json", **opts.headers}
        register_headers(self.headers)  # this process never writes them (worker processes too)
        self.last_snap: Snapshot | None = None
        self.active: set[asyncio.Task] = set()
        self.h1: H1Client | None = None
        self.in_flight = 0
        self.nonfinite: set[str] = set()
        self.sent = 0
        self.failed = 0
        self.failed_output = 0
        self.transport_run = 0  # consecutive transport failures (runner._contract.check_transport)
        self.counter_log: CounterLog | None = None  # counters.jsonl, opened at the first read
        self.cur_phase = ""
        self.read_costs: dict[str, list[tuple[int, int]]] = {}  # phase -> (ns, bytes) per counter read
        self._log_base: dict[str, Any] | None = None  # the last whole read's series (CounterReads.log_read)
        self.log_lock = asyncio.Lock()  # large reads are logged from a thread, one at a time
        self.hlogs: IntervalLogs | None = None  # the current phase's histogram logs (metrics.hlog)
        self.prev_done: dict[int, int | None] = {}  # conversations: position -> previous turn's done_ns
        self.sent_sha: dict[int, str] = {}  # live history: position -> SHA-256 of the bytes sent
        self.replies: dict[int, str] = {}  # live history: position -> the whole reply text, until its next turn

    def log_counters(self, snap: Snapshot, at: str | int) -> None:
        """Keep every raw series of a read in counters.jsonl (``kvreplay.rundir.counterlog``)."""
        if self.counter_log is None:
            # an adapter that reads only the series it maps (partial_reads) names them: the other
            # series (vLLM's histogram buckets) are logged at the run's first and last reads only
            kept = self.backend.wanted_names() if getattr(self.backend, "partial_reads", False) else None
            self.counter_log = CounterLog(self.out / COUNTERS, self.clock.origin_ns, kept=kept)
        self.counter_log.write(snap, self.cur_phase, at)

    def on_write_error(self, exc: OSError) -> None:
        """records.jsonl cannot be written (disk full): stop the run; nothing half-written stays."""
        self.cancel_in_flight("disk_full", f"records.jsonl not writable: {exc}; no further record is kept")

    def request_abort(self, reason: str, message: str) -> None:
        if self.abort is None:
            self.abort = {"reason": reason, "message": escape_controls(redact(message), newlines=True)[:1024]}
            self.progress(f"abort: {reason}: {message}")
        self.stop_new = True

    # Hooks that runner.multiproc overrides (one process: the whole sequence, all slots, no peers).

    def positions(self, phase: Phase) -> Any:
        """Iterator of ``(position, (body_index, repetition))`` this process sends, in order."""
        return iter(enumerate(phase.sequence))

    def slots(self, phase: Phase) -> int:
        """Closed-loop workers (requests in flight at most) in this process."""
        return phase.spec.concurrency

    async def phase_sync(self, phase: Phase, moment: str) -> None:
        """Wait for peer processes at ``moment`` (``start``: before the first send, ``end``: after the last)."""

    def phase_start_ns(self, phase: Phase) -> int:
        """The phase's start (``now_ns()``), origin of its open-loop intended times; common to all peers."""
        return now_ns()

    def check_outcome(self, out: RequestOutcome) -> None:
        if out.status == "client_error" and out.error and out.error.startswith("client resources exhausted"):
            self.request_abort("client_resources",
                               f"{out.error} (the client's limit, not the server's fault: "
                               "raise the open-file limit or lower the concurrency)")
        elif out.status == "http" and out.http_status in (401, 403):
            self.request_abort("auth", f"HTTP {out.http_status}: {out.error or ''}")
        elif out.status in ("http", "stream_error") and out.error and _FATAL_SERVER_ERROR.search(out.error):
            self.request_abort("server_fatal", out.error)

    def cancel_in_flight(self, reason: str, message: str) -> None:
        self.request_abort(reason, message)
        for t in list(self.active):
            t.cancel()

    def check_error_rate(self, out: RequestOutcome) -> None:
        """``max_error_rate`` counts every failure; ``max_output_error_rate`` output failures only."""
        self.sent += 1
        if out.status != "ok":
            self.failed += 1
            if failure_kind({"status": out.status, "timeout_kind": out.timeout_kind}) == "output":
                self.failed_output += 1
        if self.sent < self.opts.error_rate_min_requests:
            return
        lim = self.opts.max_error_rate
        if lim is not None and self.failed / self.sent > lim:
            self.request_abort("error_rate", f"{self.failed}/{self.sent} requests failed (> {lim:.1%})")
        lim = self.opts.max_output_error_rate
        if lim is not None and self.failed_output / self.sent > lim:
            self.request_abort("output_error_rate", f"{self.failed_output}/{self.sent} requests failed "
                               f"in their output (> {lim:.1%}; transport failures not counted)")

    async def run_phase(self, session: aiohttp.ClientSession, phase: Phase) -> PhaseStats:
        spec = phase.spec
        load_recording()  # nothing imported on the loop once the phase's clock runs (issue 42 item 6)
        st = PhaseStats(phase.name, spec.concurrency, spec.repeats, len(phase.sequence),
                        label=spec.label, comparable=spec.comparable)
        check_failed: str | None = None
        if phase.intended_ns is not None:
            st.open_loop = True
            st.cap_wait_max_ns = 0
            span = phase.intended_ns[-1] if phase.intended_ns else 0
            # with sessions, the intended times are session arrivals: the offered rate is sessions/s
            st.offered_rps = (len(phase.intended_ns) - 1) / (span / 1e9) if span > 0 else None
        if self.opts.replicas:
            st.fleet = FleetStats(self.opts.replicas)
        self.stats.append(st)
        self.cur_phase = phase.name
        be = self.backend
        if be is not None and not self.stop_new:
            if spec.reset:
                ok = await be.reset_cache()
                if not ok:
                    st.invalid_reasons.append("reset requested but the server has no cache reset")
            if spec.drain:
                dr = await wait_drained(be, interval_s=self.opts.drain_interval_s, timeout_s=self.opts.drain_timeout_s,
                                        on_read=lambda snap: self.log_counters(snap, "drain"))
                st.drain = dr.to_json()
                self.obs.on_drain(phase.name, st.drain)
                if not dr.passed:
                    st.invalid_reasons.append(f"drain did not pass within {self.opts.drain_timeout_s} s: {dr.reason}")
                    check_failed = f"drain: did not pass within {self.opts.drain_timeout_s} s: {dr.reason}"
        before = await self.snapshot(at="before")
        if spec.fresh and before is not None:
            fresh, why = check_fresh(before)
            if not fresh:
                st.invalid_reasons.append(why or "not fresh")
                check_failed = check_failed or f"fresh: {(why or '').removeprefix('not fresh: ')} (want 0)"
        elif spec.fresh:
            st.invalid_reasons.append("fresh required but the backend reports no counters")
            if not self.counters_elsewhere and not self.stop_new:
                check_failed = check_failed or "fresh: required but the backend reports no counters"
        per_req = (be is not None and spec.concurrency == 1 and self.opts.per_request_counters
                   and phase.intended_ns is None)
        counted = be is not None or self.counters_elsewhere
        attribution = "per_request" if per_req else ("phase_only" if counted else "none")
        st.attribution = attribution
        self.last_snap = before
        self.prev_done, self.sent_sha = {}, {}
        url = self.opts.target_url.rstrip("/")
        seq = self.positions(phase)
        self.publish_check(phase, check_failed)
        await self.phase_sync(phase, "start")
        st.start_ns = start_ns = self.phase_start_ns(phase)
        if not self.stop_new:  # stopped before it (identity, deadline): its end line says "not run"
            self.obs.on_phase_start(phase.name, len(phase.sequence), spec.concurrency)
        check_failed = await self.phase_check_result(phase, check_failed)
        if check_failed is not None and self.opts.on_check_fail == "skip":
            # A failed check sends nothing: every position gets its record here and
            # the workers below find the sequence used up.
            st.check_failed = check_failed
            self.progress(f"phase {phase.name}: check failed, nothing sent: {check_failed}")
            await self.write_check_failed(st, phase, seq, check_failed, attribution)

        intended = phase.intended_ns
        h1 = self.h1
        head_chars = self.opts.head_chars
        total_timeout_s = self.opts.total_timeout_s

        mon = ClientMonitor()
        fleet = bool(self.opts.replicas)

        spans = dict(phase.session_spans())  # conversations: first position -> turns
        n_seq = len(phase.sequence)
        arrival = {p: i for i, p in enumerate(spans)}  # a session's first position -> its intended_ns index

        async def one(pos: int, bi: int, rep: int, raw: bytes | None = None,
                      keep_chars: int | None = None) -> RequestOutcome | None:
            t_int = None
            if intended is not None and not self.stop_new and (not spans or pos in arrival):
                # Open loop: not before the intended time; a late send is
                # measured from the intended time too (no coordinated omission).
                t_int = start_ns + intended[arrival[pos] if spans else pos]
                wait = t_int - now_ns()
                if wait > 0:
                    await asyncio.sleep(wait / 1e9)
                elif -wait > st.cap_wait_max_ns:  # type: ignore[operator]
                    # claimed after its intended time: every slot under the cap was busy until now
                    st.cap_wait_max_ns = -wait
            if self.stop_new:
                self.record_not_sent(st, phase, pos, bi, rep, attribution)
                return None
            try:
                body = self.workload.bodies[bi]  # read from disk now, its SHA-256 checked (issue 32)
            except BodyChanged as exc:
                self.refuse_changed(st, phase, pos, bi, rep, attribution, exc)
                return None
            if not pos % READAHEAD and pos + READAHEAD < n_seq:
                # one hint per READAHEAD positions, for the next READAHEAD bodies (issue 43 item 1)
                self.workload.readahead([phase.sequence[p][0]
                                         for p in range(pos + READAHEAD, min(pos + 2 * READAHEAD, n_seq))])
            send_raw = body.raw if raw is None else raw
            head = head_chars if keep_chars is None else keep_chars
            self.obs.on_request_start(phase.name, pos)
            self.in_flight += 1
            st.peak_in_flight = max(st.peak_in_flight, self.in_flight)
            try:
                if h1 is not None:
                    out = await h1.send(body.path, send_raw, head_chars=head,
                                        total_timeout_s=total_timeout_s,
                                        sent_ns=self.claim_ns if t_int is None else None)
                else:
                    out = await send_body(session, url + body.path, send_raw, headers=self.headers,
                                          head_chars=head, total_timeout_s=total_timeout_s,
                                          replica_header=self.opts.replica_header if fleet else None)
            except asyncio.CancelledError as exc:
                # Cancelled in flight (second interrupt, hard deadline): still a record, with
                # the real send time and the partial stream when the client kept them.
                t = now_ns()
                out = getattr(exc, "outcome", None) or RequestOutcome("aborted", None, t, None, t)
                out.error = (self.abort or {}).get("reason")
                rec = self.record(phase, pos, bi, rep, out, None, attribution, t_int)
                self.writer.write(rec)
                st.add(rec)
                raise
            except Exception as exc:  # noqa: BLE001 - a client bug must not lose the position
                t = now_ns()
                out = client_error_outcome(RequestOutcome("client_error", None, t, None, t), exc)
            finally:
                self.in_flight -= 1
            if t_int is not None:
                mon.note_send(t_int, out.sent_ns)
            if keep_chars is not None:  # live history: the whole reply is kept for the next turn
                self.replies[pos] = out.stream.text_head
                out.stream.text_head = out.stream.text_head[:head_chars]
            delta = parts = None
            try:
                counts: Counts | None = check_usage(out)  # the usage counts, read once for the record
                if has_secrets():
                    redact_outcome(out)
                    counts = None  # a usage key can be redacted too: the record reads what is left
                if per_req:
                    try:
                        r = out.stream if out.status == "ok" else None
                        after = await self.snapshot(None, at=pos, complete=expected_after(
                            self.last_snap, r.prompt_tokens if r else None, r.cached_tokens if r else None))
                    except asyncio.CancelledError:
                        rec = self.record(phase, pos, bi, rep, out, None, attribution, t_int)
                        self.writer.write(rec)
                        st.add(rec, out.stream.token_ns if out.status == "ok" else None)
                        raise
                    delta = self.delta_json(self.last_snap, after)
                    parts = (part_deltas(counter_delta(self.last_snap, after).parts)
                             if fleet and self.last_snap is not None and after is not None else None)
                    self.last_snap = after
                rec = self.record(phase, pos, bi, rep, out, delta, attribution, t_int, counts, body.sha256,
                                  len(body.raw))
                if fleet:
                    rec.update(replica_fields(out.replica, parts, self.opts.replicas, per_request=per_req,
                                              reached=failure_kind(rec) != "transport"))
                self.writer.write(rec)  # orjson fails before anything is written
            except (asyncio.CancelledError, OSError):
                raise
            except Exception as exc:  # noqa: BLE001 - an accounting bug must not lose the position
                out = client_error_outcome(out, exc)
                rec = self.record(phase, pos, bi, rep, out, None, attribution, t_int)
                self.writer.write(rec)
            self.check_error_rate(out)
            if out.status == "ok":
                st.add(rec, out.stream.token_ns)
            else:
                st.add(rec)
            self.obs.on_record(rec)
            self.check_outcome(out)
            self.check_malformed(rec)
            self.check_transport(rec)
            return out

        async def conversation(turns: list[tuple[int, tuple[int, int]]]) -> None:
            """One session's turns, serial: each after the previous one's completion plus its think time."""
            ss = self.workload.sessions
            done: int | None = None
            recorded = 0
            live = self.opts.history == "live"
            bodies = self.workload.bodies
            replies: list[str] = []
            history = LiveHistory(lambda j: bodies[turns[j][1][0]].raw) if live else None
            try:
                for k, (pos, (bi, rep)) in enumerate(turns):
                    if done is not None:
                        think_ns = round(ss.turns[bi].think_time_s * 1e9) if ss is not None else 0
                        while (wait := done + think_ns - now_ns()) > 0 and not self.stop_new:
                            # timers wake late by up to a millisecond (uvloop's resolution): sleep to 1 ms
                            # before the time, then yield until it; in 250 ms steps, responsive to a stop
                            await asyncio.sleep(min(wait - 1_000_000, 250_000_000) / 1e9 if wait > 2_000_000 else 0)
                    self.prev_done[pos] = done
                    raw = None
                    if history is not None:  # each body parsed once (LiveHistory); a large one off the loop
                        retained = bodies[bi].raw
                        raw = (history.body(retained, replies) if len(retained) <= LIVE_OFF_LOOP_BYTES
                               else await asyncio.to_thread(history.body, retained, replies))
                        self.sent_sha[pos] = hashlib.sha256(raw).hexdigest() if raw is not retained \
                            else bodies[bi].sha256
                    recorded = k + 1  # one() records its position even when cancelled
                    out = await one(pos, bi, rep, raw, LIVE_TEXT_CHARS if live else None)
                    if live and out is not None:
                        replies.append(self.replies.pop(pos, ""))
                    if out is None or out.status != "ok":
                        why = None if out is None else f"session aborted: turn {k} failed"
                        for p, (b, r) in turns[k + 1:]:
                            self.record_not_sent(st, phase, p, b, r, attribution, why)
                        recorded = len(turns)
                        return
                    done = out.done_ns
            except asyncio.CancelledError:
                for p, (b, r) in turns[recorded:]:
                    self.record_not_sent(st, phase, p, b, r, attribution)
                raise

        aseq = seq if hasattr(seq, "__anext__") else None  # claims from a remote coordinator (--ray)

        async def worker() -> None:
            if aseq is not None:
                async for pos, (bi, rep) in aseq:
                    await one(pos, bi, rep)
            elif spans:  # a whole session per claim (no await between its claims: nobody else takes one)
                for pos, item in seq:
                    await conversation([(pos, item)] + [next(seq) for _ in range(spans[pos] - 1)])
            else:
                for pos, (bi, rep) in seq:
                    await one(pos, bi, rep)

        # Histogram intervals appended every hlog_interval_s of wall time (metrics.hlog).
        hl = self.hlogs = IntervalLogs(self.out / HISTOGRAMS, phase.name, {**st.hists.sets, "loop_lag": mon.lag},
                                       self.clock.origin_ns, st.start_ns,
                                       on_error=lambda e: self.progress(f"histogram logs not written: {e}"))
        hl.start(self.opts.hlog_interval_s)
        try:
            await self._run_workers(phase, st, mon, worker, aseq, seq, attribution, before, per_req)
        finally:
            files = hl.close(st.end_ns)  # the last interval ends with the phase (now, when it raised)
        st.histogram_files = {m: f for m, f in files.items() if m != "loop_lag"}
        # At C1 the last per-request read is the first of the closing pair: a closing read that
        # agrees with it is settled without a second whole scrape (issue 31 item 3).
        after = await self.snapshot(self.last_snap if per_req else None, at="phase_end")
        st.counter_delta = self.delta_json(before, after)
        if st.fleet is not None and before is not None and after is not None:
            st.fleet.counter_deltas = part_deltas(counter_delta(before, after).parts) or {}
        if st.counter_delta and st.counter_delta.get("reset"):
            st.invalid_reasons.append("server restarted during the phase (a counter went down)")
        if self.replica_lost:  # a fleet's replica could not be read (_counter_reads.lost_replica)
            st.invalid_reasons.append(f"replica_lost: {self.replica_lost}")
            self.replica_lost = None
        for why in duplicate_series((st.counter_delta or {}).get("invalid")):
            st.invalid_reasons.append(f"invalid exposition: {why}")  # a counter the server printed twice
        gate = self.writer
        n_unverified = gate.unverified.get(phase.name, 0)
        if n_unverified or (gate.drift_ns is not None and gate.drift_ns >= (self.rel(st.start_ns) or 0)):
            st.invalid_reasons.append(f"identity_drift: {n_unverified} records sent after the last identity "
                                      "read that matched")
        st.counter_reads = counter_read_summary(self.read_costs.get(phase.name, []))
        st.client = mon.to_json()
        if mon.lag.hist.get_total_count():
            self.lag_hists[phase.name] = mon.lag.hist
            if "loop_lag" in files:
                st.client["loop_lag_log"] = files["loop_lag"]
        pj = st.to_json()
        if st.deferred and self.abort is not None:
            pj["not_run"] = self.abort["reason"]  # the observer's line only; not in the summary
        self.obs.on_phase_end(pj)
        return st

    async def _run_workers(self, phase: Phase, st: PhaseStats, mon: ClientMonitor, worker: Callable[[], Any],
                           aseq: Any, seq: Any, attribution: str, before: Snapshot | None, per_req: bool) -> None:
        """The phase's workers, monitors and never-sent positions; ends by setting ``st.end_ns``."""
        be = self.backend
        intended = phase.intended_ns
        mon.start(open_loop=intended is not None)
        tasks = [asyncio.ensure_future(worker()) for _ in range(self.slots(phase))]
        self.active.update(tasks)
        watch = be is not None and (self.opts.abort_if or (self.opts.abort_on_restart and not per_req))
        bounds = asyncio.ensure_future(self.monitor(before)) if watch else None
        # Without a counter read after each request, identity is re-read on a timer (<= 1 s).
        ident_mon = (asyncio.ensure_future(self.identity_monitor())
                     if be is not None and not per_req and self.identity_before is not None else None)
        try:
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            mon.stop()
            self.active.difference_update(tasks)
            if bounds is not None:
                bounds.cancel()
            if ident_mon is not None:
                ident_mon.cancel()
        # Positions left by cancelled workers: never sent.
        if tasks and aseq is not None:
            async for pos, (bi, rep) in aseq:
                self.record_not_sent(st, phase, pos, bi, rep, attribution)
        for pos, (bi, rep) in (seq if tasks and aseq is None else ()):
            self.record_not_sent(st, phase, pos, bi, rep, attribution)
        await self.phase_sync(phase, "end")
        if st.sent == 0 and self.abort is not None:
            st.deferred = True
        st.end_ns = now_ns()

    def summary(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "plan_sha256": self.plan_sha256 or self.plan.sha256,
            "implementation": IMPLEMENTATION,
            "aborted": self.abort,
            "restarts": self.restarts,
            "identity": {"before": self.identity_before, "after": self.identity_after},
            "wall_s": round((now_ns() - self.clock.origin_ns) / 1e9, 6),
            "records": self.writer.count,
            **({"records_lost": self.writer.lost} if self.writer.lost else {}),
            "client_thresholds": thresholds(),
            # --target sim serves from this process: its CPU and loop time are in the
            # client figures, so client_bound there may be the simulator's doing.
            "client_includes_server": self.opts.target_label == "sim",
            "phases": [s.to_json() for s in self.stats],
            # Unit of each counter name in the phases' deltas (summary-schema.md, "Units").
            "units": counter_units(getattr(self.backend, "units", None), {
                k for s in self.stats for k in (s.counter_delta or {})
                if k not in ("reset", "reset_names", "invalid")}),
        }


def counter_units(units: dict[str, str] | None, names: set[str]) -> dict[str, str]:
    """The unit of each common name in ``names`` (summary.json ``units``).

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


def _h1_client(opts: RunOptions, headers: dict[str, str]) -> H1Client | None:
    """The runner's HTTP/1.1 client (runner.h1) for http and https targets; None = aiohttp (``send_body``).

    ``KVREPLAY_HTTP=aiohttp`` forces the aiohttp path (the parity reference).
    """
    if os.environ.get("KVREPLAY_HTTP", "") == "aiohttp":
        return None
    return H1Client(opts.target_url, headers=headers, connect_timeout_s=opts.connect_timeout_s,
                    read_idle_timeout_s=opts.read_idle_timeout_s, keepalive_timeout_s=opts.keepalive_timeout_s,
                    ssl_context=client_ssl_context(opts.ca_file) if opts.target_url.startswith("https:") else None,
                    replica_header=opts.replica_header if opts.replicas else None)
