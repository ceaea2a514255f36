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
``filter_honoured``). The same query is then asked once of the path with a
trailing slash (``/metrics/``): vLLM serves ``/metrics`` from
prometheus-fastapi-instrumentator's route, which ignores the query, and every
other ``/metrics...`` path from prometheus_client's ASGI app, which honours it
(``vllm/entrypoints/serve/instrumentator/metrics.py``: the ``Mount`` whose
``path_regex`` is ``^/metrics(?P<path>.*)$``; 0.32: 52 KB in 10-22 ms whole,
3.5 KB in 1-7 ms filtered). That path is used from then on only when its
answer holds no sample that was not asked for, the very series the whole
scrape held (keys) and the same start marker (``filter_path``); otherwise
later reads ask for the whole scrape without the query. Either way such a
read's snapshot is ``partial``: its ``raw`` holds only the asked-for series
(the parser drops the others before they come back), and the runner logs the
others only at phase boundaries. Parsing a large scrape happens in another
process (``_offload``).

Cheap identity reads (issue 31 item 3). The runner re-reads the identity after
every counter read (at C1 after every request, issue 14). The identity has two
parts: the profile's info series (``vllm:cache_config_info``), which
``identity()`` takes from the counter read it follows (no second scrape), and
the *served* part, ``/v1/models`` and ``/version`` (``read_served``), two more
GETs answered by the server's API process before the next request. The served
part can only change when the server process changes, and a new process shows
in the very scrape just parsed: its start marker (``Snapshot.started``, the
largest of the profile's ``started`` series: ``process_start_time_seconds``,
and for vLLM the ``_created`` time of its prefix counters, new when the engine
is re-created inside the same process) differs. So ``identity(reuse_served=True)``
keeps the served part read right after the read whose marker it was, and reads it
again only when the fresh read's marker differs from that one, or is absent (no
marker: never reused), or there is no fresh read; the runner asks for it only at
the per-request reads, so the whole identity is read at every phase boundary and
at the run's end. A served part kept for marker M was read after a scrape of the
process with marker M; a later scrape that shows M again is of that same process
(a start time is never reused; a restart writes a later one), so a restart with
another model or version is seen at the first read after it. What this does not
see before the phase ends: a change of the served model list *without* a new
process (vLLM's runtime LoRA loading, ``VLLM_ALLOW_RUNTIME_LORA_UPDATING``);
so the runner lets a reused served part vouch for the records sent before it
only once a drift turns out to have come with a new process (``served_how``;
``runner._contract``): a change seen at the phase's end with the same marker
marks every record sent since the last whole read ``identity_unverified``.
"""

from __future__ import annotations

import re
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
    check_scrape(text)  # the bounds hold for the whole body; only the info series are parsed
    samples = parse_exposition(only_wanted(text, frozenset(profile.info_series))[0])
    return {"info": info} if (info := profile.info(samples)) else {}


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


_SAMPLE_SUFFIXES = ("_total", "_created", "_bucket", "_sum", "_count", "_info", "_gsum", "_gcount")
"""Suffixes a sample name adds to its family's name (Prometheus text 0.0.4 and OpenMetrics)."""
_HELP_OR_TYPE = re.compile(r"#[ \t]+(?:HELP|TYPE)[ \t]+([^ \t\n]+)")


def _families_of(wanted: frozenset[str]) -> frozenset[str]:
    """The names a ``# HELP``/``# TYPE`` line of a wanted sample can carry: the sample's, or it less a suffix."""
    return wanted | frozenset(n[:-len(suf)] for n in wanted for suf in _SAMPLE_SUFFIXES if n.endswith(suf))


def only_wanted(text: str, wanted: frozenset[str]) -> tuple[str, bool]:
    """The lines of an exposition a filtered read parses: the samples named in ``wanted`` and their comments.

    A server that ignores ``name[]=`` (vLLM's ``/metrics``) sends every family; the
    exposition parser then spent ~20 ms on ~50 KB per read for a dozen samples. A
    sample line's name is what precedes its first ``{`` or blank (Prometheus text
    format 0.0.4). A ``# HELP`` or ``# TYPE`` line is kept when it names the family
    of a wanted sample (the sample's name, or that name less ``_total``,
    ``_created``, ``_bucket``, ...: ``_families_of``), so each kept sample keeps its
    family's type; the others (vLLM's ~180 comment lines, which the parser took
    3 ms to read) are dropped with their families, which hold no kept sample. Any
    other comment (``# EOF``) is kept. The declared names are taken from the
    whole text before (``declared_names``), never from what this keeps.

    Returns:
        ``(text, ignored)``: the kept lines, and whether any sample line was dropped
        (the server ignored the filter).
    """
    families = _families_of(wanted)
    keep: list[str] = []
    ignored = False
    for line in text.splitlines(keepends=True):
        head = line.lstrip()
        if not head:
            keep.append(line)
            continue
        if head.startswith("#"):
            m = _HELP_OR_TYPE.match(head)
            if m is None or m.group(1) in families:
                keep.append(line)
            continue
        brace, blank = head.find("{"), head.find(" ")
        end = brace if brace >= 0 and (blank < 0 or brace < blank) else blank
        if (head[:end] if end >= 0 else head.rstrip()) in wanted:
            keep.append(line)
        else:
            ignored = True
    return "".join(keep), ignored


def _query(names: frozenset[str]) -> str:
    """The ``name[]=`` query asking for ``names`` (sorted; ``:`` left as it is)."""
    return "&".join("name[]=" + quote(n, safe=":") for n in sorted(names))


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
        self.filter_path: str = profile.metrics_path  # where a filtered read is asked (module docstring)
        self._declared: frozenset[str] = frozenset()  # from the last whole scrape
        # (taken_ns, info, start marker) of the last snapshot, used once by identity()
        self._read_info: tuple[int, dict[str, Any], float | None] | None = None
        self._served: tuple[float, dict[str, Any]] | None = None  # (start marker, served part) for reuse
        self.served_how = "read"
        """How the last ``identity()`` got its served part: ``"reused"`` (kept for the same start
        marker), ``"new_process"`` (read because the marker differs from the kept one's) or ``"read"``."""

    reuses_served_identity = True
    """``identity(reuse_served=True)`` is supported (module docstring, "Cheap identity reads")."""

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
            reply = await fetch(self._session(), "GET", self.base_url, f"{self.filter_path}?{_query(names)}",
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
        # joined, decoded and parsed in another process for a large scrape, in a thread for a
        # mid-sized one, on the loop only under _offload.INLINE_BYTES (a filtered read)
        raw, common, started, invalid, declared, ignored, info = await parse_off_loop(
            parse_scrape, reply.chunks, self.profile, self._declared, wanted)
        self._read_info = (taken_ns, info, started)
        if wanted is None or ignored:
            self._declared = declared
        if wanted is not None and self.filter_honoured is None:
            self.filter_honoured = not ignored
            if ignored:
                await self._try_filter_path(wanted, raw, started)
        return Snapshot(taken_ns=taken_ns, raw=raw, common=common, started=started, invalid=invalid,
                        partial=wanted is not None, read_bytes=self.last_read_bytes)

    async def _try_filter_path(self, wanted: frozenset[str], raw: dict[str, Any], started: float | None) -> None:
        """Once, after the metrics path ignored ``name[]=``: adopt ``PATH/`` when it honours it (module docstring).

        Args:
            wanted: The names asked for.
            raw: The wanted series of the whole scrape just read.
            started: Its start marker; None: nothing is tried (no way to tell the same exposition).
        """
        alt = self.profile.metrics_path.rstrip("/") + "/"
        if started is None or alt == self.profile.metrics_path:
            return
        try:
            reply = await fetch(self._session(), "GET", self.base_url, f"{alt}?{_query(wanted)}",
                                accept=PROMETHEUS_ACCEPT, decode=False)
            if not reply.ok:
                return
            raw_a, _, started_a, _, _, ignored_a, _ = await parse_off_loop(
                parse_scrape, reply.chunks, self.profile, self._declared, wanted)
        except BackendError:
            return
        if not ignored_a and started_a == started and raw_a.keys() == raw.keys():
            self.filter_path, self.filter_honoured = alt, True

    def fresh_read(self) -> tuple[int, dict[str, Any], float | None] | None:
        """The last snapshot's ``(taken_ns, info, started)`` when taken within ``INFO_FROM_READ_NS``; used once."""
        read, self._read_info = self._read_info, None
        return read if read is not None and clock.now_ns() - read[0] <= INFO_FROM_READ_NS else None

    async def read_served(self) -> dict[str, Any]:
        """The served part of the identity: ``models`` (``/v1/models`` ids) and ``version`` (``/version``).

        Raises:
            BackendError: the server could not be reached.
        """
        served: dict[str, Any] = {}
        await add_served_identity(self._session(), self.base_url, served)
        return served

    async def served_identity(self, read: tuple[int, dict[str, Any], float | None] | None,
                              reuse: bool) -> dict[str, Any]:
        """``read_served()``, or with ``reuse`` the one kept for ``read``'s start marker (module docstring).

        Args:
            read: ``fresh_read()``'s answer (None: no fresh counter read).
            reuse: Whether a served part kept for the same start marker may stand in.

        Returns:
            A new dict (the caller may update it).

        Raises:
            BackendError: the server could not be reached.
        """
        marker = read[2] if read is not None else None
        kept = self._served
        if reuse and marker is not None and kept is not None and kept[0] == marker:
            self.served_how = "reused"
            return dict(kept[1])
        self.served_how = "new_process" if reuse and marker is not None and kept is not None else "read"
        served = await self.read_served()
        self._served = (marker, dict(served)) if marker is not None else None
        return served

    async def identity(self, *, reuse_served: bool = False) -> dict[str, Any]:
        """Served model ids (``/v1/models``), ``/version``, and the profile's info series.

        Args:
            reuse_served: Take ``models``/``version`` from the last read of them when the
                counter read just made shows the same server process (module docstring).

        Raises:
            BackendError: the server could not be reached.
        """
        ident: dict[str, Any] = {"backend": self.name, "profile": self.profile.name}
        read = self.fresh_read()
        ident.update(await self.served_identity(read, reuse_served))
        if self.profile.info_series:
            if read is not None:
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
