"""Per-phase aggregation of records into ``summary.json`` (schema version 1).

summary.json::

    {"schema_version": 1, "plan_sha256", "implementation", "aborted": null | {"reason", "message"},
     "client_includes_server": bool (--target sim: the simulator shares the client's process),
     "identity": {"before", "after"}, "wall_s",
     "phases": [{"name", "concurrency", "repeats", "planned", "sent", "ok", "not_sent", "peak_in_flight",
                 "failed": {class: n}, "failed_transport": n, "failed_output": n,
                 "wall_s", "throughput_rps", "output_tokens_per_s",
                 "service_throughput_rps" (ok * C / sum of E2E s: without the client's pauses between
                                           requests, e.g. C1 counter reads; None in an open loop),
                 "ttft_ms" | "itl_ms" | "tpot_ms" | "e2e_ms" | "queue_ms": {n, mean, p50, p90, p99, max},
                 "tokens": {"prompt", "cached", "completion", "cached_unknown"},
                 "attribution": "per_request" | "phase_only" | "none",
                 "counter_delta": {...} | null, "drain": {...} | null,
                 "counter_reads": {"n", "ms_p50", "ms_p99", "bytes_per_read"} | null (the phase's
                                  counter GETs: time and body size; runner._counter_reads),
                 "cross_check": {"usage_cached_tokens", "counter_hit_tokens", "agree",
                                 "requests_disagreeing", "disagreements": [...], "note",
                                 "gap_tokens", "requests_without_usage": {...},
                                 "unexplained_gap_tokens", "explained"} | null,
                 "schedule": {"open_loop", "offered_rps", "achieved_rps", "dispatch_delay_ms",
                              "kept_schedule", "cap_wait_max_ms" (the longest a send waited for a
                              slot under the cap; null: not known), "note"},
                 "deferred": bool (aborted before it sent anything),
                 "label": str | null, "comparable": bool (false: a control, never compared
                          as a main arm), "check_failed": null | reason (its drain/fresh check
                          failed; with on_check_fail "skip" nothing was sent),
                 "client": {"bound", "verdict", "cpu_s", "cpu_utilisation", "starved_s", "starvation_share",
                            "loop_lag_p50_ms", "loop_lag_p99_ms", "loop_lag_max_ms", "loop_lag_samples",
                            "loop_late_s", "stall_cpu_share", "stall_wait_share", "timed_sends",
                            "late_sends", "late_send_share", "loop_lag_log"} (metrics.selfmeasure),
                 "client_bound": bool (verdict client_bound: loop-lag p99 and CPU or starvation over
                                       the thresholds in summary["client_thresholds"]),
                 "valid": bool, "invalid_reasons": [...], "histograms": {metric: file},
                 "out_of_range": n,
                 conversation phases only (records with ``session``/``turn``):
                 "sessions": n (sessions planned: records of turn 0),
                 "by_turn": [{"turn", "requests" (ok), "ttft_ms": {n, mean, p50, p90, p99, max},
                              "cached_tokens" (of the answers that reported it), "prompt_tokens",
                              "hit_rate" (cached / prompt, null without prompt tokens or when an
                              answer did not report cached_tokens: absent is not zero),
                              "cached_unknown" (only when > 0)}],
                 "history": {"mode": "live", "turns", "differs"} (live history only: records sent,
                             and those whose sent bytes differ from the retained ones),
                 "replicas": [...], "fleet": {...} (a fleet target only: metrics.fleet)}]}

Latency metrics aggregate ``ok`` requests only; failures are counted by class
(``failed``) and split by kind (``failure_kind``): ``failed_transport`` counts sends
that never reached the server (connection refused, reset before any response byte,
connect timeout), ``failed_output`` those the server answered badly (HTTP error,
malformed, stream error, cut, read or total timeout); the client's own cancellations
and resource errors are in neither.
TPOT takes a sample only from a request with a decode interval (two or more
completion tokens arriving at two or more times): a non-streamed answer gives
TTFT and E2E but no TPOT, as it gives no ITL.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kvreplay.evidence.engine import counter_cached
from kvreplay.evidence.vocab import USAGE_HOST_KEYS
from kvreplay.metrics.fleet import FleetStats
from kvreplay.metrics.histograms import METRICS, LatencySet, PhaseHistograms

if TYPE_CHECKING:
    pass

__all__ = ["SCHEMA_VERSION", "TRANSPORT_STATUSES", "PhaseStats", "failure_kind"]

SCHEMA_VERSION = 1
MAX_LISTED = 20
"""Disagreeing requests listed per phase in ``cross_check`` (the count is exact)."""

TRANSPORT_STATUSES = frozenset({"connect", "write"})
"""Record statuses of a send that never reached the server: ``connect`` (refused, no
route), ``write`` (reset or closed before any response byte). A ``timeout`` whose
``timeout_kind`` is ``connect`` is one too (``failure_kind``)."""

_NOT_THE_SERVERS = frozenset({"ok", "aborted", "client_error", "check_failed"})


def failure_kind(rec: dict[str, Any]) -> str | None:
    """``"transport"``, ``"output"`` or None for one sent record (or a record-shaped dict).

    ``transport``: the server was not reached (``TRANSPORT_STATUSES``, or a connect
    timeout); ``output``: it was reached and answered badly (any other failed status);
    None: ``ok``, not sent, or the client's own doing (``aborted``: cancelled by the
    client; ``client_error``: the client's resources or a client bug).
    """
    status = rec.get("status")
    if status in TRANSPORT_STATUSES or (status == "timeout" and rec.get("timeout_kind") == "connect"):
        return "transport"
    if status in _NOT_THE_SERVERS or not rec.get("sent", True):
        return None
    return "output"


def _has_decode_interval(rec: dict[str, Any], token_ns: Sequence[int] | None) -> bool:
    """Whether a request shows a decode interval, so its ``tpot_ns`` is a TPOT sample.

    Not when it has fewer than 2 completion tokens or fewer than 2 token arrival
    times: a non-streamed answer is one JSON body, TTFT == E2E and ``tpot_ns``
    comes out 0, which measures nothing. The arrivals are ``token_ns`` when
    given (the same test as ITL's); when rebuilding from records, the record's
    ``itl`` summary (None below 2 arrivals), else its first and last token times.
    """
    ct = (rec.get("usage") or {}).get("completion_tokens")
    if ct is not None and ct < 2:
        return False
    if token_ns is not None:
        return len(token_ns) > 1
    if "itl" in rec:
        return rec["itl"] is not None
    first, last = rec.get("t_first_token_ns"), rec.get("t_last_token_ns")
    return first is None or last is None or last > first


_RECORD_KEYS = tuple((m, f"{m}_ns") for m in ("ttft", "tpot", "e2e", "queue", "ttft_from_intended",
                                                "e2e_from_intended"))
"""(histogram metric, record key) of the per-request latencies ``PhaseStats.add`` records."""


@dataclass(slots=True)
class PhaseStats:
    """Running totals for one phase; ``add()`` one record at a time."""

    name: str
    concurrency: int
    repeats: int
    planned: int
    sent: int = 0
    ok: int = 0
    not_sent: int = 0
    failed: dict[str, int] = field(default_factory=dict)
    failed_transport: int = 0
    failed_output: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    cached_unknown: int = 0
    completion_tokens: int = 0
    start_ns: int | None = None
    end_ns: int | None = None
    hists: PhaseHistograms = field(default_factory=PhaseHistograms)
    counter_delta: dict | None = None
    counter_reads: dict | None = None
    drain: dict | None = None
    invalid_reasons: list[str] = field(default_factory=list)
    attribution: str = "none"
    histogram_files: dict[str, str] = field(default_factory=dict)
    deferred: bool = False
    peak_in_flight: int = 0
    open_loop: bool = False
    offered_rps: float | None = None
    schedule_slack_ms: float = 10.0
    # Open loop: the longest a send waited past its intended time for a free slot under the
    # concurrency cap (ns; 0: the cap never held a send back; None: not known, e.g. a merge of
    # older payloads). A send late for another reason (the loop or the host) is not counted.
    cap_wait_max_ns: int | None = None
    disagreements: list[dict[str, Any]] = field(default_factory=list)
    n_disagreements: int = 0
    client: dict[str, Any] | None = None
    label: str | None = None
    comparable: bool = True
    check_failed: str | None = None
    no_usage_n: int = 0
    no_usage_by_status: dict[str, int] = field(default_factory=dict)
    no_usage_tokens: float = 0.0
    no_usage_counted: int = 0
    no_usage_positions: list[int] = field(default_factory=list)
    sessions: int = 0
    turns: dict[int, _TurnStats] = field(default_factory=dict)
    live: list[int] = field(default_factory=lambda: [0, 0])  # live history: records sent, bytes differing
    fleet: FleetStats | None = None  # a fleet run's per-replica totals (metrics.fleet), else None

    def add(self, rec: dict[str, Any], token_ns: Sequence[int] | None = None) -> None:
        """Account one record (and the token arrival times of its stream, ns).

        Args:
            rec: A record as written to records.jsonl.
            token_ns: Arrival of each token event (ns) for ITL samples; None to
                skip ITL (e.g. when rebuilding from records alone).
        """
        if self.fleet is None and "replica" in rec:
            self.fleet = FleetStats()
        if self.fleet is not None:
            self.fleet.add(rec, token_ns)
        status = rec["status"]
        turn = rec.get("turn")
        if turn == 0:
            self.sessions += 1
        if not rec.get("sent", True):
            self.not_sent += 1
            return
        self.sent += 1
        if rec.get("history") == "live":
            self.live[0] += 1
            self.live[1] += bool(rec.get("history_differs"))
        if status != "ok" or rec.get("counter_delta"):  # else _cross_check has nothing to do
            self._cross_check(rec)
        if status != "ok":
            self.failed[status] = self.failed.get(status, 0) + 1
            kind = failure_kind(rec)
            if kind == "transport":
                self.failed_transport += 1
            elif kind == "output":
                self.failed_output += 1
            return
        self.ok += 1
        u = rec.get("usage") or {}
        self.prompt_tokens += u.get("prompt_tokens") or 0
        self.completion_tokens += u.get("completion_tokens") or 0
        if u.get("cached_tokens") is None:
            self.cached_unknown += 1
        else:
            self.cached_tokens += u["cached_tokens"]
        s = self.hists.sets
        for metric, key in _RECORD_KEYS:
            v = rec.get(key)
            if v is not None and (metric != "tpot" or _has_decode_interval(rec, token_ns)):
                s[metric].record_ns(v)
        if token_ns is not None and len(token_ns) > 1:
            s["itl"].record_gaps_of(token_ns)
        if turn is not None:
            self.turns.setdefault(turn, _TurnStats()).add(rec)

    def _cross_check(self, rec: dict[str, Any]) -> None:
        """Per request (C1): usage ``cached_tokens`` vs the counters' ``hit_tokens`` delta.

        A sent request that failed (timeout, cut, error) has no usage, though the
        server may have counted its hits: it is counted in ``requests_without_usage``
        and, with a per-request delta, its counted tokens too.
        """
        d = rec.get("counter_delta")
        u = (rec.get("usage") or {}).get("cached_tokens")
        if rec.get("status") != "ok":
            self.no_usage_n += 1
            st = str(rec.get("status"))
            self.no_usage_by_status[st] = self.no_usage_by_status.get(st, 0) + 1
            if len(self.no_usage_positions) < MAX_LISTED:
                self.no_usage_positions.append(rec["position"])
            if d and "hit_tokens" in d and not d.get("reset"):
                self.no_usage_tokens += counter_cached(d)
                self.no_usage_counted += 1
            return
        if not d or "hit_tokens" not in d or u is None or d.get("reset"):
            return
        counted = counter_cached(d)
        if counted != u:
            self.n_disagreements += 1
            if len(self.disagreements) < MAX_LISTED:
                self.disagreements.append({"position": rec["position"], "body_index": rec["body_index"],
                                           "usage_cached_tokens": u, "counter_hit_tokens": counted})

    def cross_check(self) -> dict[str, Any] | None:
        """Usage ``cached_tokens`` against counter ``hit_tokens``, per phase and per request (C1).

        SERVERS.md: counters and usage can disagree (vLLM counts hits at admission,
        block-granular, preempted requests excluded; SGLang with MTP reports 0;
        llama.cpp's ``cache_n`` is per slot). Disagreements are listed, never hidden.
        """
        d = self.counter_delta
        if not d or "hit_tokens" not in d:
            return None
        usage_total = None if self.cached_unknown else self.cached_tokens
        counted = counter_cached(d)
        out: dict[str, Any] = {
            "usage_cached_tokens": usage_total,
            "counter_hit_tokens": counted,
            "agree": usage_total is not None and usage_total == counted and not self.n_disagreements,
            "requests_disagreeing": self.n_disagreements,
            "disagreements": list(self.disagreements),
        }
        gap = None if usage_total is None else counted - usage_total
        known = self.no_usage_n > 0 and self.no_usage_counted == self.no_usage_n
        out["gap_tokens"] = gap
        out["requests_without_usage"] = {
            "n": self.no_usage_n,
            "by_status": dict(sorted(self.no_usage_by_status.items())),
            "positions": list(self.no_usage_positions),
            "counter_tokens": self.no_usage_tokens if known else (0 if not self.no_usage_n else None),
        }
        unexplained = None
        if gap is not None and (known or not self.no_usage_n):
            unexplained = gap - (self.no_usage_tokens if known else 0)
        out["unexplained_gap_tokens"] = unexplained
        out["explained"] = unexplained == 0 and not self.n_disagreements
        if usage_total is None:
            out["note"] = f"{self.cached_unknown} responses did not report cached_tokens"
        elif usage_total != counted:
            out["note"] = f"gap of {counted - usage_total:+g} tokens (counters - usage)"
            if self.no_usage_n:
                why = ", ".join(f"{k} {v}" for k, v in sorted(self.no_usage_by_status.items()))
                out["note"] += f"; {self.no_usage_n} requests without usage ({why})"
                if known:
                    out["note"] += f" account for {self.no_usage_tokens:+g}"
        host = next((k for k in USAGE_HOST_KEYS if k in d), None)
        if host is not None:
            out["counted_as"] = f"hit_tokens + {host}"
        return out

    def _schedule(self, wall_s: float | None) -> dict[str, Any]:
        if not self.open_loop:
            return {"open_loop": False,
                    "note": "closed loop: no intended send times; latencies are from the actual send"}
        q = self.hists.sets["queue"].summary_ms()
        late = q["max"] is not None and q["max"] > self.schedule_slack_ms
        cap_ms = None if self.cap_wait_max_ns is None else round(self.cap_wait_max_ns / 1e6, 3)
        cap_bound = cap_ms is not None and cap_ms > self.schedule_slack_ms
        note = "schedule kept"
        if late and cap_bound:
            note = (f"client could not keep schedule: sends up to {q['max']} ms late (concurrency cap "
                    f"{self.concurrency} was full: a send waited up to {cap_ms} ms for a free slot); "
                    "see *_from_intended latencies")
        elif late and cap_ms is not None:
            note = (f"client could not keep schedule: sends up to {q['max']} ms late with a slot free under "
                    f"the concurrency cap {self.concurrency} (the client's loop or host held them: see "
                    "client.loop_lag_p99_ms); see *_from_intended latencies")
        elif late:
            note = f"client could not keep schedule: sends up to {q['max']} ms late; see *_from_intended latencies"
        return {
            "open_loop": True,
            "offered_rps": round(self.offered_rps, 3) if self.offered_rps else None,
            "achieved_rps": round(self.sent / wall_s, 3) if wall_s else None,
            "dispatch_delay_ms": q,
            "kept_schedule": not late,
            "cap_wait_max_ms": cap_ms,
            "note": note,
        }

    def service_throughput_rps(self) -> float | None:
        """Request throughput from service time (req/s): ``ok * C / sum(E2E s)`` of ok requests.

        The rate the phase's C slots would reach if each sent its next request the
        instant its previous one ended: the client's pauses between requests (at C1,
        the per-request counter reads) are left out, unlike ``throughput_rps``
        (ok / phase wall time), which includes them. None in an open loop (its
        rate is the schedule's) or without an ok E2E.
        """
        e2e = self.hists.sets["e2e"]
        if self.open_loop or not self.ok or e2e.sum_us <= 0:
            return None
        return round(e2e.hist.get_total_count() * self.concurrency / (e2e.sum_us / 1e6), 3)

    def to_json(self) -> dict[str, Any]:
        """The phase's entry in summary.json."""
        wall_s = (self.end_ns - self.start_ns) / 1e9 if self.start_ns is not None and self.end_ns else None
        out: dict[str, Any] = {
            "name": self.name,
            "label": self.label,
            "comparable": self.comparable,
            "concurrency": self.concurrency,
            "repeats": self.repeats,
            "planned": self.planned,
            "sent": self.sent,
            "ok": self.ok,
            "not_sent": self.not_sent,
            "failed": dict(sorted(self.failed.items())),
            "failed_transport": self.failed_transport,
            "failed_output": self.failed_output,
            "wall_s": round(wall_s, 6) if wall_s else None,
            "throughput_rps": round(self.ok / wall_s, 3) if wall_s else None,
            "service_throughput_rps": self.service_throughput_rps(),
            "output_tokens_per_s": round(self.completion_tokens / wall_s, 1) if wall_s else None,
        }
        for m in METRICS:
            out[f"{m}_ms"] = self.hists.sets[m].summary_ms()
        out["tokens"] = {
            "prompt": self.prompt_tokens,
            "cached": self.cached_tokens,
            "completion": self.completion_tokens,
            "cached_unknown": self.cached_unknown,
        }
        out["peak_in_flight"] = self.peak_in_flight
        out["schedule"] = self._schedule(wall_s)
        reasons = list(self.invalid_reasons)
        # Closed loop only: in an open loop cN is a cap, and staying under it is normal.
        # A conversation phase has at most one request in flight per session.
        want = min(self.concurrency, self.sessions) if self.sessions else self.concurrency
        if not self.open_loop and self.sent >= want and self.peak_in_flight < want:
            reasons.append(f"client never had {want} requests in flight (peak {self.peak_in_flight})")
        out["attribution"] = self.attribution
        out["counter_delta"] = self.counter_delta
        out["cross_check"] = self.cross_check()
        out["drain"] = self.drain
        out["deferred"] = self.deferred
        out["check_failed"] = self.check_failed
        out["valid"] = not reasons and not self.deferred
        out["invalid_reasons"] = reasons
        if self.client is not None:
            out["client"] = dict(self.client)
            out["client_bound"] = bool(self.client.get("bound"))
        out["histograms"] = dict(self.histogram_files)
        out["out_of_range"] = sum(ls.out_of_range for ls in self.hists.sets.values())
        out["counter_reads"] = self.counter_reads
        if self.sessions or self.turns:
            out["sessions"] = self.sessions
            out["by_turn"] = [self.turns[k].to_json(k) for k in sorted(self.turns)]
        if self.live[0]:
            out["history"] = {"mode": "live", "turns": self.live[0], "differs": self.live[1]}
        if self.fleet is not None:
            out.update(self.fleet.to_json())  # "replicas" and "fleet" (metrics.fleet)
        return out


@dataclass(slots=True)
class _TurnStats:
    """Running totals of the ok requests of one turn index (``PhaseStats.turns``)."""

    requests: int = 0
    ttft: LatencySet = field(default_factory=LatencySet)
    cached_tokens: int = 0
    prompt_tokens: int = 0
    cached_unknown: int = 0

    def add(self, rec: dict[str, Any]) -> None:
        u = rec.get("usage") or {}
        self.requests += 1
        self.prompt_tokens += u.get("prompt_tokens") or 0
        if u.get("cached_tokens") is None:
            self.cached_unknown += 1
        else:
            self.cached_tokens += u["cached_tokens"]
        if rec.get("ttft_ns") is not None:
            self.ttft.record_ns(rec["ttft_ns"])

    def to_json(self, turn: int) -> dict[str, Any]:
        return {"turn": turn, "requests": self.requests, "ttft_ms": self.ttft.summary_ms(),
                "cached_tokens": self.cached_tokens, "prompt_tokens": self.prompt_tokens,
                "hit_rate": (round(self.cached_tokens / self.prompt_tokens, 6)
                             if self.prompt_tokens and not self.cached_unknown else None),
                **({"cached_unknown": self.cached_unknown} if self.cached_unknown else {})}
