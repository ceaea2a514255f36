"""Identity pins and drift: is this still the server the run was planned for?

A backend's ``identity()`` is a JSON object (``runner.backend.Backend``), e.g.
the simulator through the halogen adapter::

    {"backend": "halogen", "models": ["sim-model"],
     "version": {"version": "0.1", "build": "sim-1",
                 "cache": {"model": "radix", "entries": 1024, ...}},
     "max_entries": 1024}

It is compared in **flat form**: nested objects become dotted keys
(``version.build``, ``version.cache.model``); lists stay values. Every value has a
**canonical text** (``pin_text``): strings as they are, integers in decimal,
floats by ``repr`` (``0.5``), booleans ``true``/``false``, null ``null``, lists
their items' texts joined by ``,`` (``models=a,b`` is the served list ``["a", "b"]``
in that order).

A **pin** is ``KEY=VALUE`` (``--expect-identity models=llama-3-8b``, repeatable)
or an entry of a plan's ``[identity]`` table (nested tables are dotted keys too)::

    [identity]
    models = ["llama-3-8b"]
    "version.build" = "b4567"
    [identity.version.cache]
    model = "radix"

A pin holds when the flat identity has that key and its canonical text equals
the pin's. The runner checks pins before the first request (a mismatch there
sends nothing: ``aborted.reason: identity_mismatch``) and, with the identity
read at the run's start as the baseline, every later read for **drift**: any
changed, added or removed key (``aborted.reason: identity_drift``). Both give
``aborted.old`` / ``aborted.new`` (flat key -> value) and ``aborted.changes``.

**Drift at any concurrency** (issue 30 item 3). Above C1 the identity is read
only by the monitor (at most every second), so requests sent between the last
read that matched and the read that saw the drift may have been served by the
new build. ``IdentityGate`` stands in front of the records writer. Every record is still
written (and flushed) the moment it completes, so a kill loses nothing measured;
the gate keeps only the keys of the records sent after the last identity read
that matched. When a read sees drift, every such record, and every later one,
carries ``identity_unverified: true``: later ones when written, earlier ones by
one atomic rewrite of ``records.jsonl`` when the gate closes
(``rundir.records.mark_records``; after a kill before that, ``summary.json``'s
rebuild does not know of the drift, which the terminal had said). The phase that
holds such records reads ``valid: false`` with an ``invalid_reasons`` entry
``identity_drift: N records sent after the last identity read that matched``. A
failed identity read leaves the records before it unmarked (no drift was seen).
With ``--workers N`` only worker 0 reads the identity, so only its records are
checked.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kvreplay.errors import ConfigError

__all__ = [
    "IdentityChange",
    "IdentityGate",
    "IdentityPin",
    "abort_details",
    "check_pins",
    "flatten_identity",
    "identity_changes",
    "parse_pin",
    "pin_text",
    "pins_from_mapping",
]

_KEY_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-:/")


@dataclass(frozen=True, slots=True)
class IdentityPin:
    """One expected identity value.

    Attributes:
        key: Flat (dotted) identity key, e.g. ``version.build``.
        value: Canonical text the identity's value must have (``pin_text``).
        source: Where it was given (``--expect-identity``, ``plan.toml [identity]``).
    """

    key: str
    value: str
    source: str = "--expect-identity"

    def to_json(self) -> dict[str, str]:
        """``{"key", "value", "source"}`` (plan.json's run block)."""
        return {"key": self.key, "value": self.value, "source": self.source}


@dataclass(frozen=True, slots=True)
class IdentityChange:
    """A key whose value is not what it was (drift) or not what was pinned (mismatch).

    Attributes:
        key: Flat identity key.
        old: The earlier value (drift) or the pinned text (mismatch); None when absent.
        new: The value read now; None when the key is absent now.
    """

    key: str
    old: Any
    new: Any

    def to_json(self) -> dict[str, Any]:
        """``{"key", "old", "new"}``."""
        return {"key": self.key, "old": self.old, "new": self.new}

    def describe(self) -> str:
        """``models: ['a'] -> ['a-2']`` (``<absent>`` for a missing side)."""
        old = "<absent>" if self.old is None else repr(self.old)
        new = "<absent>" if self.new is None else repr(self.new)
        return f"{self.key}: {old} -> {new}"


def pin_text(value: Any) -> str:
    """Canonical text of an identity value (module docstring); nested objects are not values.

    Raises:
        ConfigError: ``value`` is a mapping (pin one of its dotted keys instead).
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, str)):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return ",".join(pin_text(v) for v in value)
    if isinstance(value, Mapping):
        raise ConfigError("an identity pin is a value, not a table: pin one of its keys (a.b = ...)")
    return str(value)


def flatten_identity(ident: Mapping[str, Any] | None, prefix: str = "") -> dict[str, Any]:
    """Nested objects -> dotted keys; other values (lists included) as they are.

    ``{"version": {"build": "b1"}, "models": ["m"]}`` -> ``{"version.build": "b1", "models": ["m"]}``.
    An empty nested object is kept as ``{}`` under its key (so its appearance is a change).
    """
    out: dict[str, Any] = {}
    for k, v in (ident or {}).items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            out.update(flatten_identity(v, key + "."))
        else:
            out[key] = v
    return out


def _check_key(key: str, source: str) -> str:
    key = key.strip()
    if not key or not set(key) <= _KEY_CHARS or key.startswith(".") or key.endswith(".") or ".." in key:
        raise ConfigError(
            f"identity key {key!r}: letters, digits and _ - : / with '.' between levels (version.build)",
            field=source,
        )
    return key


def parse_pin(text: str, *, source: str = "--expect-identity") -> IdentityPin:
    """``KEY=VALUE`` -> ``IdentityPin`` (VALUE taken verbatim after the first ``=``, may be empty).

    Raises:
        ConfigError: no ``=`` or a bad key (``field`` = ``source``).
    """
    key, sep, value = text.partition("=")
    if not sep:
        raise ConfigError(f"{text!r}: expected KEY=VALUE, e.g. models=llama-3-8b or version.build=b4567",
                          field=source)
    return IdentityPin(_check_key(key, source), value.strip(), source)


def pins_from_mapping(data: Mapping[str, Any], *, source: str = "[identity]") -> tuple[IdentityPin, ...]:
    """The pins of a plan's ``[identity]`` table (nested tables are dotted keys), in table order.

    Raises:
        ConfigError: not a table, an empty nested table, or a key that is not a valid identity key.
    """
    if not isinstance(data, Mapping):
        raise ConfigError(f"must be a table of KEY = VALUE, not {data!r}", field=source)
    pins: list[IdentityPin] = []
    for key, value in data.items():
        if isinstance(value, Mapping):
            if not value:
                raise ConfigError(f"empty table {key!r}", field=f"{source}.{key}")
            nested = pins_from_mapping(value, source=f"{source}.{key}")
            pins.extend(IdentityPin(_check_key(f"{key}.{p.key}", source), p.value, source) for p in nested)
        else:
            pins.append(IdentityPin(_check_key(str(key), source), pin_text(value), source))
    return tuple(pins)


def check_pins(ident: Mapping[str, Any] | None, pins: Iterable[IdentityPin]) -> list[IdentityChange]:
    """Pins that ``ident`` does not satisfy: ``old`` = the pinned text, ``new`` = the value read (None if absent).

    A pinned key whose identity value is a nested object (``version`` when the
    identity has ``version.build``) is compared as absent: pin a leaf.
    A fleet's identity (``runner.fleet.FleetBackend.identity``: ``kvreplay_fleet``
    and ``replicas``) is checked replica by replica: every pin holds on every
    replica; a broken one is keyed ``replicas.URL.KEY``.
    """
    if isinstance(ident, Mapping) and "kvreplay_fleet" in ident and isinstance(ident.get("replicas"), Mapping):
        pins = list(pins)
        return [IdentityChange(f"replicas.{url}.{c.key}", c.old, c.new)
                for url, one in ident["replicas"].items() for c in check_pins(one, pins)]
    flat = flatten_identity(ident)
    out = []
    for pin in pins:
        have = flat.get(pin.key)
        if pin.key not in flat or isinstance(have, Mapping) or pin_text(have) != pin.value:
            out.append(IdentityChange(pin.key, pin.value, have if pin.key in flat else None))
    return out


def identity_changes(before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> list[IdentityChange]:
    """Flat keys whose values differ between two identities (added and removed keys too), sorted by key."""
    a, b = flatten_identity(before), flatten_identity(after)
    return [IdentityChange(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def abort_details(changes: list[IdentityChange]) -> dict[str, Any]:
    """The extra keys of ``summary.json``'s ``aborted`` for an identity abort.

    Returns:
        ``{"old": {key: value}, "new": {key: value}, "changes": [{"key", "old", "new"}]}``.
    """
    return {
        "old": {c.key: c.old for c in changes},
        "new": {c.key: c.new for c in changes},
        "changes": [c.to_json() for c in changes],
    }


class _Writer(Protocol):
    count: int

    def write(self, rec: dict[str, Any]) -> None: ...
    def close(self) -> None: ...


class IdentityGate:
    """The records writer behind an identity check (module docstring, "Drift at any concurrency").

    Has the writer's ``write``, ``close`` and ``count``; other attributes are the
    writer's. Times are the records' run-relative ``t_sent_ns`` (ns).

    Args:
        writer: The records writer (``rundir.RecordWriter``; its ``path`` is rewritten on drift).

    Attributes:
        verified_ns: Start of the last identity read that matched (run-relative
            ns); None until ``baseline`` (until then no record is checked).
        drift_ns: Start of the read that saw drift; None without drift.
        unverified: Phase -> number of records marked ``identity_unverified``.
    """

    def __init__(self, writer: _Writer) -> None:
        self.writer = writer
        self.unchecked: list[tuple[int, str, Any]] = []  # (t_sent_ns, phase, position), in write order
        self.to_mark: set[tuple[str, Any, int]] = set()  # written before the drift was seen
        self.verified_ns: int | None = None
        self.drift_ns: int | None = None
        self.unverified: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.writer, name)

    @property
    def count(self) -> int:
        """Records written."""
        return self.writer.count

    def _needs_check(self, rec: dict[str, Any]) -> bool:
        t = rec.get("t_sent_ns")
        return t is not None and self.verified_ns is not None and t > self.verified_ns

    def _count(self, phase: str) -> None:
        self.unverified[phase] = self.unverified.get(phase, 0) + 1

    def write(self, rec: dict[str, Any]) -> None:
        """Write ``rec`` now (marked when a drift was already seen and it was sent after the last match).

        Raises:
            TypeError / orjson.JSONEncodeError: as the writer's ``write``.
        """
        v = self.verified_ns  # _needs_check, inline: once a record
        if v is not None and (t := rec.get("t_sent_ns")) is not None and t > v:
            if self.drift_ns is not None:
                rec["identity_unverified"] = True
                self._count(str(rec.get("phase")))
            else:
                self.unchecked.append((int(rec["t_sent_ns"]), str(rec.get("phase")), rec.get("position")))
        self.writer.write(rec)

    def baseline(self, start_ns: int) -> None:
        """The run's baseline identity was read, starting at ``start_ns``: from now on records are checked."""
        self.verified_ns = start_ns

    def matched(self, start_ns: int) -> None:
        """An identity read started at ``start_ns`` matched: the records sent up to then are vouched for."""
        if self.drift_ns is not None or self.verified_ns is None:
            return
        self.verified_ns = max(self.verified_ns, start_ns)
        self.unchecked = [u for u in self.unchecked if u[0] > self.verified_ns]

    def unread(self, start_ns: int) -> None:
        """An identity read started at ``start_ns`` failed: the records sent before it stay unmarked."""
        if self.drift_ns is None:
            self.unchecked = [u for u in self.unchecked if u[0] > start_ns]

    def drifted(self, start_ns: int) -> None:
        """A read started at ``start_ns`` saw drift: every record sent after the last match is to be marked."""
        if self.drift_ns is not None:
            return
        self.drift_ns = start_ns
        for t, phase, position in self.unchecked:
            self.to_mark.add((phase, position, t))
            self._count(phase)
        self.unchecked = []

    def close(self) -> None:
        """Close the writer; after a drift, mark the records written before it was seen (one atomic rewrite)."""
        self.writer.close()
        path = getattr(self.writer, "path", None)
        if self.to_mark and path is not None:
            from kvreplay.rundir.records import mark_records

            mark_records(path, self.to_mark, "identity_unverified")
            self.to_mark = set()
