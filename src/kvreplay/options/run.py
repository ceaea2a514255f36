"""The keywords of a run (``kvreplay run`` / ``kvreplay.replay``) and of its simulator, as ``TypedDict`` classes.

Every key is the ``dest`` of the command line's flag (``kvreplay.api.run.add_arguments``,
``kvreplay.sim.config.add_arguments``, ``kvreplay.api.fleet.add_fleet_arguments``); the
values are the Python types the run uses (durations in float seconds, fractions as floats,
repeatable flags as lists of their strings). A key added to a parser and not here fails
the option-parity test.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, TypedDict

__all__ = ["RUN_KEYWORDS", "SIM_KEYWORDS", "RunOptions", "SimOptions"]


class RunOptions(TypedDict, total=False):
    """Keyword options of ``kvreplay.replay`` (each ``--flag`` of ``kvreplay run`` by its Python name).

    Durations are seconds (float); ``None`` turns an optional bound off.

    Attributes:
        connect_timeout: ``--connect-timeout``: TCP/TLS connect bound (s; default 30).
        read_timeout: ``--read-timeout``: longest silence between two reads of a response (s; default 120).
        total_timeout: ``--total-timeout``: whole-request bound (s; default None = off).
        drain_timeout: ``--drain-timeout``: longest wait for the server to go idle before a phase (s; default 10).
        keepalive_timeout: ``--keepalive-timeout``: idle pooled connections closed after it (s; default 2).
        stop_new_after: ``--stop-new-after``: no new request after this long (s).
        hard_deadline: ``--hard-deadline``: requests still in flight cancelled at this point (s).
        no_per_request_counters: ``--no-per-request-counters``: at C1, no counter read around each request.
        no_text: ``--no-text``: keep no response text in records.
        history: ``--history``: ``"captured"`` (default) or ``"live"`` (conversation workloads).
        max_error_rate: ``--max-error-rate``: abort above this fraction of failed requests.
        max_output_error_rate: ``--max-output-error-rate``: as above, server-side failures only.
        max_transport_failures: ``--max-transport-failures``: abort after N consecutive unsent (0 = never; default 3).
        abort_if: ``--abort-if``: bounds such as ``"host_bytes>34e9"``.
        abort_on_restart: ``--abort-on-restart``.
        expect_identity: ``--expect-identity``: ``"KEY=VALUE"`` pins.
        abort_on_malformed: ``--abort-on-malformed`` (None: the plan's setting).
        on_check_fail: ``--on-check-fail``: ``"skip"`` or ``"mark"`` (None: the plan's, else skip).
        max_body_bytes: ``--max-body-bytes``: largest request body read from the workload (bytes).
        workers: ``--workers``: processes sharing each phase (default 1).
        ray: ``--ray``: run the workers as Ray actors at this address.
        backend: ``--backend``: counter adapter (``auto``, ``none``, ``vllm``...).
        profile: ``--profile``: TOML profile for ``backend="prometheus"``.
        api_key_env: ``--api-key-env``: environment variable holding the API key.
        api_key_file: ``--api-key-file``: file holding the API key.
        ca_file: ``--ca-file``: extra trusted CA certificates (PEM).
        replica: ``--replica``: replicas behind the target router (``URL[,backend=NAME,profile=FILE]``).
        replica_header: ``--replica-header``: the response header naming the replica.
        replica_cache_from: ``--replica-cache-from``: a probe verdict standing for the replicas' cache.
    """

    connect_timeout: float
    read_timeout: float
    total_timeout: float | None
    drain_timeout: float
    keepalive_timeout: float
    stop_new_after: float | None
    hard_deadline: float | None
    no_per_request_counters: bool
    no_text: bool
    history: Literal["captured", "live"]
    max_error_rate: float | None
    max_output_error_rate: float | None
    max_transport_failures: int
    abort_if: Sequence[str]
    abort_on_restart: bool
    expect_identity: Sequence[str]
    abort_on_malformed: bool | None
    on_check_fail: Literal["skip", "mark"] | None
    max_body_bytes: int
    workers: int
    ray: str | None
    backend: str
    profile: str | None
    api_key_env: str | None
    api_key_file: str | None
    ca_file: str | None
    replica: Sequence[str]
    replica_header: str
    replica_cache_from: str | None


class SimOptions(TypedDict, total=False):
    """The embedded simulator's options (``sim=`` of the API): each ``--sim-NAME`` flag without ``sim-``.

    Fields of ``kvreplay.sim.config.SimConfig`` (its docstring gives units and defaults),
    plus ``faults`` (``--sim-fault`` specs), ``from_verdict`` (a probe verdict to calibrate
    from), ``config`` (a simulator TOML file), and ``replicas`` / ``router`` (the embedded
    fleet of ``--sim-replicas`` / ``--sim-router``).
    """

    cache: Literal["entries", "radix"]
    cache_entries: int
    snapshots: Literal[1, 2]
    snapshot_at: str
    bytes_per_token: int
    max_entry_bytes: int
    max_bytes: int
    block_size: int
    device_blocks: int
    host_rows: int
    host_pages: int
    page_tokens: int
    host_evict: Literal["leaf-lru", "ancestor-compact"]
    entries_recency: Literal["use", "offer"]
    time_scale: float
    prefill_base_s: float
    hit_prefill_base_s: float
    prefill_tokens_per_s: float
    restore_s_per_token: float
    store_s_per_token: float
    itl_s: float
    slots: int
    output_tokens: int
    model: str
    build: str
    refuse_over_bytes: bool
    faults: Sequence[str]
    from_verdict: str
    config: str
    replicas: int
    router: Literal["round_robin", "random", "prefix_affinity"]


RUN_KEYWORDS: frozenset[str] = frozenset(RunOptions.__annotations__)
"""Every key of ``RunOptions``."""

SIM_KEYWORDS: frozenset[str] = frozenset(SimOptions.__annotations__)
"""Every key of ``SimOptions``."""
