"""Phase specs as the user writes them: ``PhaseSpec``, ``parse_phase`` and ``load_plan_toml``.

Split out of ``kvreplay.plan`` (which re-exports every public name here); see that
module's docstring for the phase syntax and the plan TOML format.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any, overload

import orjson

from kvreplay.errors import ConfigError

PLAN_FORMAT = "kvreplay-plan/1"
_ORDER_RE = re.compile(r"^(forward|reverse|shuffle:\d+|by-prefix)$")
_SELECT_RE = re.compile(r"^(all|first:\d+|last:\d+)$")
MAX_POSITIONS = 10_000_000
"""Most planned positions in one plan (and repeats of one phase); plan.json holds one entry each."""
MAX_CONCURRENCY = 100_000
"""Largest concurrency accepted; the open-file limit is checked against the plan's at run time."""
MIN_RATE, MAX_RATE = 1e-3, 1e6
"""Open-loop rate bounds (requests/s): finite, at least one request per ~17 minutes."""

MIN_GAMMA_CV, MAX_GAMMA_CV = 0.01, 100.0
"""Bounds of a ``gamma:CV:SEED`` arrival's coefficient of variation (gamma shape 1/CV^2: 1e4 .. 1e-4)."""

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
# a trace path may hold any character
_ARRIVAL_RE = re.compile(r"^(constant|poisson:\d+|gamma:\d+(?:\.\d+)?:\d+|trace:.+)$", re.DOTALL)


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
            ``poisson:SEED`` (exponential gaps of mean 1/rate s, seeded),
            ``gamma:CV:SEED`` (gamma gaps of mean 1/rate s and coefficient of
            variation CV, seeded: CV 1 is Poisson, above 1 burstier) or
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
                raise bad("arrival", f"must be constant, poisson:SEED, gamma:CV:SEED or trace:FILE, not {arrival!r}")
            if not arrival.startswith("trace:"):
                if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not MIN_RATE <= rate <= MAX_RATE:
                    raise bad("rate", f"an open loop needs a finite rate in [{MIN_RATE:g}, {MAX_RATE:g}] "
                                      f"(requests/s), not {rate!r}")
                rate = float(rate)
            if arrival.startswith("gamma:") and not MIN_GAMMA_CV <= float(arrival.split(":")[1]) <= MAX_GAMMA_CV:
                raise bad("arrival", f"gamma's coefficient of variation must be in [{MIN_GAMMA_CV:g}, "
                                     f"{MAX_GAMMA_CV:g}], not {arrival.split(':')[1]}")
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
        return cls(name=name, order=order, select=select, concurrency=ints["concurrency"], repeats=ints["repeats"],
                   drain=flags["drain"], reset=flags["reset"], fresh=flags["fresh"], comparable=flags["comparable"],
                   arrival=arrival, rate=rate,
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
        ``backend``, ``identity``, ``abort_on_malformed``, ``on_check_fail``, ``fleet``) as given
        (``identity`` is turned into pins by ``kvreplay.runner.identity.pins_from_mapping``,
        ``fleet`` read by ``kvreplay.runner.fleet.replicas_from_mapping``).

    Raises:
        ConfigError: unreadable TOML, unknown keys, bad values (file, line, field).
    """
    from kvreplay.bundled import resolve
    from kvreplay.tomlfile import read_toml

    try:
        p = Path(resolve(path))  # bundled:host-cache.toml names a bundled plan
    except FileNotFoundError as exc:
        raise ConfigError(str(exc), path=path) from None
    text, data = read_toml(p, what="plan file")
    allowed = {"phase", "workload", "target", "backend", "identity", "abort_on_malformed", "on_check_fail", "fleet"}
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
    if "fleet" in data and not isinstance(data["fleet"], dict):
        raise ConfigError("[fleet] must be a table: router = URL, replicas = [URL, ...]", path=p,
                          line=_line_of(text, "fleet"), field="fleet")
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


def sequence_entry(position: int, body_index: int, body_sha256: str, repetition: int,
                   intended_ns: int | None = None) -> dict[str, Any]:
    """One entry of a plan.json phase ``sequence``, in its key order (the plan hash covers the bytes).

    ``{"position", "body_index", "body_sha256", "repetition"}`` and, for an open-loop
    phase, ``"intended_ns"`` (ns from the phase start). The one builder of the entry's
    shape: ``SequenceView`` (planning, runs) and ``rundir.planfile.Entries`` (reports).
    """
    e = {"position": position, "body_index": body_index, "body_sha256": body_sha256, "repetition": repetition}
    if intended_ns is not None:
        e["intended_ns"] = intended_ns
    return e


class SequenceView(Sequence[dict[str, Any]]):
    """One phase's plan.json ``sequence``, each entry built when asked for (O(1) memory, issue 32).

    ``phase`` is a ``plan.Phase`` (its ``sequence`` and ``intended_ns``).

    Entries are the dicts ``Plan.content()`` lists: ``position``, ``body_index``,
    ``body_sha256``, ``repetition`` and, open loop, ``intended_ns``. Pickled as a list.
    """

    def __init__(self, phase: Any, sha: Sequence[str]) -> None:
        self.phase, self.sha = phase, sha

    def __len__(self) -> int:
        return len(self.phase.sequence)

    def entry(self, pos: int) -> dict[str, Any]:
        """The entry of position ``pos``."""
        bi, rep = self.phase.sequence[pos]
        ins = self.phase.intended_ns
        return sequence_entry(pos, bi, self.sha[bi], rep, None if ins is None else ins[pos])

    @overload
    def __getitem__(self, i: int) -> dict[str, Any]: ...
    @overload
    def __getitem__(self, i: slice) -> list[dict[str, Any]]: ...
    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return [self.entry(j) for j in range(*i.indices(len(self)))]
        n = len(self)
        if not -n <= i < n:
            raise IndexError("sequence index out of range")
        return self.entry(i % n)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """The entries in order: the pairs walked once, the digests' hex read in place (``entry`` each, faster)."""
        sha, ins = self.sha, self.phase.intended_ns
        digests = getattr(sha, "digests", None)  # workload.index.HexDigests: 32 bytes a body
        n = len(sha)
        for pos, (bi, rep) in enumerate(self.phase.sequence):
            h = digests[32 * bi:32 * bi + 32].hex() if digests is not None and 0 <= bi < n else sha[bi]
            yield sequence_entry(pos, bi, h, rep, None if ins is None else ins[pos])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    __hash__ = None  # type: ignore[assignment]

    def __reduce__(self) -> tuple[Any, ...]:
        return (list, (list(self),))


_CHUNK_ENTRIES = 256
"""Entries per chunk of ``json_chunks``: each ``orjson.dumps`` result keeps a ~4 KB buffer until the
chunk is joined (4,096 entries held 17 MB; issue 32)."""


def json_chunks(doc: dict[str, Any], empty: bytes, sep: bytes, indent: bytes, option: int,
                dumps: Callable[[Any], bytes], close: bytes = b"") -> Iterator[bytes]:
    r"""``doc`` serialised by ``dumps`` with each ``SequenceView`` streamed entry by entry.

    The views are replaced by empty lists, ``doc`` is dumped once, and each ``empty``
    (``"sequence":[]`` as ``dumps`` writes it) is filled in, in phase order, with the
    view's entries (``orjson.dumps(entry, option)``, each newline followed by ``indent``,
    the first entry preceded by ``sep`` less its comma), joined by ``sep``, then
    ``close`` before the ``]``. A quote inside a JSON string is escaped, so ``empty``
    only matches the key itself. The concatenated chunks equal ``dumps`` of the
    materialised doc (compact: ``sep`` ``b","``; indented by 2 at depth 4: ``sep``
    ``b",\n" + 8 spaces``, ``indent`` 8 spaces, ``close`` ``b"\n" + 6 spaces``). Those two
    layouts are dumped ``_CHUNK_ENTRIES`` entries at a time as one list (the same bytes,
    ~2.6x less CPU a position: issue 43 item 2); any other, entry by entry.

    Raises:
        ValueError: ``empty`` appears other than once per view.
    """
    phases = doc.get("phases") or []
    views = [ph.get("sequence") if isinstance(ph, dict) else None for ph in phases]
    flat = {**doc, "phases": [{**ph, "sequence": []} if isinstance(v, SequenceView) else ph
                              for ph, v in zip(phases, views, strict=True)]}
    pieces = dumps(flat).split(empty)
    streamed = [v for v in views if isinstance(v, SequenceView)]
    if len(pieces) != len(streamed) + 1:
        raise ValueError("plan.json: a sequence key where none was expected")
    yield pieces[0]
    # The layouts the two callers use (compact, or indented by 2 with the entries at ``indent``)
    # are written a chunk at a time; any other, entry by entry.
    fast = (sep == b"," and not indent) or (bool(option & orjson.OPT_INDENT_2) and len(indent) >= 2
                                            and sep == b",\n" + indent)
    deeper = b"\n" + indent[2:]

    for view, after in zip(streamed, pieces[1:], strict=True):
        yield empty[:-1]
        if fast:
            # _CHUNK_ENTRIES entries dumped as one list: its brackets (and, indented, the list's
            # own level) taken off are the entries joined by ``sep`` (a JSON string holds no raw
            # newline, so every newline is the layout's); the same bytes, one dumps a chunk
            it, first = iter(view), True
            while entries := list(islice(it, _CHUNK_ENTRIES)):
                listed = orjson.dumps(entries, option=option)
                body = listed[2:-2].replace(b"\n", deeper)[2:] if indent else listed[1:-1]
                yield (sep[1:] if first else sep) + body
                first = False
            yield (close if len(view) else b"") + empty[-1:] + after
            continue
        batch: list[bytes] = []
        for pos in range(len(view)):
            e = orjson.dumps(view.entry(pos), option=option)
            batch.append(e.replace(b"\n", b"\n" + indent) if indent else e)
            if len(batch) == _CHUNK_ENTRIES:
                yield (sep[1:] if pos < _CHUNK_ENTRIES else sep) + sep.join(batch)
                batch = []
        if batch:
            yield (sep[1:] if len(view) <= _CHUNK_ENTRIES else sep) + sep.join(batch)
        yield (close if len(view) else b"") + empty[-1:] + after


class Pairs(Sequence[tuple[int, int]]):
    """A phase's ``(body_index, repetition)`` per position, flat: 16 bytes a position, or less.

    Reads like the tuple of pairs it replaces (indexing, iteration, ``==`` with a
    tuple, hashing). Two forms: ``Pairs.of`` keeps every pair in one int64 array;
    ``Pairs.product(ordered, repeats)`` keeps the phase's ordered bodies once (a
    ``range`` as it is: nothing per position for a forward or reverse phase over a
    contiguous selection; else an int64 array, 8 bytes a body), pair ``i`` being
    ``(ordered[i % len(ordered)], i // len(ordered))`` (issue 32).
    """

    def __init__(self, flat: array, ordered: Sequence[int] | None = None, repeats: int = 1) -> None:
        self.flat = flat
        self.ordered, self.repeats = ordered, repeats

    @classmethod
    def of(cls, pairs: Iterable[tuple[int, int]]) -> Pairs:
        """From ``(body_index, repetition)`` pairs (each in int64)."""
        flat = array("q")
        for bi, rep in pairs:
            flat.append(bi)
            flat.append(rep)
        return cls(flat)

    @classmethod
    def product(cls, ordered: Sequence[int], repeats: int) -> Pairs:
        """The pairs of ``ordered`` bodies sent ``repeats`` times: ``(b, r) for r in range(repeats) for b in ordered``.

        Raises:
            OverflowError: a body index outside int64.
        """
        kept = ordered if isinstance(ordered, range) else array("q", ordered)
        return cls(array("q"), kept, repeats)

    def __len__(self) -> int:
        if self.ordered is not None:
            return len(self.ordered) * self.repeats
        return len(self.flat) // 2

    @overload
    def __getitem__(self, i: int) -> tuple[int, int]: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[tuple[int, int], ...]: ...
    def __getitem__(self, i: int | slice) -> Any:
        n = len(self)
        if isinstance(i, slice):
            return tuple(self[j] for j in range(*i.indices(n)))
        if not -n <= i < n:
            raise IndexError("sequence index out of range")
        i %= n
        if self.ordered is not None:
            rep, k = divmod(i, len(self.ordered))
            return self.ordered[k], rep
        return self.flat[2 * i], self.flat[2 * i + 1]

    def __iter__(self) -> Iterator[tuple[int, int]]:
        if self.ordered is not None:
            o = self.ordered
            return ((b, rep) for rep in range(self.repeats) for b in o)
        f = self.flat
        return ((f[k], f[k + 1]) for k in range(0, len(f), 2))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Pairs) and self.ordered is None and other.ordered is None:
            return self.flat == other.flat
        return isinstance(other, Sequence) and len(self) == len(other) and tuple(self) == tuple(other)

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __reduce__(self) -> tuple[Any, ...]:
        return (Pairs, (self.flat, self.ordered, self.repeats))

    def __repr__(self) -> str:
        return f"Pairs({tuple(self)!r})"


class Offsets(Sequence[int]):
    """An open-loop phase's intended send offsets (ns) in one int64 array (8 bytes a position, issue 32).

    Reads like the tuple of ints it replaces (indexing, iteration, ``==`` with a
    tuple, hashing); a Python int per position costs ~36 bytes in a tuple.

    Raises:
        OverflowError: (construction) an offset outside int64.
    """

    def __init__(self, values: Iterable[int]) -> None:
        """From the offsets in send order."""
        self.flat = values if isinstance(values, array) and values.typecode == "q" else array("q", values)

    def __len__(self) -> int:
        return len(self.flat)

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[int, ...]: ...
    def __getitem__(self, i: int | slice) -> Any:
        if isinstance(i, slice):
            return tuple(self.flat[i])
        return self.flat[i]

    def __iter__(self) -> Iterator[int]:
        return iter(self.flat)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Offsets):
            return self.flat == other.flat
        return isinstance(other, Sequence) and tuple(self.flat) == tuple(other)

    def __hash__(self) -> int:
        return hash(tuple(self.flat))

    def __repr__(self) -> str:
        return f"Offsets({tuple(self.flat)!r})"
