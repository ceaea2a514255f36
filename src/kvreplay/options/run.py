"""The keywords of a run (``kvreplay run`` / ``kvreplay.replay``) and of its simulator, as ``TypedDict`` classes.

Every key is the ``dest`` of the command line's flag (``kvreplay.api.run.add_arguments``,
``kvreplay.sim.config.add_arguments``, ``kvreplay.api.fleet.add_fleet_arguments``); the
values are the Python types the run uses (durations in float seconds, fractions as floats,
repeatable flags as lists of their strings). A key added to a parser and not here fails
the option-parity test.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypedDict

__all__ = ["PLAN_TOML_KEYS", "RUN_KEYWORDS", "SIM_KEYWORDS", "WINDOW_KEYS", "RunConfig", "RunOptions", "SimOptions"]


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


PLAN_TOML_KEYS: dict[str, str] = {
    "phase": "phase",
    "workload": "workload",
    "target": "target",
    "backend": "backend",
    "identity": "expect_identity",
    "abort_on_malformed": "abort_on_malformed",
    "on_check_fail": "on_check_fail",
    "fleet": "replica",
}
"""Each top-level key of a plan.toml (``kvreplay.plan.load_plan_toml``) -> the run option it sets
(the command line's wins over it)."""

WINDOW_KEYS: dict[str, str | None] = {
    "stop_new_after": "stop_new_after",
    "hard_deadline": "hard_deadline",
    "abort_if": "abort_if",
    "max_error_rate": "max_error_rate",
    "max_output_error_rate": "max_output_error_rate",
    "max_transport_failures": "max_transport_failures",
    "abort_on_malformed": "abort_on_malformed",
    "restore_reserve": None,
    "deadline_from": None,
}
"""Each key of an experiment's ``[window]`` table (``kvreplay.experiments.window.spec``) -> the run
option it sets for the window's run steps (None: the window's own, no run option)."""

RUN_KEYWORDS: frozenset[str] = frozenset(RunOptions.__annotations__)
"""Every key of ``RunOptions``."""

SIM_KEYWORDS: frozenset[str] = frozenset(SimOptions.__annotations__)
"""Every key of ``SimOptions``."""


def _list() -> list[Any]:
    return []


@dataclass(slots=True, kw_only=True)
class RunConfig:
    """Every option of one run, typed: what ``kvreplay run`` parsed or ``kvreplay.replay`` was given.

    The run's orchestration (``kvreplay.api.runflow``) takes this object; the command line
    builds it from its parsed flags (``from_dests``), the API from its keywords. Fields are
    the flags' ``dest`` names with the command line's defaults (the option-parity test holds
    them equal), the ``RunOptions`` keys among them; ``sim`` holds the simulator's options
    without their ``sim_`` prefix (``SimOptions``: only those given).

    Attributes:
        workload: The workload path (None: the plan's or the frozen plan's).
        phase: ``--phase`` strings in run order.
        plan: A TOML plan file.
        from_plan: An earlier run's plan.json to re-execute.
        out: The run directory (None: ``runs/<UTC timestamp>``).
        report: ``html``, ``md`` or ``none``.
        quiet: Print nothing.
        target: ``sim`` or the server's base URL.
        sim: Simulator options given (``SimOptions`` keys).
        (the others): as ``RunOptions`` says.
    """

    workload: str | None = None
    phase: list[str] = field(default_factory=_list)
    plan: str | None = None
    from_plan: str | None = None
    out: str | None = None
    report: str = "html"
    quiet: bool = False
    target: str = "sim"
    connect_timeout: float = 30.0
    read_timeout: float = 120.0
    total_timeout: float | None = None
    drain_timeout: float = 10.0
    keepalive_timeout: float = 2.0
    stop_new_after: float | None = None
    hard_deadline: float | None = None
    no_per_request_counters: bool = False
    no_text: bool = False
    history: str = "captured"
    max_error_rate: float | None = None
    max_output_error_rate: float | None = None
    max_transport_failures: int = 3
    abort_if: list[tuple[str, str, float]] = field(default_factory=_list)
    abort_on_restart: bool = False
    expect_identity: list[str] = field(default_factory=_list)
    abort_on_malformed: bool | None = None
    on_check_fail: str | None = None
    max_body_bytes: int = 64 << 20
    workers: int = 1
    ray: str | None = None
    backend: str = "auto"
    profile: str | None = None
    api_key_env: str | None = None
    api_key_file: str | None = None
    ca_file: str | None = None
    replica: list[str] = field(default_factory=_list)
    replica_header: str = "x-kvreplay-replica"
    replica_cache_from: str | None = None
    sim: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dests(cls, values: Mapping[str, Any]) -> RunConfig:
        """From parsed values by their flag ``dest`` (``sim_time_scale`` goes to ``sim["time_scale"]``).

        Values the command line left unset (None for a simulator option) are not put in ``sim``;
        keys that are no option of a run (a command's own, such as ``_run``) are ignored.
        """
        own = {f for f in cls.__dataclass_fields__ if f != "sim"}
        kw: dict[str, Any] = {k: v for k, v in values.items() if k in own}
        sim = {k[len("sim_"):]: v for k, v in values.items()
               if k.startswith("sim_") and v is not None and k[len("sim_"):] in SIM_KEYWORDS}
        return cls(**kw, sim=sim)

    def sim_value(self, key: str, default: Any = None) -> Any:
        """A simulator option given, else ``default``."""
        return self.sim.get(key, default)
