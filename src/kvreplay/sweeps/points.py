"""One sweep point: the phases its run sends, and its sweep.json entry read back from its run directory.

A point is an ordinary run directory (``DIR/points/NN-c4/`` or ``NN-r2.5``) whose plan
has, in order: ``prime`` (``--cache warm``: the measured bodies once, forward, C1,
label ``prime``, not comparable), ``warmup`` (``--warmup N``: the first N measured
bodies at the point's load, label ``warmup``, not comparable; their records are kept
and marked by that phase, and left out of every figure of the point) and the measured
phase named after the load (``c4``, ``r2.5``; label ``main``; with ``--cache cold``
``reset`` and ``drain`` set, so the cache is emptied after the warm-up and before it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvreplay.plan import PhaseSpec, past_the_workload
from kvreplay.rundir import open_run
from kvreplay.sweeps.cache import cache_evidence
from kvreplay.sweeps.goodput import goodput
from kvreplay.sweeps.loads import Slo, Until

__all__ = ["LATENCY_BLOCKS", "PointSpec", "load_label", "point_entry", "point_phases", "selection"]

LATENCY_BLOCKS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
"""The summary.json latency blocks a point entry carries (percentiles in measured ms)."""
_STATS = ("p50", "p90", "p99", "mean", "max")


def load_label(kind: str, load: float) -> str:
    """``c4`` for a concurrency of 4, ``r2.5`` for a rate of 2.5 requests/s (a phase name and a folder suffix)."""
    return f"c{int(load)}" if kind == "concurrency" else f"r{load:g}"


def selection(select: str | None, n_bodies: int) -> list[int]:
    """Body indices of ``--select`` (``firstN``, ``lastN``, ``all`` or None) in a workload of ``n_bodies``.

    Raises:
        ValueError: another selector, N < 1, or N past ``n_bodies``.
    """
    if select in (None, "all"):
        return list(range(n_bodies))
    assert select is not None
    for kind in ("first", "last"):
        if select.startswith(kind) and select[len(kind):].lstrip(":").isdigit():
            k = int(select[len(kind):].lstrip(":"))
            if k < 1:
                raise ValueError(f"{select!r}: N must be >= 1")
            why = past_the_workload(kind, k, n_bodies)  # refused, not cut to the workload (as a run's phase)
            if why is not None:
                raise ValueError(f"{select!r} {why}")
            return list(range(k)) if kind == "first" else list(range(n_bodies - k, n_bodies))
    raise ValueError(f"{select!r}: firstN, lastN or all")


@dataclass(frozen=True, slots=True, kw_only=True)
class PointSpec:
    """What one point sends.

    Attributes:
        kind: ``"concurrency"`` or ``"rate"``.
        load: Its concurrency or rate (requests/s).
        bodies: Body indices of the measured phase, in send order (the selection,
            cycled to ``--requests``).
        cache: ``cold``, ``warm`` or ``as-is``.
        warmup: Warm-up requests before the measured phase.
        arrival: Open loop: the plan arrival (``constant``, ``poisson:SEED``, ``gamma:CV:SEED``).
        max_in_flight: Open loop: requests in flight at most.
    """

    kind: str
    load: float
    bodies: tuple[int, ...]
    cache: str
    warmup: int = 0
    arrival: str | None = None
    max_in_flight: int = 1


def point_phases(p: PointSpec) -> list[PhaseSpec]:
    """The phases of a point's run (module docstring), in run order."""
    name = load_label(p.kind, p.load)
    if p.kind == "concurrency":
        load_kw: dict[str, Any] = {"concurrency": int(p.load)}
    else:
        load_kw = {"concurrency": p.max_in_flight, "arrival": p.arrival, "rate": float(p.load)}
    out = []
    if p.cache == "warm":
        unique = tuple(dict.fromkeys(p.bodies))
        out.append(PhaseSpec(name="prime", concurrency=1, select=unique, label="prime", comparable=False))
    if p.warmup:
        cycled = tuple(p.bodies[i % len(p.bodies)] for i in range(p.warmup))
        out.append(PhaseSpec(name="warmup", select=cycled, label="warmup", comparable=False, **load_kw))
    cold = p.cache == "cold"
    out.append(PhaseSpec(name=name, select=p.bodies, label="main", reset=cold, drain=cold, **load_kw))
    return out


def _stats(block: Any) -> dict[str, Any] | None:
    if not isinstance(block, dict):
        return None
    return {k: block.get(k) for k in _STATS}


def point_entry(run_dir: Path, base: Path, p: PointSpec, *, slos: Sequence[Slo], until: Sequence[Until],
                warm_min: float | None = None) -> dict[str, Any]:
    """The sweep.json ``points[]`` entry of a point, read from its run directory alone.

    Args:
        run_dir: The point's run directory.
        base: The sweep directory (``run_dir`` is written relative to it).
        p: The point.
        slos: ``--slo`` (goodput; none: every ok request counts).
        until: ``--until`` limits (``limit_broken`` names the first crossed).
        warm_min: ``--warm-min``.

    Returns:
        ``{kind: load, "run_dir", "phase", "warmup_phase", "prime_phase", "records", "ok",
        "wall_s", "throughput_rps", "output_tokens_per_s", "ttft_ms", "tpot_ms", "itl_ms",
        "e2e_ms", "goodput_rps", "slo_met", "slo_attainment", "cached_share", "cache",
        "aborted", "limit_broken"}``.

    Raises:
        FileNotFoundError: the run directory has no records (``rundir.open_run``).
    """
    run = open_run(run_dir)
    summary = run.summary
    name = load_label(p.kind, p.load)
    ph: dict[str, Any] = next((x for x in summary.get("phases") or [] if x.get("name") == name), {})
    gp = goodput(run.iter_records(), name, ph.get("wall_s"), slos)
    cache = cache_evidence(run_dir, summary, run.iter_records(), name, p.cache,
                           wave=int(p.load) if p.kind == "concurrency" else 1, warm_min=warm_min)
    entry: dict[str, Any] = {
        p.kind: int(p.load) if p.kind == "concurrency" else p.load,
        "run_dir": run_dir.relative_to(base).as_posix(),
        "phase": name,
        "warmup_phase": "warmup" if p.warmup else None,
        "prime_phase": "prime" if p.cache == "warm" else None,
        "records": gp.records,
        "ok": gp.ok,
        "wall_s": ph.get("wall_s"),
        "throughput_rps": ph.get("throughput_rps"),
        "output_tokens_per_s": ph.get("output_tokens_per_s"),
        **{b: _stats(ph.get(b)) for b in LATENCY_BLOCKS},
        "goodput_rps": gp.goodput_rps,
        "slo_met": gp.met,
        "slo_attainment": gp.slo_attainment,
        "cached_share": cache["evidence"]["cached_share"],
        "cache": cache,
        "aborted": (summary.get("aborted") or None),
    }
    entry["limit_broken"] = broken_limit(entry, ph, until)
    return entry


def broken_limit(entry: dict[str, Any], phase: dict[str, Any], until: Sequence[Until]) -> str | None:
    """The first ``--until`` limit the point crosses (``"ttft_ms:p99>2000 (2310.4)"``), ``aborted: ...``, or None."""
    if entry.get("aborted"):
        return f"aborted: {entry['aborted']}"
    for u in until:
        if u.metric == "slo_attainment":
            observed = entry.get("slo_attainment")
        else:
            block = phase.get(u.metric)
            observed = block.get(u.stat) if isinstance(block, dict) and u.stat else None
        if u.broken(observed):
            return f"{u} ({observed:.6g})"
    return None
