"""The frozen plan: phases, selection, order, repeats, concurrency.

A plan is expanded into the exact request sequence of every phase before the
first request and written to ``plan.json`` with a SHA-256 of its own content, so
that ``kvreplay run --from-plan plan.json`` sends the same bodies in the same
order.

Phase shorthand (command line)::

    NAME:ORDER:cN[:xREPEATS][:lastN|firstN][:rRATE[:poissonSEED]]
    prime:forward:c1   replay:reverse:c4   control:forward:c1:x2:last12
    load:forward:c4:r40            open loop, 40 requests/s, at most 4 in flight
    load:forward:c64:r20:poisson7  open loop, Poisson arrivals (seed 7)
    mix:shuffle:7:c4   (a seeded shuffle; the seed is the token after "shuffle")
    control:forward:c1:x2:last12:label=control:nocompare
                       a labelled control, never compared as a main arm
    grouped:by-prefix:c1           bodies grouped by shared prefix chain

TOML plan file (``--plan FILE``)::

    [[phase]]
    name = "prime"          # required, unique
    order = "forward"       # forward | reverse | shuffle:SEED | by-prefix
    concurrency = 1         # closed loop, >= 1
    repeats = 1
    select = "all"          # all | first:N | last:N | [i, j, ...]
    drain = false           # a drain must pass before the phase starts
    reset = false           # ask the server to empty its prefix cache first
    fresh = false           # require zeroed counters and an empty cache
    arrival = "constant"    # open loop: constant | poisson:SEED | trace:FILE (omit: closed loop)
    rate = 40.0             # requests/s for constant / poisson
    interleave = {workload = "other.jsonl", every = 4}   # one body of a second
                            # workload after every 4 of this phase (cycling)
    label = "control"       # what the phase is for (prime, main, control, ...); optional
    comparable = true       # false: a control; never pooled with or compared as a main arm

Top-level settings of a TOML plan besides ``[[phase]]`` (``workload``, ``target``,
``backend`` as before)::

    abort_on_malformed = false   # the first malformed response aborts the run
    on_check_fail = "skip"       # a failed drain/fresh check sends nothing for that
                                 # phase ("skip", the default) or only marks it invalid ("mark")
    [identity]                   # identity pins (kvreplay.runner.identity), e.g.
    models = ["llama-3-8b"]      # checked before the first request and at every counter read

``by-prefix`` keeps the selection but groups bodies that share a prefix chain
(``kvreplay.workload.prefix_chain``: system block, then each further message):
bodies are sorted by the first appearance of their chain links, depth by depth,
so every group of bodies with the same system block is contiguous, and inside it
every group with the same next message, ties in selection order. ``interleave``
is applied last (after order and repeats): it mixes unrelated traffic into the
phase, the bodies of the second workload taking indices after the main
workload's (``plan.json`` lists it under ``interleave_workloads``). Plans that use
neither write exactly the plan.json they did before these options existed.

Unknown keys and bad values raise ``ConfigError`` naming file, line and field.
"""

from __future__ import annotations

import hashlib
import random
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from kvreplay.errors import ConfigError
from kvreplay.workload import Body, Workload

__all__ = [
    "CHECK_FAIL_MODES",
    "PLAN_FORMAT",
    "ExtraWorkload",
    "Interleave",
    "Phase",
    "PhaseSpec",
    "Plan",
    "build_plan",
    "by_prefix",
    "interleave_sequence",
    "load_plan_json",
    "load_plan_toml",
    "parse_phase",
]

PLAN_FORMAT = "kvreplay-plan/1"
_ORDER_RE = re.compile(r"^(forward|reverse|shuffle:\d+|by-prefix)$")
_SELECT_RE = re.compile(r"^(all|first:\d+|last:\d+)$")
MAX_POSITIONS = 10_000_000
"""Most planned positions in one plan (and repeats of one phase); plan.json holds one entry each."""
MAX_CONCURRENCY = 100_000
"""Largest concurrency accepted; the open-file limit is checked against the plan's at run time."""
MIN_RATE, MAX_RATE = 1e-3, 1e6
"""Open-loop rate bounds (requests/s): finite, at least one request per ~17 minutes."""

_PHASE_KEYS = {"name", "order", "concurrency", "repeats", "select", "drain", "reset", "fresh",
               "arrival", "rate", "time_scale", "interleave", "label", "comparable"}
_LABEL_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
CHECK_FAIL_MODES = ("skip", "mark")
"""``on_check_fail``: a failed drain/fresh check skips the phase (sends nothing) or only marks it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Interleave:
    """A second workload mixed into a phase.

    Attributes:
        workload: Path of the second workload (folder or JSONL).
        every: One of its bodies (in its order, cycling) after every ``every``
            bodies of the phase (>= 1).
        burst: Bodies inserted per gap (>= 1; default 1): a burst of ``burst``
            foreign prompts after every ``every`` bodies.
    """

    workload: str
    every: int
    burst: int = 1

    def to_json(self) -> dict[str, Any]:
        """``{"workload": path, "every": k}``, plus ``"burst": b`` when b > 1."""
        return {"workload": self.workload, "every": self.every,
                **({"burst": self.burst} if self.burst != 1 else {})}
_ARRIVAL_RE = re.compile(r"^(constant|poisson:\d+|trace:.+)$")


@dataclass(frozen=True, slots=True, kw_only=True)
class PhaseSpec:
    """One phase as the user wrote it.

    Attributes:
        name: Unique phase name (used in records and summaries).
        order: ``forward``, ``reverse`` or ``shuffle:SEED``.
        concurrency: Closed-loop workers (C1, C4, ...), >= 1.
        repeats: Times the ordered selection is sent, >= 1.
        select: ``all``, ``first:N``, ``last:N`` or a tuple of body indices.
        drain: A drain must pass before the phase starts.
        reset: Empty the server's prefix cache before the phase.
        fresh: Require a fresh server (zero counters, empty cache) at the start.
        arrival: None for a closed loop; else an open loop whose intended send
            times are frozen into the plan: ``constant`` (every 1/rate s),
            ``poisson:SEED`` (exponential gaps of mean 1/rate s, seeded) or
            ``trace:FILE`` (a JSON list of arrival offsets in ms, one per
            position, e.g. from ``kvreplay import mooncake``). ``concurrency``
            then caps requests in flight; latency is measured from the intended
            time as well as from the actual send (no coordinated omission).
        rate: Offered load for ``constant``/``poisson`` (requests/s).
        time_scale: Multiplies trace offsets (0.5 = twice as fast).
        interleave: A second workload mixed into the phase.
        label: What the phase is for (``prime``, ``main``, ``control``...),
            1-64 letters, digits, ``_.-``; None = unlabelled.
        comparable: False for a control: the diagnosis never pools it with, or
            compares it as, a main arm.
    """

    name: str
    order: str = "forward"
    concurrency: int = 1
    repeats: int = 1
    select: str | tuple[int, ...] = "all"
    drain: bool = False
    reset: bool = False
    fresh: bool = False
    arrival: str | None = None
    rate: float | None = None
    time_scale: float = 1.0
    interleave: Interleave | None = None
    label: str | None = None
    comparable: bool = True

    @classmethod
    def from_mapping(cls, data: dict[str, Any], *, where: dict[str, Any]) -> PhaseSpec:
        """Validate a mapping (from TOML or plan.json).

        Args:
            data: The phase table.
            where: ``path``/``line``/``field`` prefix for error messages.

        Raises:
            ConfigError: unknown key, missing name, or a bad value.
        """
        prefix = where.get("field", "phase")
        loc = {k: v for k, v in where.items() if k != "field"}
        unknown = sorted(set(data) - _PHASE_KEYS)
        if unknown:
            raise ConfigError(f"unknown key {unknown[0]!r}", field=f"{prefix}.{unknown[0]}", **loc)

        def bad(key: str, msg: str) -> ConfigError:
            return ConfigError(msg, field=f"{prefix}.{key}", **loc)

        name = data.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise bad("name", "needs a name of letters, digits, '_', '.', '-'")
        order = data.get("order", "forward")
        if not isinstance(order, str) or not _ORDER_RE.match(order):
            raise bad("order", f"must be forward, reverse, shuffle:SEED or by-prefix, not {order!r}")
        ints = {}
        for key in ("concurrency", "repeats"):
            v = data.get(key, 1)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise bad(key, f"must be an integer >= 1, not {v!r}")
            cap = MAX_CONCURRENCY if key == "concurrency" else MAX_POSITIONS
            if v > cap:
                raise bad(key, f"must be at most {cap}, not {v}")
            ints[key] = v
        select = data.get("select", "all")
        if isinstance(select, list):
            if not select or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in select):
                raise bad("select", "an explicit selection is a non-empty list of body indices >= 0")
            select = tuple(select)
        elif not isinstance(select, str) or not _SELECT_RE.match(select):
            raise bad("select", f"must be all, first:N, last:N or a list of indices, not {select!r}")
        flags = {}
        for key in ("drain", "reset", "fresh", "comparable"):
            v = data.get(key, key == "comparable")
            if not isinstance(v, bool):
                raise bad(key, f"must be true or false, not {v!r}")
            flags[key] = v
        arrival = data.get("arrival")
        rate = data.get("rate")
        time_scale = data.get("time_scale", 1.0)
        if arrival is not None:
            if not isinstance(arrival, str) or not _ARRIVAL_RE.match(arrival):
                raise bad("arrival", f"must be constant, poisson:SEED or trace:FILE, not {arrival!r}")
            if not arrival.startswith("trace:"):
                if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not MIN_RATE <= rate <= MAX_RATE:
                    raise bad("rate", f"an open loop needs a finite rate in [{MIN_RATE:g}, {MAX_RATE:g}] "
                                      f"(requests/s), not {rate!r}")
                rate = float(rate)
        elif rate is not None:
            raise bad("rate", "a rate needs an arrival process (arrival = \"constant\" or \"poisson:SEED\")")
        if (isinstance(time_scale, bool) or not isinstance(time_scale, (int, float))
                or not 0 < time_scale < float("inf")):
            raise bad("time_scale", f"must be a number > 0, not {time_scale!r}")
        interleave = data.get("interleave")
        if interleave is not None:
            if (not isinstance(interleave, dict) or not {"workload", "every"} <= set(interleave)
                    or not set(interleave) <= {"workload", "every", "burst"}
                    or not isinstance(interleave["workload"], str) or not interleave["workload"]
                    or any(not isinstance(interleave.get(k, 1), int) or isinstance(interleave.get(k, 1), bool)
                           or interleave.get(k, 1) < 1 for k in ("every", "burst"))):
                raise bad("interleave", "must be {workload = PATH, every = K[, burst = B]} with K, B >= 1, "
                                        f"not {interleave!r}")
            interleave = Interleave(workload=interleave["workload"], every=interleave["every"],
                                    burst=interleave.get("burst", 1))
        label = data.get("label")
        if label is not None and (not isinstance(label, str) or not _LABEL_RE.fullmatch(label)):
            raise bad("label", f"must be 1-64 letters, digits, '_', '.', '-', not {label!r}")
        return cls(name=name, order=order, select=select, **ints, **flags, arrival=arrival, rate=rate,
                   time_scale=float(time_scale), interleave=interleave, label=label)

    def to_json(self) -> dict[str, Any]:
        """The spec as JSON (explicit selections as lists)."""
        return {
            "name": self.name,
            "order": self.order,
            "concurrency": self.concurrency,
            "repeats": self.repeats,
            "select": list(self.select) if isinstance(self.select, tuple) else self.select,
            "drain": self.drain,
            "reset": self.reset,
            "fresh": self.fresh,
            **({"arrival": self.arrival, "rate": self.rate, "time_scale": self.time_scale}
               if self.arrival is not None else {}),
            **({"interleave": self.interleave.to_json()} if self.interleave is not None else {}),
            # Only when set, so plans without them keep their plan.json (and hash).
            **({"label": self.label} if self.label is not None else {}),
            **({"comparable": False} if not self.comparable else {}),
        }


def parse_phase(spec: str) -> PhaseSpec:
    """Parse the shorthand ``NAME:ORDER:cN[:xREPEATS][:lastN|firstN]``.

    ``ORDER`` may be ``shuffle:SEED`` (two tokens). Tokens after ``cN`` may come
    in any order; besides the module docstring's: ``drain``, ``reset``, ``fresh``,
    ``label=LABEL`` (the phase's label) and ``nocompare`` (``comparable = false``).

    Raises:
        ConfigError: on any token it does not understand (``field`` = ``--phase``).
    """
    parts = spec.split(":")
    if len(parts) < 3:
        raise ConfigError(f"{spec!r}: expected NAME:ORDER:cN[:xREPEATS][:lastN|firstN][:rRATE[:poissonSEED]]"
                          " (ORDER: forward, reverse, shuffle:SEED, by-prefix)", field="--phase")
    data: dict[str, Any] = {"name": parts[0]}
    rest = parts[1:]
    if rest[0] == "shuffle":
        if len(rest) < 2 or not rest[1].isdigit():
            raise ConfigError(f"{spec!r}: shuffle needs a seed, e.g. shuffle:7", field="--phase")
        data["order"] = f"shuffle:{rest[1]}"
        rest = rest[2:]
    else:
        data["order"] = rest[0]
        rest = rest[1:]
    for tok in rest:
        tok = tok.lower() if re.fullmatch(r"[CX]\d+", tok) else tok  # C4 as written in prose
        if m := re.fullmatch(r"c(\d+)", tok):
            data["concurrency"] = int(m.group(1))
        elif m := re.fullmatch(r"x(\d+)", tok):
            data["repeats"] = int(m.group(1))
        elif m := re.fullmatch(r"(first|last)(\d+)", tok):
            data["select"] = f"{m.group(1)}:{m.group(2)}"
        elif tok in ("drain", "reset", "fresh"):
            data[tok] = True
        elif tok.startswith("label="):
            data["label"] = tok[6:]
        elif tok == "nocompare":
            data["comparable"] = False
        elif m := re.fullmatch(r"r(\d+(?:\.\d+)?)", tok):
            data["rate"] = float(m.group(1))
            data.setdefault("arrival", "constant")
        elif m := re.fullmatch(r"poisson(\d+)", tok):
            data["arrival"] = f"poisson:{m.group(1)}"
        else:
            raise ConfigError(f"{spec!r}: unknown token {tok!r}", field="--phase")
    if "concurrency" not in data:
        raise ConfigError(f"{spec!r}: missing concurrency (c1, c4, ...)", field="--phase")
    return PhaseSpec.from_mapping(data, where={"field": "--phase"})


def load_plan_toml(path: str | Path) -> tuple[list[PhaseSpec], dict[str, Any]]:
    """Read a TOML plan file.

    Returns:
        The phases, and the other top-level settings (``workload``, ``target``,
        ``backend``, ``identity``, ``abort_on_malformed``, ``on_check_fail``) as given
        (``identity`` is turned into pins by ``kvreplay.runner.identity.pins_from_mapping``).

    Raises:
        ConfigError: unreadable TOML, unknown keys, bad values (file, line, field).
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
        data = tomllib.loads(text)
    except FileNotFoundError as exc:
        raise ConfigError("plan file not found", path=p) from exc
    except tomllib.TOMLDecodeError as exc:
        line = getattr(exc, "lineno", None)
        raise ConfigError(f"not valid TOML: {exc}", path=p, line=line) from exc
    allowed = {"phase", "workload", "target", "backend", "identity", "abort_on_malformed", "on_check_fail"}
    for key in data:
        if key not in allowed:
            raise ConfigError(f"unknown key {key!r}", path=p, line=_line_of(text, key), field=key)
    if "abort_on_malformed" in data and not isinstance(data["abort_on_malformed"], bool):
        raise ConfigError(f"must be true or false, not {data['abort_on_malformed']!r}", path=p,
                          line=_line_of(text, "abort_on_malformed"), field="abort_on_malformed")
    if "on_check_fail" in data and data["on_check_fail"] not in CHECK_FAIL_MODES:
        raise ConfigError(f"must be \"skip\" or \"mark\", not {data['on_check_fail']!r}", path=p,
                          line=_line_of(text, "on_check_fail"), field="on_check_fail")
    if "identity" in data and (not isinstance(data["identity"], dict) or not data["identity"]):
        raise ConfigError("[identity] must be a non-empty table of KEY = VALUE", path=p,
                          line=_line_of(text, "identity"), field="identity")
    phases_raw = data.get("phase")
    if not isinstance(phases_raw, list) or not phases_raw:
        raise ConfigError("a plan needs at least one [[phase]]", path=p, field="phase")
    lines = [i + 1 for i, ln in enumerate(text.splitlines()) if ln.strip() == "[[phase]]"]
    phases = []
    for i, ph in enumerate(phases_raw):
        line = lines[i] if i < len(lines) else None
        phases.append(PhaseSpec.from_mapping(ph, where={"path": p, "line": line, "field": f"phase[{i}]"}))
    _check_unique(phases, where={"path": p})
    settings = {k: v for k, v in data.items() if k != "phase"}
    return phases, settings


def _line_of(text: str, key: str) -> int | None:
    for i, ln in enumerate(text.splitlines()):
        if re.match(rf"\s*{re.escape(key)}\s*=", ln) or ln.strip() == f"[{key}]":
            return i + 1
    return None


def _check_unique(phases: list[PhaseSpec], *, where: dict[str, Any]) -> None:
    seen = set()
    for ph in phases:
        if ph.name in seen:
            raise ConfigError(f"phase name {ph.name!r} used twice", field="phase.name", **where)
        seen.add(ph.name)


@dataclass(frozen=True, slots=True)
class Phase:
    """A phase with its frozen request sequence.

    Attributes:
        spec: What the user asked for.
        sequence: ``(body_index, repetition)`` per position, in send order.
        intended_ns: Open loop only: intended send time of each position (ns
            after the phase start), frozen before the first request.
    """

    spec: PhaseSpec
    sequence: tuple[tuple[int, int], ...]
    intended_ns: tuple[int, ...] | None = None

    @property
    def name(self) -> str:
        """The phase name."""
        return self.spec.name


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
    body_sha256: tuple[str, ...]
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
    """

    workload_path: str
    workload_sha256: str
    body_sha256: tuple[str, ...]
    phases: tuple[Phase, ...]
    extra: tuple[ExtraWorkload, ...] = ()

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
        bodies = list(workload.bodies)
        for ex in self.extra:
            if ex.workload is None:
                raise ConfigError(f"interleaved workload {ex.path} is not loaded", field="interleave")
            bodies.extend(_reindexed(b, len(bodies)) for b in ex.workload.bodies)
        return Workload(workload.path, tuple(bodies), workload.sha256)

    def content(self) -> dict[str, Any]:
        """The hashed content of plan.json (everything but ``plan_sha256`` and ``run``)."""
        sha = self.body_sha256 if not self.extra else [self.sha_of(i) for i in range(self._n_all())]
        out = {
            "format": PLAN_FORMAT,
            "workload": {
                "path": self.workload_path,
                "n_bodies": len(self.body_sha256),
                "sha256": self.workload_sha256,
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
                    ],
                }
                for ph in self.phases
            ],
        }
        if self.extra:
            out["interleave_workloads"] = [ex.to_json() for ex in self.extra]
        return out

    def _n_all(self) -> int:
        return len(self.body_sha256) + sum(len(ex.body_sha256) for ex in self.extra)

    @property
    def sha256(self) -> str:
        """SHA-256 of the canonical JSON of ``content()`` (sorted keys)."""
        return hashlib.sha256(orjson.dumps(self.content(), option=orjson.OPT_SORT_KEYS)).hexdigest()

    @property
    def total_requests(self) -> int:
        """Requests in all phases."""
        return sum(len(p.sequence) for p in self.phases)

    def to_json(self, run: dict[str, Any]) -> dict[str, Any]:
        """plan.json: content, its hash, and the run block (target, backend, version, ...)."""
        return {**self.content(), "plan_sha256": self.sha256, "run": run}


def _select(spec: PhaseSpec, n: int) -> list[int]:
    sel = spec.select
    if isinstance(sel, tuple):
        bad = [i for i in sel if i >= n]
        if bad:
            raise ConfigError(
                f"phase {spec.name!r} selects body {bad[0]} but the workload has {n}", field="select"
            )
        return list(sel)
    if sel == "all":
        return list(range(n))
    kind, count = sel.split(":")
    if int(count) < 1:
        raise ConfigError(f"phase {spec.name!r} selects {sel}: nothing to send (N >= 1)", field="select")
    k = min(int(count), n)
    return list(range(k)) if kind == "first" else list(range(n - k, n))


def _reindexed(body: Body, index: int) -> Body:
    return Body(index, body.raw, body.sha256, body.source, body.kind, body.stream)


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


def _order(spec: PhaseSpec, idx: list[int], workload: Workload | None = None) -> list[int]:
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


def _intended(spec: PhaseSpec, n: int) -> tuple[int, ...] | None:
    """Intended send offsets (ns after phase start) of an open-loop phase, or None."""
    if spec.arrival is None:
        return None
    if spec.arrival == "constant":
        gap = 1e9 / spec.rate  # type: ignore[operator]
        return tuple(round(i * gap) for i in range(n))
    if spec.arrival.startswith("poisson:"):
        rng = random.Random(int(spec.arrival.split(":")[1]))
        t, out = 0.0, []
        for _ in range(n):
            out.append(round(t))
            t += rng.expovariate(spec.rate) * 1e9  # type: ignore[arg-type]
        return tuple(out)
    path = Path(spec.arrival.split(":", 1)[1])
    try:
        offsets = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read trace arrivals: {exc}", path=path, field="arrival") from exc
    if not isinstance(offsets, list) or len(offsets) < n or not all(isinstance(x, (int, float)) for x in offsets):
        raise ConfigError(f"needs a JSON list of at least {n} arrival offsets (ms)", path=path, field="arrival")
    base = offsets[0]
    return tuple(round((x - base) * 1e6 * spec.time_scale) for x in offsets[:n])


def interleave_sequence(seq: tuple[tuple[int, int], ...], first_index: int, n_extra: int,
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
        selected = _select(spec, n)
        if len(selected) * spec.repeats + total > MAX_POSITIONS:
            raise ConfigError(f"phase {spec.name}: {len(selected)} bodies x {spec.repeats} repeats takes the plan "
                              f"over {MAX_POSITIONS} positions", field=f"phase {spec.name}.repeats")
        total += len(selected) * spec.repeats
        ordered = _order(spec, selected, workload)
        seq = tuple((bi, rep) for rep in range(spec.repeats) for bi in ordered)
        if spec.interleave is not None:
            path = spec.interleave.workload
            if path not in extras:
                extra_wl = (interleave_workloads or {}).get(path)
                if extra_wl is None:
                    from kvreplay.workload import load_workload

                    extra_wl = load_workload(path)
                if not len(extra_wl):
                    raise ConfigError(f"interleaved workload {path} is empty", field="interleave")
                extras[path] = ExtraWorkload(path, extra_wl.sha256, tuple(b.sha256 for b in extra_wl.bodies),
                                             next_index, extra_wl)
                next_index += len(extra_wl)
            ex = extras[path]
            seq = interleave_sequence(seq, ex.first_index, len(ex.body_sha256), spec.interleave.every,
                                      spec.interleave.burst)
        phases.append(Phase(spec, seq, _intended(spec, len(seq))))
    return Plan(
        workload_path=workload.path,
        workload_sha256=workload.sha256,
        body_sha256=tuple(b.sha256 for b in workload.bodies),
        phases=tuple(phases),
        extra=tuple(extras.values()),
    )


def load_plan_json(path: str | Path, workload: Workload | None = None) -> tuple[Plan, dict[str, Any]]:
    """Re-read a plan.json so it can be executed again exactly.

    Args:
        path: The plan.json file.
        workload: The workload to check it against; loaded from the plan's
            ``workload.path`` by the caller when None is given here.

    Returns:
        The plan (sequence taken verbatim from the file) and its ``run`` block.

    Raises:
        ConfigError: unreadable file, hash mismatch, or bodies whose SHA-256 no
            longer match the workload.
    """
    p = Path(path)
    try:
        data = orjson.loads(p.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read plan: {exc}", path=p) from exc
    if not isinstance(data, dict) or data.get("format") != PLAN_FORMAT:
        raise ConfigError(f"not a {PLAN_FORMAT} file", path=p, field="format")
    content = {k: v for k, v in data.items() if k not in ("plan_sha256", "run")}
    digest = hashlib.sha256(orjson.dumps(content, option=orjson.OPT_SORT_KEYS)).hexdigest()
    if digest != data.get("plan_sha256"):
        raise ConfigError("plan_sha256 does not match the plan's content (edited?)", path=p, field="plan_sha256")
    try:
        return _load_plan_data(p, data, workload)
    except ConfigError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise ConfigError(f"malformed plan.json: {type(exc).__name__}: {exc}"[:300], path=p) from None


def _load_plan_data(p: Path, data: Any, workload: Workload | None) -> tuple[Plan, dict[str, Any]]:
    """The body of ``load_plan_json`` once the file is read and its hash checked (shapes validated)."""
    wl = data["workload"]
    n_bodies = wl["n_bodies"]
    if not isinstance(n_bodies, int) or isinstance(n_bodies, bool) or not 0 < n_bodies <= MAX_POSITIONS:
        raise ConfigError(f"n_bodies must be an integer in [1, {MAX_POSITIONS}]", path=p, field="workload.n_bodies")
    if not isinstance(data["phases"], list):
        raise ConfigError("phases must be a list", path=p, field="phases")
    if sum(len(ph["sequence"]) for ph in data["phases"]) > MAX_POSITIONS:
        raise ConfigError(f"over {MAX_POSITIONS} positions", path=p, field="phases[].sequence")
    if workload is not None:
        if len(workload) != wl["n_bodies"] or workload.sha256 != wl["sha256"]:
            raise ConfigError(
                f"workload {workload.path} is not the one the plan was made from "
                f"(sha256 {workload.sha256[:12]} vs {wl['sha256'][:12]})",
                path=p,
                field="workload.sha256",
            )
    seen_extra: dict[int, str] = {}
    phases = []
    body_sha = [""] * wl["n_bodies"]
    for i, ph in enumerate(data["phases"]):
        spec_data = {k: v for k, v in ph.items() if k != "sequence"}
        spec = PhaseSpec.from_mapping(spec_data, where={"path": p, "field": f"phases[{i}]"})
        seq = []
        intended = []
        for k, item in enumerate(ph["sequence"]):
            bi_, rep_ = item["body_index"], item["repetition"]
            # An interleaved (foreign) body's repetition counts cycles through its own
            # workload (interleave_sequence), so only the main bodies are held to `repeats`.
            rep_cap = spec.repeats if isinstance(bi_, int) and bi_ < wl["n_bodies"] else MAX_POSITIONS
            if (not isinstance(bi_, int) or isinstance(bi_, bool) or not 0 <= bi_ < MAX_POSITIONS
                    or not isinstance(rep_, int) or isinstance(rep_, bool) or not 0 <= rep_ < rep_cap
                    or not isinstance(item["body_sha256"], str)):
                raise ConfigError("body_index, repetition or body_sha256 out of range or of the wrong type",
                                  path=p, field=f"phases[{i}].sequence[{k}]")
            if "intended_ns" in item and (not isinstance(item["intended_ns"], int) or item["intended_ns"] < 0):
                raise ConfigError("intended_ns must be an integer >= 0", path=p,
                                  field=f"phases[{i}].sequence[{k}].intended_ns")
            if item["body_index"] < wl["n_bodies"]:
                body_sha[item["body_index"]] = item["body_sha256"]
            else:
                seen_extra[item["body_index"]] = item["body_sha256"]
            seq.append((item["body_index"], item["repetition"]))
            if "intended_ns" in item:
                intended.append(item["intended_ns"])
        phases.append(Phase(spec, tuple(seq), tuple(intended) if spec.arrival is not None else None))
    if workload is not None:
        for bi, sha in enumerate(body_sha):
            if sha and workload.bodies[bi].sha256 != sha:
                raise ConfigError(f"body {bi} changed since the plan was made", path=p, field="body_sha256")
        body_sha = [b.sha256 for b in workload.bodies]
    extra = _load_extras(data.get("interleave_workloads"), p, seen_extra, load=workload is not None)
    plan = Plan(wl["path"], wl["sha256"], tuple(body_sha), tuple(phases), extra)
    if workload is not None and plan.sha256 != data["plan_sha256"]:
        raise ConfigError("re-expanded plan does not hash to plan_sha256", path=p, field="plan_sha256")
    return plan, data.get("run", {})


def _load_extras(items: Any, p: Path, seen: dict[int, str], *, load: bool) -> tuple[ExtraWorkload, ...]:
    """Read plan.json's ``interleave_workloads``.

    Loaded and checked when ``load``; else with the body hashes its sequences
    name (``seen``: plan index -> SHA-256).
    """
    if not items:
        return ()
    out = []
    for it in items:
        wl = None
        if load:
            from kvreplay.workload import load_workload

            wl = load_workload(it["path"])
            if wl.sha256 != it["sha256"] or len(wl) != it["n_bodies"]:
                raise ConfigError(f"interleaved workload {it['path']} changed since the plan was made",
                                  path=p, field="interleave_workloads")
        if wl is not None:
            sha = tuple(b.sha256 for b in wl.bodies)
            for j, b in enumerate(wl.bodies):
                named = seen.get(it["first_index"] + j)
                if named is not None and named != b.sha256:
                    raise ConfigError(f"body {j} of {it['path']} changed since the plan was made",
                                      path=p, field="body_sha256")
        else:
            sha = tuple(seen.get(it["first_index"] + j, "") for j in range(it["n_bodies"]))
        out.append(ExtraWorkload(it["path"], it["sha256"], sha, it["first_index"], wl))
    return tuple(out)
