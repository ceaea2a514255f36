"""Profiles: TOML files that map a server's Prometheus series onto common names.

A profile is how a server is measured without code changes (issue 4). The
built-in families ship as ``kvreplay/profiles/<name>.toml``; any other file can
be passed by path. Shape::

    name = "vllm"                                  # required
    description = "..."
    sources = ["vllm/v1/metrics/loggers.py"]       # where the names come from
    metrics_path = "/metrics"                      # default
    load_gauges = ["running", "waiting"]           # must read 0 for a drain
    started = ["process_start_time_seconds"]       # restart marker: max over present samples
    info_series = ["vllm:cache_config_info"]       # labels become identity fields

    [reset]                                        # optional cache reset endpoint
    method = "POST"
    path = "/reset_prefix_cache"
    expect_body = ""                               # substring the body must hold

    [common.hit_tokens]
    series = ["vllm:prefix_cache_hits_total",      # current name first ...
              "vllm:gpu_prefix_cache_hits_total"]  # ... deprecated duplicate second
    labels = { model_name = "m" }                  # optional filter (all must match)
    aggregate = "sum"                              # sum | max | min over matching series
    unit = "tokens"                                # what one count means
    scale = 1.0                                    # multiplier (e.g. MiB -> bytes)

``series`` alternatives are tried in order and the first one with a matching
sample wins: a deprecated duplicate is read only when the current name is
absent, never added to it. An entry may also be a table
``{ name = "...", labels = { ... } }`` whose labels replace the mapping's.
A common name with no matching sample is absent from the snapshot, never 0.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from kvreplay.errors import ConfigError
from kvreplay.evidence.vocab import COUNTER_NAMES, GAUGE_NAMES, TOKEN_TWINS
from kvreplay.runner.backend import DUPLICATE_SERIES, counter_problem

from ._prom import Sample, series_key

__all__ = ["Profile", "SeriesMap", "builtin_profile_names", "load_profile"]

_AGGREGATES: dict[str, Callable[[list[float]], float]] = {"sum": math.fsum, "max": max, "min": min}
_UNITS = (
    "tokens",
    "requests",
    "lookups",
    "entries",
    "bytes",
    "rows",
    "pages",
    "transfers",
    "ratio",
)


def _strs(value: Any, *, where: object, field_name: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ConfigError("must be a list of non-empty strings", path=where, field=field_name)
    return tuple(value)


def _labels(value: Any, *, where: object, field_name: str) -> tuple[tuple[str, str], ...]:
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ConfigError("must be a table of string labels", path=where, field=field_name)
    return tuple(value.items())


def _unknown(data: Mapping, allowed: Iterable[str], *, where: object, prefix: str) -> None:
    extra = sorted(set(data) - set(allowed))
    if extra:
        raise ConfigError(f"unknown key {extra[0]!r}", path=where, field=f"{prefix}{extra[0]}")


@dataclass(frozen=True, slots=True, kw_only=True)
class SeriesMap:
    """How one common name is read.

    Attributes:
        common: The common name (one of COUNTER_NAMES or GAUGE_NAMES).
        alternatives: ``(series name, label filter)`` pairs, in preference order.
        aggregate: ``sum``, ``max`` or ``min`` over the matching series of the
            chosen alternative (e.g. per-engine vLLM counters are summed; per-rank
            SGLang gauges take ``max`` so that identical TP copies are not added).
        unit: What one count means (``tokens``, ``lookups``, ...), or None.
        scale: Multiplier applied to the aggregate.
    """

    common: str
    alternatives: tuple[tuple[str, tuple[tuple[str, str], ...]], ...]
    aggregate: str = "sum"
    unit: str | None = None
    scale: float = 1.0

    @classmethod
    def from_mapping(cls, common: str, data: Any, *, where: object) -> SeriesMap:
        """Validate one ``[common.NAME]`` table.

        Raises:
            ConfigError: unknown common name or key, empty ``series``, bad types.
        """
        prefix = f"common.{common}."
        if common not in COUNTER_NAMES and common not in GAUGE_NAMES:
            raise ConfigError(
                "not a common counter or gauge name", path=where, field=f"common.{common}"
            )
        if not isinstance(data, Mapping):
            raise ConfigError("must be a table", path=where, field=f"common.{common}")
        _unknown(
            data, ("series", "labels", "aggregate", "unit", "scale"), where=where, prefix=prefix
        )
        base = _labels(data.get("labels", {}), where=where, field_name=prefix + "labels")
        series = data.get("series")
        if not isinstance(series, list) or not series:
            raise ConfigError("must be a non-empty list", path=where, field=prefix + "series")
        alts = []
        for i, entry in enumerate(series):
            if isinstance(entry, str) and entry:
                alts.append((entry, base))
            elif isinstance(entry, Mapping):
                _unknown(entry, ("name", "labels"), where=where, prefix=f"{prefix}series[{i}].")
                name = entry.get("name")
                if not isinstance(name, str) or not name:
                    raise ConfigError("needs a name", path=where, field=f"{prefix}series[{i}]")
                lab = _labels(
                    entry.get("labels", {}), where=where, field_name=f"{prefix}series[{i}].labels"
                )
                alts.append((name, lab))
            else:
                raise ConfigError(
                    "must be a string or a table", path=where, field=f"{prefix}series[{i}]"
                )
        aggregate = data.get("aggregate", "sum")
        if aggregate not in _AGGREGATES:
            raise ConfigError(
                f"must be one of {sorted(_AGGREGATES)}", path=where, field=prefix + "aggregate"
            )
        unit = data.get("unit")
        if unit is not None and unit not in _UNITS:
            raise ConfigError(f"must be one of {list(_UNITS)}", path=where, field=prefix + "unit")
        if unit == "tokens" and common in TOKEN_TWINS:
            # An older profile's lookup name counted in tokens: it is the token name.
            common = TOKEN_TWINS[common]
        scale = data.get("scale", 1.0)
        if (
            isinstance(scale, bool)
            or not isinstance(scale, (int, float))
            or not math.isfinite(scale)
        ):
            raise ConfigError("must be a finite number", path=where, field=prefix + "scale")
        return cls(
            common=common,
            alternatives=tuple(alts),
            aggregate=aggregate,
            unit=unit,
            scale=float(scale),
        )

    def read(
        self, by_name: Mapping[str, list[Sample]], declared: frozenset[str] = frozenset()
    ) -> float | None:
        """The mapped value; None when the server does not report it.

        The first alternative that matches wins. An alternative counts as
        reported at 0 when its series is declared (``# TYPE``) but has no
        matching sample yet, provided the filter's label names occur on its
        samples (or it has none): prometheus_client declares a labelled counter
        before its first increment, e.g. SGLang's ``sglang:cached_tokens_total``,
        which is incremented only when a request had cached tokens.

        Args:
            by_name: Samples grouped by printed name.
            declared: Names declared by ``# TYPE`` lines (``declared_names``).
        """
        for name, labels in self.alternatives:
            present = by_name.get(name, ())
            values = [
                float(s.value)
                for s in present
                if all(s.labels.get(k) == v for k, v in labels) and not math.isnan(s.value)
            ]
            if values:
                return _AGGREGATES[self.aggregate](values) * self.scale
            if name in declared:
                keys_seen = {k for s in present for k in s.labels}
                if not present or all(k in keys_seen for k, _ in labels):
                    return 0.0
        return None

    def problem(self, by_name: Mapping[str, list[Sample]]) -> str | None:
        """Why the mapped value cannot be differenced; None when it can (or is absent).

        The first alternative with matching samples is checked: a series printed twice
        with the same labels makes it invalid (the exposition format allows each series
        once: Prometheus "Exposition formats", text format: "Each line must have a unique
        combination of a metric name and labels. Otherwise, the ingestion behavior is undefined";
        summing both would count it twice), so does a sample outside the 64-bit range or
        infinite, and so do samples that are all NaN (``runner.backend.counter_problem``).
        The reason names the series.
        """
        for name, labels in self.alternatives:
            match = [s for s in by_name.get(name, ()) if all(s.labels.get(k) == v for k, v in labels)]
            if not match:
                continue
            seen: set[frozenset[tuple[str, str]]] = set()
            for s in match:
                key = frozenset(s.labels.items())
                if key in seen:  # the text format allows each series once: which value is meant is unknown
                    return (f"{series_key(s.name, s.labels)}: {DUPLICATE_SERIES} (the same name and labels "
                            "twice in one exposition); not summed")
                seen.add(key)
            finite = [s for s in match if not math.isnan(s.value)]
            for s in finite or match[:1]:
                why = counter_problem(s.value)
                if why is not None:
                    return f"{series_key(s.name, s.labels)}: {why}"
            return None
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class Profile:
    """A validated profile (see the module docstring for the file shape).

    Attributes:
        name: Profile name (also the backend name for built-in families).
        description: One line for people.
        sources: Where the series names come from.
        metrics_path: Path of the exposition endpoint.
        maps: One SeriesMap per common name.
        load_gauges: Common gauge names that must be zero for a drain.
        started: Series whose largest present value is the restart marker.
        info_series: Series whose labels are identity fields.
        reset: ``{"method", "path", "expect_body"}`` or None when there is no reset.
        path: The file it was read from (None for an in-memory mapping).
    """

    name: str
    description: str = ""
    sources: tuple[str, ...] = ()
    metrics_path: str = "/metrics"
    maps: tuple[SeriesMap, ...] = ()
    load_gauges: tuple[str, ...] = ()
    started: tuple[str, ...] = ()
    info_series: tuple[str, ...] = ()
    reset: dict[str, str] | None = field(default=None)
    path: str | None = None

    @classmethod
    def from_mapping(cls, data: Any, *, where: object = None) -> Profile:
        """Validate a parsed TOML document.

        Raises:
            ConfigError: unknown keys, unknown common names, a load gauge that is
                not a mapped gauge, bad types; ``.path`` and ``.field`` say where.
        """
        if not isinstance(data, Mapping):
            raise ConfigError("profile must be a table", path=where)
        allowed = (
            "name",
            "description",
            "sources",
            "metrics_path",
            "load_gauges",
            "started",
            "info_series",
            "reset",
            "common",
        )
        _unknown(data, allowed, where=where, prefix="")
        name = data.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError("profile needs a name", path=where, field="name")
        description = data.get("description", "")
        if not isinstance(description, str):
            raise ConfigError("must be a string", path=where, field="description")
        metrics_path = data.get("metrics_path", "/metrics")
        if not isinstance(metrics_path, str) or not metrics_path.startswith("/"):
            raise ConfigError("must be an absolute path", path=where, field="metrics_path")
        common = data.get("common", {})
        if not isinstance(common, Mapping) or not common:
            raise ConfigError("needs at least one [common.NAME] table", path=where, field="common")
        maps = tuple(SeriesMap.from_mapping(k, v, where=where) for k, v in common.items())
        # A lookup name moved to its token twin gives way to an explicit mapping of the twin.
        maps = tuple(
            m for i, m in enumerate(maps) if m.common not in {x.common for x in maps[:i]}
        )
        mapped = {m.common for m in maps}
        load_gauges = _strs(data.get("load_gauges", []), where=where, field_name="load_gauges")
        for g in load_gauges:
            if g not in GAUGE_NAMES or g not in mapped:
                raise ConfigError(f"{g!r} is not a mapped gauge", path=where, field="load_gauges")
        reset = data.get("reset")
        if reset is not None:
            if not isinstance(reset, Mapping):
                raise ConfigError("must be a table", path=where, field="reset")
            _unknown(reset, ("method", "path", "expect_body"), where=where, prefix="reset.")
            method = reset.get("method", "POST")
            rpath = reset.get("path")
            expect = reset.get("expect_body", "")
            if method not in ("GET", "POST"):
                raise ConfigError("must be GET or POST", path=where, field="reset.method")
            if not isinstance(rpath, str) or not rpath.startswith("/"):
                raise ConfigError("must be an absolute path", path=where, field="reset.path")
            if not isinstance(expect, str):
                raise ConfigError("must be a string", path=where, field="reset.expect_body")
            reset = {"method": method, "path": rpath, "expect_body": expect}
        return cls(
            name=name,
            description=description,
            sources=_strs(data.get("sources", []), where=where, field_name="sources"),
            metrics_path=metrics_path,
            maps=maps,
            load_gauges=load_gauges,
            started=_strs(data.get("started", []), where=where, field_name="started"),
            info_series=_strs(data.get("info_series", []), where=where, field_name="info_series"),
            reset=reset,
            path=None if where is None else str(where),
        )

    @property
    def units(self) -> dict[str, str]:
        """Common name -> unit, for the mappings that declare one."""
        return {m.common: m.unit for m in self.maps if m.unit}

    def apply(
        self, samples: list[Sample], declared: frozenset[str] = frozenset()
    ) -> tuple[dict[str, float], float | None]:
        """Map parsed samples onto common names.

        Args:
            samples: One scrape, as from ``parse_exposition``.
            declared: Names its ``# TYPE`` lines declare (``declared_names``);
                a declared series with no sample yet reads 0 (see ``SeriesMap.read``).

        Returns:
            ``(common, started)``: common values (absent names left out) and the
            restart marker (largest value of the ``started`` series present), or
            None when none of them is present.
        """
        by_name: dict[str, list[Sample]] = {}
        for s in samples:
            by_name.setdefault(s.name, []).append(s)
        common: dict[str, float] = {}
        for m in self.maps:
            value = m.read(by_name, declared)
            if value is not None:
                common[m.common] = value
        marks = [
            float(s.value)
            for n in self.started
            for s in by_name.get(n, ())
            if math.isfinite(s.value)
        ]
        return common, (max(marks) if marks else None)

    def apply_checked(
        self, samples: list[Sample], declared: frozenset[str] = frozenset()
    ) -> tuple[dict[str, float], float | None, dict[str, str]]:
        """``apply``, plus the names whose value cannot be differenced.

        Returns:
            ``(common, started, invalid)``: as ``apply``, without the invalid names,
            and ``invalid`` mapping each of them to its reason (``SeriesMap.problem``).
        """
        by_name: dict[str, list[Sample]] = {}
        for s in samples:
            by_name.setdefault(s.name, []).append(s)
        common, started = self.apply(samples, declared)
        invalid = {m.common: why for m in self.maps if (why := m.problem(by_name)) is not None}
        return {k: v for k, v in common.items() if k not in invalid}, started, invalid

    def info(self, samples: list[Sample]) -> dict[str, dict[str, str]]:
        """Labels of the first sample of each ``info_series`` present (identity fields)."""
        out: dict[str, dict[str, str]] = {}
        for s in samples:
            if s.name in self.info_series and s.name not in out:
                out[s.name] = dict(s.labels)
        return out


def builtin_profile_names() -> list[str]:
    """Names of the profiles shipped in ``kvreplay/profiles`` (file stems), sorted."""
    root = resources.files("kvreplay") / "profiles"
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".toml"))


def load_profile(name_or_path: str | Path) -> Profile:
    """Load a built-in profile by name, or a profile file by path.

    Args:
        name_or_path: A built-in name (``vllm``, ``sglang``, ``llamacpp``, ...) or
            the path of a TOML file.

    Returns:
        The validated profile.

    Raises:
        ConfigError: no such profile or file, invalid TOML, or an invalid profile.
    """
    p = Path(name_or_path)
    if p.suffix == ".toml" or p.exists():
        try:
            raw = p.read_bytes()
        except OSError as exc:
            raise ConfigError(f"cannot read profile: {exc.strerror}", path=p) from exc
        where: object = p
    else:
        res = resources.files("kvreplay") / "profiles" / f"{name_or_path}.toml"
        if not res.is_file():
            raise ConfigError(
                f"no built-in profile {str(name_or_path)!r} "
                f"(have: {', '.join(builtin_profile_names())})"
            )
        raw = res.read_bytes()
        where = f"kvreplay/profiles/{name_or_path}.toml"
    from kvreplay.tomlfile import field_line, parse_toml

    text, data = parse_toml(raw, where=where)
    try:
        return Profile.from_mapping(data, where=where)
    except ConfigError as exc:
        if exc.line is not None or exc.field is None:
            raise
        line = field_line(text, exc.field)  # the file names the line as well as the field
        raise ConfigError(exc.message, path=exc.path, line=line, field=exc.field) from None
