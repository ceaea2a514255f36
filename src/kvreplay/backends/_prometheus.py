"""The profile-driven Prometheus adapter (``--backend prometheus --profile FILE``).

Any server with a Prometheus ``/metrics`` endpoint is measured by naming, in a
profile (see ``_profile``), which of its series mean which common names and which
gauges must read zero for a drain. The vLLM, SGLang and llama.cpp adapters are
this adapter with a built-in profile plus their own identity and reset calls.

Cheap reads (issue 31 item 3): a read inside a phase (``snapshot(full=False)``)
asks only for the sample names the profile reads (``wanted_names``), with the
``name[]=`` query that prometheus_client's exposition honours (vLLM, SGLang).
A server that ignores it answers the whole scrape: that is seen once per adapter
(a sample name that was not asked for, or a non-2xx answer;
``filter_honoured``) and later reads ask for the whole scrape without the
query. Either way such a read's snapshot is ``partial``: its ``raw`` holds
only the asked-for series (the parser drops the others before they come back),
and the runner logs the others only at phase boundaries. Parsing a large
scrape happens in another process (``_offload``).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import aiohttp

from kvreplay import clock
from kvreplay.errors import BackendError
from kvreplay.runner.backend import Snapshot

from ._common import add_served_identity, drain_blockers
from ._family import BackendFamily
from ._http import Reply, fetch
from ._offload import parse_off_loop
from ._profile import Profile
from ._prom import check_scrape, declared_names, parse_exposition, raw_from_samples

__all__ = ["FAMILY", "PrometheusBackend", "info_of", "parse_scrape"]

PROMETHEUS_ACCEPT = "text/plain; version=0.0.4"
"""Never the OpenMetrics type: prometheus_client 0.26 then escapes ``:`` in sample
names but not in HELP/TYPE, and the parse fails (SERVERS.md section 6)."""


def info_of(text: str, profile: Profile) -> dict[str, Any]:
    """``{"info": {series: labels}}`` from a scrape, or ``{}`` (module-level: it may run in the parser process).

    Raises:
        BackendError: the text is not valid exposition format.
    """
    return {"info": info} if (info := profile.info(parse_exposition(text))) else {}


def parse_scrape(
    body: str | tuple[bytes, ...], profile: Profile, declared_extra: frozenset[str], wanted: frozenset[str] | None
) -> tuple[dict[str, Any], dict[str, float], float | None, dict[str, str], frozenset[str], bool, dict[str, Any]]:
    """Parse one scrape and map it (module-level: it runs in the parser process for large scrapes).

    Args:
        body: The exposition text, or its bytes as they arrived (joined and
            decoded here as UTF-8, invalid bytes replaced).
        profile: The mapping.
        declared_extra: Names declared by an earlier full scrape (a filtered
            scrape omits a declared family with no sample yet; it still reads 0).
        wanted: The sample names asked for (None: the whole scrape was asked for).

    Returns:
        ``(raw, common, started, invalid, declared, ignored, info)``: as
        ``PrometheusBackend.parse_checked`` (with ``wanted``, ``raw`` holds only
        those samples even when the server sent more), the names this text
        declares, whether it held a sample name outside ``wanted`` (the server
        ignored the filter), and ``info_of``'s identity fields of this text (the
        profile's info series are among ``wanted_names``).

    Raises:
        BackendError: the text is not valid exposition format, or over a bound.
    """
    text = body if isinstance(body, str) else b"".join(body).decode("utf-8", errors="replace")
    declared = declared_names(text)
    ignored = False
    if wanted is not None:
        check_scrape(text)  # the bounds hold for the whole body, parsed or not
        text, ignored = only_wanted(text, wanted)
    samples = parse_exposition(text)
    common, started, invalid = profile.apply_checked(samples, declared | declared_extra)
    info = {"info": i} if (i := profile.info(samples)) else {}
    return raw_from_samples(samples), common, started, invalid, declared, ignored, info


def only_wanted(text: str, wanted: frozenset[str]) -> tuple[str, bool]:
    """The lines of an exposition a filtered read parses: comments and the samples named in ``wanted``.

    A server that ignores ``name[]=`` (vLLM's ``/metrics``) sends every family; the
    exposition parser then spent ~20 ms on ~50 KB per read for a dozen samples. A
    sample line's name is what precedes its first ``{`` or blank (Prometheus text
    format 0.0.4).

    Returns:
        ``(text, ignored)``: the kept lines, and whether any sample line was dropped
        (the server ignored the filter).
    """
    keep: list[str] = []
    ignored = False
    for line in text.splitlines(keepends=True):
        head = line.lstrip()
        if not head or head.startswith("#"):
            keep.append(line)
            continue
        brace, blank = head.find("{"), head.find(" ")
        end = brace if brace >= 0 and (blank < 0 or brace < blank) else blank
        if (head[:end] if end >= 0 else head.rstrip()) in wanted:
            keep.append(line)
        else:
            ignored = True
    return "".join(keep), ignored


INFO_FROM_READ_NS = 250_000_000
"""``identity()`` takes the info series from the last counter read when it is this fresh (ns) and not used yet:
the runner reads the identity right after each counter read (at C1 after every request), and a second
scrape of a large ``/metrics`` that ignores ``name[]=`` (vLLM's, ~50 KB) doubled the cost of a read."""


class PrometheusBackend:
    """Counters from a ``/metrics`` scrape, mapped by a profile.

    Attributes:
        name: Backend name (``"prometheus"``, or the family name in subclasses).
        base_url: Server root URL.
        profile: The mapping in use.
        units: Common name -> unit (``"tokens"``, ``"requests"``, ...) from the profile.
        load_gauges: Common gauges that must read zero for a drain.
    """

    name = "prometheus"
    metrics_optional = False
    """True when the family serves /metrics only behind a flag (404/501 then means
    "off", and snapshots come back empty instead of failing)."""

    def __init__(
        self, base_url: str, session: aiohttp.ClientSession | None, profile: Profile
    ) -> None:
        self.base_url = base_url
        self.session = session
        self.profile = profile
        self.units: dict[str, str] = profile.units
        self.load_gauges: tuple[str, ...] = profile.load_gauges
        self.filter_honoured: bool | None = None  # None: no filtered read yet
        self._declared: frozenset[str] = frozenset()  # from the last whole scrape
        self._read_info: tuple[int, dict[str, Any]] | None = None  # (taken_ns, info) of the last snapshot, used once

    partial_reads = True
    """``snapshot(full=False)`` asks only for the profile's series (module docstring)."""

    def wanted_names(self) -> frozenset[str]:
        """The sample names a filtered read asks for: the series the profile maps, start markers, info series."""
        return (frozenset(n for m in self.profile.maps for n, _ in m.alternatives) | frozenset(self.profile.started)
                | frozenset(self.profile.info_series))

    # -- offline -----------------------------------------------------------
    def parse(self, text: str) -> tuple[dict[str, Any], dict[str, float], float | None]:
        """Parse one saved or live ``/metrics`` body.

        Args:
            text: Prometheus text exposition.

        Returns:
            ``(raw, common, started)``: every series verbatim (key
            ``name{labels}`` as printed), the profile's common values (absent when
            not reported) and the restart marker (None when the profile names none
            present).

        Raises:
            BackendError: the text is not valid exposition format.
        """
        raw, common, started, _ = self.parse_checked(text)
        return raw, common, started

    def parse_checked(self, text: str) -> tuple[dict[str, Any], dict[str, float], float | None, dict[str, str]]:
        """``parse``, plus the common names whose value cannot be differenced (``Snapshot.invalid``).

        Raises:
            BackendError: the text is not valid exposition format.
        """
        samples = parse_exposition(text)
        common, started, invalid = self.profile.apply_checked(samples, declared_names(text))
        return raw_from_samples(samples), common, started, invalid

    def identity_from_text(self, text: str) -> dict[str, Any]:
        """Identity fields held in a scrape: the labels of the profile's info series.

        Raises:
            BackendError: the text is not valid exposition format.
        """
        return info_of(text, self.profile)

    # -- live ----------------------------------------------------------------
    def _session(self) -> aiohttp.ClientSession:
        if self.session is None:
            raise BackendError(f"{self.name} backend has no HTTP session (offline parse only)")
        return self.session

    async def scrape(self, names: frozenset[str] | None = None) -> str | None:
        """GET the metrics path with ``Accept: text/plain``.

        Args:
            names: Ask only for these sample names (``name[]=`` query), unless the
                server was seen to refuse the filter; None: the whole scrape.

        Returns:
            The body, or None when the endpoint is switched off (404/501) and the
            family's metrics are optional.

        Raises:
            BackendError: unreachable server, or a non-2xx status otherwise.
        """
        reply = await self._get(names, decode=True)
        return None if reply is None else reply.text

    async def _get(self, names: frozenset[str] | None, *, decode: bool) -> Reply | None:
        """``scrape``'s GET; with ``decode`` False the body stays as the chunks that arrived."""
        path = self.profile.metrics_path
        if names and self.filter_honoured is not False:
            query = "&".join("name[]=" + quote(n, safe=":") for n in sorted(names))
            reply = await fetch(self._session(), "GET", self.base_url, f"{path}?{query}",
                                accept=PROMETHEUS_ACCEPT, decode=decode)
            self.last_read_bytes = reply.body_bytes
            if reply.ok:
                return reply
            self.filter_honoured = False  # refused: whole scrapes from now on
        reply = await fetch(self._session(), "GET", self.base_url, path, accept=PROMETHEUS_ACCEPT, decode=decode)
        self.last_read_bytes = reply.body_bytes
        if reply.ok:
            return reply
        if self.metrics_optional and reply.status in (404, 501):
            return None
        raise BackendError(f"GET {path}: HTTP {reply.status}", url=self.base_url + path)

    last_read_bytes = 0
    """Characters of the last scrape's body."""

    async def snapshot(self, *, full: bool = True) -> Snapshot:
        """Scrape once and map the series.

        Args:
            full: False: ask only for the profile's series (module docstring);
                the snapshot is ``partial`` when the server honoured that.

        Raises:
            BackendError: unreachable, non-2xx, or malformed exposition.
        """
        wanted = None if full else self.wanted_names()
        reply = await self._get(wanted, decode=False)
        taken_ns = clock.now_ns()
        if reply is None:
            return Snapshot(taken_ns=taken_ns, raw={}, common={}, read_bytes=self.last_read_bytes)
        # joined, decoded and parsed in another process for a large scrape, in a thread
        # otherwise: never on the event loop (_offload)
        raw, common, started, invalid, declared, ignored, info = await parse_off_loop(
            parse_scrape, reply.chunks, self.profile, self._declared, wanted)
        self._read_info = (taken_ns, info)
        if wanted is None or ignored:
            self._declared = declared
        if wanted is not None and self.filter_honoured is None:
            self.filter_honoured = not ignored
        return Snapshot(taken_ns=taken_ns, raw=raw, common=common, started=started, invalid=invalid,
                        partial=wanted is not None, read_bytes=self.last_read_bytes)

    async def identity(self) -> dict[str, Any]:
        """Served model ids (``/v1/models``), ``/version``, and the profile's info series.

        Raises:
            BackendError: the server could not be reached.
        """
        ident: dict[str, Any] = {"backend": self.name, "profile": self.profile.name}
        await add_served_identity(self._session(), self.base_url, ident)
        if self.profile.info_series:
            read = self._read_info
            self._read_info = None
            if read is not None and clock.now_ns() - read[0] <= INFO_FROM_READ_NS:
                ident.update(read[1])  # the counter read just parsed held them: no second scrape
            else:
                text = await self.scrape(frozenset(self.profile.info_series))  # only those, where the server can
                if text is not None:
                    ident.update(await parse_off_loop(info_of, text, self.profile))
        return ident

    def drained(self, a: Snapshot, b: Snapshot) -> bool:
        """Load gauges named by the profile zero in both, counters unchanged a -> b."""
        return not drain_blockers(a, b, self.load_gauges)

    async def reset_cache(self) -> bool:
        """Call the profile's reset endpoint.

        Returns:
            True when it answered 2xx (and its body holds ``expect_body``); False
            when the profile has no reset or the server refused.

        Raises:
            BackendError: the server could not be reached.
        """
        reset = self.profile.reset
        if reset is None:
            return False
        reply = await fetch(self._session(), reset["method"], self.base_url, reset["path"])
        return reply.ok and reset["expect_body"] in reply.text


FAMILY = BackendFamily(name="prometheus", adapter=PrometheusBackend,
                       summary="/metrics via any profile TOML (--profile NAME|FILE)", needs_profile=True)
"""Any Prometheus ``/metrics`` mapped by a profile; never detected (``--backend prometheus --profile``)."""
