"""A fleet target on the command line and in a plan: ``--replica``, ``--replica-header``, ``[fleet]`` (issue 33).

``kvreplay run`` (``api.run``) takes ``--target ROUTER_URL --replica URL[,backend=...,profile=...]``
(repeatable) or a plan's ``[fleet]`` table; the runner's side is ``kvreplay.runner.fleet``.
"""

from __future__ import annotations

import asyncio
from typing import Any

from kvreplay.argtypes import add_declared, integer
from kvreplay.errors import ConfigError
from kvreplay.options import RunConfig
from kvreplay.redaction import redact_url

__all__ = ["add_fleet_arguments", "check_replicas_answer", "finish_routing_loss", "fleet_of", "no_backend",
           "open_fleet_backend", "replica_cache_extra", "sim_fleet_size", "sim_option_check", "start_sim_fleet"]


def add_fleet_arguments(p: Any) -> None:
    """A fleet target's flags: ``RunConfig``'s ``fleet`` group and the embedded fleet's.

    ``--replica`` (repeatable), ``--replica-header``, ``--replica-cache-from`` from their
    declarations; ``--sim-replicas`` / ``--sim-router`` are simulator options (``SimOptions``).
    """
    add_declared(p, RunConfig, ("fleet",))
    from kvreplay.sim.routing import ROUTER_POLICIES

    p.add_argument("--sim-replicas", type=integer(1), default=1, metavar="N",
                   help="with --target sim: N simulated replicas behind the embedded router "
                        "(kvreplay.sim.fleet; every --sim-* option applies to each), run as a fleet target")
    p.add_argument("--sim-router", choices=ROUTER_POLICIES, default=None,
                   help="with --target sim: the embedded router's policy (default round_robin; "
                        "given with --sim-replicas 1, a router fronts the one replica)")


def sim_option_check(name: str) -> Any:
    """The command line's check of simulator option ``name`` (``replicas``, ``time_scale``...), or None."""
    if name == "replicas":
        return integer(1)
    from kvreplay.sim.config import option_check

    return option_check(name)


def sim_fleet_size(args: Any) -> tuple[int, str] | None:
    """``(replicas, policy)`` of ``--sim-replicas`` / ``--sim-router`` (parsed flags of those names), or None."""
    n = getattr(args, "sim_replicas", 1) or 1
    policy = getattr(args, "sim_router", None)
    if n <= 1 and policy is None:
        return None
    return n, policy or "round_robin"


async def no_backend(session: Any) -> None:
    """No counter adapter (``--backend none`` with a fleet target)."""
    return None


def fleet_of(args: RunConfig, settings: dict[str, Any], target: str) -> tuple[str, tuple[Any, ...]]:
    """The target and the fleet's replicas from ``--replica`` and a plan's ``[fleet]`` (``runner.fleet``).

    ``--replica`` replaces the plan's replicas; the plan's ``router`` is the target
    unless ``--target`` names one. No replicas: ``(target, ())``, one server as before.

    Raises:
        ConfigError: a bad replica, ``--target sim`` with replicas, a replica that is
            the router, a replica listed twice, a replica's adapter that cannot be built
            (``backends.fleet.check_fleet_backends``; field ``--replica``): before the run
            directory is made.
    """
    from kvreplay.runner.fleet import check_fleet, check_header_name, parse_replica, replicas_from_mapping

    if getattr(args, "replica_header", None) is not None:
        check_header_name(args.replica_header)

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
    from kvreplay.backends.fleet import check_fleet_backends

    check_fleet_backends(replicas, getattr(args, "backend", "auto"), getattr(args, "profile", None))
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
    """``kvreplay.backends.fleet.open_fleet_backend`` (its home), imported when first called."""
    from kvreplay.backends.fleet import open_fleet_backend as open_fleet

    return await open_fleet(replicas, name, profile, session)


async def start_sim_fleet(size: tuple[int, str], config: Any, calibration: dict[str, Any] | None
                          ) -> tuple[Any, tuple[Any, ...], dict[str, Any]]:
    """Start the embedded fleet of ``--target sim --sim-replicas N`` on the running loop.

    Args:
        size: ``(replicas, policy)`` (``sim_fleet_size``).
        config: Every replica's ``SimConfig``.
        calibration: ``--sim-from-verdict``'s calibration (served in ``/version``), or None.

    Returns:
        ``(fleet, replicas, run_extra)``: the running ``sim.fleet.Fleet`` (the caller
        stops it), one ``runner.fleet.Replica`` per replica URL, and plan.json
        ``run`` keys (``sim_fleet``: ``offline.runloss.sim_fleet_json``).
    """
    from kvreplay.offline.runloss import sim_fleet_json
    from kvreplay.runner.fleet import Replica
    from kvreplay.sim.fleet import start_fleet

    fleet = await start_fleet(size[0], size[1], config=config, calibration=calibration)
    replicas = tuple(Replica(url=u) for u in fleet.replica_urls)
    return fleet, replicas, {"sim_fleet": sim_fleet_json(config, *size)}


def replica_cache_extra(args: RunConfig, replicas: Any) -> dict[str, Any]:
    """plan.json ``run.replica_cache`` from ``--replica-cache-from VERDICT`` and ``--replica URL,verdict=FILE``.

    ``{"source", "sha256", "replicas", "router": null, "seed": 0, "config"}``: the verdict's
    calibrated ``SimConfig`` (``sim.calibrate.calibrate_from_verdict``), the cache-model
    fields ``offline.runloss`` reads, for every replica. Where some replica names its own
    ``verdict=`` (a mixed fleet: vLLM beside llama-server), ``per_replica`` lists every
    replica's ``{"url", "source", "sha256", "config"}`` (its own verdict, else the
    ``--replica-cache-from`` one) and ``offline.runloss`` models each replica with its own
    cache and converts each replica's tokens with its own ratio; ``config`` is then the
    first replica's. Where a verdict's cached-token counts gave the block size (``sim.calibrate``:
    their gcd, in the server's tokens), its entry (or ``replica_cache`` itself) carries it as
    ``server_block_size``, which ``offline.runloss.server_blocks`` converts to simulator tokens.
    Empty without either.

    Raises:
        ConfigError: the flag without ``--replica``, a verdict that cannot calibrate, or
            some replica with a ``verdict=`` while another has none and no ``--replica-cache-from``.
    """
    path = getattr(args, "replica_cache_from", None)
    own = [r for r in replicas or () if getattr(r, "verdict", None)]
    if not path and not own:
        return {}
    if not replicas:
        raise ConfigError("--replica-cache-from needs a fleet target (--replica)", field="--replica-cache-from")
    from kvreplay.offline.runloss import sim_fleet_json
    from kvreplay.sim.calibrate import calibrate_from_verdict
    from kvreplay.sim.config import SimConfig

    def model_of(src: str) -> tuple[dict[str, Any], Any]:
        cal = calibrate_from_verdict(src)
        cfg = SimConfig.from_mapping(cal.changes, where=src)
        block = {"server_block_size": cal.changes["block_size"]} if "block_size" in cal.changes else {}
        return {"source": str(src), "sha256": cal.sha256, "config": sim_fleet_json(cfg, 1, None)["config"],
                **block}, cfg

    shared, shared_cfg = model_of(path) if path else (None, None)
    if not own:
        assert shared is not None and shared_cfg is not None
        return {"replica_cache": {"source": shared["source"], "sha256": shared["sha256"],
                                  **sim_fleet_json(shared_cfg, len(replicas), None),
                                  **({"server_block_size": shared["server_block_size"]}
                                     if "server_block_size" in shared else {})}}
    per = []
    for r in replicas:
        if getattr(r, "verdict", None):
            per.append({"url": r.url, **model_of(r.verdict)[0]})
        elif shared is not None:
            per.append({"url": r.url, **shared})
        else:
            raise ConfigError(f"replica {r.url} has no cache model: give it verdict=FILE as the others have, or "
                              "--replica-cache-from VERDICT for the rest", field="--replica")
    first = per[0]
    return {"replica_cache": {"source": first["source"], "sha256": first["sha256"], "replicas": len(replicas),
                              "router": None, "seed": 0, "config": first["config"], "per_replica": per}}


def finish_routing_loss(out: Any, summary: dict[str, Any], plan: Any, workload: Any, render_report: Any) -> None:
    """``kvreplay.offline.runloss.finish_routing_loss`` (its home): ``phases[].routing_loss`` after a fleet run."""
    from kvreplay.offline.runloss import finish_routing_loss as finish

    finish(out, summary, plan, workload, render_report)
