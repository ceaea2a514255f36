"""The runner's options (``RunOptions``) and the plan.json a run writes (``plan_json_of``).

``kvreplay.runner`` exports ``RunOptions``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvreplay import __version__
from kvreplay.accounting import IMPLEMENTATION
from kvreplay.clock import RunClock
from kvreplay.plan import Plan
from kvreplay.runner.identity import IdentityPin

__all__ = ["RunOptions", "plan_json_of"]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunOptions:
    """How to run a plan (nothing here changes what is sent).

    Attributes:
        target_url: Server base URL, e.g. ``http://127.0.0.1:8000``.
        out_dir: Run directory.
        backend_name: Name written to plan.json (``none`` without counters).
        headers: Extra request headers (e.g. Authorization); never written out.
        head_chars: Visible text kept per record (characters); 0 with ``--no-text``.
        connect_timeout_s: TCP connect bound (s).
        read_idle_timeout_s: Longest silence between two reads (s) (field case B12).
        total_timeout_s: Whole-request bound (s); None = none (B12: off by default).
        per_request_counters: Read counters around each request at C1.
        drain_timeout_s / drain_interval_s: Drain check bounds (s).
        abort_on_restart: Stop new requests when counters show a restart.
        stop_new_after_s: Deadline (s from run start) after which no request is sent.
        hard_deadline_s: Deadline (s) at which in-flight requests are cancelled too.
        max_error_rate: Abort when failed/sent exceeds this fraction (after
            ``error_rate_min_requests`` requests); every failure counts, transport
            and output alike (``metrics.summary.failure_kind``).
        max_output_error_rate: As ``max_error_rate`` counting output failures only
            (the server answered badly), so that a transport failure never trips it.
        max_transport_failures: This many consecutive sends that never reached the
            server (connection refused, reset before any response byte, connect
            timeout) stop new requests (``aborted.reason: transport``); None = never.
        abort_if: Bounds on common counter/gauge names, ``(name, op, value)`` with op
            one of ``>``, ``>=``, ``<``, ``<=``; checked at every counter read and
            every ``monitor_interval_s`` while a phase runs.
        keepalive_timeout_s: Close pooled idle connections after this long (s), under
            the servers' own idle limits (llama.cpp closes at 5 s, field case B11).
        quiet: No progress lines.
        run_extra: Extra keys of plan.json's ``run`` block (``sim_time_scale``).
        ca_file: PEM file of extra trusted CA certificates for https targets (``--ca-file``).
        elapsed_before_s: Seconds of the run gone before these options took effect (a
            worker's deadlines are shortened by it); added back in the deadline messages.
        identity_pins: Expected identity values (``runner.identity``), checked before the
            first request and at every identity read.
        identity_interval_s: Identity re-read period while a phase runs without
            per-request counter reads (s; at most 1 s is used).
        abort_on_malformed: The first ``malformed`` record stops new requests.
        on_check_fail: ``skip`` (a phase whose drain/fresh check failed sends nothing)
            or ``mark`` (it is sent and marked invalid).
        hlog_interval_s: Wall time between two intervals appended to each
            ``histograms/<phase>.<metric>.hlog`` while a phase runs (s; ``metrics.hlog``).
        history: Conversation workloads: ``captured`` (the retained bytes, the default) or
            ``live`` (earlier turns' assistant messages replaced by this server's replies:
            the one option that changes the bytes sent; ``workload.conversations.live_body``).
        replicas: A fleet target's replica URLs as given (``runner.fleet``); ``target_url``
            is then the router. Empty: one server (records carry no ``replica``).
        replica_header: The response header naming the replica (fleet runs only).
        fleet_json: plan.json ``run.fleet`` (router, replicas with backend and profile, header).
    """

    target_url: str
    out_dir: Path
    backend_name: str = "none"
    target_label: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    head_chars: int = 256
    connect_timeout_s: float = 30.0
    read_idle_timeout_s: float = 120.0
    total_timeout_s: float | None = None
    per_request_counters: bool = True
    drain_timeout_s: float = 10.0
    drain_interval_s: float = 0.2
    abort_on_restart: bool = False
    stop_new_after_s: float | None = None
    hard_deadline_s: float | None = None
    max_error_rate: float | None = None
    max_output_error_rate: float | None = None
    max_transport_failures: int | None = 3
    error_rate_min_requests: int = 20
    abort_if: tuple[tuple[str, str, float], ...] = ()
    monitor_interval_s: float = 1.0
    keepalive_timeout_s: float = 2.0
    quiet: bool = False
    elapsed_before_s: float = 0.0
    run_extra: dict[str, Any] = field(default_factory=dict)
    identity_pins: tuple[IdentityPin, ...] = ()
    identity_interval_s: float = 1.0
    abort_on_malformed: bool = False
    on_check_fail: str = "skip"
    ca_file: str | None = None
    hlog_interval_s: float = 1.0
    history: str = "captured"
    replicas: tuple[str, ...] = ()
    replica_header: str | None = None
    fleet_json: dict[str, Any] | None = None


def plan_json_of(plan: Plan, opts: RunOptions, clock: RunClock, **extra: Any) -> dict[str, Any]:
    """plan.json's content for a run of ``plan`` with ``opts`` (``extra`` joins the run block)."""
    return plan.to_json({
        "target": opts.target_label or opts.target_url,
        "backend": opts.backend_name,
        "kvreplay_version": __version__,
        "implementation": IMPLEMENTATION,
        "wall_anchor_ns": clock.wall_anchor_ns,
        "unplanned_requests": [],
        **opts.run_extra,
        **({"history": opts.history} if opts.history != "captured" else {}),
        **({"fleet": opts.fleet_json} if opts.fleet_json is not None else {}),
        # The execution contract the run kept (runner._contract).
        "contract": {
            "identity_pins": [p.to_json() for p in opts.identity_pins],
            "abort_on_malformed": opts.abort_on_malformed,
            "max_transport_failures": opts.max_transport_failures,
            "on_check_fail": opts.on_check_fail,
        },
        **extra,
    }, lazy=True)  # sequences streamed into plan.json, never held as lists (issue 32)
