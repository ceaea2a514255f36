"""A fleet's counter adapter: one adapter per replica as one ``runner.fleet.FleetBackend`` (issue 33).

The one place a fleet target's adapters are built, for ``kvreplay run --replica``
(``api.fleet``) and for an experiment file's ``[fleet]`` (``experiments``).
"""

from __future__ import annotations

from typing import Any

from kvreplay.errors import ConfigError

__all__ = ["check_fleet_backends", "open_fleet_backend"]


async def open_fleet_backend(replicas: Any, name: str, profile: str | None, session: Any) -> Any:
    """A ``runner.fleet.FleetBackend`` over every replica's adapter (``make_backend``; ``auto``: ``detect``).

    A replica's own ``backend=`` / ``profile=`` win over ``name`` / ``profile``.
    Module-level, so a ``functools.partial`` of it pickles for ``--workers`` / ``--ray``.

    Args:
        replicas: ``runner.fleet.Replica`` values.
        name: The run's backend name (``auto``: detected per replica).
        profile: The run's profile (for ``prometheus``).
        session: The aiohttp session the adapters read with.

    Raises:
        ConfigError: an unknown backend name or profile, or a replica with ``backend=none``.
        BackendError: detection failed for a replica.
    """
    from kvreplay.backends import detect, make_backend
    from kvreplay.redaction import register_url
    from kvreplay.runner.fleet import FleetBackend

    members = []
    for r in replicas:
        register_url(r.url)  # in this process too (a --workers / --ray worker): no output of it keeps them
        chosen = r.backend or name
        if chosen == "none":
            be = None
        else:
            if chosen == "auto":
                chosen = await detect(r.url, session)
            be = make_backend(chosen, r.url, session, profile=r.profile or profile)
        if be is None:
            raise ConfigError(f"replica {r.name}: backend=none reads no counters; give its backend or "
                              "run with --backend none", field="--replica")
        members.append((r.name, be))  # keyed by the redacted name, as records and opts.replicas are
    return FleetBackend(members)


def check_fleet_backends(replicas: Any, name: str, profile: str | None, *, profiles: bool = True) -> None:
    """Refuse, before anything is written or sent, a replica adapter ``open_fleet_backend`` would refuse.

    A replica's ``backend=none`` beside a run's backend, an unknown backend name, an
    unreadable or invalid profile: the adapter is built without a session (no request);
    ``auto`` is left to detection. A run with ``--backend none`` reads no replica.
    ``profiles=False`` checks the names only (an experiment reads its profiles when it runs).

    Raises:
        ConfigError: field ``--replica``, naming the replica (``Replica.name``).
    """
    from kvreplay.backends import backend_names, make_backend

    if name == "none":
        return
    for r in replicas:
        chosen = r.backend or name
        if chosen == "none":
            raise ConfigError(f"replica {r.name}: backend=none reads no counters; give its backend or "
                              "run with --backend none", field="--replica")
        if chosen == "auto":
            continue
        try:
            if not profiles and chosen not in backend_names():  # the name only: profiles are read later
                make_backend(chosen, r.url, None)
            elif profiles:
                make_backend(chosen, r.url, None, profile=r.profile or profile)
        except ConfigError as exc:
            raise ConfigError(f"replica {r.name}: {exc.message if exc.field else exc}", field="--replica") from None
