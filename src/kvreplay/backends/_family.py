"""The backend-family registry: what each ``--backend NAME`` is and how a server is recognised.

A family is one ``BackendFamily`` value declared in its adapter's module
(``_halogen.FAMILY``, ``_families.VLLM``, ...). ``_registry`` lists the built-in
ones explicitly and registers them; ``register_family`` adds one at run time. The
CLI's ``--backend`` help, ``make_backend``, ``detect`` (live servers),
``detect_text`` (saved dumps) and the halogen adapter's companion ``/metrics`` all
read this registry; none of them names a family.

Detection order (``detect``): every family's ``probe`` whose ``probe_rank`` is below
``METRICS_RANK``; then one ``/metrics`` scrape, whose sample names are matched against
every family's ``series_prefix`` in registration order; then the other probes by rank;
else the fallback family (``openai``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import aiohttp

from ._prom import family_of

__all__ = ["METRICS_RANK", "BackendFamily", "families", "family", "register_family", "series_family",
           "unregister_family"]

METRICS_RANK = 20
"""Probes ranked below this run before the ``/metrics`` scrape, the others after it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BackendFamily:
    """One server family: its adapter and how it is recognised.

    Attributes:
        name: The ``--backend`` name (``[server] backend``).
        adapter: ``adapter(base_url, session, profile)`` -> an object satisfying
            ``kvreplay.runner.backend.Backend`` (with ``parse``, ``identity_from_text``,
            ``units``, ``load_gauges``); the adapter class itself, as a rule.
        summary: One line for help and docs: what it reads.
        profile: Built-in profile (``kvreplay/profiles/<profile>.toml``) mapping its
            ``/metrics`` series, None when it has none.
        series_prefix: The prefix of its ``/metrics`` sample names (``"vllm:"``): a scrape or
            a dump with a sample line starting with it is this family's.
        probe: ``async probe(session, base_url) -> bool``: a GET-only check of a control
            endpoint only this family serves (no generation request).
        probe_rank: Order of ``probe`` (lower first; below ``METRICS_RANK``: before ``/metrics``).
        tells_dump: ``tells_dump(text) -> bool``: a saved dump in this family's own format
            (halogen: a JSON object), tried before series prefixes.
        needs_profile: ``make_backend`` refuses it without a profile (``prometheus``).
        counters: False for a family whose adapter reads no counters (``openai``): the probe
            then measures without an adapter.
    """

    name: str
    adapter: Callable[..., Any]
    summary: str
    profile: str | None = None
    series_prefix: str | None = None
    probe: Callable[[aiohttp.ClientSession, str], Awaitable[bool]] | None = None
    probe_rank: int = 100
    tells_dump: Callable[[str], bool] | None = None
    needs_profile: bool = False
    counters: bool = True


_FAMILIES: dict[str, BackendFamily] = {}
_BUILTIN: set[str] = set()


def register_family(fam: BackendFamily, *, replace: bool = False, builtin: bool = False) -> BackendFamily:
    """Add a backend family (``--backend <name>`` then builds its adapter; ``auto`` may detect it).

    Args:
        fam: The family's declaration.
        replace: Allow replacing a family of the same name.
        builtin: Mark it built in (``_registry`` does; ``unregister_family`` then refuses it).

    Returns:
        ``fam``.

    Raises:
        ValueError: a family of that name exists (and ``replace`` is false), or a bad name
            (``auto`` and ``none`` are reserved; letters, digits, ``_`` only).
    """
    if fam.name in ("auto", "none") or not fam.name.replace("_", "").isalnum():
        raise ValueError(f"bad backend family name {fam.name!r}")
    if fam.name in _FAMILIES and not replace:
        raise ValueError(f"backend family {fam.name!r} is already registered")
    _FAMILIES[fam.name] = fam
    if builtin:
        _BUILTIN.add(fam.name)
    return fam


def unregister_family(name: str) -> None:
    """Remove a family added by ``register_family`` (a built-in family stays).

    Raises:
        ValueError: ``name`` is a built-in family.
    """
    if name in _BUILTIN:
        raise ValueError(f"backend family {name!r} is built in")
    _FAMILIES.pop(name, None)


def family(name: str) -> BackendFamily | None:
    """The registered family called ``name``, or None."""
    return _FAMILIES.get(name)


def families() -> tuple[BackendFamily, ...]:
    """Every registered family, in registration order (the built-in ones first)."""
    return tuple(_FAMILIES.values())


def series_family(text: str) -> str | None:
    """The family whose ``series_prefix`` starts a sample line of ``text`` (registration order), or None."""
    return family_of(text, [(f.name, f.series_prefix) for f in _FAMILIES.values() if f.series_prefix])
