"""The profile-driven Prometheus adapter (``--backend prometheus --profile FILE``).

Any server with a Prometheus ``/metrics`` endpoint is measured by naming, in a
profile (see ``_profile``), which of its series mean which common names and which
gauges must read zero for a drain. The vLLM, SGLang and llama.cpp adapters are
this adapter with a built-in profile plus their own identity and reset calls.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from kvreplay import clock
from kvreplay.errors import BackendError
from kvreplay.runner.backend import Snapshot

from ._common import add_served_identity, drain_blockers
from ._family import BackendFamily
from ._http import fetch
from ._profile import Profile
from ._prom import declared_names, parse_exposition, raw_from_samples

__all__ = ["FAMILY", "PrometheusBackend"]

PROMETHEUS_ACCEPT = "text/plain; version=0.0.4"
"""Never the OpenMetrics type: prometheus_client 0.26 then escapes ``:`` in sample
names but not in HELP/TYPE, and the parse fails (SERVERS.md section 6)."""


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
        return {"info": info} if (info := self.profile.info(parse_exposition(text))) else {}

    # -- live ----------------------------------------------------------------
    def _session(self) -> aiohttp.ClientSession:
        if self.session is None:
            raise BackendError(f"{self.name} backend has no HTTP session (offline parse only)")
        return self.session

    async def scrape(self) -> str | None:
        """GET the metrics path with ``Accept: text/plain``.

        Returns:
            The body, or None when the endpoint is switched off (404/501) and the
            family's metrics are optional.

        Raises:
            BackendError: unreachable server, or a non-2xx status otherwise.
        """
        path = self.profile.metrics_path
        reply = await fetch(self._session(), "GET", self.base_url, path, accept=PROMETHEUS_ACCEPT)
        if reply.ok:
            return reply.text
        if self.metrics_optional and reply.status in (404, 501):
            return None
        raise BackendError(f"GET {path}: HTTP {reply.status}", url=self.base_url + path)

    async def snapshot(self) -> Snapshot:
        """Scrape once and map the series.

        Raises:
            BackendError: unreachable, non-2xx, or malformed exposition.
        """
        text = await self.scrape()
        taken_ns = clock.now_ns()
        if text is None:
            return Snapshot(taken_ns=taken_ns, raw={}, common={})
        # a worker thread: a large or hostile scrape costs neither deadlines nor in-flight reads
        raw, common, started, invalid = await asyncio.to_thread(self.parse_checked, text)
        return Snapshot(taken_ns=taken_ns, raw=raw, common=common, started=started, invalid=invalid)

    async def identity(self) -> dict[str, Any]:
        """Served model ids (``/v1/models``), ``/version``, and the profile's info series.

        Raises:
            BackendError: the server could not be reached.
        """
        ident: dict[str, Any] = {"backend": self.name, "profile": self.profile.name}
        await add_served_identity(self._session(), self.base_url, ident)
        if self.profile.info_series:
            text = await self.scrape()
            if text is not None:
                ident.update(self.identity_from_text(text))
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
