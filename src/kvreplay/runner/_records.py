"""The runner's records: one dict per position, sent or not (a mixin of ``_runner._Run``).

Split out of ``kvreplay.runner._runner`` (as ``_counter_reads`` and ``_contract`` are):
``RecordMaking.record`` builds a position's record from its outcome (the fields of
docs/summary-schema.md, "records.jsonl"), ``record_not_sent`` and ``refuse_changed``
write the record of a position that was never sent. ``_Run`` holds the state used
(``workload``, ``opts``, ``clock``, ``writer``, ``abort``, ``prev_done``, ``sent_sha``)
and ``request_abort``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvreplay.accounting.events import usage_counts
from kvreplay.accounting.sse import itl_summary_ns
from kvreplay.metrics.summary import PhaseStats
from kvreplay.plan import Phase
from kvreplay.redaction import escape_controls, redact
from kvreplay.runner.http import RequestOutcome
from kvreplay.runner.outcomes import Counts
from kvreplay.workload.index import BodyChanged, sha_of, size_of

__all__ = ["SENT_KEYS", "RecordMaking"]

HEAD_KEYS = ("phase", "repetition", "position", "body_index", "body_sha256", "body_bytes", "concurrency")
"""A record's first keys, in records.jsonl's order (docs/summary-schema.md, "records.jsonl")."""
SENT_KEYS = ("sent", "status", "http_status", "finish_reason", "terminal", "done_marker", "visible",
             "reasoning_only", "chunks", "content_deltas", "reasoning_deltas", "usage", "usage_raw", "timings",
             "error", "timeout_kind", "reconnects", "t_intended_ns", "t_sent_ns", "t_headers_ns", "t_first_byte_ns",
             "t_first_token_ns", "t_first_content_ns", "t_last_token_ns", "t_done_ns", "ttft_ns", "tpot_ns",
             "e2e_ns", "queue_ns", "ttft_from_intended_ns", "e2e_from_intended_ns", "itl", "text_head",
             "attribution", "counter_delta")
"""A sent position's keys after the head (and a label's, a session's or a replica's keys), in order."""
_SENT_TEMPLATE: dict[str, Any] = dict.fromkeys(SENT_KEYS)
_PLAIN_TEMPLATE: dict[str, Any] = dict.fromkeys(HEAD_KEYS + SENT_KEYS)


class RecordMaking:
    """Records of a run (a mixin: ``_Run`` holds the state)."""

    workload: Any
    opts: Any
    clock: Any
    writer: Any
    abort: dict[str, Any] | None
    prev_done: dict[int, int | None]
    sent_sha: dict[int, str]

    if TYPE_CHECKING:  # defined by _Run; declared here for the type checker

        def request_abort(self, reason: str, message: str) -> None: ...

    def record_not_sent(self, st: PhaseStats, phase: Phase, pos: int, bi: int, rep: int, attribution: str,
                        error: str | None = None) -> None:
        """Write the record of a position never sent (stopped or cancelled before its send; ``error`` overrides why)."""
        rec = self.record(phase, pos, bi, rep, None, None, attribution)
        if error is not None:
            rec["error"] = error
        self.writer.write(rec)
        st.add(rec)

    def refuse_changed(self, st: PhaseStats, phase: Phase, pos: int, bi: int, rep: int, attribution: str,
                       exc: BodyChanged) -> None:
        """A body edited on disk since planning: not sent; its record names why, and the run stops.

        The frozen plan no longer describes what would be sent, so no further body is
        sent either (abort reason ``body_changed``; later positions are recorded as not sent).
        """
        self.request_abort("body_changed", str(exc))
        rec = self.record(phase, pos, bi, rep, None, None, attribution)
        rec["error"] = escape_controls(redact(str(exc)), newlines=True)[:1024]
        self.writer.write(rec)
        st.add(rec)

    def rel(self, t: int | None) -> int | None:
        return None if t is None else t - self.clock.origin_ns

    def record(self, phase: Phase, pos: int, bi: int, rep: int, out: RequestOutcome | None,
               delta: dict | None, attribution: str, intended_ns: int | None = None,
               counts: Counts | None = None, sha: str | None = None, size: int | None = None) -> dict[str, Any]:
        """The record of position ``pos`` (docs/summary-schema.md, "records.jsonl"); ``out`` None: not sent.

        Args:
            phase: The phase.
            pos: The position in the phase.
            bi: Its body's index in the workload.
            rep: Its repetition.
            out: The outcome; None for a position never sent.
            delta: The request's counter delta (``counter_delta``), or None.
            attribution: How counters are attributed to requests (``attribution``).
            intended_ns: The open loop's intended send time (absolute ns), None in a closed loop.
            counts: ``out``'s usage counts as ``outcomes.check_usage`` returned them (read
                once a request); None: read here from ``out.stream.usage``.
            sha: Body ``bi``'s hex SHA-256 when the caller holds it (the ``Body`` just
                sent); None: from the workload's index.
            size: Body ``bi``'s bytes when the caller holds them (``len`` of the body just
                sent, checked against the index); None: from the workload's index.
        """
        bodies = self.workload.bodies
        spec = phase.spec
        label, comparable = getattr(spec, "label", None), getattr(spec, "comparable", True)
        turns = getattr(phase, "turns", None)
        fleet = bool(getattr(getattr(self, "opts", None), "replicas", ()))
        head = (phase.name, rep, pos, bi,
                sha_of(bodies, bi) if sha is None else sha,  # from the index: not read again
                size_of(bodies, bi) if size is None else size, spec.concurrency)  # HEAD_KEYS' values
        if out is not None and label is None and comparable and turns is None and not fleet:
            # The common record: a copy of the template (every key in place, in order) and
            # the values assigned, not two dicts merged (issue 43 item 2).
            rec = _PLAIN_TEMPLATE.copy()
            (rec["phase"], rec["repetition"], rec["position"], rec["body_index"], rec["body_sha256"],
             rec["body_bytes"], rec["concurrency"]) = head
            _fill_sent(rec, out, delta, attribution, intended_ns, counts, self.clock.origin_ns)
            return rec
        base = dict(zip(HEAD_KEYS, head, strict=True))
        if label is not None:
            base["label"] = label
        if not comparable:
            base["comparable"] = False
        if turns is not None:
            ss, prev = self.workload.sessions, self.prev_done.get(pos)
            base["session"], base["turn"] = turns[pos]
            # a session's first turn is sent when the session starts: its think time is not applied,
            # so not planned either (workload.conversations.session_warnings: first_turn_think)
            base["think_time_planned_s"] = (None if ss is None else ss.turns[bi].think_time_s
                                            if turns[pos][1] > 0 else 0.0)
            base["think_time_actual_s"] = (None if prev is None or out is None
                                           else round((out.sent_ns - prev) / 1e9, 9))
            if self.opts.history == "live":
                sent_sha = self.sent_sha.get(pos) if out is not None else None
                base["history"], base["sent_sha256"] = "live", sent_sha
                base["history_differs"] = sent_sha is not None and sent_sha != base["body_sha256"]
        if fleet:
            base["replica"] = None  # a fleet run: runner.fleet.replica_fields names it once the request is done
        if out is None:
            return {**base, "sent": False, "status": "aborted", "http_status": None,
                    "error": (self.abort or {}).get("reason", "not sent")}
        base.update(_SENT_TEMPLATE)
        _fill_sent(base, out, delta, attribution, intended_ns, counts, self.clock.origin_ns)
        return base


def _fill_sent(rec: dict[str, Any], out: RequestOutcome, delta: dict | None, attribution: str,
               intended_ns: int | None, counts: Counts | None, o: int) -> None:
    """Assign a sent position's values to ``rec``'s keys from ``SENT_KEYS`` (in place; None stays where nothing came).

    ``o`` is the run's clock origin (ns): the record's ``t_*`` times are relative to it.
    """
    r = out.stream
    pt, ct, cached, reasoning = usage_counts(r.usage) if counts is None else counts
    sent_ns, done_ns, first_ns, last_ns = out.sent_ns, out.done_ns, r.first_token_ns, r.last_token_ns
    if first_ns is not None:
        rec["ttft_ns"] = first_ns - sent_ns
        rec["t_first_token_ns"] = first_ns - o
        if last_ns is not None:
            n = ct if ct is not None else len(r.token_ns)
            if n and n > 1:
                rec["tpot_ns"] = (last_ns - first_ns) // (n - 1)
    s = itl_summary_ns(r.token_ns)  # native: no Python int per token
    if s is not None:
        n_gaps, total, top, p50 = s
        rec["itl"] = {"n": n_gaps, "mean_ms": round(total / n_gaps / 1e6, 3),
                      "p50_ms": round(p50 / 1e6, 3), "max_ms": round(top / 1e6, 3)}
    status, finish, visible = out.status, r.finish_reason, r.visible
    headers_ns, first_byte, first_content = out.headers_ns, r.first_byte_ns, r.first_content_ns
    rec["sent"] = True
    rec["status"] = status
    rec["http_status"] = out.http_status
    rec["finish_reason"] = finish
    rec["terminal"] = "finished" if finish else ("errored" if status != "ok" else "stopped")
    rec["done_marker"] = r.done_marker
    rec["visible"] = visible
    rec["reasoning_only"] = r.reasoning_deltas > 0 and not visible
    rec["chunks"] = r.chunks
    rec["content_deltas"] = r.content_deltas
    rec["reasoning_deltas"] = r.reasoning_deltas
    rec["usage"] = {"prompt_tokens": pt, "completion_tokens": ct, "cached_tokens": cached,
                    "reasoning_tokens": reasoning}
    rec["usage_raw"] = r.usage
    rec["timings"] = r.timings
    rec["error"] = out.error
    rec["timeout_kind"] = out.timeout_kind
    rec["reconnects"] = out.reconnects
    rec["t_sent_ns"] = sent_ns - o
    if headers_ns is not None:
        rec["t_headers_ns"] = headers_ns - o
    if first_byte is not None:
        rec["t_first_byte_ns"] = first_byte - o
    if first_content is not None:
        rec["t_first_content_ns"] = first_content - o
    if last_ns is not None:
        rec["t_last_token_ns"] = last_ns - o
    rec["t_done_ns"] = done_ns - o
    rec["e2e_ns"] = done_ns - sent_ns
    if intended_ns is not None:  # the open loop's times (None in a closed loop: the template's)
        rec["t_intended_ns"] = intended_ns - o
        rec["queue_ns"] = max(0, sent_ns - intended_ns)
        rec["ttft_from_intended_ns"] = None if first_ns is None else first_ns - intended_ns
        rec["e2e_from_intended_ns"] = done_ns - intended_ns
    rec["text_head"] = r.text_head
    rec["attribution"] = attribution
    rec["counter_delta"] = delta
