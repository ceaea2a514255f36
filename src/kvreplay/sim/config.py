"""Simulator configuration: ``SimConfig``, its TOML form and its command-line options.

Precedence: defaults, then ``--sim-config FILE.toml`` (or ``--config`` under
``serve-sim``), then the other options given on the command line. Faults from
the file and the command line are concatenated (file first).

TOML keys are the field names of ``SimConfig`` (``-`` and ``_`` both accepted),
at the top level or under a ``[sim]`` table; unknown keys are errors::

    cache = "radix"
    device_blocks = 215
    host_rows = 40
    host_evict = "leaf-lru"
    time_scale = 0.001
    faults = ["cut@3:chunks=2"]

Default costs come from a measured server (issue 5): prefill ``a = 1.52 s`` plus
``uncached_tokens / 1370`` s; restore 2e-5 s per token (0.48-0.6 s for 24-30k
tokens, inside the measured 0.2-0.7 s); decode ITL 20 ms.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from kvreplay.argtypes import integer, number
from kvreplay.errors import ConfigError
from kvreplay.options.importing import SIM_MODEL
from kvreplay.sim.cache_entries import DEFAULT_BYTES_PER_TOKEN
from kvreplay.sim.cache_host import HOST_EVICT_POLICIES
from kvreplay.sim.faults import FAULT_KINDS, FaultSpec, parse_fault

__all__ = [
    "DEFAULT_MODEL",
    "CACHE_MODELS",
    "SNAPSHOT_POINTS",
    "SimConfig",
    "add_arguments",
    "config_and_calibration",
    "config_and_calibration_of",
    "config_from_args",
    "option_check",
]

CACHE_MODELS = ("entries", "radix")
SNAPSHOT_POINTS = ("system", "messages", "prompt")


DEFAULT_MODEL = SIM_MODEL
"""The model id the simulator serves by default (``/v1/models``; the default ``model`` of imported bodies;
declared in ``kvreplay.options.importing``)."""

@dataclass(frozen=True, slots=True, kw_only=True)
class SimConfig:
    """Everything the simulator server needs; every field has a default.

    Attributes:
        model: Model id served (``/v1/models``, response ``model``).
        build: Build string of ``/version`` (part of the server identity).
        cache: ``"entries"`` or ``"radix"``.
        cache_entries: Entries model capacity (snapshots).
        snapshots: Entries model snapshots per request, 1 or 2 (the first
            ``snapshots`` points of ``snapshot_at``).
        snapshot_at: Snapshot points in order: ``system`` (end of the system
            block), ``messages`` (end of rendered messages), ``prompt`` (full prompt).
        bytes_per_token: KV bytes per token (bytes).
        max_entry_bytes: Entries model per-snapshot cap (bytes): a larger
            snapshot is truncated to it (halogen); None = none.
        refuse_over_bytes: Entries model: refuse over-cap snapshots instead of
            truncating them (servers that refuse).
        max_bytes: Entries model total byte budget (bytes); None = none.
        block_size: Radix block size (tokens).
        device_blocks: Radix device capacity (blocks).
        host_rows: Host tier row pool (checkpoints); 0 = no host tier.
        host_pages: Host tier page pool (pages).
        page_tokens: Tokens per host page (tokens).
        host_evict: ``"leaf-lru"`` or ``"ancestor-compact"``.
        entries_recency: Entries model: what refreshes a snapshot, ``"use"`` (the
            lookup that uses it, the default) or ``"offer"`` (storing it or
            offering it again; a stack algorithm, see ``kvreplay.offline``).
        time_scale: Multiplier of every simulated delay (0 = no delay).
        prefill_base_s: Prefill fixed cost ``a`` of a request with no cached
            tokens (s).
        hit_prefill_base_s: Fixed cost of a request with cached tokens (s;
            default 0): a resume restores the snapshot (``restore_s``) and
            computes its tail, it does not pay the cold fit's ``a`` again (issue
            18: halogen resumes a 24k prefix in 0.2-0.7 s; 0 + 130 / 1370 +
            24000 x 2e-5 = 0.575 s).
        prefill_tokens_per_s: Prefill rate for uncached tokens (tokens/s).
        restore_s_per_token: Restore cost per restored token (s).
        store_s_per_token: Store cost per stored token (s).
        itl_s: Decode inter-token latency (s).
        slots: Requests served at once; more wait (``num_requests_waiting``).
        output_tokens: Natural output length for every request (tokens); None =
            from the body hash, 32..256.
        max_output_tokens: Output cap when the body gives no ``max_tokens`` (tokens).
        events_max: Events kept for ``/events`` (oldest dropped beyond).
        faults: Fault specs (``faults.parse_fault``).
    """

    model: str = DEFAULT_MODEL
    build: str = "sim-1"
    cache: str = "entries"
    cache_entries: int = 8
    snapshots: int = 2
    snapshot_at: tuple[str, ...] = ("system", "messages")
    bytes_per_token: int = DEFAULT_BYTES_PER_TOKEN
    max_entry_bytes: int | None = None
    refuse_over_bytes: bool = False
    max_bytes: int | None = None
    block_size: int = 16
    device_blocks: int = 4096
    host_rows: int = 0
    host_pages: int = 4096
    page_tokens: int = 256
    host_evict: str = "leaf-lru"
    entries_recency: str = "use"
    time_scale: float = 1.0
    prefill_base_s: float = 1.52
    hit_prefill_base_s: float = 0.0
    prefill_tokens_per_s: float = 1370.0
    restore_s_per_token: float = 2.0e-5
    store_s_per_token: float = 5.0e-6
    itl_s: float = 0.020
    slots: int = 16
    output_tokens: int | None = None
    max_output_tokens: int = 256
    events_max: int = 100_000
    faults: tuple[FaultSpec, ...] = field(default=())

    def __post_init__(self) -> None:
        self.validate()

    def validate(self, *, where: object = None) -> None:
        """Check ranges and choices.

        Raises:
            ConfigError: A value is out of range, naming the field.
        """

        def bad(name: str, msg: str) -> ConfigError:
            return ConfigError(msg, path=where, field=name)

        if self.cache not in CACHE_MODELS:
            raise bad("cache", f"must be one of {CACHE_MODELS}, not {self.cache!r}")
        if self.snapshots not in (1, 2):
            raise bad("snapshots", "must be 1 or 2")
        if not self.snapshot_at or any(p not in SNAPSHOT_POINTS for p in self.snapshot_at):
            raise bad("snapshot_at", f"points must be among {SNAPSHOT_POINTS}")
        if self.host_evict not in HOST_EVICT_POLICIES:
            raise bad("host_evict", f"must be one of {HOST_EVICT_POLICIES}")
        if self.entries_recency not in ("use", "offer"):
            raise bad("entries_recency", "must be 'use' or 'offer'")
        for name in ("cache_entries", "block_size", "device_blocks", "host_pages", "page_tokens", "slots"):
            if getattr(self, name) < 1:
                raise bad(name, "must be >= 1")
        for name in ("host_rows", "max_output_tokens", "events_max"):
            if getattr(self, name) < 0:
                raise bad(name, "must be >= 0")
        if self.bytes_per_token < 1:
            raise bad("bytes_per_token", "must be >= 1")
        for name in ("max_entry_bytes", "max_bytes"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise bad(name, "must be >= 1 (bytes)")
        for name in (
            "time_scale",
            "prefill_base_s",
            "hit_prefill_base_s",
            "restore_s_per_token",
            "store_s_per_token",
            "itl_s",
        ):
            v = getattr(self, name)
            if not math.isfinite(v) or v < 0:  # nan passes a bare `< 0` test
                raise bad(name, f"must be a finite number >= 0, not {v!r}")
        if not math.isfinite(self.prefill_tokens_per_s) or self.prefill_tokens_per_s <= 0:
            raise bad("prefill_tokens_per_s", f"must be a finite number > 0, not {self.prefill_tokens_per_s!r}")
        if self.output_tokens is not None and self.output_tokens < 0:
            raise bad("output_tokens", "must be >= 0")

    @property
    def snapshot_points(self) -> tuple[str, ...]:
        """The snapshot points actually stored per request (entries model)."""
        return self.snapshot_at[: self.snapshots]

    @classmethod
    def from_mapping(cls, data: dict[str, Any], *, where: object = None, base: SimConfig | None = None) -> SimConfig:
        """Build a config from a mapping (e.g. parsed TOML) over ``base``.

        Args:
            data: Field names (``-`` or ``_``) to values; ``faults`` is a list of spec strings.
            where: File the mapping came from (for error messages).
            base: Values not in ``data`` (default: the defaults).

        Returns:
            The merged config.

        Raises:
            ConfigError: Unknown key, wrong type or out-of-range value.
        """
        known = {f.name: f for f in fields(cls)}
        changes: dict[str, Any] = {}
        for raw_key, value in data.items():
            key = raw_key.replace("-", "_")
            if key not in known:
                raise ConfigError(f"unknown simulator setting {raw_key!r}", path=where, field=raw_key)
            changes[key] = _coerce(key, value, where)
        try:
            return replace(base or cls(), **changes)
        except ConfigError as exc:
            if where is None or exc.path is not None:
                raise
            raise ConfigError(str(exc).split(": ", 1)[-1], path=where, field=exc.field) from exc

    @classmethod
    def from_toml(cls, path: str | Path, *, base: SimConfig | None = None) -> SimConfig:
        """Load a TOML file (top level or ``[sim]`` table).

        Raises:
            ConfigError: Unreadable file, invalid TOML or a bad setting (its line named).
        """
        from kvreplay.tomlfile import read_toml

        text, data = read_toml(path, what="simulator settings file")
        if set(data) == {"sim"} and isinstance(data["sim"], dict):
            data = data["sim"]
        try:
            return cls.from_mapping(data, where=path, base=base)
        except ConfigError as exc:
            if exc.line is not None or not exc.field:
                raise
            from kvreplay.tomlfile import key_line

            raise ConfigError(exc.message, path=exc.path, line=key_line(text, exc.field), field=exc.field) from None


_INT_OR_NONE = {"max_entry_bytes", "max_bytes", "output_tokens"}
_FLOATS = {
    "time_scale",
    "prefill_base_s",
    "hit_prefill_base_s",
    "prefill_tokens_per_s",
    "restore_s_per_token",
    "store_s_per_token",
    "itl_s",
}
_STRS = {"model", "build", "cache", "host_evict", "entries_recency"}


def _coerce(key: str, value: Any, where: object) -> Any:
    def bad(msg: str) -> ConfigError:
        return ConfigError(msg, path=where, field=key)

    if key == "faults":
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, (list, tuple)):
            raise bad("must be a list of fault specs")
        return tuple(v if isinstance(v, FaultSpec) else parse_fault(str(v)) for v in value)
    if key == "snapshot_at":
        if isinstance(value, str):
            value = [v.strip() for v in value.split(",") if v.strip()]
        if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
            raise bad("must be a list of snapshot points")
        return tuple(value)
    if key == "refuse_over_bytes":
        if not isinstance(value, bool):
            raise bad("must be true or false")
        return value
    if key in _STRS:
        if not isinstance(value, str):
            raise bad("must be a string")
        return value
    if key in _FLOATS:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad("must be a number")
        return float(value)
    if value is None and key in _INT_OR_NONE:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad("must be an integer")
    return value


_BYTES = integer(1, unit="bytes")
_SECONDS = number(0, unit="s")
_RATE = number(0, strict=True, unit="tokens/s")

# (option name, field, type, help); the types check ranges when the flags are parsed
# (kvreplay.argtypes: exit 2 naming the flag), as ``validate`` does for a file
_OPTIONS: tuple[tuple[str, str, Any, str], ...] = (
    ("cache", "cache", str, "cache model: entries (N snapshots, LRU) or radix (block prefix cache)"),
    ("cache-entries", "cache_entries", integer(1), "entries model capacity (snapshots; default 8)"),
    ("snapshots", "snapshots", int, "entries model snapshots per request: 1 (system) or 2 (+messages)"),
    ("snapshot-at", "snapshot_at", str, "snapshot points, comma separated: system,messages,prompt"),
    ("bytes-per-token", "bytes_per_token", _BYTES, "KV bytes per token (bytes)"),
    ("max-entry-bytes", "max_entry_bytes", _BYTES, "entries model: per-snapshot cap (bytes); larger ones truncated"),
    ("max-bytes", "max_bytes", _BYTES, "entries model: total byte budget (bytes)"),
    ("block-size", "block_size", integer(1), "radix block size (tokens; default 16)"),
    ("device-blocks", "device_blocks", integer(1), "radix device capacity (blocks; default 4096)"),
    ("host-rows", "host_rows", integer(0), "radix host tier row pool (0 = no host tier)"),
    ("host-pages", "host_pages", integer(1), "radix host tier page pool (pages; default 4096)"),
    ("page-tokens", "page_tokens", integer(1), "tokens per host page (default 256)"),
    ("host-evict", "host_evict", str, "host eviction: leaf-lru or ancestor-compact"),
    ("entries-recency", "entries_recency", str, "entries model: a snapshot is refreshed on use (default) or offer"),
    ("time-scale", "time_scale", number(0), "multiply every simulated delay (0 = none; default 1)"),
    ("prefill-base-s", "prefill_base_s", _SECONDS, "prefill fixed cost a of a cold request (s; default 1.52)"),
    ("hit-base-s", "hit_prefill_base_s", _SECONDS, "fixed cost of a request with cached tokens (s; default 0)"),
    ("prefill-rate", "prefill_tokens_per_s", _RATE, "prefill rate (tokens/s; default 1370)"),
    ("restore-s-per-token", "restore_s_per_token", number(0), "restore cost (s per token; default 2e-5)"),
    ("store-s-per-token", "store_s_per_token", number(0), "store cost (s per token; default 5e-6)"),
    ("itl-s", "itl_s", _SECONDS, "decode inter-token latency (s; default 0.020)"),
    ("slots", "slots", integer(1), "requests served at once, more wait (default 16)"),
    ("output-tokens", "output_tokens", integer(0), "fixed natural output length (tokens; default from body hash)"),
    ("model", "model", str, "model id served (default kvreplay-sim)"),
    ("build", "build", str, "build string of /version (default sim-1)"),
)


def _dest(prefix: str, name: str) -> str:
    return (prefix + name).replace("-", "_")


def _flags(prefix: str, name: str) -> tuple[str, ...]:
    """``--PREFIXNAME``; without a prefix (``serve-sim``) ``--sim-NAME`` too, as ``run`` spells it."""
    return (f"--{prefix}{name}",) if prefix else (f"--{name}", f"--sim-{name}")


def option_check(name: str) -> Any:
    """The command line's ``type=`` check of simulator option ``name`` (``time_scale``); None for a string or flag."""
    return next((typ for _, fname, typ, _ in _OPTIONS if fname == name and typ is not str), None)


def add_arguments(parser: Any, prefix: str = "sim-") -> None:
    """Add the simulator options to a parser.

    Args:
        parser: The parser (or argument group) to extend.
        prefix: Option prefix: ``"sim-"`` gives ``--sim-cache ...`` (for ``run``),
            ``""`` gives ``--cache ...`` (for ``serve-sim``, which takes ``--sim-cache ...``
            too, so a flag copied from a ``run`` command works).
    """
    g = parser.add_argument_group("simulator") if hasattr(parser, "add_argument_group") else parser
    for name, fname, typ, help_ in _OPTIONS:
        kwargs: dict[str, Any] = {"type": typ, "default": None, "help": help_, "dest": _dest(prefix, fname)}
        if fname == "cache":
            kwargs["choices"] = CACHE_MODELS
        elif fname == "entries_recency":
            kwargs["choices"] = ("use", "offer")
        elif fname == "host_evict":
            kwargs["choices"] = HOST_EVICT_POLICIES
        elif fname == "snapshots":
            kwargs["choices"] = (1, 2)
        g.add_argument(*_flags(prefix, name), **kwargs)
    g.add_argument(
        *_flags(prefix, "refuse-over-bytes"),
        action="store_const",
        const=True,
        default=None,
        dest=_dest(prefix, "refuse_over_bytes"),
        help="entries model: refuse snapshots over --max-entry-bytes instead of truncating",
    )
    g.add_argument(
        *_flags(prefix, "fault"),
        action="append",
        default=None,
        metavar="SPEC",
        dest=_dest(prefix, "faults"),
        help=f"inject a fault, repeatable: KIND[@N][:key=value,...] with KIND one of {', '.join(FAULT_KINDS)} "
        "(docs/simulator.md, 'Faults')",
    )
    g.add_argument(
        *_flags(prefix, "from-verdict"),
        default=None,
        metavar="VERDICT_JSON",
        dest=_dest(prefix, "from_verdict"),
        help="calibrate from a probe verdict: prefill fit, restore cost, block size, capacity"
        " from the eviction bisection (or unbounded), bytes per token (kvreplay.sim.calibrate)",
    )
    g.add_argument(
        *_flags(prefix, "config"),
        default=None,
        metavar="FILE.toml",
        dest=_dest(prefix, "config"),
        help="simulator settings file (TOML); command-line options win",
    )


def config_from_args(args: Any, prefix: str = "sim-") -> SimConfig:
    """Build a ``SimConfig`` from parsed options (see ``add_arguments``).

    Args:
        args: The parsed options (any object with the prefixed attributes ``add_arguments`` declares).
        prefix: The prefix given to ``add_arguments``.

    Returns:
        Defaults, then the config file, then a probe verdict's calibration
        (``--sim-from-verdict``; what it set is printed to stderr), then the
        options given.

    Raises:
        ConfigError: Bad file, verdict, fault spec or value.
    """
    return config_and_calibration(args, prefix)[0]


def config_and_calibration(args: Any, prefix: str = "sim-") -> tuple[SimConfig, dict[str, Any] | None]:
    """``config_from_args`` plus the calibration it applied, for a run to keep.

    Args:
        args: The parsed options (any object with the prefixed attributes ``add_arguments`` declares).
        prefix: The prefix given to ``add_arguments``.

    Returns:
        As ``config_and_calibration_of``.

    Raises:
        ConfigError: Bad file, verdict, fault spec or value (field: the flag).
    """
    names = [o[1] for o in _OPTIONS] + ["refuse_over_bytes", "faults", "from_verdict", "config"]
    values = {n: getattr(args, _dest(prefix, n), None) for n in names}
    return config_and_calibration_of({k: v for k, v in values.items() if v is not None}, flag_prefix=f"--{prefix}")


def config_and_calibration_of(values: Mapping[str, Any], *, flag_prefix: str = "--sim-"
                              ) -> tuple[SimConfig, dict[str, Any] | None]:
    """The simulator's configuration from its options by name, and the calibration it applied.

    Args:
        values: Options given, by ``SimConfig`` field name (``time_scale``, ``cache_entries``...),
            plus ``faults`` (fault spec strings), ``from_verdict`` (a probe verdict.json) and
            ``config`` (a simulator TOML file); ``kvreplay.options.SimOptions`` keys.
        flag_prefix: How errors name an option: ``--sim-`` gives ``--sim-cache-entries``.

    Returns:
        ``(config, calibration)``: defaults, then the config file, then a probe verdict's
        calibration (what it set is printed to stderr), then the options given. calibration
        is None without ``from_verdict``, else ``kvreplay.sim.calibrate.Calibration.to_json()``
        (``source``, ``sha256``, ``changes`` = every field it set, ``capacity`` = entries,
        blocks or ``"unbounded"``, ``notes``) plus ``overridden``: field -> the value an
        option gave instead of the calibrated one (empty when none did).

    Raises:
        ConfigError: Bad file, verdict, fault spec or value (field: the flag).
    """
    cfg = SimConfig()
    path = values.get("config")
    if path:
        cfg = SimConfig.from_toml(path)
    verdict = values.get("from_verdict")
    calibration: dict[str, Any] | None = None
    if verdict:
        import sys

        from kvreplay.sim.calibrate import calibrate_from_verdict

        cal = calibrate_from_verdict(verdict)
        cfg = SimConfig.from_mapping(cal.changes, where=verdict, base=cfg)
        for note in cal.notes:
            print(f"sim calibration: {note}", file=sys.stderr)
        calibration = cal.to_json()
    changes: dict[str, Any] = {}
    for fname in [o[1] for o in _OPTIONS] + ["refuse_over_bytes"]:
        value = values.get(fname)
        if value is not None:
            changes[fname] = value
    specs = values.get("faults")
    if specs:
        changes["faults"] = tuple(cfg.faults) + tuple(parse_fault(s) for s in specs)
    try:
        out = SimConfig.from_mapping(changes, base=cfg) if changes else cfg
    except ConfigError as exc:
        flag = next((f"{flag_prefix}{name}" for name, fname, *_ in _OPTIONS if fname == exc.field and fname in changes),
                    None)
        if flag is None:
            raise
        raise ConfigError(exc.message, field=flag) from None
    if calibration is not None:
        calibration["overridden"] = {
            k: getattr(out, k)
            for k in calibration["changes"]
            if k in changes and getattr(out, k) != calibration["changes"][k]
        }
    return out, calibration
