"""The options of ``kvreplay serve-sim`` / ``kvreplay.serve_sim``: ``ServeSimConfig``, one field a flag.

``kvreplay.argtypes.add_declared`` derives ``kvreplay serve-sim``'s own flags from these fields
(group ``serve``, then the titled ``serve-fleet`` section); the simulator's options follow,
without a prefix (``--cache``, also ``--sim-cache``: ``kvreplay.sim.config.add_arguments``),
and are held in ``sim`` (``SimOptions`` keys but the fleet's, which are fields here).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kvreplay.argtypes import integer, number
from kvreplay.options.declare import option
from kvreplay.options.run import SIM_FLEET_KEYWORDS, SIM_KEYWORDS
from kvreplay.options.simulate import ROUTER_POLICIES

__all__ = ["SERVE_FLEET_TITLE", "ServeSimConfig"]

SERVE_FLEET_TITLE = "fleet (N replicas behind a router: docs/fleets.md)"
"""The help section of the ``serve-fleet`` group."""


@dataclass(slots=True, kw_only=True)
class ServeSimConfig:
    """Every option of ``kvreplay serve-sim``, by its flag's ``dest``.

    Attributes:
        host: Address to bind.
        port: TCP port (0: a free one), the router's with a fleet.
        duration: Stop after this long (s; None: until interrupted).
        replicas: Simulated replicas behind a router (1: one server, no router).
        router: The router's policy (None: round_robin with a fleet, no router with one replica).
        router_seed: Seed of the ``random`` policy.
        sim: The simulator's options given (``SimOptions`` keys without ``replicas``/``router``).
    """

    host: str = option("127.0.0.1", flag="--host", group="serve", help="address to bind (default 127.0.0.1)")
    port: int = option(0, flag="--port", check=integer(0, maximum=65535), group="serve",
                       help="TCP port; 0 picks a free one (default 0)")
    duration: float | None = option(flag="--duration", check=number(0, strict=True, unit="s"), metavar="S",
                                    unit="s", group="serve",
                                    help="stop after S seconds (default: run until interrupted)")
    replicas: int = option(1, flag="--replicas", check=integer(1), metavar="N", group="serve-fleet",
                           help="simulated replicas behind a router (default 1: one server, no router)")
    router: str | None = option(flag="--router", choices=ROUTER_POLICIES, group="serve-fleet",
                                help="the router's policy (default round_robin; given with --replicas 1, a router "
                                     "fronts the one replica)")
    router_seed: int = option(0, flag="--router-seed", check=integer(0), metavar="S", group="serve-fleet",
                              help="seed of --router random (default 0)")
    sim: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dests(cls, values: Mapping[str, Any]) -> ServeSimConfig:
        """From parsed values by their ``dest`` (the simulator's without a prefix); unset ones (None) left out."""
        own = {f for f in cls.__dataclass_fields__ if f != "sim"}
        sim_keys = SIM_KEYWORDS - SIM_FLEET_KEYWORDS
        return cls(**{k: v for k, v in values.items() if k in own},
                   sim={k: v for k, v in values.items() if k in sim_keys and v is not None})
