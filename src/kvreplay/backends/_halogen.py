"""halogen-style ``GET /cache`` JSON counters (halogen, and kvreplay's simulator).

The document is one JSON object with exactly these keys (issue 4)::

    entries bytes last_entry_bytes max_entries hits misses stores evicted
    prompt_tokens_saved store_ms_total restore_ms_total refused rows_copied hit_rate

Common names read from it (absent when the key is absent or not a number):
``hits``, ``misses``, ``lookups`` (= hits + misses: every lookup ends as one of
the two), ``stores``, ``evictions`` (``evicted``), ``refused``, ``hit_tokens``
(``prompt_tokens_saved``: prompt tokens restored instead of computed),
``entries`` and ``bytes``. Everything else stays in ``raw`` only. The document
has no start marker unless it carries a numeric ``started`` (or ``epoch``) key;
otherwise a restart shows as a counter going down.

``/cache`` has no load gauge. When the same server also serves a Prometheus
``/metrics`` of a known family (kvreplay's simulator serves vLLM-named series
beside ``/cache``), live snapshots also read it and take from it, through that
family's built-in profile (``sim`` for the simulator), only the load gauges
(``running``, ``waiting``, ...)
and the start marker; its series are kept verbatim under ``raw["/metrics"]``.
The counters stay those of ``/cache``. A server without ``/metrics`` (404/501)
is asked once and then never again.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import aiohttp

from kvreplay import clock
from kvreplay.errors import BackendError
from kvreplay.evidence.vocab import LOAD_GAUGES
from kvreplay.runner.backend import Snapshot, counter_problem

from ._common import add_served_identity, drain_blockers
from ._family import BackendFamily, family, series_family
from ._http import fetch, fetch_json
from ._profile import load_profile
from ._prom import declared_names, parse_exposition, raw_from_samples

__all__ = ["FAMILY", "HALOGEN_KEYS", "HalogenBackend"]

HALOGEN_KEYS = (
    "entries",
    "bytes",
    "last_entry_bytes",
    "max_entries",
    "hits",
    "misses",
    "stores",
    "evicted",
    "prompt_tokens_saved",
    "store_ms_total",
    "restore_ms_total",
    "refused",
    "rows_copied",
    "hit_rate",
)

_COMMON_OF = {
    "hits": "hits",
    "misses": "misses",
    "stores": "stores",
    "evicted": "evictions",
    "refused": "refused",
    "prompt_tokens_saved": "hit_tokens",
    "entries": "entries",
    "bytes": "bytes",
}
_UNITS = {
    "hits": "lookups",
    "misses": "lookups",
    "lookups": "lookups",
    "stores": "entries",
    "evictions": "entries",
    "refused": "entries",
    "hit_tokens": "tokens",
    "entries": "entries",
    "bytes": "bytes",
}


def _number(v: Any) -> float | None:
    """``v`` as a float; None for text, booleans, NaN/infinities and values outside the 64-bit range."""
    if counter_problem(v) is not None:  # float() of a huge int is inexact, or overflows
        return None
    return float(v)


def invalid_of(doc: dict[str, Any]) -> dict[str, str]:
    """Common name -> reason for each counter key of a ``/cache`` document whose value cannot be differenced.

    A key that is present but holds text, a boolean, NaN/infinity or an integer
    outside the 64-bit range (``runner.backend.counter_problem``); ``lookups``
    is invalid with ``hits`` or ``misses``.
    """
    out: dict[str, str] = {}
    for key, name in _COMMON_OF.items():
        if key in doc and (why := counter_problem(doc[key])) is not None:
            out[name] = f"{key}: {why}"
    for part in ("hits", "misses"):
        if part in out:
            out.setdefault("lookups", out[part])
    return out


class HalogenBackend:
    """Counters from ``GET /cache``; identity from ``/v1/models`` and ``/version``.

    Attributes:
        name: ``"halogen"``.
        base_url: Server root URL.
        units: Common name -> unit.
        load_gauges: The load gauges found on a companion ``/metrics``; empty
            without one, and a drain is then "counters unchanged across two reads".
    """

    name = "halogen"
    cache_path = "/cache"

    def __init__(
        self, base_url: str, session: aiohttp.ClientSession | None, profile: object = None
    ) -> None:
        self.base_url = base_url
        self.session = session
        self.units = dict(_UNITS)
        self.load_gauges: tuple[str, ...] = ()
        self._metrics: bool | None = None  # None: not probed yet

    def _session(self) -> aiohttp.ClientSession:
        if self.session is None:
            raise BackendError("halogen backend has no HTTP session (offline parse only)")
        return self.session

    def parse(self, text: str) -> tuple[dict[str, Any], dict[str, float], float | None]:
        """Parse one saved or live ``/cache`` body.

        Returns:
            ``(raw, common, started)``: the JSON object verbatim, the common values,
            and ``started``/``epoch`` when the document carries one (else None).

        Raises:
            BackendError: not JSON, or not a JSON object.
        """
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError) as exc:  # RecursionError: nesting deeper than the stack
            raise BackendError(f"/cache body is not JSON: {exc}") from exc
        if not isinstance(doc, dict):
            raise BackendError(f"/cache body is a JSON {type(doc).__name__}, not an object")
        common: dict[str, float] = {}
        for key, name in _COMMON_OF.items():
            v = _number(doc.get(key))
            if v is not None:
                common[name] = v
        if "hits" in common and "misses" in common:
            common["lookups"] = common["hits"] + common["misses"]
        started = _number(doc.get("started", doc.get("epoch")))
        return doc, common, started

    def identity_from_text(self, text: str) -> dict[str, Any]:
        """Identity fields in a ``/cache`` dump: its ``max_entries`` (cache size), when present."""
        raw, _, _ = self.parse(text)
        return {"max_entries": raw["max_entries"]} if "max_entries" in raw else {}

    async def _companion(self) -> tuple[dict[str, Any], dict[str, float], float | None] | None:
        """Load gauges and start marker from the server's ``/metrics``, if it has one."""
        if self._metrics is False:
            return None
        from ._prometheus import PROMETHEUS_ACCEPT

        reply = await fetch(
            self._session(), "GET", self.base_url, "/metrics", accept=PROMETHEUS_ACCEPT
        )
        try:
            name = series_family(reply.text) if reply.ok else None
            fam = family(name) if name is not None else None
            family_profile = fam.profile if fam is not None else None
        except BackendError:
            if self._metrics is None:
                # Never readable: no companion. /cache alone still carries the counters.
                self._metrics = False
                return None
            raise
        if family_profile is not None and re.search(r"^kvreplay_sim:", reply.text, re.MULTILINE):
            family_profile = "sim"  # the simulator: its own profile also maps retiring/transfer gauges
        if family_profile is None:
            if self._metrics is None:
                self._metrics = False
                return None
            raise BackendError(
                f"GET /metrics: HTTP {reply.status}, no known series",
                url=self.base_url + "/metrics",
            )
        try:
            samples = await asyncio.to_thread(parse_exposition, reply.text)
        except BackendError:
            if self._metrics is None:
                self._metrics = False
                return None
            raise
        self._metrics = True
        common, started = load_profile(family_profile).apply(samples, declared_names(reply.text))
        gauges = {g: common[g] for g in LOAD_GAUGES if g in common}
        self.load_gauges = tuple(gauges)
        return raw_from_samples(samples), gauges, started

    async def snapshot(self) -> Snapshot:
        """GET ``/cache`` once (and the companion ``/metrics``, see the module docstring).

        Raises:
            BackendError: unreachable, non-2xx, or not a JSON object; a companion
                ``/metrics`` that answered before and fails now.
        """
        reply = await fetch(self._session(), "GET", self.base_url, self.cache_path)
        taken_ns = clock.now_ns()
        if not reply.ok:
            raise BackendError(
                f"GET {self.cache_path}: HTTP {reply.status}", url=self.base_url + self.cache_path
            )
        raw, common, started = await asyncio.to_thread(self.parse, reply.text)
        invalid = invalid_of(raw)
        extra = await self._companion()
        if extra is not None:
            m_raw, gauges, m_started = extra
            raw = {**raw, "/metrics": m_raw}
            common = {**common, **gauges}
            started = m_started if m_started is not None else started
        return Snapshot(taken_ns=taken_ns, raw=raw, common=common, started=started, invalid=invalid)

    async def identity(self) -> dict[str, Any]:
        """Model ids, ``/version``, and the cache size (``max_entries``) from ``/cache``.

        Raises:
            BackendError: the server could not be reached.
        """
        ident: dict[str, Any] = {"backend": self.name}
        await add_served_identity(self._session(), self.base_url, ident)
        reply = await fetch(self._session(), "GET", self.base_url, self.cache_path)
        if reply.ok:
            ident.update(self.identity_from_text(reply.text))
        return ident

    def drained(self, a: Snapshot, b: Snapshot) -> bool:
        """Counters unchanged from a to b (``/cache`` has no load gauges)."""
        return not drain_blockers(a, b, self.load_gauges)

    async def reset_cache(self) -> bool:
        """``POST /reset_prefix_cache`` (the simulator has it; halogen may not).

        Returns:
            True on 2xx, False otherwise (404/405: no such endpoint).

        Raises:
            BackendError: the server could not be reached.
        """
        reply = await fetch(self._session(), "POST", self.base_url, "/reset_prefix_cache")
        return reply.ok


async def _serves_cache(session: aiohttp.ClientSession, base_url: str) -> bool:
    """``GET /cache`` answers a JSON object with ``hits`` and ``misses``."""
    cache = await fetch_json(session, base_url, "/cache")
    return isinstance(cache, dict) and "hits" in cache and "misses" in cache


FAMILY = BackendFamily(
    name="halogen", adapter=HalogenBackend, summary="GET /cache JSON (halogen, kvreplay's simulator)",
    probe=_serves_cache, probe_rank=10, tells_dump=lambda text: text.lstrip().startswith("{"))
"""The halogen family (``_family``): probed first, and a dump that is a JSON object is its."""
