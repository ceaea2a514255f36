"""Router policies of a simulated fleet: the one place a replica is chosen for a request.

Both the embedded fleet's router (``kvreplay.sim.fleet``, live) and the offline
routing-loss simulation (``kvreplay.offline.routing``) decide through
``RouterPolicy``, so at concurrency 1 the sim router and the offline simulation
make the same choice for the same sequence of bodies.

Policies (``ROUTER_POLICIES``):

``round_robin``
    request ``i`` (0-based, in arrival order) goes to replica ``i mod N``.
``random``
    ``random.Random(seed).randrange(N)`` per request, in arrival order.
``prefix_affinity``
    every replica is asked how many tokens of the prompt it would serve from
    its cache now (``EntriesCache.peek`` / ``RadixCache.peek``: the
    simulator's own prefix model, nothing changed by asking); the request goes
    to the replica with the most. Ties go to the least loaded: fewest requests
    in flight (the live router's count; 0 offline), then fewest requests
    routed to it so far, then the lowest index. So cold prompts spread over
    the replicas in turn, and a prompt follows its cached prefix.

The response header ``REPLICA_HEADER`` names the replica that served a request
(its base URL) in the fleet router's answers.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Protocol

from kvreplay.options.simulate import ROUTER_POLICIES

__all__ = ["REPLICA_HEADER", "ROUTER_POLICIES", "PrefixPeek", "RouterPolicy"]

REPLICA_HEADER = "x-kvreplay-replica"
"""Response header of the embedded fleet's router: the base URL of the replica that served."""


class PrefixPeek(Protocol):
    """A cache that tells, without changing anything, how much of a prompt it holds."""

    def peek(self, tokens: Sequence[int]) -> int:
        """Cached tokens a request of ``tokens`` would be credited now (tokens)."""
        ...


class RouterPolicy:
    """The choice of a replica per request (see module docstring).

    Args:
        replicas: Number of replicas N (>= 1).
        policy: One of ``ROUTER_POLICIES``.
        seed: Seed of ``random`` (ignored by the other policies).

    Raises:
        ValueError: N < 1 or an unknown policy.
    """

    __slots__ = ("_next", "_rng", "assigned", "policy", "replicas", "seed")

    def __init__(self, replicas: int, policy: str, *, seed: int = 0) -> None:
        if replicas < 1:
            raise ValueError(f"a fleet needs at least 1 replica, not {replicas}")
        if policy not in ROUTER_POLICIES:
            raise ValueError(f"unknown router policy {policy!r}; one of {', '.join(ROUTER_POLICIES)}")
        self.replicas = replicas
        self.policy = policy
        self.seed = seed
        self._rng = random.Random(seed)
        self._next = 0
        self.assigned = [0] * replicas
        """Requests routed to each replica so far."""

    @property
    def needs_tokens(self) -> bool:
        """True when ``choose`` looks at the prompt (``prefix_affinity``)."""
        return self.policy == "prefix_affinity"

    def choose(
        self,
        tokens: Sequence[int] | None = None,
        caches: Sequence[PrefixPeek] = (),
        loads: Sequence[int] | None = None,
    ) -> int:
        """Pick the replica of the next request and count it.

        Args:
            tokens: The prompt's token ids (``prefix_affinity``; None when the
                body could not be rendered: every replica then scores 0).
            caches: One cache per replica, in replica order (``prefix_affinity``).
            loads: Requests in flight per replica (default all 0).

        Returns:
            The replica index, ``0..N-1``.

        Raises:
            ValueError: ``prefix_affinity`` with a number of caches other than N.
        """
        n = self.replicas
        if self.policy == "round_robin":
            pick = self._next % n
            self._next += 1
        elif self.policy == "random":
            pick = self._rng.randrange(n)
        else:
            if len(caches) != n:
                raise ValueError(f"prefix_affinity needs {n} caches, got {len(caches)}")
            scores = [c.peek(tokens) for c in caches] if tokens is not None else [0] * n
            load = loads if loads is not None else [0] * n
            pick = min(range(n), key=lambda i: (-scores[i], load[i], self.assigned[i], i))
        self.assigned[pick] += 1
        return pick
