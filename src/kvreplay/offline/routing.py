"""Routing loss, offline: how much of a workload's prefix reuse a fleet's routing keeps.

For one frozen sequence of requests (``sources.ModelRequest``: the tokens and
outputs the simulator models for each body) and one cache model per replica
(a ``SimConfig`` each: ``entries`` with ``cache_entries`` and optionally
``max_bytes``, or ``radix`` with ``device_blocks``; built by
``kvreplay.sim.engine.make_cache``, the simulator's own classes), the requests
are served one at a time (concurrency 1, as ``offline.reference`` drives the
caches) under each of:

``observed``
    a given assignment (replica index per position), e.g. what a replay measured;
``merged``
    one cache holding the fleet's total capacity (capacities summed): the reuse
    available to any routing (an upper bound in practice; LRU is not a stack
    algorithm for every model, so a routing can exceed it by a little);
``prefix_affinity``
    greedy: each request to the replica whose cache holds its longest cached
    prefix now, ties to the replica with the fewest requests so far, then the
    lowest index; each replica's capacity is respected (it evicts as it would);
``round_robin`` and ``random``
    position ``i`` to replica ``i mod N``; ``random.Random(seed)`` per request.

The choices are made by ``kvreplay.sim.routing.RouterPolicy``, the embedded
fleet router's own code, so ``kvreplay serve-sim --replicas N --router P`` at
concurrency 1 makes exactly the assignment simulated here for ``P``.

A new cache epoch (a reset between plan phases) empties every cache. Requests
with ``counted=False`` (interleaved foreign traffic) are routed and take space
but are not counted.

The result (``routing_loss``) is the ``phases[].routing_loss`` object of
``summary.json``::

    {"replicas": N, "requests": R, "prompt_tokens": P,
     "cache": {"model": "radix", "unit": "blocks", "per_replica": [64, 64], "merged": 128},
        (unit: "blocks" for radix, "entries", or "bytes" for entries under max_bytes)
     "policies": {NAME: {"cached_tokens", "prompt_tokens", "hit_rate", "kept_pct", "method",
                         "per_replica_cached_tokens", "per_replica_requests"}, ...},
     "observed": {"replica": [...], "cached_tokens": [...]} | null   (per position),
     "measured_cached_tokens": M | null, "observed_vs_measured_pct": ... | null,
     "kept_pct": X | null, "sentence": "the routing kept X% of the reuse available (...)"}

``hit_rate`` is cached over prompt tokens (counted requests); ``kept_pct`` is a
policy's cached tokens over the merged bound's, times 100 (None when the bound
is 0).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from kvreplay.errors import ConfigError
from kvreplay.offline.simulate import SimulateOptions, load_requests
from kvreplay.offline.sources import ModelRequest
from kvreplay.sim.cache_entries import EntriesCache
from kvreplay.sim.cache_radix import RadixCache
from kvreplay.sim.config import SimConfig
from kvreplay.sim.engine import make_cache
from kvreplay.sim.routing import ROUTER_POLICIES, RouterPolicy

__all__ = [
    "LOSS_POLICIES",
    "assignment",
    "loss_sentence",
    "merged_config",
    "replay_assignment",
    "routing_loss",
    "simulate_fleet",
]

LOSS_POLICIES = ("observed", "merged", "prefix_affinity", "round_robin", "random")
"""The figures of a routing-loss table, in order."""

_METHOD = {
    "observed": "the observed assignment replayed at C1 through one {model} cache per replica",
    "merged": "one {model} cache of the fleet's total capacity ({merged} {unit}), every request to it",
    "prefix_affinity": "greedy: each request to the replica whose cache holds its longest prefix"
    " (peek), ties to the fewest requests so far then the lowest index; capacity per replica respected",
    "round_robin": "position i to replica i mod {n}",
    "random": "random.Random({seed}).randrange({n}) per position",
}


def _unit(cfg: SimConfig) -> str:
    """What a replica's capacity counts: ``entries``, ``bytes`` (entries under a byte budget) or ``blocks``."""
    if cfg.cache != "entries":
        return "blocks"
    return "entries" if cfg.max_bytes is None else "bytes"


def _capacity(cfg: SimConfig, unit: str) -> int:
    if unit == "blocks":
        return cfg.device_blocks
    return (cfg.max_bytes or 0) if unit == "bytes" else cfg.cache_entries


def merged_config(replicas: Sequence[SimConfig]) -> SimConfig:
    """One configuration holding the fleet's total capacity.

    Capacities are summed: ``cache_entries`` and ``max_bytes`` (entries;
    ``max_bytes`` None when any replica has none), ``device_blocks``,
    ``host_rows`` and ``host_pages`` (radix). The rest is the first replica's.

    Raises:
        ConfigError: No replicas, or replicas of different cache models or
            block sizes (one cache cannot hold both).
    """
    if not replicas:
        raise ConfigError("a fleet needs at least one replica", field="replicas")
    first = replicas[0]
    for cfg in replicas[1:]:
        if cfg.cache != first.cache or cfg.block_size != first.block_size:
            raise ConfigError(
                "replicas of different cache models or block sizes have no merged cache", field="replicas"
            )
    if first.cache == "entries":
        max_bytes = None if any(c.max_bytes is None for c in replicas) else sum(c.max_bytes or 0 for c in replicas)
        return dataclasses.replace(first, cache_entries=sum(c.cache_entries for c in replicas), max_bytes=max_bytes)
    return dataclasses.replace(
        first,
        device_blocks=sum(c.device_blocks for c in replicas),
        host_rows=sum(c.host_rows for c in replicas),
        host_pages=sum(c.host_pages for c in replicas),
    )


def _serve(cache: EntriesCache | RadixCache, cfg: SimConfig, r: ModelRequest) -> int:
    """One request at C1, as the simulator's engine serves it; returns its cached tokens."""
    if isinstance(cache, EntriesCache):
        look = cache.lookup(r.tokens)
        ends = {"system": r.system_end, "messages": r.messages_end, "prompt": len(r.tokens)}
        cache.store(r.tokens, [ends[p] for p in cfg.snapshot_points])
        return look.hit_tokens
    return cache.request(r.tokens, r.output, messages_end=r.messages_end).cached_tokens


def _run(
    reqs: Sequence[ModelRequest], replicas: Sequence[SimConfig], route: Any
) -> tuple[list[int], list[int]]:
    """Serve ``reqs`` in order, each on ``route(i, r, caches)``; returns (assignment, cached per position)."""
    caches = [make_cache(c) for c in replicas]
    epoch = reqs[0].epoch if reqs else 0
    picks: list[int] = []
    cached: list[int] = []
    for i, r in enumerate(reqs):
        if r.epoch != epoch:
            for c in caches:
                c.clear()
            epoch = r.epoch
        k = route(i, r, caches)
        if not 0 <= k < len(caches):
            raise ConfigError(f"position {i}: replica {k} outside 0..{len(caches) - 1}", field="assignment")
        picks.append(k)
        cached.append(_serve(caches[k], replicas[k], r))
    return picks, cached


def replay_assignment(
    reqs: Sequence[ModelRequest], replicas: Sequence[SimConfig], observed: Sequence[int]
) -> list[int]:
    """Cached tokens per position when position ``i`` is served by replica ``observed[i]``.

    Raises:
        ConfigError: An assignment of another length, or an index outside ``0..N-1``.
    """
    if len(observed) != len(reqs):
        raise ConfigError(f"{len(observed)} assignments for {len(reqs)} requests", field="assignment")
    return _run(reqs, replicas, lambda i, r, caches: observed[i])[1]


def assignment(
    reqs: Sequence[ModelRequest], replicas: Sequence[SimConfig], policy: str, *, seed: int = 0
) -> tuple[list[int], list[int]]:
    """Simulate a router policy at C1 (``kvreplay.sim.routing.ROUTER_POLICIES``).

    Returns:
        ``(replica per position, cached tokens per position)``.

    Raises:
        ConfigError: An unknown policy.
    """
    if policy not in ROUTER_POLICIES:
        raise ConfigError(f"unknown router policy {policy!r}; one of {', '.join(ROUTER_POLICIES)}", field="router")
    router = RouterPolicy(len(replicas), policy, seed=seed)
    return _run(reqs, replicas, lambda i, r, caches: router.choose(r.tokens, caches))


def _figure(
    reqs: Sequence[ModelRequest], n: int, picks: Sequence[int], cached: Sequence[int], method: str
) -> dict[str, Any]:
    tok = sum(c for c, r in zip(cached, reqs, strict=True) if r.counted)
    prompt = sum(len(r.tokens) for r in reqs if r.counted)
    per_c = [0] * n
    per_r = [0] * n
    for k, c, r in zip(picks, cached, reqs, strict=True):
        if r.counted:
            per_c[k] += c
            per_r[k] += 1
    return {
        "cached_tokens": tok,
        "prompt_tokens": prompt,
        "hit_rate": tok / prompt if prompt else 0.0,
        "kept_pct": None,
        "method": method,
        "per_replica_cached_tokens": per_c,
        "per_replica_requests": per_r,
    }


def routing_loss(
    reqs: Sequence[ModelRequest],
    replicas: Sequence[SimConfig],
    *,
    observed: Sequence[int] | None = None,
    observed_label: str | None = None,
    seed: int = 0,
    measured_cached_tokens: int | None = None,
) -> dict[str, Any]:
    """The routing-loss table of one frozen sequence (see module docstring for the shape).

    Args:
        reqs: The requests in send order (``sources.model_requests``; outputs
            rendered with the replicas' ``output_tokens`` / ``max_output_tokens``).
        replicas: One cache configuration per replica, in replica index order.
        observed: Replica index per position (e.g. from each record's
            ``replica``), or None for no ``observed`` figure.
        observed_label: Appended to the observed figure's method (e.g. "the
            round_robin router, simulated").
        seed: Seed of the ``random`` figure.
        measured_cached_tokens: What the replay measured (sum of the replicas'
            counters), to check the observed figure against; None = not given.

    Returns:
        The ``phases[].routing_loss`` object; ``policies`` holds ``observed``
        (when given), ``merged``, ``prefix_affinity``, ``round_robin`` and
        ``random`` in that order.

    Replicas of different cache models or block sizes (a mixed fleet: vLLM's blocks beside
    llama-server's) have no merged cache: the table then has no ``merged`` figure, every
    ``kept_pct`` is None, ``cache.model`` is ``mixed`` and ``cache.models`` names each
    replica's, and the sentence says so.

    Raises:
        ConfigError: No replicas, or a bad assignment.
    """
    if not replicas:
        raise ConfigError("a fleet needs at least one replica", field="replicas")
    n = len(replicas)
    first = replicas[0]
    mixed = any(c.cache != first.cache or c.block_size != first.block_size for c in replicas[1:])
    merged_cfg = None if mixed else merged_config(replicas)
    unit = _unit(merged_cfg or first)
    fmt = {"model": "per-replica" if mixed else first.cache,
           "merged": None if merged_cfg is None else _capacity(merged_cfg, unit), "unit": unit, "n": n, "seed": seed}
    policies: dict[str, dict[str, Any]] = {}
    per_position = None
    if observed is not None:
        cached = replay_assignment(reqs, replicas, observed)
        method = _METHOD["observed"].format(**fmt) + (f" ({observed_label})" if observed_label else "")
        policies["observed"] = _figure(reqs, n, observed, cached, method)
        per_position = {"replica": list(observed), "cached_tokens": cached}
    if merged_cfg is not None:
        m_picks, m_cached = _run(reqs, [merged_cfg], lambda i, r, caches: 0)
        policies["merged"] = _figure(reqs, 1, m_picks, m_cached, _METHOD["merged"].format(**fmt))
    for name in ("prefix_affinity", "round_robin", "random"):
        picks, cached = assignment(reqs, replicas, name, seed=seed)
        policies[name] = _figure(reqs, n, picks, cached, _METHOD[name].format(**fmt))
    bound = policies["merged"]["cached_tokens"] if "merged" in policies else None
    for fig in policies.values():
        fig["kept_pct"] = 100.0 * fig["cached_tokens"] / bound if bound else None
    out: dict[str, Any] = {
        "replicas": n,
        "requests": sum(1 for r in reqs if r.counted),
        "prompt_tokens": policies["prefix_affinity"]["prompt_tokens"],
        "seed": seed,
        "cache": {
            "model": "mixed" if mixed else first.cache,
            "unit": unit,
            "per_replica": [_capacity(c, _unit(c) if mixed else unit) for c in replicas],
            "merged": None if merged_cfg is None else _capacity(merged_cfg, unit),
            **({"models": [f"{c.cache} ({_unit(c)}, block {c.block_size})" for c in replicas]} if mixed else {}),
        },
        "policies": policies,
        "observed": per_position,
        "measured_cached_tokens": measured_cached_tokens,
        "observed_vs_measured_pct": None,
        "kept_pct": policies["observed"]["kept_pct"] if "observed" in policies else None,
    }
    if measured_cached_tokens is not None and "observed" in policies and measured_cached_tokens:
        out["observed_vs_measured_pct"] = 100.0 * policies["observed"]["cached_tokens"] / measured_cached_tokens
    out["sentence"] = loss_sentence(out)
    return out


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f}%"


def loss_sentence(loss: dict[str, Any]) -> str:
    """The one-line verdict of a ``routing_loss`` result.

    ``the routing kept X% of the reuse available (merged-cache bound Y, greedy
    affinity Z)``, X the observed figure's ``kept_pct``, Y and Z cached tokens;
    without an observed figure it reads ``no observed assignment (merged-cache
    bound Y, greedy affinity Z)``. Where ``server_tokens_per_sim_token`` R is
    given and not 1 (a real server's tokenizer: ``offline.runloss``), Y and Z are
    the figures' ``cached_tokens_server`` and the sentence ends ``(in the
    server's tokens: simulator tokens × R)``. A mixed fleet's figures are converted
    replica by replica (``server_tokens_per_sim_token_per_replica`` R1, R2, ... all
    known, not all 1: ``offline.runloss``), so the sentence then ends ``(in each replica's
    server's tokens: simulator tokens × R1, × R2)``, not the fleet's one ratio.
    """
    pol = loss["policies"]
    ratio = loss.get("server_tokens_per_sim_token")
    per = loss.get("server_tokens_per_sim_token_per_replica")
    per = per if (isinstance(per, list) and per and all(x is not None for x in per)
                  and any(x != 1.0 for x in per)) else None
    key = ("cached_tokens_server" if ratio is not None and (ratio != 1.0 or per is not None)
           and all(f.get("cached_tokens_server") is not None for f in pol.values()) else "cached_tokens")
    bound = (f"merged-cache bound {pol['merged'][key]:,}" if "merged" in pol
             else "no merged-cache bound: replicas of different cache models")
    tail = f"({bound}, greedy affinity {pol['prefix_affinity'][key]:,})"
    if key == "cached_tokens_server" and per is not None:
        tail += " (in each replica's server's tokens: simulator tokens " + ", ".join(f"× {x:.4g}" for x in per) + ")"
    elif key == "cached_tokens_server":
        tail += f" (in the server's tokens: simulator tokens × {ratio:.4g})"
    if "observed" not in pol:
        return f"no observed assignment {tail}"
    if "merged" not in pol:
        return f"the observed routing served {pol['observed'][key]:,} cached tokens {tail}"
    return f"the routing kept {_pct(pol['observed']['kept_pct'])} of the reuse available {tail}"


def simulate_fleet(
    opts: SimulateOptions, replicas: int, *, router: str | None = None, seed: int = 0
) -> dict[str, Any]:
    """``kvreplay simulate --replicas N [--router P]``: the routing-loss table of a workload or plan.

    Every replica gets the cache ``opts`` describes (``model``, default
    ``entries``; the capacity per replica is ``opts.capacities[0]`` in
    entries or blocks, else ``opts.today``, else the simulator's default:
    8 entries or 4096 blocks). With ``router``, that policy's simulated
    assignment is the ``observed`` figure.

    Returns:
        ``routing_loss``'s object plus ``source`` and ``kind``.

    Raises:
        ConfigError: a block trace (no tokens to route), a host tier, more
            than one capacity, a unit other than ``units``, N < 1.
        WorkloadError: an unreadable source.
    """
    if replicas < 1:
        raise ConfigError("must be >= 1", field="replicas")
    if opts.host is not None:
        raise ConfigError("the routing loss does not model a host tier yet", field="host-rows")
    if opts.capacities is not None and (len(opts.capacities) != 1 or opts.capacity_unit != "units"):
        raise ConfigError("with --replicas, give one capacity per replica in units (entries or blocks)",
                          field="capacities")
    kind, data = load_requests(opts.source, opts)
    if kind == "trace":
        raise ConfigError("a block trace has no token prompts to route; use a workload or plan.json",
                          field="replicas")
    model = opts.model or "entries"
    cap = int(opts.capacities[0]) if opts.capacities else opts.today
    kw: dict[str, Any] = {"cache": model, "entries_recency": opts.recency,
                          "snapshot_at": tuple(opts.snapshot_points), "snapshots": len(opts.snapshot_points),
                          "max_entry_bytes": opts.max_entry_bytes, "refuse_over_bytes": opts.refuse_over_bytes,
                          "output_tokens": opts.output_tokens}
    if cap is not None:
        kw["cache_entries" if model == "entries" else "device_blocks"] = cap
    for name in ("block_size", "bytes_per_token", "max_output_tokens"):
        if getattr(opts, name) is not None:
            kw[name] = getattr(opts, name)
    cfg = SimConfig(**kw)
    reqs = list(data)  # type: ignore[arg-type]
    cfgs = [cfg] * replicas
    observed = assignment(reqs, cfgs, router, seed=seed)[0] if router else None
    label = f"the {router} router, simulated" if router else None
    out = routing_loss(reqs, cfgs, observed=observed, observed_label=label, seed=seed)
    return {"source": opts.source, "kind": kind, "router": router, **out}
