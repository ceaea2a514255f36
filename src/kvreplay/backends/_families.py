"""vLLM, SGLang and llama.cpp adapters.

Each is the Prometheus adapter with a built-in profile, plus the family's own
identity and cache-reset endpoints (SERVERS.md sections 1-3).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from kvreplay import clock
from kvreplay.runner.backend import Snapshot

from ._common import add_served_identity
from ._family import BackendFamily
from ._http import fetch, fetch_json
from ._offload import parse_off_loop
from ._profile import Profile, load_profile
from ._prom import check_scrape, parse_exposition
from ._prometheus import PrometheusBackend, only_wanted, parse_scrape

__all__ = ["LLAMACPP", "SGLANG", "VLLM", "LlamacppBackend", "SglangBackend", "VllmBackend"]


CACHE_CONFIG_INFO = "vllm:cache_config_info"
VLLM_RESET_TRIES = 5
"""Tries of vLLM's ``/reset_prefix_cache`` while it answers ``{"success": false}``."""
VLLM_RESET_RETRY_S = 0.2
"""Seconds between those tries."""


def cache_config(text: str) -> dict[str, Any]:
    """``{"cache_config": {...}}`` from the labels of ``vllm:cache_config_info``, when present.

    Module-level: it runs in the parser process for a large scrape (``_offload``). Only
    that series' lines are parsed (``only_wanted``; the bounds checked on the whole text).

    Raises:
        BackendError: the text is not valid exposition format, or over a bound.
    """
    check_scrape(text)
    for s in parse_exposition(only_wanted(text, frozenset({CACHE_CONFIG_INFO}))[0]):
        if s.name == CACHE_CONFIG_INFO:
            return {"cache_config": dict(s.labels)}
    return {}


class VllmBackend(PrometheusBackend):
    """vLLM (V1 engine): ``/metrics`` through the ``vllm`` profile.

    Identity: ``/v1/models`` ids and ``max_model_len``, ``/version``, and the
    labels of ``vllm:cache_config_info`` (block_size, enable_prefix_caching,
    num_gpu_blocks, ...). Sources: ``vllm/v1/metrics/loggers.py``,
    ``vllm/entrypoints/serve/cache/api_router.py``.
    """

    name = "vllm"

    def __init__(
        self, base_url: str, session: aiohttp.ClientSession | None, profile: Profile | None = None
    ) -> None:
        super().__init__(base_url, session, profile or load_profile("vllm"))

    def identity_from_text(self, text: str) -> dict[str, Any]:
        """``{"cache_config": {...}}`` from ``vllm:cache_config_info`` labels, when present."""
        return cache_config(text)

    async def read_served(self) -> dict[str, Any]:
        """Model ids and ``max_model_len`` (``/v1/models``), ``/version``.

        Raises:
            BackendError: the server could not be reached.
        """
        served: dict[str, Any] = {}
        cards = await add_served_identity(self._session(), self.base_url, served)
        if cards and "max_model_len" in cards[0]:
            served["max_model_len"] = cards[0]["max_model_len"]
        return served

    async def identity(self, *, reuse_served: bool = False) -> dict[str, Any]:
        """Model ids and ``max_model_len``, ``/version``, cache configuration.

        The cache configuration comes from the counter read just made when there is
        one (its filtered read asks for ``vllm:cache_config_info`` too), else from a
        scrape of its own; ``reuse_served``: as ``PrometheusBackend.identity`` (the
        served part kept while the start marker stays the same).

        Raises:
            BackendError: the server could not be reached.
        """
        ident: dict[str, Any] = {"backend": self.name}
        read = self.fresh_read()
        ident.update(await self.served_identity(read, reuse_served))
        if read is not None:  # the scrape just parsed: no second ~50 KB scrape (vLLM ignores name[]=)
            info = read[1].get("info", {})
            if CACHE_CONFIG_INFO in info:
                ident["cache_config"] = dict(info[CACHE_CONFIG_INFO])
            return ident
        text = await self.scrape(frozenset({CACHE_CONFIG_INFO}))  # only that series, where the server can
        if text is not None:
            ident.update(await parse_off_loop(cache_config, text))
        return ident

    async def reset_cache(self) -> bool:
        """``POST /reset_prefix_cache`` (mounted only with ``VLLM_SERVER_DEV_MODE=1``).

        vLLM 0.32 (the version tested here) answers 200 with ``{"success": false}`` while
        blocks are still held (running requests, KV transfers:
        ``vllm/entrypoints/serve/dev/cache/api_router.py``, "callers may retry"); that answer
        is retried ``VLLM_RESET_TRIES`` times in all, ``VLLM_RESET_RETRY_S`` apart. A 2xx
        without that field (an empty body) counts as accepted. The reset does not zero the
        Prometheus counters: verify with the fresh check.

        Returns:
            True on 2xx without ``"success": false``; False when the route is absent
            (404/405) or every try answered ``"success": false``.

        Raises:
            BackendError: the server could not be reached.
        """
        for attempt in range(VLLM_RESET_TRIES):
            if attempt:
                await asyncio.sleep(VLLM_RESET_RETRY_S)
            reply = await fetch(self._session(), "POST", self.base_url, "/reset_prefix_cache")
            if not reply.ok:
                return False
            try:
                answer = json.loads(reply.text) if reply.text.strip() else None
            except ValueError:
                answer = None
            if not (isinstance(answer, dict) and answer.get("success") is False):
                return True
        return False


_SGLANG_IDENTITY_KEYS = (
    "version",
    "model_path",
    "tokenizer_path",
    "served_model_name",
    "tp_size",
    "dp_size",
    "context_length",
    "page_size",
    "disable_radix_cache",
    "enable_hierarchical_cache",
    "hicache_ratio",
    "hicache_size",
    "chunked_prefill_size",
    "max_running_requests",
    "max_total_tokens",
    "mem_fraction_static",
    "kv_cache_dtype",
    "schedule_policy",
    "enable_cache_report",
    "enable_metrics",
    "speculative_algorithm",
)
"""Stable fields of ``/get_server_info`` (server_args and version). The rest of that
document (``internal_states``, throughput) changes while serving and would read as
identity drift."""


class SglangBackend(PrometheusBackend):
    """SGLang: ``/metrics`` (with ``--enable-metrics``) through the ``sglang`` profile.

    Identity: the stable fields of ``/get_server_info`` (``/server_info`` in newer
    builds) and ``/v1/models`` ids. Reset: ``POST /flush_cache``, which answers 400
    while requests run, so its body is checked as well as its status. Source:
    ``python/sglang/srt/entrypoints/http_server.py``.
    """

    name = "sglang"
    metrics_optional = True
    reuses_served_identity = False  # its identity is /get_server_info's, read whole each time

    def __init__(
        self, base_url: str, session: aiohttp.ClientSession | None, profile: Profile | None = None
    ) -> None:
        super().__init__(base_url, session, profile or load_profile("sglang"))

    async def identity(self, *, reuse_served: bool = False) -> dict[str, Any]:
        """Stable server_info fields and model ids (read whole: ``reuse_served`` is ignored).

        Raises:
            BackendError: the server could not be reached.
        """
        ident: dict[str, Any] = {"backend": self.name}
        info = await fetch_json(self._session(), self.base_url, "/get_server_info")
        if not isinstance(info, dict):
            info = await fetch_json(self._session(), self.base_url, "/server_info")
        if isinstance(info, dict):
            for key in _SGLANG_IDENTITY_KEYS:
                if key in info:
                    ident[key] = info[key]
        await add_served_identity(self._session(), self.base_url, ident, version=False)
        return ident

    async def reset_cache(self) -> bool:
        """``POST /flush_cache``.

        Returns:
            True only for a 2xx whose body says ``Cache flushed``; False for the
            400 SGLang sends while requests are running or waiting.

        Raises:
            BackendError: the server could not be reached.
        """
        reply = await fetch(self._session(), "POST", self.base_url, "/flush_cache")
        return reply.ok and "cache flushed" in reply.text.lower()


class LlamacppBackend(PrometheusBackend):
    """llama.cpp ``llama-server``: ``/metrics`` (with ``--metrics``) via the ``llamacpp`` profile.

    Without ``--metrics`` the server answers 501; snapshots then fall back to
    ``/slots`` (on by default) for the one thing it shows, the number of slots
    processing (``running``), kept raw as ``slots.is_processing``. llama.cpp has
    no counter start marker, and no cache reset endpoint. Identity: ``/props``
    ``build_info`` and ``model_path`` (plus ``model_alias``, ``total_slots``,
    ``n_ctx``). Source: ``tools/server/server-context.cpp``.
    """

    name = "llamacpp"
    metrics_optional = True
    partial_reads = False  # llama-server's /metrics is a dozen lines, and not prometheus_client's
    reuses_served_identity = False  # its identity is /props', read whole each time; no start marker

    def __init__(
        self, base_url: str, session: aiohttp.ClientSession | None, profile: Profile | None = None
    ) -> None:
        super().__init__(base_url, session, profile or load_profile("llamacpp"))

    async def snapshot(self, *, full: bool = True) -> Snapshot:
        """Scrape ``/metrics``; when it is off, count busy slots from ``/slots``.

        Args:
            full: Ignored: every read is the whole scrape (``partial_reads`` is False).

        Raises:
            BackendError: unreachable, non-2xx, or malformed exposition.
        """
        text = await self.scrape()
        if text is not None:
            taken_ns = clock.now_ns()
            raw, common, started, invalid, _, _, _ = await parse_off_loop(
                parse_scrape, text, self.profile, frozenset(), None)
            return Snapshot(taken_ns=taken_ns, raw=raw, common=common, started=started, invalid=invalid,
                            read_bytes=self.last_read_bytes)
        slots = await fetch_json(self._session(), self.base_url, "/slots")
        taken_ns = clock.now_ns()
        if isinstance(slots, list):
            busy = [bool(s.get("is_processing")) for s in slots if isinstance(s, dict)]
            return Snapshot(
                taken_ns=taken_ns,
                raw={"slots.is_processing": busy},
                common={"running": float(sum(busy))},
            )
        return Snapshot(taken_ns=taken_ns, raw={}, common={})

    async def identity(self, *, reuse_served: bool = False) -> dict[str, Any]:
        """``build_info`` and ``model_path`` from ``/props``, and model ids (read whole: ``reuse_served`` is ignored).

        Raises:
            BackendError: the server could not be reached.
        """
        ident: dict[str, Any] = {"backend": self.name}
        props = await fetch_json(self._session(), self.base_url, "/props")
        if isinstance(props, dict):
            for key in ("build_info", "model_path", "model_alias", "total_slots"):
                if key in props:
                    ident[key] = props[key]
            dgs = props.get("default_generation_settings")
            if isinstance(dgs, dict) and "n_ctx" in dgs:
                ident["n_ctx"] = dgs["n_ctx"]
        await add_served_identity(self._session(), self.base_url, ident, version=False)
        return ident

    async def reset_cache(self) -> bool:
        """llama.cpp has no prompt-cache reset endpoint: always False, nothing sent."""
        return False


async def _vllm_models(session: aiohttp.ClientSession, base_url: str) -> bool:
    """``/v1/models`` lists a card with ``owned_by: "vllm"``."""
    models = await fetch_json(session, base_url, "/v1/models")
    return (isinstance(models, dict) and isinstance(models.get("data"), list)
            and any(isinstance(c, dict) and c.get("owned_by") == "vllm" for c in models["data"]))


async def _sglang_info(session: aiohttp.ClientSession, base_url: str) -> bool:
    """``/get_server_info`` answers a JSON object."""
    return isinstance(await fetch_json(session, base_url, "/get_server_info"), dict)


async def _llamacpp_props(session: aiohttp.ClientSession, base_url: str) -> bool:
    """``/props`` answers a JSON object with ``build_info`` or ``default_generation_settings``."""
    props = await fetch_json(session, base_url, "/props")
    return isinstance(props, dict) and ("build_info" in props or "default_generation_settings" in props)


VLLM = BackendFamily(
    name="vllm", adapter=VllmBackend, summary="/metrics via profiles/vllm.toml; /v1/models, /version, "
    "cache_config_info", profile="vllm", series_prefix="vllm:", probe=_vllm_models, probe_rank=50)
"""vLLM: its ``vllm:`` series, else ``/v1/models`` cards owned by vllm (probed last)."""
SGLANG = BackendFamily(
    name="sglang", adapter=SglangBackend, summary="/metrics via profiles/sglang.toml; /get_server_info; "
    "POST /flush_cache", profile="sglang", series_prefix="sglang:", probe=_sglang_info, probe_rank=40)
"""SGLang: its ``sglang:`` series, else ``/get_server_info`` (metrics off)."""
LLAMACPP = BackendFamily(
    name="llamacpp", adapter=LlamacppBackend, summary="/metrics via profiles/llamacpp.toml (or /slots); /props",
    profile="llamacpp", series_prefix="llamacpp:", probe=_llamacpp_props, probe_rank=30)
"""llama.cpp: its ``llamacpp:`` series, else ``/props`` (metrics off)."""
