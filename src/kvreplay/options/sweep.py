"""The options of ``kvreplay sweep`` / ``kvreplay.sweep``: a run's (``RunConfig``) and the sweep's own.

``SweepConfig`` is ``RunConfig`` (every option of a run: target, simulator, timeouts...;
each point is an ordinary run) with the sweep's fields (group ``sweep``), each declaring its
flag (``kvreplay.argtypes.add_declared`` derives ``kvreplay sweep``'s ``sweep`` group from
them). Loads and limits stay text here (``--concurrency 1,2,4``, ``--slo ttft_ms<=500``):
``kvreplay.sweeps.loads`` reads them, naming the flag.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from kvreplay.argtypes import duration, integer, number
from kvreplay.options.declare import option
from kvreplay.options.run import RunConfig

__all__ = ["CACHE_STATES", "DEFAULT_MAX_CONCURRENCY", "DEFAULT_MAX_RATE", "SweepConfig"]

CACHE_STATES = ("cold", "warm", "as-is")
"""The values of ``--cache``."""
DEFAULT_MAX_CONCURRENCY = 256
"""Largest concurrency ``--concurrency auto`` doubles to (``--max-load``)."""
DEFAULT_MAX_RATE = 1024.0
"""Largest rate ``--rate auto`` doubles to (requests/s; ``--max-load``)."""


def _strings() -> list[str]:
    return []


@dataclass(slots=True, kw_only=True)
class SweepConfig(RunConfig):
    """Every option of one sweep: a run's (inherited; each point's) and the sweep's own.

    Attributes:
        concurrency: ``--concurrency``: closed-loop loads (``"1,2,4"``) or ``"auto"``.
        rate: ``--rate``: open-loop loads in requests/s, or ``"auto"``.
        arrivals: ``--arrivals``: ``constant``, ``poisson[:SEED]``, ``gamma:CV[:SEED]``.
        max_in_flight: ``--max-in-flight``: open loop, requests in flight at most.
        select: ``--select``: ``firstN`` / ``lastN`` (None: every body).
        requests: ``--requests``: measured requests per point (None: the selection once).
        duration: ``--duration``: open loop, measured seconds per point.
        warmup: ``--warmup``: requests before each measured phase.
        cache: ``--cache``: one of ``CACHE_STATES``.
        warm_min: ``--warm-min``: warm, the fraction of the first prompt that must be cached.
        slo: ``--slo``: per-request SLOs (``ttft_ms<=500``).
        until: ``--until``: limits that end the sweep (``ttft_ms:p99>2000``).
        start: ``--start``: auto, the first load.
        max_load: ``--max-load``: auto, the largest load.
        force: ``--force``: replace an earlier sweep in ``out``.
        csv: ``--csv``: also write points.csv.
    """

    concurrency: str | None = option(flag="--concurrency", metavar="LIST|auto", group="sweep",
                                     help="closed-loop loads, e.g. 1,2,4,8, or auto (search the knee)")
    rate: str | None = option(flag="--rate", metavar="LIST|auto", group="sweep",
                              help="open-loop loads in requests/s, e.g. 1,2,4, or auto (search the knee)")
    arrivals: str = option("poisson", flag="--arrivals", metavar="PROCESS", group="sweep",
                           help="open loop: constant, poisson[:SEED] (default, seed 0) or gamma:CV[:SEED] "
                                "(CV > 1 burstier)")
    max_in_flight: int = option(256, flag="--max-in-flight", check=integer(1), metavar="N", group="sweep",
                                help="open loop: requests in flight at most (default 256)")
    select: str | None = option(flag="--select", metavar="firstN|lastN", group="sweep",
                                help="the bodies a point sends (default all)")
    requests: int | None = option(flag="--requests", check=integer(1), metavar="N", group="sweep",
                                  help="measured requests per point (the selection cycled; default: the selection "
                                       "once)")
    duration: float | None = option(flag="--duration", check=duration, metavar="DUR", unit="s", group="sweep",
                                    help="open loop: measured time per point (rate x DUR requests), e.g. 60s")
    warmup: int = option(0, flag="--warmup", check=integer(0), metavar="N", group="sweep",
                         help="requests sent and recorded before each measured phase, out of the point's figures "
                              "(default 0)")
    cache: str = option("cold", flag="--cache", choices=CACHE_STATES, group="sweep",
                        help="cache state of each point: cold (reset, proved empty; default), warm (primed with the "
                             "point's bodies at C1, proved by cached tokens) or as-is (flagged)")
    warm_min: float | None = option(flag="--warm-min", check=number(0, strict=True, maximum=1.0), metavar="F",
                                    group="sweep",
                                    help="warm: the fraction of the first measured prompt that must be cached "
                                         "(default: its block-rounded length)")
    slo: list[str] = option(flag="--slo", action="append", factory=_strings, metavar="METRIC<=MS", group="sweep",
                            help="per-request SLO in measured ms, repeatable: ttft_ms<=500, tpot_ms<=50, e2e_ms<=9000")
    until: list[str] = option(flag="--until", action="append", factory=_strings, metavar="LIMIT", group="sweep",
                              help="end the sweep at a point crossing it, repeatable: ttft_ms:p99>2000, "
                                   "slo_attainment<0.9")
    start: float | None = option(flag="--start", check=number(0, strict=True), metavar="LOAD", group="sweep",
                                 help="auto: the first load (default 1)")
    max_load: float | None = option(flag="--max-load", check=number(0, strict=True), metavar="LOAD", group="sweep",
                                    help=f"auto: largest load (default {DEFAULT_MAX_CONCURRENCY} in flight, "
                                         f"{DEFAULT_MAX_RATE:g} requests/s)")
    force: bool = option(False, flag="--force", action="store_true", group="sweep",
                         help="replace an earlier sweep in --out")
    csv: bool = option(False, flag="--csv", action="store_true", group="sweep",
                       help="also write points.csv (one row per point)")

    def run_config(self, **changes: Any) -> RunConfig:
        """The run options of one point: this sweep's ``RunConfig`` fields, with ``changes`` (``out=``...)."""
        values = {f.name: getattr(self, f.name) for f in fields(RunConfig)}
        values.update(changes)
        return RunConfig(**values)
