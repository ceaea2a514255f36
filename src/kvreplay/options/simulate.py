"""The options of ``kvreplay simulate`` / ``kvreplay.simulate``: ``SimulateConfig``, each field declaring its flag.

``kvreplay.argtypes.add_declared`` derives ``kvreplay simulate``'s flags from these fields,
one argument group of its help at a time (``SIMULATE_GROUPS``: the group and its title);
``kvreplay.api.simulation`` takes the object (``--sim-from-verdict`` fills the fields left
unset). ``--prefill``'s grammar is the offline model's (``kvreplay.offline.report``): the
command line adds that check to the flag.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvreplay.argtypes import integer, number, number_list
from kvreplay.options.declare import option

__all__ = ["ROUTER_POLICIES", "SIMULATE_GROUPS", "SimulateConfig"]

ROUTER_POLICIES = ("round_robin", "random", "prefix_affinity")
"""The routing policies of a simulated fleet (``kvreplay.sim.routing``): ``--router``, ``--sim-router``."""

SIMULATE_GROUPS: tuple[tuple[str, str | None], ...] = (
    ("simulate", None),
    ("simulate-entries", "entries model (as serve-sim --sim-cache entries)"),
    ("simulate-radix", "radix model"),
    ("simulate-outputs", "outputs (radix inserts the output's blocks, as serve-sim does)"),
    ("simulate-fleet", "fleet: the routing loss over N replicas (docs/fleets.md); --capacities gives one capacity "
                       "per replica"),
    ("simulate-sessions", "sessions (a workload with a sessions side file: reuse by turn is reported)"),
    ("simulate-print", None),
)
"""The groups of ``SimulateConfig``'s fields in help order, each with its help section's title (None: the
command's own options)."""


def _strings() -> list[str]:
    return []


@dataclass(slots=True, kw_only=True)
class SimulateConfig:
    """Every option of one offline simulation, by its flag's ``dest`` (units and meanings in each help).

    ``restore_s_per_token`` is no flag: a probe verdict's calibration (``--sim-from-verdict``) sets it.
    ``capacities`` is the parsed list, or the command line's text from a caller that did not parse it.
    """

    source: str = option(flag=None, required=True, metavar="WORKLOAD_OR_TRACE", group="simulate",
                         help="workload (folder of *.json or .jsonl), plan.json, or block trace (hash_ids)")
    model: str | None = option(flag="--model", choices=("radix", "entries"), group="simulate",
                               help="cache model (default: radix for traces, entries for workloads)")
    capacities: tuple[float, ...] | list[float] | str | None = option(
        flag="--capacities", check=number_list(number(0, strict=True)), metavar="N,N,...", group="simulate",
        help="capacities to report (see --capacity-unit)")
    capacity_unit: str = option("units", flag="--capacity-unit", choices=("units", "tokens", "gib"), group="simulate",
                                help="unit of --capacities: entries/blocks, or for radix tokens or GiB (whole blocks)")
    points: int = option(40, flag="--points", check=integer(1), group="simulate",
                         help="geometric capacities when none are given")
    phase: list[str] = option(flag="--phase", action="append", factory=_strings, metavar="SPEC", group="simulate",
                              help="plan phases for a workload, e.g. prime:forward:c1 (repeatable; serial order)")
    interleave: str | None = option(flag="--interleave", metavar="PATH", group="simulate",
                                    help="second workload or trace mixed in")
    every: int | None = option(flag="--every", check=integer(1), metavar="K", group="simulate",
                               help="with --interleave: foreign requests after every K (default 1)")
    burst: int | None = option(flag="--burst", check=integer(1), metavar="B", group="simulate",
                               help="with --interleave: B foreign requests per gap (default 1)")
    today: int | None = option(flag="--today", check=integer(1), metavar="N", group="simulate",
                               help="the capacity run today: always reported, and the answer line compares it")
    sim_from_verdict: str | None = option(flag="--sim-from-verdict", metavar="VERDICT_JSON", group="simulate",
                                          help="calibrate from a probe verdict: model, prefill fit, restore cost, "
                                               "block size, bytes per token, entry cap; its capacity becomes --today "
                                               "(flags given win)")
    prefill: str | None = option(flag="--prefill", metavar="a=S,rate=TOK_PER_S|verdict.json", group="simulate",
                                 help="prefill cost model (prefill_s = a + tokens / rate)")
    share: float = option(0.95, flag="--share", check=number(0, strict=True, maximum=1), group="simulate",
                          help="recommend the smallest capacity reaching this share of the best hit ratio")
    metric: str = option("tokens", flag="--metric", choices=("tokens", "requests"), group="simulate",
                         help="hit ratio the recommendation uses")
    bytes_per_token: int | None = option(flag="--bytes-per-token", check=integer(1, unit="bytes"), unit="bytes",
                                         group="simulate", help="KV bytes per token (default: the simulator's)")
    snapshots: int = option(2, flag="--snapshots", check=int, choices=(1, 2), group="simulate-entries",
                            help="snapshots per request")
    snapshot_at: str = option("system,messages", flag="--snapshot-at", group="simulate-entries",
                              help="snapshot points in order (system, messages, prompt)")
    recency: str = option("use", flag="--recency", choices=("use", "offer"), group="simulate-entries",
                          help="what refreshes a snapshot: use (simulator default; per-capacity runs) or offer (one "
                               "pass)")
    max_entry_bytes: int | None = option(flag="--max-entry-bytes", check=integer(1, unit="bytes"), unit="bytes",
                                         group="simulate-entries",
                                         help="per-snapshot cap (bytes): larger snapshots keep their first tokens "
                                              "that fit")
    refuse_over_bytes: bool = option(False, flag="--refuse-over-bytes", action="store_true", group="simulate-entries",
                                     help="refuse snapshots over --max-entry-bytes instead of truncating them")
    block_size: int | None = option(flag="--block-size", check=integer(1), group="simulate-radix",
                                    help="tokens per block for workloads (default 16)")
    trace_block_tokens: int = option(512, flag="--trace-block-tokens", check=integer(1), group="simulate-radix",
                                     help="tokens per hash_ids block of a trace (Mooncake: 512)")
    limit: int | None = option(flag="--limit", check=integer(1), group="simulate-radix",
                               help="first N trace requests only")
    host_rows: int = option(0, flag="--host-rows", check=integer(0), group="simulate-radix",
                            help="host tier rows (0: no host tier)")
    host_pages: int = option(4096, flag="--host-pages", check=integer(1), group="simulate-radix",
                             help="host tier pages")
    page_tokens: int = option(256, flag="--page-tokens", check=integer(1), group="simulate-radix",
                              help="tokens per host page")
    host_evict: str = option("leaf-lru", flag="--host-evict", choices=("leaf-lru", "ancestor-compact"),
                             group="simulate-radix", help="host tier eviction: leaf-lru (default) or ancestor-compact")
    no_outputs: bool = option(False, flag="--no-outputs", action="store_true", group="simulate-outputs",
                              help="insert no output tokens")
    output_tokens: int | None = option(flag="--output-tokens", check=integer(0), group="simulate-outputs",
                                       help="serve-sim's output_tokens")
    max_output_tokens: int | None = option(flag="--max-output-tokens", check=integer(1), group="simulate-outputs",
                                           help="serve-sim's max_output_tokens")
    replicas: int | None = option(flag="--replicas", check=integer(1), metavar="N", group="simulate-fleet",
                                  help="simulate N replicas, each with the cache model above, and print the "
                                       "routing-loss table (merged-cache bound, greedy prefix affinity, round-robin, "
                                       "random)")
    router: str | None = option(flag="--router", choices=ROUTER_POLICIES, group="simulate-fleet",
                                help="with --replicas: the policy taken as the observed routing (its kept %%)")
    router_seed: int = option(0, flag="--router-seed", check=integer(0), metavar="S", group="simulate-fleet",
                              help="seed of the random policy")
    sessions: int | None = option(flag="--sessions", check=integer(1), metavar="N", group="simulate-sessions",
                                  help="simulate N conversations in flight (closed loop) instead of the workload's "
                                       "order: the recommended capacity keeps N conversations warm")
    think_time: float | None = option(flag="--think-time", check=number(0.0, unit="s"), metavar="S", unit="s",
                                      group="simulate-sessions",
                                      help="with --sessions: think time before every later turn (default: the side "
                                           "file's)")
    service_time: float = option(0.0, flag="--service-time", check=number(0.0, unit="s"), metavar="S", unit="s",
                                 group="simulate-sessions",
                                 help="with --sessions: seconds from a turn's send to its last byte (default 0)")
    json: bool = option(False, flag="--json", action="store_true", group="simulate-print",
                        help="print JSON instead of a table")
    plot: str | None = option(flag="--plot", metavar="FILE.png", group="simulate-print",
                              help="also write the curve as a PNG plot")
    restore_s_per_token: float | None = field(default=None)
