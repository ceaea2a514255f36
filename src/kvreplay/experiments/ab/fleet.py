"""Router policies as A/B arms: simulator arms that run the embedded fleet (issue 33 item 7).

A simulator arm (``sim:KEY=VALUE,...``, ``experiments.ab.arms``) may name a fleet
with two keys that are not ``SimConfig`` fields: ``replicas=N`` (N simulated
replicas, each with the arm's configuration) and ``router=POLICY``
(``round_robin``, ``random``, ``prefix_affinity``; ``kvreplay.sim.routing``).
Each block of such an arm starts a fresh ``kvreplay.sim.fleet`` on the loop and
runs as a fleet target (records name their replica; ``phases[].replicas``,
``phases[].fleet``), and the block's summary gets ``phases[].routing_loss``
(``offline.runloss``). ``fleet_cells`` publishes, per arm and phase, the mean over
the arm's blocks of each replica's hit rate and requests and of the routing-loss
figures.

Example arms::

    arms = [{name = "round_robin", cmd = "sim:replicas=2,router=round_robin"},
            {name = "prefix_affinity", cmd = "sim:replicas=2,router=prefix_affinity"}]
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

from kvreplay.errors import ConfigError

__all__ = ["FLEET_KEYS", "arm_fleet", "fleet_cells", "fleet_run_options", "start_arm_fleet"]

FLEET_KEYS = ("replicas", "router")
"""The keys of a simulator arm that name a fleet rather than a ``SimConfig`` field."""


def arm_fleet(spec: str, arm_name: str) -> tuple[int, str] | None:
    """``(replicas, policy)`` of a ``sim:...`` arm's ``replicas=`` / ``router=``, or None for one simulator.

    Raises:
        ConfigError: replicas not an integer >= 1, or an unknown policy (field ``--arm``).
    """
    from kvreplay.sim.routing import ROUTER_POLICIES

    got: dict[str, str] = {}
    for item in filter(None, (s.strip() for s in spec.split(","))):
        key, _, value = item.partition("=")
        if key.strip() in FLEET_KEYS:
            got[key.strip()] = value.strip()
    if not got:
        return None
    try:
        n = int(got.get("replicas", "1"))
    except ValueError:
        n = 0
    if n < 1:
        raise ConfigError(f"arm {arm_name}: replicas must be an integer >= 1", field="--arm")
    policy = got.get("router", "round_robin")
    if policy not in ROUTER_POLICIES:
        raise ConfigError(f"arm {arm_name}: router is one of {', '.join(ROUTER_POLICIES)}", field="--arm")
    return n, policy


async def start_arm_fleet(config: Any, size: tuple[int, str], calibration: dict[str, Any] | None) -> Any:
    """Start the arm's embedded fleet on the running loop (``sim.fleet.start_fleet``); the caller stops it."""
    from kvreplay.sim.fleet import start_fleet

    return await start_fleet(size[0], size[1], config=config, calibration=calibration)


def fleet_run_options(fleet: Any, config: Any, size: tuple[int, str]) -> dict[str, Any]:
    """``RunOptions`` fields of a block against ``fleet``: replicas, replica header, plan.json ``run`` keys."""
    from kvreplay.offline.runloss import sim_fleet_json
    from kvreplay.runner.fleet import DEFAULT_REPLICA_HEADER

    urls = tuple(fleet.replica_urls)
    return {
        "replicas": urls,
        "replica_header": DEFAULT_REPLICA_HEADER,
        "fleet_json": {"router": "sim", "replica_header": DEFAULT_REPLICA_HEADER,
                       "replicas": [{"url": u, "backend": "halogen", "profile": None} for u in urls]},
        "sim_fleet": sim_fleet_json(config, *size),
    }


async def fleet_backend(urls: tuple[str, ...], session: Any) -> Any:
    """Every replica's ``halogen`` adapter as one ``runner.fleet.FleetBackend``."""
    from kvreplay.backends import make_backend
    from kvreplay.runner.fleet import FleetBackend

    return FleetBackend([(u, make_backend("halogen", u, session)) for u in urls])


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def fleet_cells(step: str, ab_dir: Path, status: str) -> list[dict[str, Any]]:
    """Per-replica and routing-loss cells of an A/B whose arms ran fleets (empty otherwise).

    Cells ``ARM.PHASE.replicaK.hit_rate`` and ``ARM.PHASE.replicaK.requests`` (replica
    K in start order), ``ARM.PHASE.routing.kept_pct``, ``.observed_cached_tokens``,
    ``.merged_cached_tokens``, ``.prefix_affinity_cached_tokens``,
    ``.round_robin_cached_tokens``, ``.measured_cached_tokens``: each the mean over
    the arm's measured blocks (``value``), the block count in ``reason``.
    """
    from kvreplay.rundir import read_json, read_summary

    ab = read_json(ab_dir / "ab.json")
    if not isinstance(ab, dict):
        return []
    acc: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for blk in ab.get("blocks") or []:
        if blk.get("deferred") or blk.get("aborted"):
            continue
        summary = read_summary(ab_dir / blk["dir"]) or {}
        for ph in summary.get("phases") or []:
            key = (blk["arm"], str(ph.get("name")))
            for k, rep in enumerate(ph.get("replicas") or []):
                if rep.get("hit_rate") is not None:
                    acc[(*key, f"replica{k}.hit_rate")].append(float(rep["hit_rate"]))
                acc[(*key, f"replica{k}.requests")].append(float(rep.get("requests") or 0))
            loss = ph.get("routing_loss") or {}
            pol = loss.get("policies") or {}
            if loss.get("kept_pct") is not None:
                acc[(*key, "routing.kept_pct")].append(float(loss["kept_pct"]))
            for name in ("observed", "merged", "prefix_affinity", "round_robin"):
                if name in pol:
                    acc[(*key, f"routing.{name}_cached_tokens")].append(float(pol[name]["cached_tokens"]))
            if loss.get("measured_cached_tokens") is not None:
                acc[(*key, "routing.measured_cached_tokens")].append(float(loss["measured_cached_tokens"]))
    return [{"step": step, "metric": f"{arm}.{phase}.{what}", "status": status, "value": _mean(vals),
             "reason": f"mean of {len(vals)} block(s)"} for (arm, phase, what), vals in acc.items()]
