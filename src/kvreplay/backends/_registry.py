"""Backend names, construction, endpoint probing and offline dump parsing, from the family registry.

The built-in families are listed here (``BUILTIN_FAMILIES``) and registered in
``_family``; every function below iterates over that registry.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp

from kvreplay.errors import BackendError, ConfigError

from . import _families, _halogen, _openai, _prometheus
from ._family import METRICS_RANK, BackendFamily, families, family, register_family, series_family
from ._http import fetch
from ._profile import Profile, load_profile
from ._prometheus import PROMETHEUS_ACCEPT

__all__ = ["BACKEND_NAMES", "BUILTIN_FAMILIES", "backend_names", "detect", "detect_text", "make_backend",
           "parse_dump"]

BUILTIN_FAMILIES: tuple[BackendFamily, ...] = (
    _halogen.FAMILY,
    _families.VLLM,
    _families.SGLANG,
    _families.LLAMACPP,
    _prometheus.FAMILY,
    _openai.FAMILY,
)
"""The built-in families, registered here (``_family``), in the order help texts list them and
``/metrics`` prefixes are matched. Adding a family: its module with its ``BackendFamily``, its
profile (``kvreplay/profiles/<name>.toml``), one entry here, and its tests."""
for _fam in BUILTIN_FAMILIES:
    register_family(_fam, builtin=True)

FALLBACK = _openai.FAMILY.name
"""What ``detect`` answers when no family is recognised."""

BACKEND_NAMES = tuple(sorted(f.name for f in BUILTIN_FAMILIES))
"""Names of the built-in families, sorted (``backend_names()`` also has families registered later)."""


def backend_names() -> tuple[str, ...]:
    """Names accepted by ``make_backend`` (``--backend``), in registration order.

    The built-in families first, then any registered since; ``auto`` (resolved by
    ``detect``) and ``none`` (no adapter) are not family names.
    """
    return tuple(f.name for f in families())


def make_backend(
    name: str,
    base_url: str,
    session: aiohttp.ClientSession | None,
    profile: Profile | str | Path | None = None,
) -> Any:
    """Build one adapter.

    Args:
        name: A registered family, ``backend_names()`` (resolve ``auto`` with :func:`detect` first).
        base_url: Server root, e.g. ``http://127.0.0.1:8000``.
        session: The caller's aiohttp session (never closed by the adapter); None
            for an adapter used only to ``parse`` saved dumps.
        profile: For ``prometheus`` (required) and the built-in Prometheus
            families (optional override): a Profile, a built-in profile name, or
            the path of a profile TOML file. Ignored by ``halogen`` and ``openai``;
            required by a family with ``needs_profile``.

    Returns:
        An object satisfying ``kvreplay.runner.backend.Backend``, with also
        ``parse(text) -> (raw, common, started)``, ``identity_from_text(text)``,
        ``units`` and ``load_gauges``.

    Raises:
        ConfigError: unknown name, ``prometheus`` (``needs_profile``) without a profile, or a profile
            that cannot be loaded.
    """
    fam = family(name)
    if fam is None:
        raise ConfigError(
            f"unknown backend {name!r}; one of: auto, {', '.join(sorted(backend_names()))}", field="--backend"
        )
    if profile is not None and not isinstance(profile, Profile):
        profile = load_profile(profile)
    if fam.needs_profile and profile is None:
        raise ConfigError(
            f"the {name} backend needs --profile (a name or a TOML file)", field="--profile"
        )
    return fam.adapter(base_url, session, profile)


async def detect(base_url: str, session: aiohttp.ClientSession) -> str:
    """Find the backend of a live server by probing control endpoints (GET only).

    Probes, in order, stopping at the first that identifies the family (the
    registry's order, ``_family``; the built-in families give):

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
        A registered family name.

    Raises:
        BackendError: the server could not be reached at all: the message says so and
            names the endpoint tried (the first probe's, halogen's ``/cache``) as a probe,
            not as the server's backend, with ``--backend`` for a server that is known.
    """
    try:
        return await _detect(base_url, session)
    except BackendError as exc:
        names = ", ".join(f.name for f in families())
        raise BackendError(f"cannot reach {base_url} to detect its backend (probing {exc}); is the server up "
                           f"at that URL? With --backend NAME ({names}) kvreplay reads that backend's own "
                           "endpoints (vllm, sglang, llamacpp: /metrics; halogen: /cache)",
                           url=exc.url) from (exc.__cause__ or exc)


async def _detect(base_url: str, session: aiohttp.ClientSession) -> str:
    """``detect``'s probes (its docstring); a connection failure raises the probe's ``BackendError``."""
    probes = sorted(((f.probe_rank, f.name, f.probe) for f in families() if f.probe is not None),
                    key=lambda p: p[0])  # stable: equal ranks keep registration order
    for rank, name, probe in probes:
        if rank < METRICS_RANK and await probe(session, base_url):
            return name
    reply = await fetch(session, "GET", base_url, "/metrics", accept=PROMETHEUS_ACCEPT)
    if reply.ok and (found := series_family(reply.text)):
        return found
    for rank, name, probe in probes:
        if rank >= METRICS_RANK and await probe(session, base_url):
            return name
    return FALLBACK


def detect_text(text: str) -> str:
    """The backend that parses a saved dump.

    A family's own format first (``tells_dump``: a JSON object is ``halogen``); otherwise
    the family whose series prefix (``vllm:``, ``sglang:``, ``llamacpp:``) starts a line.

    Raises:
        BackendError: neither (pass ``--backend`` explicitly).
    """
    for fam in families():
        if fam.tells_dump is not None and fam.tells_dump(text):
            return fam.name
    name = series_family(text)
    if name is None:
        raise BackendError("cannot tell the backend of this dump; pass --backend NAME")
    return name


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
