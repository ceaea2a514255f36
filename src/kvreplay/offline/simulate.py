"""``kvreplay simulate``: load a source, pick the model, compute the curve, build the report.

Sources: a block trace (Mooncake ``hash_ids``), a kvreplay workload (a folder of
``*.json`` or a JSONL of bodies), or a ``plan.json`` (its frozen order, phases
included; a phase with ``reset`` starts a new cache epoch). Models: ``radix``
(one pass; per capacity with the simulator's class when a host tier is on) and
``entries`` (one pass with ``recency="offer"``; per capacity with the
simulator's class for its default ``recency="use"``, which is not a stack
algorithm, see ``entries``). The recommended capacity is exact and checked at
N and N - 1 (``smallest``).

A workload with a sessions side file gets a ``sessions`` section: reuse by turn index
at the recommended and the largest reported capacity, and, with ``sessions`` (N
conversations in flight, ``offline.sessions.session_order``), the whole simulation runs
in the order those N conversations send their turns, so the recommended capacity is the
number of entries (blocks) that keeps N conversations warm at that think time.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import TypedDict

from kvreplay.errors import ConfigError
from kvreplay.offline.entries import entries_curve
from kvreplay.offline.mrc import Curve, default_capacities
from kvreplay.offline.reference import brute_entries, brute_radix
from kvreplay.offline.report import PrefillModel, curve_rows
from kvreplay.offline.sessions import by_turn, session_order
from kvreplay.offline.sizing import add_sizing, entry_bytes
from kvreplay.offline.smallest import Point3, check, search
from kvreplay.offline.sources import (
    ModelRequest,
    block_requests_from_models,
    block_requests_from_trace,
    interleave,
    model_requests,
    snapshot_requests,
)
from kvreplay.offline.traces import (
    MOONCAKE_BLOCK_TOKENS,
    BlockTrace,
    is_block_trace,
    load_block_trace,
)
from kvreplay.workload.importers import reject_csv
from kvreplay.workload.sessions import Sessions, load_sessions, sessions_path

__all__ = ["SimulateOptions", "load_requests", "simulate"]

GIB = 1 << 30


@dataclass(frozen=True, slots=True, kw_only=True)
class SimulateOptions:
    """What ``simulate`` was asked for (see ``commands/simulate.py`` for the flags).

    Attributes:
        source: Trace, workload or plan.json path.
        model: ``"radix"`` or ``"entries"``; None = radix for traces, else entries.
        capacities: Explicit capacities in ``capacity_unit``, or None for
            about ``points`` geometric ones.
        capacity_unit: ``"units"`` (blocks or entries), or for the radix model
            ``"tokens"`` or ``"gib"`` (rounded down to whole blocks).
        points: Number of geometric capacities when none are given.
        block_size: Radix block size (tokens); None = the simulator's (16).
        trace_block_tokens: Tokens per trace block (512 for Mooncake).
        limit: Use only the first ``limit`` trace requests.
        snapshot_points: Entries snapshot points.
        recency: Entries recency, ``"use"`` or ``"offer"``.
        max_entry_bytes: Entries per-snapshot cap (bytes); over-cap snapshots
            are truncated to it.
        refuse_over_bytes: Refuse over-cap snapshots instead (``--refuse-over-bytes``).
        bytes_per_token: KV bytes per token (bytes).
        host: Makes a host tier (radix), or None.
        phases: Phase shorthands for a workload (serial order).
        outputs: Insert the simulator's outputs (radix).
        output_tokens: The simulator's ``output_tokens``.
        max_output_tokens: The simulator's ``max_output_tokens``.
        interleave_path: A second workload/trace mixed in.
        interleave_every: Foreign requests after every ``k``.
        interleave_burst: Foreign requests per gap (``--burst``; default 1).
        restore_s_per_token: Restore cost for ``loop_s`` (s per token); None =
            the simulator's default (2e-5).
        today: A capacity always reported (the one run today), or None.
        prefill: Prefill cost model, or None.
        share: Target share of the best hit ratio.
        metric: ``"tokens"`` or ``"requests"``.
        sessions: Conversations in flight (a workload with a sessions side file), or
            None for the workload's own order.
        think_time: With ``sessions``: think time before every later turn (s); None =
            the side file's.
        service_time: With ``sessions``: time from a turn's send to its last byte (s).
    """

    source: str
    model: str | None = None
    capacities: Sequence[float] | None = None
    capacity_unit: str = "units"
    points: int = 40
    block_size: int | None = None
    trace_block_tokens: int = MOONCAKE_BLOCK_TOKENS
    limit: int | None = None
    snapshot_points: tuple[str, ...] = ("system", "messages")
    recency: str = "use"
    max_entry_bytes: int | None = None
    refuse_over_bytes: bool = False
    bytes_per_token: int | None = None
    host: Callable | None = None
    phases: Sequence[str] = field(default_factory=tuple)
    outputs: bool = True
    output_tokens: int | None = None
    max_output_tokens: int | None = None
    interleave_path: str | None = None
    interleave_every: int = 1
    interleave_burst: int = 1
    restore_s_per_token: float | None = None
    today: int | None = None
    prefill: PrefillModel | None = None
    share: float = 0.95
    metric: str = "tokens"
    sessions: int | None = None
    think_time: float | None = None
    service_time: float = 0.0


class _RenderOptions(TypedDict):
    """``model_requests``' rendering keywords, as ``load_requests`` passes them."""

    outputs: bool
    output_tokens: int | None
    max_output_tokens: int | None


def _is_plan(path: Path) -> bool:
    if not path.is_file() or path.suffix != ".json":
        return False
    import orjson

    try:
        data = orjson.loads(path.read_bytes())
    except orjson.JSONDecodeError:
        return False
    return isinstance(data, dict) and "plan_sha256" in data


def load_requests(path: str, opts: SimulateOptions) -> tuple[str, BlockTrace | list[ModelRequest]]:
    """Load one source as a trace or as rendered requests in send order.

    Returns:
        ``("trace", BlockTrace)``, or ``("workload" | "plan", [ModelRequest])``.

    Raises:
        WorkloadError: unreadable or invalid source.
        ConfigError: bad phases or plan.
    """
    from kvreplay.plan import build_plan, parse_phase
    from kvreplay.rundir import load_plan_json
    from kvreplay.workload import load_workload

    p = Path(path)
    if p.is_file() and p.suffix.lower() == ".csv":
        reject_csv(p.read_bytes()[:65536], p)
    if is_block_trace(p):
        return "trace", load_block_trace(p, block_tokens=opts.trace_block_tokens, limit=opts.limit)
    kw: _RenderOptions = {
        "outputs": opts.outputs,
        "output_tokens": opts.output_tokens,
        "max_output_tokens": opts.max_output_tokens,
    }
    if _is_plan(p):
        plan, _run = load_plan_json(p)
        wl = load_workload(plan.workload_path)
        plan, _run = load_plan_json(p, wl)
        kind = "plan"
    else:
        wl = load_workload(p)
        if not opts.phases:
            return "workload", model_requests(wl, _sessions(p, len(wl), opts)[1], **kw)
        if opts.sessions is not None:
            raise ConfigError("conversations in flight order a whole workload; give no --phase", field="sessions")
        plan = build_plan(wl, [parse_phase(s) for s in opts.phases])
        kind = "workload"
    order, epochs, epoch = [], [], 0
    for i, ph in enumerate(plan.phases):
        if i and ph.spec.reset:
            epoch += 1
        for bi, _rep in ph.sequence:
            order.append(bi)
            epochs.append(epoch)
    n_main = len(wl)
    reqs = model_requests(plan.bind(wl), order, epochs=epochs, **kw)
    # bodies of a phase's `interleave` workload are foreign: they take space, uncounted
    return kind, [
        r if bi < n_main else ModelRequest(r.tokens, r.output, r.system_end, r.messages_end, False, r.epoch)
        for r, bi in zip(reqs, order, strict=True)
    ]


def _sessions(p: Path, n: int, opts: SimulateOptions) -> tuple[Sessions | None, list[int] | None]:
    """A workload's sessions and, with ``opts.sessions``, the order its conversations in flight send in.

    Raises:
        ConfigError: ``opts.sessions`` for a workload without a sessions side file.
        WorkloadError: a bad side file.
    """
    ss = load_sessions(p, n)
    if opts.sessions is None:
        return ss, None
    if ss is None:
        raise ConfigError(f"{p} has no sessions side file ({sessions_path(p).name})", field="sessions")
    return ss, session_order(ss, opts.sessions, think_time_s=opts.think_time, service_time_s=opts.service_time)


def _sample(cur_max: int, opts: SimulateOptions, unit_tokens: int | None, bpt: int) -> list[int]:
    """Capacities in model units: the explicit ones converted, or geometric ones."""
    today = {opts.today} if opts.today else set()
    if not opts.capacities:
        return sorted(set(default_capacities(max(cur_max, 1), points=opts.points)) | today)
    if opts.capacity_unit == "units":
        units = [int(c) for c in opts.capacities]
    elif unit_tokens is None:
        raise ConfigError("the entries model counts whole entries only", field="capacity-unit")
    elif opts.capacity_unit == "tokens":
        units = [int(c // unit_tokens) for c in opts.capacities]
    elif opts.capacity_unit == "gib":
        units = [int(Fraction(str(c)) * GIB // (unit_tokens * bpt)) for c in opts.capacities]
    else:
        raise ConfigError(f"unknown unit {opts.capacity_unit!r}", field="capacity-unit")
    return sorted({u for u in units if u >= 1} | today)


def simulate(opts: SimulateOptions) -> dict:
    """Compute the curve and the report for ``opts``.

    Returns:
        The JSON report: ``curve`` (rows with ``capacity``,
        ``hit_ratio_requests``, ``hit_ratio_tokens``, ``prefill_s_saved``, ...),
        ``recommended``, and the description of source, model and method.

    Raises:
        ConfigError: an option that does not fit the source (e.g. the entries
            model on a trace, or interleaving a trace into a workload).
        WorkloadError: an unreadable source.
    """
    from kvreplay.sim.cache_entries import DEFAULT_BYTES_PER_TOKEN

    bpt = opts.bytes_per_token or DEFAULT_BYTES_PER_TOKEN
    kind, data = load_requests(opts.source, opts)
    model = opts.model or ("radix" if kind == "trace" else "entries")
    foreign = None
    if opts.interleave_path:
        fkind, foreign = load_requests(opts.interleave_path, opts)
        if (fkind == "trace") != (kind == "trace"):
            raise ConfigError(
                "interleave a trace with a trace, or a workload with a workload", field="interleave"
            )
    info: dict = {"source": opts.source, "kind": kind, "model": model}
    if opts.interleave_path:
        info["interleave"] = {
            "source": opts.interleave_path,
            "every": opts.interleave_every,
            "burst": opts.interleave_burst,
        }
    curve: Curve | None = None
    points: list[Point3]
    # `run` simulates capacities with the simulator's class (the per-capacity search and
    # the boundary check); `run_method` says how, for the check's record
    run: Callable[[list[int]], list[Point3]]
    run_method = "the simulator's cache class, one run per capacity"
    if kind == "trace":
        if model != "radix":
            raise ConfigError(
                "a block trace has no tokens: only --model radix applies", field="model"
            )
        if opts.host is not None:
            raise ConfigError(
                "the host tier needs token prompts; not available for traces", field="host-rows"
            )
        assert isinstance(data, BlockTrace)
        br = block_requests_from_trace(data, foreign, opts.interleave_every, opts.interleave_burst)  # type: ignore[arg-type]
        curve = br.curve()
        trace_curve = curve

        def run(cs: list[int]) -> list[Point3]:
            return [(c, *trace_curve.at(c)) for c in cs]

        run_method = "the one-pass curve (a block trace has no token prompts to re-simulate)"
        info.update(method="one-pass", unit="block", unit_tokens=br.block_tokens)
    else:
        reqs = list(data)  # type: ignore[arg-type]
        if foreign is not None:
            reqs = interleave(reqs, list(foreign), opts.interleave_every, opts.interleave_burst)  # type: ignore[arg-type]
        if model == "radix":
            B = opts.block_size or 16
            br = block_requests_from_models(reqs, B)

            def run(cs: list[int]) -> list[Point3]:
                pts = brute_radix(reqs, cs, block_size=B, host=opts.host)
                return [(p.capacity, p.hit_requests, p.hit_tokens) for p in pts]

            def each(cs: list[int]) -> list[list[int]]:
                out: list[list[int]] = []
                brute_radix(reqs, cs, block_size=B, host=opts.host, per_request=out)
                return out

            info.update(unit="block", unit_tokens=B)
            if opts.host is None:
                curve = br.curve()
                info["method"] = "one-pass"
            else:
                universe = int(len(set(br.blocks.tolist())))
                caps = _sample(universe, opts, B, bpt)
                pts = brute_radix(reqs, caps, block_size=B, host=opts.host)
                points = [(p.capacity, p.hit_requests, p.hit_tokens) for p in pts]
                info["method"] = "per-capacity"
                info["host_hit_tokens"] = {str(p.capacity): p.host_hit_tokens for p in pts}
        elif model == "entries":
            info.update(
                unit="entry",
                unit_tokens=None,
                recency=opts.recency,
                snapshot_points=list(opts.snapshot_points),
            )
            max_tok = None if opts.max_entry_bytes is None else opts.max_entry_bytes // bpt
            snaps = snapshot_requests(reqs, opts.snapshot_points)
            largest = max(
                (min(o, max_tok) if max_tok is not None else o for s in snaps for o in s.offsets),
                default=0,
            )
            info["entry_bytes"] = entry_bytes(opts.max_entry_bytes, largest, bpt)
            info["entry_bytes_source"] = (
                "the per-entry cap" if opts.max_entry_bytes is not None
                else f"the largest snapshot ({largest} tokens) x {bpt} B/token"
            )

            def run(cs: list[int]) -> list[Point3]:
                pts = brute_entries(
                    reqs,
                    cs,
                    points=opts.snapshot_points,
                    recency=opts.recency,
                    max_entry_bytes=opts.max_entry_bytes,
                    refuse_over_bytes=opts.refuse_over_bytes,
                    bytes_per_token=bpt,
                )
                return [(p.capacity, p.hit_requests, p.hit_tokens) for p in pts]

            def each(cs: list[int]) -> list[list[int]]:
                out: list[list[int]] = []
                brute_entries(reqs, cs, points=opts.snapshot_points, recency=opts.recency,
                              max_entry_bytes=opts.max_entry_bytes, refuse_over_bytes=opts.refuse_over_bytes,
                              bytes_per_token=bpt, per_request=out)
                return out

            if opts.recency == "offer":
                curve = entries_curve(
                    snaps, max_entry_tokens=max_tok, truncate=not opts.refuse_over_bytes
                )
                info["method"] = "one-pass"
            else:
                universe = max(
                    entries_curve(
                        snaps, max_entry_tokens=max_tok, truncate=not opts.refuse_over_bytes
                    ).max_capacity,
                    1,
                )
                distinct = len({(s.epoch, s.tokens[:o]) for s in snaps for o in s.offsets if o})
                caps = _sample(max(universe, distinct), opts, None, bpt)
                if not opts.capacities:
                    caps = sorted(set(caps) | {distinct})
                points = run(caps)
                info["method"] = "per-capacity"
        else:
            raise ConfigError(f"unknown model {model!r}; radix or entries", field="model")
        n_req = sum(1 for r in reqs if r.counted)
        n_tok = sum(len(r.tokens) for r in reqs if r.counted)
    if curve is not None:
        caps = _sample(curve.max_capacity, opts, info.get("unit_tokens"), bpt)
        rec_cap = curve.smallest_capacity(opts.share, metric=opts.metric)
        if rec_cap > 0 and not opts.capacities:
            caps = sorted(set(caps) | {rec_cap, curve.max_capacity})
        points = [(c, *curve.at(c)) for c in caps]
        n_req, n_tok = curve.requests, curve.prompt_tokens
        info["max_useful_capacity"] = curve.max_capacity
    unit_tokens = info.get("unit_tokens")
    answer: Point3 | None
    if curve is None:
        # not a stack algorithm: simulate every capacity between the samples around the turn
        answer, best, _filled = search(points, run, share=opts.share, metric=opts.metric)
        if answer is not None and not opts.capacities and answer[0] not in {p[0] for p in points}:
            points = sorted([*points, answer])
    else:
        # exact on the full curve, not only among the sampled rows
        best_arr = curve.hit_tokens if opts.metric == "tokens" else curve.hit_requests
        best = int(best_arr[-1])
        answer = (rec_cap, *curve.at(rec_cap))
    rows = curve_rows(
        points,
        requests=n_req,
        prompt_tokens=n_tok,
        prefill=opts.prefill,
        capacity_tokens=unit_tokens,
        bytes_per_token=bpt,
    )
    rec = None
    if answer is not None:
        total = n_tok if opts.metric == "tokens" else n_req
        rec_row = curve_rows(
            [answer],
            requests=n_req,
            prompt_tokens=n_tok,
            prefill=opts.prefill,
            capacity_tokens=unit_tokens,
            bytes_per_token=bpt,
        )[0]
        rec = {
            **rec_row,
            "share": opts.share,
            "metric": opts.metric,
            "best_hit_ratio": best / total if total else 0.0,
            "check": None
            if answer[0] < 1
            else check(
                answer[0],
                run,
                best=best,
                share=opts.share,
                metric=opts.metric,
                method=run_method,
            ),
        }
    cold = None
    if opts.prefill is not None:
        cold = n_req * opts.prefill.a_s + n_tok / opts.prefill.rate_tokens_per_s
    sized = [*rows, rec] if rec else rows
    add_sizing(
        sized,
        unit=info.get("unit", "entry"),
        requests=n_req,
        prompt_tokens=n_tok,
        prefill=opts.prefill,
        entry_size=info.get("entry_bytes"),
        **(
            {"restore_s_per_token": opts.restore_s_per_token}
            if opts.restore_s_per_token is not None
            else {}
        ),
    )
    sessions = None
    if kind == "workload" and not opts.phases and not opts.interleave_path:
        ss, order = _sessions(Path(opts.source), len(reqs), opts)
        if ss is not None:
            caps = sorted({c for c in ((rec or {}).get("capacity", 0), rows[-1]["capacity"] if rows else 0) if c >= 1})
            turns = [ss.turns[b].turn for b in (order if order is not None else range(len(reqs)))]
            sizes = [len(r.tokens) for r in reqs]
            sessions = {
                "sessions": len(ss),
                "in_flight": opts.sessions,
                "order": "workload" if opts.sessions is None else f"{opts.sessions} conversations in flight",
                "think_time_s": None if opts.sessions is None else (
                    "per turn (side file)" if opts.think_time is None else opts.think_time),
                "service_time_s": None if opts.sessions is None else opts.service_time,
                "by_turn": [{"capacity": c, "rows": by_turn(turns, sizes, hits)}
                            for c, hits in zip(caps, each(caps), strict=True)],
            }
    if sessions is not None:
        info["sessions"] = sessions
    return {
        **info,
        "requests": n_req,
        "prompt_tokens": n_tok,
        "bytes_per_token": bpt,
        "prefill": None if opts.prefill is None else opts.prefill.to_json(),
        "prefill_s_cold": cold,
        "curve": rows,
        "recommended": rec,
    }
