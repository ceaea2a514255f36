"""A fleet target on the command line and in a plan: ``--replica``, ``--replica-header``, ``[fleet]`` (issue 33).

``kvreplay run`` (``api.run``) takes ``--target ROUTER_URL --replica URL[,backend=...,profile=...]``
(repeatable) or a plan's ``[fleet]`` table; the runner's side is ``kvreplay.runner.fleet``.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from kvreplay.errors import ConfigError
from kvreplay.redaction import redact_url

__all__ = ["add_fleet_arguments", "check_replicas_answer", "fleet_of", "no_backend", "open_fleet_backend"]


def add_fleet_arguments(p: argparse.ArgumentParser) -> None:
    """``--replica`` (repeatable) and ``--replica-header``: a fleet target (``runner.fleet``)."""
    from kvreplay.runner.fleet import DEFAULT_REPLICA_HEADER

    p.add_argument("--replica", action="append", default=[], metavar="URL[,backend=NAME,profile=FILE]",
                   help="a replica behind the --target router, repeatable: its counters and identity are "
                        "read (the router's never) and every record names the replica that served it; "
                        "without backend= it gets --backend (auto: detected per replica)")
    p.add_argument("--replica-header", default=DEFAULT_REPLICA_HEADER, metavar="NAME",
                   help="response header naming the replica that served a request, when the router or "
                        f"replica sets one (default {DEFAULT_REPLICA_HEADER})")


async def no_backend(session: Any) -> None:
    """No counter adapter (``--backend none`` with a fleet target)."""
    return None


def fleet_of(args: argparse.Namespace, settings: dict[str, Any], target: str) -> tuple[str, tuple[Any, ...]]:
    """The target and the fleet's replicas from ``--replica`` and a plan's ``[fleet]`` (``runner.fleet``).

    ``--replica`` replaces the plan's replicas; the plan's ``router`` is the target
    unless ``--target`` names one. No replicas: ``(target, ())``, one server as before.

    Raises:
        ConfigError: a bad replica, ``--target sim`` with replicas, a replica that is
            the router, a replica listed twice (field ``--replica``).
    """
    from kvreplay.runner.fleet import check_fleet, parse_replica, replicas_from_mapping

    router, replicas = replicas_from_mapping(settings["fleet"]) if settings.get("fleet") else (None, ())
    given = [parse_replica(t) for t in getattr(args, "replica", None) or ()]
    if given:
        replicas = tuple(given)
    if router and target == "sim":
        target = router
    if not replicas:
        return target, ()
    if target == "sim":
        raise ConfigError("--replica needs --target ROUTER_URL (the router the requests go to), not sim",
                          field="--replica")
    check_fleet(target, replicas)
    return target, replicas


async def check_replicas_answer(replicas: Any, timeout_s: float) -> None:
    """Open (and close) a TCP connection to every replica before anything is sent.

    Raises:
        ConfigError: a replica does not answer (field ``--replica``; exit 2).
    """
    from urllib.parse import urlsplit

    for r in replicas:
        u = urlsplit(r.url)
        port = u.port or (443 if u.scheme == "https" else 80)
        try:
            _, w = await asyncio.wait_for(asyncio.open_connection(u.hostname, port), timeout_s)
        except (OSError, TimeoutError) as exc:
            why = "no answer within the connect timeout" if isinstance(exc, TimeoutError) else (exc.strerror or exc)
            raise ConfigError(f"replica {redact_url(r.url)} does not answer: {why}; nothing was sent",
                              field="--replica") from None
        w.close()


async def open_fleet_backend(replicas: Any, name: str, profile: str | None, session: Any) -> Any:
    """A ``runner.fleet.FleetBackend`` over every replica's adapter (``api.run.open_backend``'s way for each).

    A replica's own ``backend=`` / ``profile=`` win over ``name`` / ``profile``.
    Module-level, so a ``functools.partial`` of it pickles for ``--workers`` / ``--ray``.

    Raises:
        ConfigError: an unknown backend name or profile.
        BackendError: detection failed for a replica.
    """
    from kvreplay.backends import detect, make_backend
    from kvreplay.runner.fleet import FleetBackend

    members = []
    for r in replicas:
        chosen = r.backend or name
        if chosen == "none":
            be = None
        else:
            if chosen == "auto":
                chosen = await detect(r.url, session)
            be = make_backend(chosen, r.url, session, profile=r.profile or profile)
        if be is None:
            raise ConfigError(f"replica {r.url}: backend=none reads no counters; give its backend or "
                              "run with --backend none", field="--replica")
        members.append((r.url, be))
    return FleetBackend(members)
