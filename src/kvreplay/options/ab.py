"""The options of ``kvreplay ab`` / ``kvreplay.ab``: ``AbConfig``, each field declaring its flag.

``AbConfig`` is ``TargetConfig`` (target, backend, API key, simulator) with the
experiment's own fields: group ``ab`` (the arms, repetitions, checks, timeouts and bounds of
its blocks), then the execution contract shared with ``kvreplay run`` (group ``contract``,
``RunConfig``'s declarations reused), then group ``ab-out`` (body size bound, output, quiet).
``kvreplay.argtypes.add_declared`` derives ``kvreplay ab``'s flags from them, in that order.
Arms, checks and phases stay text here: ``kvreplay.experiments.ab`` reads them, naming the flag.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvreplay.argtypes import bound, duration, integer
from kvreplay.options.declare import option, reuse
from kvreplay.options.run import RunConfig, TargetConfig

__all__ = ["ACCEPT_BUSY_FACTOR", "AbConfig"]

ACCEPT_BUSY_FACTOR = 3.0
"""``--accept-busy-host`` without a value: the factor by which a decisive effect must clear every gate."""


def _strings() -> list[str]:
    return []


def _bounds() -> list[tuple[str, str, float]]:
    return []


@dataclass(slots=True, kw_only=True)
class AbConfig(TargetConfig):
    """Every option of one A/B experiment, by its flag's ``dest``.

    Attributes:
        workload: The workload path (required).
        arm: ``NAME=CMD`` arms, baseline first (required, twice).
        reps: Repetitions (pairs of blocks).
        phases: Concurrencies of each block's phases (``c1,c4``).
        order: Body order inside a phase.
        select: The bodies every phase sends (``all``, ``firstN``, ``lastN``).
        primary: Primary checks (``ttft_p50:-5%``).
        protected: Protected checks (``itl_p50:+3%``).
        seed: Bootstrap seed.
        accept_busy_host: Accept a timing decision on a busy host by this factor (None: no).
        ready_timeout: Longest wait for the server after an arm's command (s).
        cmd_timeout: Longest an arm's command may run (s).
        drain_timeout: Longest wait for the server to go idle before a block (s).
        stop_new_after: No new request after this long (s).
        hard_deadline: Requests and arm commands still running cancelled at this point (s).
        abort_if: Parsed bounds ``(name, op, value)``.
        expect_identity, abort_on_malformed, on_check_fail: The contract (as ``RunConfig``'s).
        max_body_bytes: Largest request body read from the workload (bytes).
        out: The experiment directory (None: ``runs/<UTC timestamp>``).
        quiet: Print no progress.
    """

    workload: str = option(flag=None, required=True, group="ab", help="folder of *.json bodies or a .jsonl file")
    arm: list[str] = option(flag="--arm", action="append", factory=_strings, required=True, metavar="NAME=CMD",
                            group="ab",
                            help="an arm and the command that switches the server to it (twice; baseline first); "
                                 "with --target sim: NAME=sim:KEY=VALUE,... (e.g. sim:prefill_scale=1.1)")
    reps: int = option(3, flag="--reps", check=int, group="ab", help="repetitions (pairs of blocks; default 3)")
    phases: str = option("c1,c4", flag="--phases", group="ab",
                         help="concurrencies of each block's phases (default c1,c4)")
    order: str = option("forward", flag="--order", group="ab",
                        help="body order inside a phase: forward, reverse, shuffle:SEED")
    select: str = option("all", flag="--select", metavar="firstN|lastN", group="ab",
                         help="the bodies every phase sends: all (default), firstN or lastN (e.g. first8: the first 8 "
                              "bodies)")
    primary: list[str] = option(flag="--primary", action="append", factory=_strings, metavar="METRIC:±X%",
                                group="ab",
                                help="primary check, e.g. ttft_p50:-5%% (lower by 5%% is a benefit) or "
                                     "ratio:hit_tokens/query_tokens:+5%% (a counter ratio 5%% higher is a benefit); "
                                     "metrics: ttft/itl/tpot/e2e _p50/_p90/_p99, throughput, output_tps, "
                                     "cached_tokens, ratio:NUM/DEN; repeatable")
    protected: list[str] = option(flag="--protected", action="append", factory=_strings, metavar="METRIC:±X%",
                                  group="ab",
                                  help="protected check, e.g. itl_p50:+3%% (rising by more is a regression); "
                                       "repeatable")
    seed: int = option(0, flag="--seed", check=int, group="ab", help="bootstrap seed")
    accept_busy_host: float | None = option(flag="--accept-busy-host", check=float, nargs="?",
                                            const=ACCEPT_BUSY_FACTOR, metavar="FACTOR", group="ab",
                                            help="accept a timing decision on a busy host (host_busy) when the effect "
                                                 "clears every gate FACTOR times over (default "
                                                 f"{ACCEPT_BUSY_FACTOR:g}); the verdict carries host_busy as a caveat")
    ready_timeout: float = option(60.0, flag="--ready-timeout", check=duration, metavar="DUR", unit="s", group="ab",
                                  help="longest wait for the server to answer after an arm's command (s; default 60)")
    cmd_timeout: float = option(600.0, flag="--cmd-timeout", check=duration, metavar="DUR", unit="s", group="ab",
                                help="longest an arm's switch command may run (s; default 600)")
    drain_timeout: float = option(10.0, flag="--drain-timeout", check=duration, metavar="DUR", unit="s", group="ab",
                                  help="longest wait for the server to go idle before a block that asks for a drain "
                                       "(s; default 10)")
    stop_new_after: float | None = option(flag="--stop-new-after", check=duration, metavar="DUR", unit="s",
                                          group="ab",
                                          help="send no new request after this long from the experiment's start "
                                               "(e.g. 70m); later blocks are deferred and the exit status is 3")
    hard_deadline: float | None = option(flag="--hard-deadline", check=duration, metavar="DUR", unit="s", group="ab",
                                         help="cancel requests (and arm commands) still running at this point "
                                              "(e.g. 80m)")
    abort_if: list[tuple[str, str, float]] = option(flag="--abort-if", action="append", factory=_bounds, check=bound,
                                                    metavar="NAME>VALUE", group="ab",
                                                    help="abort the block (and the experiment) when a common counter "
                                                         "or gauge crosses a bound, e.g. 'host_bytes>34e9'; "
                                                         "repeatable")
    expect_identity: list[str] = reuse(RunConfig, "expect_identity")
    abort_on_malformed: bool | None = reuse(RunConfig, "abort_on_malformed")
    on_check_fail: str | None = reuse(RunConfig, "on_check_fail")
    max_body_bytes: int = option(64 << 20, flag="--max-body-bytes", check=integer(1, unit="bytes"),
                                 metavar="BYTES", unit="bytes",
                                 group="ab-out",
                                 help="largest request body read from the workload; a larger one is refused (bytes)")
    out: str | None = option(flag="--out", group="ab-out", help="experiment directory (default runs/<UTC timestamp>)")
    quiet: bool = option(False, flag="--quiet", action="store_true", group="ab-out",
                         help="print no progress (the output directory holds everything)")
