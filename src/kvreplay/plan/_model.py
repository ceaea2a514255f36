"""The frozen plan built from a workload and phase specs: ``Phase``, ``Plan``, ``build_plan`` (package docstring)."""

from __future__ import annotations

import hashlib
import math
import random
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from kvreplay.errors import ConfigError
from kvreplay.plan._spec import (
    CHECK_FAIL_MODES,
    MAX_POSITIONS,
    PLAN_FORMAT,
    Interleave,
    Offsets,
    Pairs,
    PhaseSpec,
    SequenceView,
    _check_unique,
    json_chunks,
    load_plan_toml,
    parse_phase,
)
from kvreplay.workload import Workload
from kvreplay.workload.index import JoinedBodies, hex_digests

__all__ = [
    "CHECK_FAIL_MODES",
    "PLAN_FORMAT",
    "ExtraWorkload",
    "Interleave",
    "Offsets",
    "Phase",
    "Pairs",
    "PhaseSpec",
    "Plan",
    "SequenceView",
    "build_plan",
    "by_prefix",
    "gamma_offsets",
    "interleave_sequence",
    "json_chunks",
    "load_plan_toml",
    "parse_phase",
]

@dataclass(frozen=True, slots=True)
class Phase:
    """A phase with its frozen request sequence.

    Attributes:
        spec: What the user asked for.
        sequence: ``(body_index, repetition)`` per position, in send order.
        intended_ns: Open loop only: intended send time of each position (ns
            after the phase start), frozen before the first request; with sessions,
            of each session's first turn (one per session start, in order).
        turns: Conversation workloads only: ``(session id, turn index)`` per position;
            each session's turns are contiguous and in order, a session starting at
            turn 0 (the sequence is the order of session starts). None without sessions.
    """

    spec: PhaseSpec
    sequence: Sequence[tuple[int, int]]
    intended_ns: Sequence[int] | None = None
    turns: tuple[tuple[str, int], ...] | None = None

    @property
    def name(self) -> str:
        """The phase name."""
        return self.spec.name

    def session_spans(self) -> tuple[tuple[int, int], ...]:
        """``(first position, number of turns)`` of each session run, in send order; () without sessions."""
        if self.turns is None:
            return ()
        starts = [pos for pos, (_, k) in enumerate(self.turns) if k == 0]
        ends = [*starts[1:], len(self.turns)]
        return tuple((a, b - a) for a, b in zip(starts, ends, strict=True))


@dataclass(frozen=True, slots=True)
class ExtraWorkload:
    """A workload interleaved into some phase, indexed after the main workload.

    Attributes:
        path: Where it was loaded from (as written in the phase's ``interleave``).
        sha256: Its digest (``Workload.sha256``).
        body_sha256: Its bodies' SHA-256, in its order.
        first_index: Plan body index of its first body (= main bodies + earlier extras).
        workload: The loaded workload (not part of plan.json), or None.
    """

    path: str
    sha256: str
    body_sha256: Sequence[str]
    first_index: int
    workload: Workload | None = None

    def to_json(self) -> dict[str, Any]:
        """Its entry in plan.json's ``interleave_workloads``."""
        return {"path": self.path, "n_bodies": len(self.body_sha256), "sha256": self.sha256,
                "first_index": self.first_index}


@dataclass(frozen=True, slots=True)
class Plan:
    """A frozen plan: workload identity and the expanded phases.

    Attributes:
        workload_path: Where the workload was loaded from.
        workload_sha256: The workload's digest (see ``Workload.sha256``).
        body_sha256: Every body's SHA-256, by index.
        phases: The phases in run order.
        extra: Interleaved workloads (their bodies follow the main ones); empty
            for a plan without ``interleave``.
        sessions: ``{"sha256", "n_sessions"}`` of the workload's sessions side file, or
            None without one (then nothing about sessions enters the plan or its hash).
    """

    workload_path: str
    workload_sha256: str
    body_sha256: Sequence[str]
    phases: tuple[Phase, ...]
    extra: tuple[ExtraWorkload, ...] = ()
    sessions: dict[str, Any] | None = None

    def sha_of(self, body_index: int) -> str:
        """SHA-256 of a plan body index (main workload, then interleaved ones)."""
        n = len(self.body_sha256)
        if body_index < n:
            return self.body_sha256[body_index]
        for ex in self.extra:
            if ex.first_index <= body_index < ex.first_index + len(ex.body_sha256):
                return ex.body_sha256[body_index - ex.first_index]
        raise IndexError(f"body index {body_index} is outside the plan's workloads")

    def bind(self, workload: Workload) -> Workload:
        """The workload the runner indexes: ``workload`` itself, or with the interleaved bodies appended.

        Raises:
            ConfigError: an interleaved workload was not loaded with the plan.
        """
        if not self.extra:
            return workload
        parts = [workload.bodies]
        for ex in self.extra:
            if ex.workload is None:
                raise ConfigError(f"interleaved workload {ex.path} is not loaded", field="interleave")
            parts.append(ex.workload.bodies)
        return Workload(workload.path, JoinedBodies(parts), workload.sha256, workload.sessions)

    def content(self, *, lazy: bool = False) -> dict[str, Any]:
        """The hashed content of plan.json (everything but ``plan_sha256`` and ``run``).

        ``lazy``: each phase's ``sequence`` is a ``SequenceView`` (entries built on
        access, none held; ``rundir.write_plan_json`` streams it) instead of a list.
        """
        sha = self.body_sha256 if not self.extra else [self.sha_of(i) for i in range(self._n_all())]
        if lazy:
            out = self.content_head()
            for ph_json, ph in zip(out["phases"], self.phases, strict=True):
                # a conversation phase's items carry session/turn: listed whole (conversations are small)
                ph_json["sequence"] = SequenceView(ph, sha) if ph.turns is None else _session_items(ph, sha)
            return out
        out = {
            "format": PLAN_FORMAT,
            "workload": {
                "path": self.workload_path,
                "n_bodies": len(self.body_sha256),
                "sha256": self.workload_sha256,
                **({"sessions": self.sessions} if self.sessions is not None else {}),
            },
            "phases": [
                {
                    **ph.spec.to_json(),
                    "sequence": [
                        {
                            "position": pos,
                            "body_index": bi,
                            "body_sha256": sha[bi],
                            "repetition": rep,
                            **({"intended_ns": ph.intended_ns[pos]} if ph.intended_ns is not None else {}),
                        }
                        for pos, (bi, rep) in enumerate(ph.sequence)
                    ] if ph.turns is None else _session_items(ph, sha),
                }
                for ph in self.phases
            ],
        }
        if self.extra:
            out["interleave_workloads"] = [ex.to_json() for ex in self.extra]
        return out

    def _n_all(self) -> int:
        return len(self.body_sha256) + sum(len(ex.body_sha256) for ex in self.extra)

    def content_head(self) -> dict[str, Any]:
        """``content()`` with every phase's ``sequence`` empty (what ``SequenceView`` fills in)."""
        wl = {"path": self.workload_path, "n_bodies": len(self.body_sha256), "sha256": self.workload_sha256,
              **({"sessions": self.sessions} if self.sessions is not None else {})}
        out: dict[str, Any] = {"format": PLAN_FORMAT, "workload": wl,
                               "phases": [{**ph.spec.to_json(), "sequence": []} for ph in self.phases]}
        if self.extra:
            out["interleave_workloads"] = [ex.to_json() for ex in self.extra]
        return out

    @property
    def sha256(self) -> str:
        """SHA-256 of the canonical JSON of ``content()`` (sorted keys), hashed entry by entry (issue 32)."""
        h = hashlib.sha256()
        for chunk in json_chunks(self.content(lazy=True), b'"sequence":[]', b",", b"", orjson.OPT_SORT_KEYS,
                                 lambda d: orjson.dumps(d, option=orjson.OPT_SORT_KEYS)):
            h.update(chunk)
        return h.hexdigest()

    @property
    def total_requests(self) -> int:
        """Requests in all phases."""
        return sum(len(p.sequence) for p in self.phases)

    def to_json(self, run: dict[str, Any], *, lazy: bool = False) -> dict[str, Any]:
        """plan.json: content, its hash, and the run block (target, backend, version, ...).

        ``lazy`` (a run's plan.json, issue 32): its sequences are ``SequenceView``s
        (built on access, pickled as lists; orjson refuses them:
        ``rundir.write_plan_json`` streams them into the file).
        """
        return {**self.content(lazy=lazy), "plan_sha256": self.sha256, "run": run}


def _session_items(ph: Phase, sha: Any) -> list[dict[str, Any]]:
    """plan.json sequence items of a session phase: ``session`` and ``turn`` on each, ``intended_ns`` on first turns."""
    out = []
    starts = -1
    for pos, ((bi, rep), (sid, k)) in enumerate(zip(ph.sequence, ph.turns or (), strict=True)):
        starts += k == 0
        item = {"position": pos, "body_index": bi, "body_sha256": sha[bi], "repetition": rep, "session": sid,
                "turn": k}
        if ph.intended_ns is not None and k == 0:
            item["intended_ns"] = ph.intended_ns[starts]
        out.append(item)
    return out


def _select(spec: PhaseSpec, n: int, noun: str = "body") -> Sequence[int]:
    # a contiguous selection stays a range: nothing per body (issue 32)
    sel = spec.select
    if isinstance(sel, tuple):
        bad = [i for i in sel if i >= n]
        if bad:
            raise ConfigError(
                f"phase {spec.name!r} selects {noun} {bad[0]} but the workload has {n}", field="select"
            )
        return list(sel)
    if sel == "all":
        return range(n)
    kind, count = sel.split(":")
    if int(count) < 1:
        raise ConfigError(f"phase {spec.name!r} selects {sel}: nothing to send (N >= 1)", field="select")
    k = int(count)
    why = past_the_workload(kind, k, n, noun)
    if why is not None:
        raise ConfigError(f"phase {spec.name!r} {why}", field="select")
    return range(k) if kind == "first" else range(n - k, n)


def past_the_workload(kind: str, k: int, n: int, noun: str = "body") -> str | None:
    """Why ``firstK`` / ``lastK`` (``kind`` ``first`` or ``last``) cannot select from ``n`` items; None when it can.

    A selection past the workload is refused, never cut to it (a run's phase, ab's and a
    sweep's ``--select``): ``selects first:100 but the workload has 52 bodies (first:52 or
    all sends every one)``. ``noun``: ``body`` or ``session``.
    """
    if k <= n:
        return None
    many = {"body": "bodies"}.get(noun, noun + "s")
    return f"selects {kind}:{k} but the workload has {n} {noun if n == 1 else many} ({kind}:{n} or all sends every one)"


def _shas(workload: Workload) -> Sequence[str]:
    """Every body's SHA-256, in order, from the workload's index (no body is read; 32 bytes a body)."""
    return hex_digests(workload.bodies)


def by_prefix(chains: list[tuple[bytes, ...]]) -> list[int]:
    """Positions ``0..n-1`` reordered so that bodies sharing a prefix chain are contiguous.

    Each link of a chain stands for the whole prefix up to it, so sorting by the
    first-appearance rank of every link, depth by depth, groups bodies by their
    first unit, then inside each group by their second, and so on; equal keys
    keep their input order (the sort is stable).

    Args:
        chains: Links of each body, in selection order.

    Returns:
        The new order, as positions into ``chains``.
    """
    first_seen: dict[bytes, int] = {}
    for links in chains:
        for link in links:
            first_seen.setdefault(link, len(first_seen))
    return sorted(range(len(chains)), key=lambda i: tuple(first_seen[link] for link in chains[i]))


def _order(spec: PhaseSpec, idx: Sequence[int], workload: Workload | None = None) -> Sequence[int]:
    if spec.order == "forward":
        return idx
    if spec.order == "reverse":
        return idx[::-1]
    if spec.order == "by-prefix":
        from kvreplay.workload import prefix_chain

        if workload is None:
            raise ConfigError("by-prefix needs the workload's bodies", field="order")
        chains = [prefix_chain(workload.bodies[i].raw).links for i in idx]
        return [idx[j] for j in by_prefix(chains)]
    seed = int(spec.order.split(":")[1])
    out = list(idx)
    random.Random(seed).shuffle(out)
    return out


def _intended(spec: PhaseSpec, n: int) -> Offsets | None:
    """Intended send offsets (ns after phase start) of an open-loop phase, or None."""
    if spec.arrival is None:
        return None
    if spec.arrival == "constant":
        gap = 1e9 / spec.rate  # type: ignore[operator]
        return Offsets(round(i * gap) for i in range(n))
    if spec.arrival.startswith("poisson:"):
        rng = random.Random(int(spec.arrival.split(":")[1]))
        t, out = 0.0, array("q")
        for _ in range(n):
            out.append(round(t))
            t += rng.expovariate(spec.rate) * 1e9  # type: ignore[arg-type]
        return Offsets(out)
    if spec.arrival.startswith("gamma:"):
        return Offsets(gamma_offsets(spec.rate, float(spec.arrival.split(":")[1]),  # type: ignore[arg-type]
                                     int(spec.arrival.split(":")[2]), n))
    path = Path(spec.arrival.split(":", 1)[1])
    try:
        offsets = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read trace arrivals: {exc}", path=path, field="arrival") from exc
    if not isinstance(offsets, list) or len(offsets) < n or not all(isinstance(x, (int, float)) for x in offsets):
        raise ConfigError(f"needs a JSON list of at least {n} arrival offsets (ms)", path=path, field="arrival")
    base = offsets[0]
    out = array("q")
    for i, x in enumerate(offsets[:n]):
        ns = (x - base) * 1e6 * spec.time_scale
        if not math.isfinite(ns) or not 0 <= ns <= MAX_ARRIVAL_NS:
            raise ConfigError(f"offset {i} ({x!r} ms) is not a finite offset from the first within "
                              f"{MAX_ARRIVAL_NS / 1e9 / 86400:.0f} days", path=path, field=f"arrival[{i}]")
        out.append(round(ns))
    return Offsets(out)


def gamma_offsets(rate: float, cv: float, seed: int, n: int) -> array:
    """``n`` arrival offsets (ns from the first, which is 0) with gamma-distributed gaps.

    Each gap is drawn from a gamma distribution of shape ``k = 1 / cv**2`` and scale
    ``1 / (rate * k)`` s: mean ``1 / rate`` s, standard deviation ``cv / rate`` s
    (coefficient of variation ``cv``; ``cv = 1`` is the exponential gap of a Poisson
    process, ``cv > 1`` burstier). The burstiness of vLLM's ``bench serve
    --burstiness B`` is ``k``, i.e. ``cv = 1 / sqrt(B)``. Seeded by ``seed``
    (``random.Random``), so a plan rebuilt from the same spec has the same offsets.
    """
    rng = random.Random(seed)
    k = 1.0 / (cv * cv)
    theta_ns = 1e9 / (rate * k)
    t, out = 0.0, array("q")
    for _ in range(n):
        out.append(round(t))
        t += rng.gammavariate(k, theta_ns)
    return out


MAX_ARRIVAL_NS = 365 * 86400 * 10**9
"""Latest arrival a trace may schedule (ns from its first; one year): far beyond any run, well inside int64."""


def interleave_sequence(seq: Sequence[tuple[int, int]], first_index: int, n_extra: int,
                        every: int, burst: int = 1) -> tuple[tuple[int, int], ...]:
    """Insert ``burst`` interleaved bodies after every ``every`` positions of ``seq``.

    The interleaved bodies are taken in their order, cycling; each gets plan
    index ``first_index + j`` and, as its repetition, the number of completed
    cycles through the interleaved workload.

    Args:
        seq: ``(body_index, repetition)`` per position.
        first_index: Plan index of the interleaved workload's first body.
        n_extra: Bodies in the interleaved workload (>= 1).
        every: ``k`` >= 1.
        burst: Bodies per gap (>= 1).

    Returns:
        The mixed sequence.
    """
    out: list[tuple[int, int]] = []
    j = 0
    for pos, item in enumerate(seq, start=1):
        out.append(item)
        if pos % every == 0:
            for _ in range(burst):
                out.append((first_index + j % n_extra, j // n_extra))
                j += 1
    return tuple(out)


def build_plan(workload: Workload, specs: list[PhaseSpec],
               interleave_workloads: dict[str, Workload] | None = None) -> Plan:
    """Expand phase specs into the frozen request sequence.

    Selection is applied to workload order, then the order, then repeats (each
    repetition sends the same ordered selection), then ``interleave``.

    Args:
        workload: The main workload.
        specs: The phases.
        interleave_workloads: Already loaded interleaved workloads by the path
            written in ``interleave``; others are loaded here.

    Raises:
        ConfigError: no phases, duplicate names, or a selection outside the workload.
        WorkloadError: an interleaved workload cannot be loaded or is empty.
    """
    if not specs:
        raise ConfigError("no phases: give --phase or --plan", field="--phase")
    _check_unique(list(specs), where={})
    n = len(workload)
    extras: dict[str, ExtraWorkload] = {}
    next_index = n
    phases = []
    total = 0
    for spec in specs:
        if workload.sessions is not None:
            phases.append(_session_phase(spec, workload, total))
            total += len(phases[-1].sequence)
            continue
        selected = _select(spec, n)
        if len(selected) * spec.repeats + total > MAX_POSITIONS:
            raise ConfigError(f"phase {spec.name}: {len(selected)} bodies x {spec.repeats} repeats takes the plan "
                              f"over {MAX_POSITIONS} positions", field=f"phase {spec.name}.repeats")
        total += len(selected) * spec.repeats
        ordered = _order(spec, selected, workload)
        seq: Sequence[tuple[int, int]] = Pairs.product(ordered, spec.repeats)
        if spec.interleave is not None:
            path = spec.interleave.workload
            if path not in extras:
                extra_wl = (interleave_workloads or {}).get(path)
                if extra_wl is None:
                    from kvreplay.workload import load_workload

                    extra_wl = load_workload(path)
                if not len(extra_wl):
                    raise ConfigError(f"interleaved workload {path} is empty", field="interleave")
                extras[path] = ExtraWorkload(path, extra_wl.sha256, _shas(extra_wl), next_index, extra_wl)
                next_index += len(extra_wl)
            ex = extras[path]
            seq = interleave_sequence(seq, ex.first_index, len(ex.body_sha256), spec.interleave.every,
                                      spec.interleave.burst)
        phases.append(Phase(spec, seq, _intended(spec, len(seq))))
    return Plan(
        workload_path=workload.path,
        workload_sha256=workload.sha256,
        body_sha256=_shas(workload),
        phases=tuple(phases),
        extra=tuple(extras.values()),
        sessions=None if workload.sessions is None else _sessions_json(workload),
    )


def _sessions_json(workload: Workload) -> dict[str, Any]:
    ss = workload.sessions
    assert ss is not None
    return {"sha256": ss.sha256, "n_sessions": len(ss)}


def _session_phase(spec: PhaseSpec, workload: Workload, total: int) -> Phase:
    """A phase of a conversation workload: selection, order and repeats count sessions.

    ``select`` (``first:N``, ``last:N``, a list) picks sessions in the workload's session
    order; the order (forward, reverse, shuffle, by-prefix on each session's first turn)
    is the order of session starts; each session's turns follow each other in turn order.

    Raises:
        ConfigError: ``interleave`` (a foreign body would sit inside a conversation), or a
            plan over ``MAX_POSITIONS``.
    """
    ss = workload.sessions
    assert ss is not None
    if spec.interleave is not None:
        raise ConfigError(f"phase {spec.name!r}: interleave does not apply to a conversation workload "
                          "(its bodies would land inside sessions)", field="interleave")
    selected = _select(spec, len(ss), "session")
    firsts = [ss.bodies[ss.order[i]][0] for i in selected]
    by_first = {b: i for i, b in zip(selected, firsts, strict=True)}
    ordered = [by_first[b] for b in _order(spec, firsts, workload)]
    n_turns = sum(len(ss.bodies[ss.order[i]]) for i in ordered)
    if n_turns * spec.repeats + total > MAX_POSITIONS:
        raise ConfigError(f"phase {spec.name}: {n_turns} turns x {spec.repeats} repeats takes the plan "
                          f"over {MAX_POSITIONS} positions", field=f"phase {spec.name}.repeats")
    seq: list[tuple[int, int]] = []
    turns: list[tuple[str, int]] = []
    for rep in range(spec.repeats):
        for i in ordered:
            sid = ss.order[i]
            for k, bi in enumerate(ss.bodies[sid]):
                seq.append((bi, rep))
                turns.append((sid, k))
    return Phase(spec, tuple(seq), _intended(spec, len(ordered) * spec.repeats), tuple(turns))
