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
from typing import Any, Literal, Self, TypedDict

from kvreplay.argtypes import bound, duration, integer, number
from kvreplay.options.declare import option

__all__ = ["PLAN_TOML_KEYS", "RUN_KEYWORDS", "SIM_FLEET_KEYWORDS", "SIM_KEYWORDS", "WINDOW_KEYS",
           "WINDOW_ONLY_KEYS", "RunConfig", "RunOptions", "SimOptions", "TargetConfig"]


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
        replica: ``--replica``: replicas behind the target router (``URL[,backend=NAME,profile=FILE,verdict=FILE]``).
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

SIM_FLEET_KEYWORDS: frozenset[str] = frozenset({"replicas", "router"})
"""The ``SimOptions`` keys of the embedded fleet (``--sim-replicas``, ``--sim-router``): a run's and a sweep's only."""


def _list() -> list[Any]:
    return []


@dataclass(slots=True, kw_only=True)
class TargetConfig:
    """The options of every command that talks to a target (run, demo, sweep, probe): group ``target``.

    Attributes:
        target: ``sim`` or the server's base URL.
        backend: The counter adapter (``auto``, ``none``, a backend's name).
        profile: A TOML profile for ``backend="prometheus"``.
        api_key_env: The environment variable holding the API key.
        api_key_file: The file holding the API key.
        ca_file: Extra trusted CA certificates (PEM).
        sim: Simulator options given (``SimOptions`` keys, without their ``sim_`` prefix).
    """

    target: str = option("sim", flag="--target", group="target", toml="target",
                         help="server base URL (http://127.0.0.1:8000) or 'sim' for the embedded simulator (default)")
    backend: str = option("auto", flag="--backend", group="target", toml="backend",
                          help="counter adapter: auto, none, or a backend name")
    profile: str | None = option(flag="--profile", group="target", help="TOML profile for --backend prometheus")
    api_key_env: str | None = option(flag="--api-key-env", metavar="NAME", group="target",
                                     help="read the API key from this environment variable (never from the command "
                                          "line)")
    api_key_file: str | None = option(flag="--api-key-file", metavar="FILE", group="target",
                                      help="read the API key from this file")
    ca_file: str | None = option(flag="--ca-file", metavar="PEM", group="target",
                                 help="extra trusted CA certificates (PEM) for an https target, e.g. a self-signed "
                                      "server")
    sim: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dests(cls, values: Mapping[str, Any]) -> Self:
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


@dataclass(slots=True, kw_only=True)
class RunConfig(TargetConfig):
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

    workload: str | None = option(flag=None, help="folder of *.json bodies or a .jsonl file", group="run",
                                  toml="workload")
    phase: list[str] = option(flag="--phase", action="append", factory=_list, metavar="SPEC", group="run",
                              toml="phase",
                              help="NAME:ORDER:cN[:xREPEATS][:lastN|firstN][:rRATE[:poissonSEED]], repeatable, in run "
                                   "order; ORDER is forward, reverse, shuffle:SEED or by-prefix; rRATE makes an open "
                                   "loop (requests/s, at most N in flight)")
    plan: str | None = option(flag="--plan", metavar="FILE", help="TOML plan file", group="run")
    from_plan: str | None = option(flag="--from-plan", metavar="PLAN_JSON", group="run",
                                   help="re-execute exactly the sequence of an earlier plan.json")
    out: str | None = option(flag="--out", help="run directory (default runs/<UTC timestamp>)", group="run")
    connect_timeout: float = option(30.0, flag="--connect-timeout", check=duration, metavar="DUR", unit="s",
                                    group="run",
                                    help="longest wait for a TCP (and TLS) connection to the target (s; default 30)")
    read_timeout: float = option(120.0, flag="--read-timeout", check=duration, metavar="DUR", unit="s", group="run",
                                 help="longest silence allowed between two reads of a response (s)")
    total_timeout: float | None = option(flag="--total-timeout", check=duration, metavar="DUR", unit="s",
                                         group="run", help="whole-request bound (s); off by default")
    drain_timeout: float = option(10.0, flag="--drain-timeout", check=duration, metavar="DUR", unit="s", group="run",
                                  help="longest wait for the server to go idle before a phase that asks for a drain "
                                       "(s; default 10)")
    no_per_request_counters: bool = option(False, flag="--no-per-request-counters", action="store_true", group="run",
                                           help="at C1, do not read counters around each request")
    no_text: bool = option(False, flag="--no-text", action="store_true", group="run",
                           help="keep no response text in records")
    history: str = option("captured", flag="--history", choices=("captured", "live"), group="run",
                          help="conversation workloads: send earlier turns as retained (captured, the default) or "
                               "with this server's own replies in place of the captured assistant messages (live; "
                               "records add sent_sha256 and history_differs)")
    stop_new_after: float | None = option(flag="--stop-new-after", check=duration, metavar="DUR", unit="s",
                                          group="run", window="stop_new_after",
                                          help="send no new request after this long (e.g. 70m, 90s, 1h); in-flight "
                                               "ones finish")
    hard_deadline: float | None = option(flag="--hard-deadline", check=duration, metavar="DUR", unit="s",
                                         group="run", window="hard_deadline",
                                         help="cancel requests still in flight at this point (e.g. 90m)")
    max_error_rate: float | None = option(flag="--max-error-rate", check=number(0, maximum=1), metavar="FRACTION",
                                          group="run", window="max_error_rate",
                                          help="abort when more than this fraction of sent requests failed (after 20 "
                                               "requests; every failure counts, transport and output alike)")
    max_output_error_rate: float | None = option(flag="--max-output-error-rate", check=number(0, maximum=1),
                                                 metavar="FRACTION", group="run", window="max_output_error_rate",
                                                 help="as --max-error-rate counting only requests the server answered "
                                                      "badly (HTTP error, malformed, cut, read timeout); connection "
                                                      "failures are not counted")
    max_transport_failures: int = option(3, flag="--max-transport-failures", check=integer(0), metavar="N",
                                         group="run", window="max_transport_failures",
                                         help="abort after N consecutive sends that never reached the server "
                                              "(connection refused, reset before any response byte, connect "
                                              "timeout); 0 = never (default 3)")
    abort_if: list[tuple[str, str, float]] = option(flag="--abort-if", action="append", factory=_list, check=bound,
                                                    metavar="NAME>VALUE", group="run", window="abort_if",
                                                    help="abort when a common counter or gauge crosses a bound, e.g. "
                                                         "'host_bytes>34e9'")
    abort_on_restart: bool = option(False, flag="--abort-on-restart", action="store_true", group="run",
                                    help="abort when counters show the server restarted (a counter went down)")
    expect_identity: list[str] = option(flag="--expect-identity", action="append", factory=_list, metavar="KEY=VALUE",
                                        group="contract", toml="identity",
                                        help="identity pin, repeatable: the server's identity must have KEY (dotted, "
                                             "e.g. models, version.build, version.cache.host_evict) = VALUE before "
                                             "the first request, and keep it (checked at every counter read; else "
                                             "exit 3, identity_drift)")
    abort_on_malformed: bool | None = option(flag="--abort-on-malformed", action="store_true", group="contract",
                                             toml="abort_on_malformed", window="abort_on_malformed",
                                             help="abort the run at the first malformed response (a plan's "
                                                  "abort_on_malformed)")
    on_check_fail: str | None = option(flag="--on-check-fail", choices=("skip", "mark"), group="contract",
                                       toml="on_check_fail",
                                       help="a phase whose drain or fresh check failed: send nothing (skip, the "
                                            "default) or send it and mark it invalid (mark)")
    keepalive_timeout: float = option(2.0, flag="--keepalive-timeout", check=duration, metavar="DUR", unit="s",
                                      group="run",
                                      help="close idle pooled connections after S seconds (below the server's own "
                                           "limit)")
    max_body_bytes: int = option(64 << 20, flag="--max-body-bytes", check=integer(1, unit="bytes"),
                                 metavar="BYTES", unit="bytes",
                                 group="run",
                                 help=f"largest request body read from the workload; a larger one is refused (bytes; "
                                      f"default {64 << 20})")
    quiet: bool = option(False, flag="--quiet", action="store_true", group="run",
                         help="print nothing (the run directory holds everything)")
    report: str = option("html", flag="--report", choices=("html", "md", "none"), group="run",
                         help="reports written at the end: html (report.md and report.html; the default at every "
                              "size: records are streamed, about 2 s a 200,000-record run), md (report.md only), "
                              "none (records, summary and histograms only; draw later with kvreplay report)")
    workers: int = option(1, flag="--workers", check=integer(1), metavar="N", group="run",
                          help="run in N processes sharing each phase's frozen sequence (runner.multiproc); the "
                               "phase's concurrency is spread over them")
    ray: str | None = option(flag="--ray", metavar="ADDRESS", group="run",
                             help="run the --workers as Ray actors, on any host of a Ray cluster: 'auto', HOST:PORT, "
                                  "ray://HOST:10001, or 'local' for a new instance here (optional extra: pip install "
                                  "'kvreplay[ray]'); clocks are per host")
    # The fleet group: kvreplay.api.fleet.add_fleet_arguments adds it, with --sim-replicas/--sim-router.
    replica: list[str] = option(flag="--replica", action="append", factory=_list, group="fleet", toml="fleet",
                                metavar="URL[,backend=NAME,profile=FILE,verdict=FILE]",
                                help="a replica behind the --target router, repeatable: its counters and identity are "
                                     "read (the router's never) and every record names the replica that served it; "
                                     "without backend= it gets --backend (auto: detected per replica); verdict= a "
                                     "probe verdict.json whose cache model is this replica's in the routing loss "
                                     "(a mixed fleet)")
    replica_header: str = option("x-kvreplay-replica", flag="--replica-header", group="fleet", metavar="NAME",
                                 help="response header naming the replica that served a request, when the router or "
                                      "replica sets one (default x-kvreplay-replica)")
    replica_cache_from: str | None = option(flag="--replica-cache-from", group="fleet", metavar="VERDICT",
                                            help="a probe verdict.json whose calibrated cache model (sim.calibrate) "
                                                 "stands for every --replica's cache: the run's phases[].routing_loss "
                                                 "is computed with it (without it, only the embedded fleet's replicas "
                                                 "have a known cache model)")


def _keys(kind: str) -> dict[str, str]:
    from dataclasses import fields

    return {f.metadata[kind]: f.name for f in fields(RunConfig) if f.metadata.get(kind)}


PLAN_TOML_KEYS: dict[str, str] = _keys("toml")
"""Each top-level key of a plan.toml (``kvreplay.plan.load_plan_toml``) -> the run option it sets
(the command line's wins over it), from the fields' declarations."""

WINDOW_KEYS: dict[str, str] = _keys("window")
"""Each key of an experiment's ``[window]`` table (``kvreplay.experiments.window.spec``) that sets a run
option for the window's run steps -> that option, from the fields' declarations."""

WINDOW_ONLY_KEYS = ("deadline_from", "restore_reserve")
"""``[window]`` keys that are the window's own (no run option)."""
