"""A fleet target: a router URL and the replicas behind it, read as one ``Backend`` (issue 33).

Requests go to the router (``RunOptions.target_url``); counters and identity are
read from every replica (never from the router). ``FleetBackend`` wraps one
adapter per replica and satisfies ``runner.backend.Backend``:

- ``snapshot()`` reads every replica at once; ``common`` is the sum over the
  replicas, ``raw`` is ``{replica URL: that replica's raw series}`` (so
  counters.jsonl keeps every replica's series), ``parts`` holds each replica's
  own snapshot. ``counter_delta`` over two fleet snapshots sums the replicas'
  own deltas, and a replica whose counters went down makes the delta a reset
  (``reset_names`` ``name@URL``): a replica that restarts aborts as one server does.
- ``identity()`` is ``{"kvreplay_fleet": [URL, ...], "replicas": {URL: identity}}``:
  a drift of any replica is a drift; ``runner.identity.check_pins`` applies every
  pin to every replica.
- ``drained(a, b)``: every replica drained; ``reset_cache()``: every replica reset.

Attribution (records' ``replica``, ``replica_reason``; ``attribute_by_counters``,
``attribute_by_header``): at C1 the replica whose request-level counters moved
(``evidence.vocab.REQUEST_COUNTERS``: lookups, prompt tokens, ... not only hits);
at any concurrency the response header ``RunOptions.replica_header`` when the
router or replica sets it. Reasons: ``ambiguous`` (more than one replica's
counters moved), ``unattributed`` (none moved: the router forwarded to a replica
not listed, or the server counts nothing), ``unlisted`` (the header names a
replica not listed), ``conflict`` (header and counters disagree), ``phase_only``
(no per-request counters and no header: per-replica totals per phase only),
``not_reached`` (the send never reached the router: connection refused, reset).
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import SplitResult, urlsplit

from kvreplay.errors import BackendError, ConfigError
from kvreplay.evidence.vocab import REQUEST_COUNTERS
from kvreplay.redaction import redact_url, register_url
from kvreplay.runner.backend import Backend, Snapshot
from kvreplay.sim.routing import REPLICA_HEADER

__all__ = [
    "DEFAULT_REPLICA_HEADER",
    "FLEET_MARKER",
    "FleetBackend",
    "Replica",
    "attribute_by_counters",
    "attribute_by_header",
    "check_fleet",
    "check_header_name",
    "endpoint",
    "fleet_run_fields",
    "parse_replica",
    "part_deltas",
    "replica_fields",
    "replicas_from_mapping",
]

DEFAULT_REPLICA_HEADER = REPLICA_HEADER  # the name kvreplay's own router sets (sim.routing)
"""Response header naming the replica that served a request (``--replica-header``)."""
FLEET_MARKER = "kvreplay_fleet"
"""Key of a fleet identity listing its replica URLs (``FleetBackend.identity``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Replica:
    """One replica behind the router.

    Attributes:
        url: Its base URL as given (``http://127.0.0.1:8001``); records name it so.
        backend: Counter adapter name; None = the run's ``--backend``.
        profile: Profile for ``--backend prometheus``; None = the run's ``--profile``.
        verdict: A probe verdict.json whose calibrated cache model stands for this replica's
            cache in the routing loss (``api.fleet.replica_cache_extra``); None = the run's
            ``--replica-cache-from``, if any.
    """

    url: str
    backend: str | None = None
    profile: str | None = None
    verdict: str | None = None

    @property
    def name(self) -> str:
        """The replica as every output names it: its URL through ``redaction.redact_url``.

        Userinfo and secret query values replaced by the marker. Records' ``replica``,
        counters.jsonl, summary.json, reports and attribution all use this one form.
        """
        return redact_url(self.url)

    def to_json(self) -> dict[str, Any]:
        """``{"url", "backend", "profile"}``, ``verdict`` when set (plan.json ``run.fleet.replicas``; url: ``name``)."""
        return {"url": self.name, "backend": self.backend, "profile": self.profile,
                **({"verdict": self.verdict} if self.verdict is not None else {})}


def _check_url(url: str, field: str) -> str:
    """``url`` when it is an http(s) URL with a host; its secrets are registered (``redaction.register_url``)."""
    try:
        u = urlsplit(url)
        ok = url.startswith(("http://", "https://")) and bool(u.hostname) and (u.port or 0) >= 0
    except ValueError:  # a bad IPv6 literal, a port that is not a number
        ok = False
    if not ok:
        raise ConfigError(f"{redact_url(url)!r} is not a replica URL: give http://HOST:PORT", field=field)
    try:
        register_url(url)  # before anything is written or printed: no output keeps them
    except ValueError as exc:
        raise ConfigError(f"credentials in the replica URL: {exc}", field=field) from None
    return url


def parse_replica(text: str, *, field: str = "--replica") -> Replica:
    """``URL[,backend=NAME][,profile=FILE][,verdict=FILE]`` -> ``Replica``.

    Raises:
        ConfigError: not an http(s) URL, an unknown or repeated key, an empty value.
    """
    url, *opts = [p.strip() for p in text.split(",")]
    _check_url(url, field)
    got: dict[str, str] = {}
    for o in opts:
        key, sep, value = o.partition("=")
        if not sep or key not in ("backend", "profile", "verdict") or not value or key in got:
            raise ConfigError(f"{o!r} in {redact_url(url)!r}: expected backend=NAME, profile=FILE or verdict=FILE, "
                              "each once", field=field)
        got[key] = value
    return Replica(url=url, backend=got.get("backend"), profile=got.get("profile"), verdict=got.get("verdict"))


def replicas_from_mapping(data: Any, *, source: str = "[fleet]") -> tuple[str | None, tuple[Replica, ...]]:
    """A plan's ``[fleet]`` table -> ``(router URL or None, replicas)``.

    The table: ``router = "http://..."`` (optional; the run's ``--target`` wins) and
    ``replicas = ["http://...", {url = "http://...", backend = "llamacpp"}, ...]``.

    Raises:
        ConfigError: not a table, an unknown key, a replica that is not a URL or a table with ``url``.
    """
    if not isinstance(data, Mapping):
        raise ConfigError("must be a table with router and replicas", field=source)
    unknown = set(data) - {"router", "replicas"}
    if unknown:
        raise ConfigError(f"unknown keys {sorted(unknown)} (router, replicas)", field=source)
    router = data.get("router")
    if router is not None and not isinstance(router, str):
        raise ConfigError("router must be a URL string", field=f"{source}.router")
    items = data.get("replicas", [])
    if not isinstance(items, list):
        raise ConfigError("replicas must be a list", field=f"{source}.replicas")
    out = []
    for i, it in enumerate(items):
        where = f"{source}.replicas[{i}]"
        if isinstance(it, str):
            out.append(parse_replica(it, field=where))
        elif isinstance(it, Mapping) and isinstance(it.get("url"), str):
            bad = set(it) - {"url", "backend", "profile", "verdict"}
            if bad or any(v is not None and not isinstance(v, str) for v in it.values()):
                raise ConfigError(f"a replica table has url, backend, profile, verdict (strings); got {sorted(it)}",
                                  field=where)
            out.append(Replica(url=_check_url(it["url"], where), backend=it.get("backend"),
                               profile=it.get("profile"), verdict=it.get("verdict")))
        else:
            raise ConfigError("a replica is a URL or a table with url", field=where)
    return router, tuple(out)


_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


def check_header_name(name: str, *, field: str = "--replica-header") -> str:
    """``name`` when it is an HTTP field name (RFC 9110 5.1: a ``token``; no CR, LF, space or ``:``).

    Raises:
        ConfigError: any other character (its code and offset named).
    """
    if not _TOKEN.fullmatch(name):
        bad = next(((i, c) for i, c in enumerate(name) if not _TOKEN.fullmatch(c)), None)
        where = f": character code {ord(bad[1])} at offset {bad[0]}" if bad else ": empty"
        raise ConfigError(f"not an HTTP header name{where} (letters, digits and !#$%&'*+.^_`|~-)", field=field)
    return name


def fleet_run_fields(router: str, replicas: Sequence[Replica], header: str | None = DEFAULT_REPLICA_HEADER
                     ) -> dict[str, Any]:
    """``RunOptions`` fields of a run against ``router`` and ``replicas`` (empty without replicas).

    ``replicas`` (``Replica.name``: the redacted URLs), ``replica_header`` and ``fleet_json`` (plan.json ``run.fleet``:
    ``router``, ``replicas`` as ``Replica.to_json``, ``replica_header``); an experiment
    file's ``[fleet]`` runs with them as ``kvreplay run --replica`` does.
    """
    if not replicas:
        return {}
    return {"replicas": tuple(r.name for r in replicas), "replica_header": header,
            "fleet_json": {"router": redact_url(router), "replicas": [r.to_json() for r in replicas],
                           "replica_header": header}}


_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@?#]*@")


def _split(url: str) -> SplitResult:
    """``urlsplit`` of ``url`` without its userinfo (a name's ``[REDACTED]@`` is not an IPv6 literal)."""
    return urlsplit(_USERINFO.sub(r"\1", url))


def _same_server(a: str, b: str) -> bool:
    ua, ub = _split(a), _split(b)
    return (ua.scheme, ua.hostname, ua.port, ua.path.rstrip("/")) == (ub.scheme, ub.hostname, ub.port,
                                                                        ub.path.rstrip("/"))


def endpoint(url: str) -> tuple[frozenset[str], int]:
    """``(addresses, port)`` of the server a URL names: one server, whatever name it is given by.

    The host is resolved (``socket.getaddrinfo``): ``localhost`` is ``{127.0.0.1, ::1}``
    (as the resolver says), ``127.0.0.1`` is ``{127.0.0.1}``; an IP literal is itself
    (normalised: ``::0:1`` is ``::1``). A name that does not resolve stands for itself,
    lowercased. The port is the URL's, or the scheme's default (80, 443).
    """
    u = _split(url)
    host = (u.hostname or "").lower()
    port = u.port or (443 if u.scheme == "https" else 80)
    try:
        return frozenset({ipaddress.ip_address(host).compressed}), port
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return frozenset({host}), port
    return frozenset(ipaddress.ip_address(str(i[4][0]).partition("%")[0]).compressed for i in infos), port


def _one_server(a: tuple[frozenset[str], int], b: tuple[frozenset[str], int]) -> bool:
    return a[1] == b[1] and bool(a[0] & b[0])


def check_fleet(router: str, replicas: Sequence[Replica]) -> None:
    """Refuse a replica that is the router itself, or a replica listed twice.

    Servers are compared by ``endpoint``: the same port and a resolved address in common,
    so ``http://localhost:8001`` and ``http://127.0.0.1:8001`` are one server (issue 44 item 2).

    Raises:
        ConfigError: field ``--replica``.
    """
    ends = [endpoint(r.url) for r in replicas]
    at_router = endpoint(router)
    for i, r in enumerate(replicas):
        if _one_server(ends[i], at_router):
            raise ConfigError(f"replica {r.name} is the router itself (--target {redact_url(router)}): "
                              "list the servers behind it", field="--replica")
        for j, other in enumerate(replicas[:i]):
            if _one_server(ends[i], ends[j]):
                alias = "" if _same_server(r.url, other.url) else f" (as {other.name}: the same address and port)"
                raise ConfigError(f"replica {r.name} is listed twice{alias}", field="--replica")


def _moved(delta: Mapping[str, Any] | None) -> bool:
    if not delta:
        return False
    return any(isinstance(delta.get(n), (int, float)) and delta[n] > 0 for n in REQUEST_COUNTERS)


def attribute_by_counters(deltas: Mapping[str, Mapping[str, Any] | None]) -> tuple[str | None, str | None]:
    """The replica that served one C1 request, from each replica's counter delta over it.

    Args:
        deltas: Replica URL -> its delta (``CounterDelta.to_json()``) over the request; None when unread.

    Returns:
        ``(url, None)`` when exactly one replica's request-level counters
        (``REQUEST_COUNTERS``) moved; ``(None, "ambiguous")`` when several did;
        ``(None, "unattributed")`` when none did.
    """
    moved = [u for u, d in deltas.items() if _moved(d)]
    if len(moved) == 1:
        return moved[0], None
    return None, ("ambiguous" if moved else "unattributed")


def attribute_by_header(value: str | None, replicas: Sequence[str]) -> tuple[str | None, str | None]:
    """The replica a response header names: ``(url as listed, None)``, ``(None, "unlisted")`` or ``(None, None)``.

    The header may carry the replica's URL (a trailing ``/`` and the scheme's default
    port ignored) or its ``HOST:PORT``. None or empty: ``(None, None)`` (no header).
    """
    if not value:
        return None, None
    v = value.strip()
    for u in replicas:
        if _same_server(v, u) or v == _split(u).netloc:
            return u, None
    return None, "unlisted"


def _sum_snapshots(parts: dict[str, Snapshot]) -> Snapshot:
    common: dict[str, float] = {}
    invalid: dict[str, str] = {}
    for url, s in parts.items():
        for k, v in s.common.items():
            common[k] = common.get(k, 0) + v
        for k, why in s.invalid.items():
            invalid.setdefault(k, f"{url}: {why}")
    for k in invalid:
        common.pop(k, None)  # one replica's invalid value makes the sum invalid
    return Snapshot(taken_ns=max(s.taken_ns for s in parts.values()), raw={u: s.raw for u, s in parts.items()},
                    common=common, started=None,
                    settled=all(s.settled for s in parts.values()) if all(s.settled is not None
                                                                          for s in parts.values()) else None,
                    invalid=invalid, read_bytes=sum(s.read_bytes for s in parts.values()), parts=parts)


class FleetBackend:
    """Every replica's adapter as one ``Backend`` (module docstring).

    Args:
        members: ``(replica URL, its adapter)`` in the order given.
    """

    partial_reads = False  # whole reads: counters.jsonl keeps each replica's series under its URL

    def __init__(self, members: Sequence[tuple[str, Backend]]) -> None:
        self.members = list(members)
        self.name = "fleet:" + ",".join(b.name for _, b in self.members)
        units: dict[str, str] = {}
        for _, b in self.members:
            units.update(getattr(b, "units", None) or {})
        self.units = units

    @property
    def urls(self) -> list[str]:
        """The replica URLs, in order."""
        return [u for u, _ in self.members]

    async def snapshot(self, full: bool = True) -> Snapshot:
        """Every replica read at once, summed (``parts`` keeps each).

        Raises:
            BackendError: a replica could not be read (its URL in the message).
        """
        got = await asyncio.gather(*(b.snapshot() for _, b in self.members), return_exceptions=True)
        for url, g in zip(self.urls, got, strict=True):
            if isinstance(g, BaseException):
                if isinstance(g, BackendError | OSError | TimeoutError):
                    raise BackendError(f"replica {url} could not be read: {g}") from g
                raise g
        return _sum_snapshots(dict(zip(self.urls, got, strict=True)))  # type: ignore[arg-type]

    async def identity(self) -> dict[str, Any]:
        """``{"kvreplay_fleet": [URL, ...], "replicas": {URL: identity}}``.

        Raises:
            BackendError: a replica's identity could not be read.
        """
        idents = await asyncio.gather(*(b.identity() for _, b in self.members))
        return {FLEET_MARKER: self.urls, "replicas": dict(zip(self.urls, idents, strict=True))}

    def drained(self, a: Snapshot, b: Snapshot) -> bool:
        """Every replica drained between ``a`` and ``b``."""
        pa, pb = a.parts or {}, b.parts or {}
        return all(u in pa and u in pb and be.drained(pa[u], pb[u]) for u, be in self.members)

    async def reset_cache(self) -> bool:
        """Reset every replica's cache; True only when every one could."""
        done = await asyncio.gather(*(b.reset_cache() for _, b in self.members))
        return all(done)


def part_deltas(delta_parts: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``{URL: delta JSON}`` of a fleet ``CounterDelta.parts``; None without parts."""
    if not delta_parts:
        return None
    return {u: d.to_json() for u, d in delta_parts.items()}



def replica_fields(header: str | None, deltas: Mapping[str, Any] | None, replicas: Sequence[str], *,
                   per_request: bool, reached: bool = True) -> dict[str, Any]:
    """The record keys naming the replica that served one request (module docstring).

    Args:
        header: The replica header's value in the response (``RequestOutcome.replica``), None when absent.
        deltas: Replica URL -> its counter delta over the request (C1 per-request reads), else None.
        replicas: The listed replica URLs.
        per_request: Counters were read around this request (C1).
        reached: False when the send never reached the router (a transport failure:
            ``metrics.summary.failure_kind``): no replica served it, ``replica_reason: "not_reached"``.

    Returns:
        ``{"replica", "replica_reason", "replica_source"}``, plus ``replica_deltas``
        (every replica's delta) with counters, and ``replica_header`` (its value) when
        the header named no listed replica. The counters decide at C1; the header
        settles an ``ambiguous`` case when it names one of the replicas that moved; a
        header naming another replica than the counters is a ``conflict``.
    """
    by_header, header_reason = attribute_by_header(header, replicas)
    out: dict[str, Any] = {}
    if not reached:
        return {"replica": None, "replica_reason": "not_reached", "replica_source": None}
    if per_request and deltas is not None:
        out["replica_deltas"] = dict(deltas)
        url, reason = attribute_by_counters(deltas)
        source: str | None = "counters"
        if url is not None and by_header is not None and by_header != url:
            url, reason, source = None, "conflict", None
        elif url is None and reason == "ambiguous" and by_header is not None and _moved(deltas.get(by_header)):
            url, reason, source = by_header, None, "header"
        elif url is None:
            source = None
    elif header:
        url, reason, source = by_header, header_reason, "header" if by_header else None
    else:
        url, reason, source = None, "phase_only", None
    out.update({"replica": url, "replica_reason": reason, "replica_source": source})
    if header and by_header is None:
        out["replica_header"] = header[:200]
    return out
