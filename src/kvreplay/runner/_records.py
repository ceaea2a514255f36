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

__all__ = ["RecordMaking"]


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
               counts: Counts | None = None, sha: str | None = None) -> dict[str, Any]:
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
        """
        bodies = self.workload.bodies
        base = {
            "phase": phase.name,
            "repetition": rep,
            "position": pos,
            "body_index": bi,
            "body_sha256": sha_of(bodies, bi) if sha is None else sha,  # from the index: not read again
            "body_bytes": size_of(bodies, bi),
            "concurrency": phase.spec.concurrency,
        }
        label, comparable = getattr(phase.spec, "label", None), getattr(phase.spec, "comparable", True)
        if label is not None:
            base["label"] = label
        if not comparable:
            base["comparable"] = False
        if (turns := getattr(phase, "turns", None)) is not None:
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
        if getattr(getattr(self, "opts", None), "replicas", ()):
            base["replica"] = None  # a fleet run: runner.fleet.replica_fields names it once the request is done
        if out is None:
            return {**base, "sent": False, "status": "aborted", "http_status": None,
                    "error": (self.abort or {}).get("reason", "not sent")}
        r = out.stream
        pt, ct, cached, reasoning = usage_counts(r.usage) if counts is None else counts
        o = self.clock.origin_ns
        sent_ns, done_ns, first_ns, last_ns = out.sent_ns, out.done_ns, r.first_token_ns, r.last_token_ns
        ttft = first_ns - sent_ns if first_ns is not None else None
        tpot = None
        if first_ns is not None and last_ns is not None:
            n = ct if ct is not None else len(r.token_ns)
            if n and n > 1:
                tpot = (last_ns - first_ns) // (n - 1)
        itl = None
        s = itl_summary_ns(r.token_ns)  # native: no Python int per token
        if s is not None:
            n_gaps, total, top, p50 = s
            itl = {"n": n_gaps, "mean_ms": round(total / n_gaps / 1e6, 3),
                   "p50_ms": round(p50 / 1e6, 3), "max_ms": round(top / 1e6, 3)}
        terminal = "finished" if r.finish_reason else ("errored" if out.status != "ok" else "stopped")
        headers_ns, first_byte, first_content = out.headers_ns, r.first_byte_ns, r.first_content_ns
        base.update({
            "sent": True,
            "status": out.status,
            "http_status": out.http_status,
            "finish_reason": r.finish_reason,
            "terminal": terminal,
            "done_marker": r.done_marker,
            "visible": r.visible,
            "reasoning_only": r.reasoning_deltas > 0 and not r.visible,
            "chunks": r.chunks,
            "content_deltas": r.content_deltas,
            "reasoning_deltas": r.reasoning_deltas,
            "usage": {
                "prompt_tokens": pt,
                "completion_tokens": ct,
                "cached_tokens": cached,
                "reasoning_tokens": reasoning,
            },
            "usage_raw": r.usage,
            "timings": r.timings,
            "error": out.error,
            "timeout_kind": out.timeout_kind,
            "reconnects": out.reconnects,
            "t_intended_ns": None if intended_ns is None else intended_ns - o,
            "t_sent_ns": sent_ns - o,
            "t_headers_ns": None if headers_ns is None else headers_ns - o,
            "t_first_byte_ns": None if first_byte is None else first_byte - o,
            "t_first_token_ns": None if first_ns is None else first_ns - o,
            "t_first_content_ns": None if first_content is None else first_content - o,
            "t_last_token_ns": None if last_ns is None else last_ns - o,
            "t_done_ns": done_ns - o,
            "ttft_ns": ttft,
            "tpot_ns": tpot,
            "e2e_ns": done_ns - sent_ns,
            "queue_ns": None if intended_ns is None else max(0, sent_ns - intended_ns),
            "ttft_from_intended_ns": None if intended_ns is None or first_ns is None
            else first_ns - intended_ns,
            "e2e_from_intended_ns": None if intended_ns is None else done_ns - intended_ns,
            "itl": itl,
            "text_head": r.text_head,
            "attribution": attribution,
            "counter_delta": delta,
        })
        return base
