"""Backend names, construction, endpoint probing and offline dump parsing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from kvreplay.errors import BackendError, ConfigError

from ._families import LlamacppBackend, SglangBackend, VllmBackend
from ._halogen import HalogenBackend
from ._http import fetch, fetch_json
from ._openai import OpenAIBackend
from ._profile import Profile, load_profile
from ._prom import family_of
from ._prometheus import PROMETHEUS_ACCEPT, PrometheusBackend

__all__ = ["BACKEND_NAMES", "detect", "detect_text", "make_backend", "parse_dump"]

_CLASSES: dict[str, type] = {
    "halogen": HalogenBackend,
    "llamacpp": LlamacppBackend,
    "openai": OpenAIBackend,
    "prometheus": PrometheusBackend,
    "sglang": SglangBackend,
    "vllm": VllmBackend,
}
BACKEND_NAMES = tuple(sorted(_CLASSES))
"""Names accepted by ``make_backend`` (``--backend``; ``auto`` is resolved by ``detect``)."""


def make_backend(
    name: str,
    base_url: str,
    session: aiohttp.ClientSession | None,
    profile: Profile | str | Path | None = None,
) -> Any:
    """Build one adapter.

    Args:
        name: One of ``BACKEND_NAMES`` (resolve ``auto`` with :func:`detect` first).
        base_url: Server root, e.g. ``http://127.0.0.1:8000``.
        session: The caller's aiohttp session (never closed by the adapter); None
            for an adapter used only to ``parse`` saved dumps.
        profile: For ``prometheus`` (required) and the built-in Prometheus
            families (optional override): a Profile, a built-in profile name, or
            the path of a profile TOML file. Ignored by ``halogen`` and ``openai``.

    Returns:
        An object satisfying ``kvreplay.runner.backend.Backend``, with also
        ``parse(text) -> (raw, common, started)``, ``identity_from_text(text)``,
        ``units`` and ``load_gauges``.

    Raises:
        ConfigError: unknown name, ``prometheus`` without a profile, or a profile
            that cannot be loaded.
    """
    cls = _CLASSES.get(name)
    if cls is None:
        raise ConfigError(
            f"unknown backend {name!r}; one of: auto, {', '.join(BACKEND_NAMES)}", field="--backend"
        )
    if profile is not None and not isinstance(profile, Profile):
        profile = load_profile(profile)
    if cls is PrometheusBackend:
        if profile is None:
            raise ConfigError(
                "the prometheus backend needs --profile (a name or a TOML file)", field="--profile"
            )
        return PrometheusBackend(base_url, session, profile)
    return cls(base_url, session, profile)


async def detect(base_url: str, session: aiohttp.ClientSession) -> str:
    """Find the backend of a live server by probing control endpoints (GET only).

    Probes, in order, stopping at the first that identifies the family:

    1. ``/cache`` -> a JSON object with ``hits`` and ``misses``: ``halogen``;
    2. ``/metrics`` (``Accept: text/plain``) -> series named ``vllm:``,
       ``sglang:`` or ``llamacpp:``: that family;
    3. ``/props`` -> a JSON object with ``build_info`` or
       ``default_generation_settings``: ``llamacpp`` (metrics off);
    4. ``/get_server_info`` -> a JSON object: ``sglang`` (metrics off);
    5. ``/v1/models`` with ``owned_by: "vllm"``: ``vllm``;

    and ``openai`` when none does. No generation request is sent.

    Args:
        base_url: Server root.
        session: The caller's aiohttp session.

    Returns:
        One of ``BACKEND_NAMES``.

    Raises:
        BackendError: the server could not be reached at all.
    """
    cache = await fetch_json(session, base_url, "/cache")
    if isinstance(cache, dict) and "hits" in cache and "misses" in cache:
        return "halogen"
    reply = await fetch(session, "GET", base_url, "/metrics", accept=PROMETHEUS_ACCEPT)
    if reply.ok and (family := family_of(reply.text)):
        return family
    props = await fetch_json(session, base_url, "/props")
    if isinstance(props, dict) and (
        "build_info" in props or "default_generation_settings" in props
    ):
        return "llamacpp"
    info = await fetch_json(session, base_url, "/get_server_info")
    if isinstance(info, dict):
        return "sglang"
    models = await fetch_json(session, base_url, "/v1/models")
    if (isinstance(models, dict) and isinstance(models.get("data"), list)
            and any(isinstance(c, dict) and c.get("owned_by") == "vllm" for c in models["data"])):
        return "vllm"
    return "openai"


def detect_text(text: str) -> str:
    """The backend that parses a saved dump.

    A JSON object is ``halogen``; otherwise the family whose series prefix
    (``vllm:``, ``sglang:``, ``llamacpp:``) starts a line.

    Raises:
        BackendError: neither (pass ``--backend`` explicitly).
    """
    if text.lstrip().startswith("{"):
        return "halogen"
    family = family_of(text)
    if family is None:
        raise BackendError("cannot tell the backend of this dump; pass --backend NAME")
    return family


def parse_dump(
    text: str, backend: str = "auto", profile: Profile | str | Path | None = None
) -> tuple[str, dict[str, Any], dict[str, Any], dict[str, float], float | None]:
    """Parse a saved ``/metrics`` or ``/cache`` body offline.

    Args:
        text: The dump.
        backend: A backend name, or ``auto`` to tell it from the text.
        profile: As for :func:`make_backend`.

    Returns:
        ``(backend_name, identity, raw, common, started)``; identity holds only
        what the dump itself carries (e.g. vLLM's cache configuration).

    Raises:
        BackendError: malformed dump, or ``auto`` could not tell the backend.
        ConfigError: unknown backend or bad profile.
    """
    name = detect_text(text) if backend == "auto" else backend
    adapter = make_backend(name, "", None, profile)
    raw, common, started = adapter.parse(text)
    return name, adapter.identity_from_text(text), raw, common, started
