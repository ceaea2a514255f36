"""What a phase's figures can and cannot show about restores: the one evidence engine.

The run report (``report.diagnose``), the experiment findings
(``experiments.findings``) and ``kvreplay compare`` all decide with these rules,
on the names of ``kvreplay.evidence.vocab``, so that they never answer
differently for the same run directory and never contradict the records.

*A void delta.* A counter delta with ``reset`` (the server restarted inside the
interval, ``runner.backend.counter_delta``) holds post-restart values, not the
interval's increase: it is no evidence of anything (``usable_delta`` is None;
the phase's counter tiers are absent, reason "the server restarted during the
phase"). This holds for a phase's delta and for each per-request delta alike.

*Absent is not zero.* A counter tier takes part in a phase (is *live*) only when
its lookup counter moved in that phase (increase above 0). The host (KV
connector, CPU RAM) tier is live when ``host_lookups`` or ``host_query_tokens``
increased; the device prefix cache is live when ``lookups`` or ``query_tokens``
increased, or, for a server that exports no lookup counter for it (llama.cpp's
``prompt_tokens_cached_total``), when its hit counter is present and the server
did prompt work (``prompt_tokens`` or ``computed_tokens`` increased) or the hit
counter itself moved. A tier that is exported but did not move is *absent* for
the phase, with the reason (vLLM prints
``vllm:external_prefix_cache_queries_total 0`` without any connector: that is no
host tier, not a host tier that restored nothing). Over several phases (an
experiment window) a tier is *present* when it is live in at least one.

*Restore signal.* A live tier restores what its restore counter says:
host ``host_fetched_tokens``, else ``host_reused_tokens``, else
``host_hit_tokens``, else ``host_hits`` (lookups); device ``hit_tokens``, else
``hits``. The usage ``cached_tokens`` total counts too, but only when every ok
answer reported it. A phase *restored some* when any live figure is above zero,
and *restored none* only when every live figure is zero and at least one exists;
with none it is no evidence either way.

*One tier across the compared phases.* Phases are compared on the first tier
live in every one of the main phases (``common_tier``): the host tier when its
lookups moved in each, else the device prefix cache (a server without a host
tier: device hit tokens), else usage ``cached_tokens``. A phase read on that
tier restored when its figure there is above 0; a phase where that tier is not
live (a control) restored only when one of its own live tiers reads above 0
(``restored_on``): a tier that reads 0 never counts as restored.

*Only repeats are evidence* (``SentBodies``). A request is a *repeat* when its
body (``body_sha256``) was already sent in the same incarnation of the server
(an earlier phase, or earlier in the same phase). A phase is a *replay* when it
sent at least one body and every body it sent was sent by an earlier phase of
the same incarnation: a phase that shares only some of its bodies with earlier
phases is not a replay, and its phase-wide counters are no evidence. (With
per-request counters, C1, the repeats inside any phase are evidence one by one;
``experiments.findings``.) A run directory is one incarnation. The run report
also leaves out a phase whose name is ``prime`` or starts with ``prime``, one
labelled ``prime``, and one marked ``comparable: false`` (``replay_orders``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from kvreplay.evidence.vocab import (
    DEVICE_KEYS,
    DEVICE_LOOKUP_KEYS,
    DEVICE_WORK_KEYS,
    HOST_KEYS,
    HOST_LOOKUP_KEYS,
    USAGE_HOST_KEYS,
)

if TYPE_CHECKING:
    from kvreplay.evidence.bodykeys import KeySet

__all__ = [
    "PhaseEvidence",
    "PhaseSends",
    "SentBodies",
    "Tier",
    "common_tier",
    "counter_cached",
    "counter_value",
    "delta_evidence",
    "figure_on",
    "fmt",
    "phase_evidence",
    "replay_orders",
    "restored_on",
    "tiers_present",
    "usable",
    "usable_delta",
]

RESTARTED = "the server restarted during the phase"
"""Why a delta with ``reset`` is no evidence."""


def fmt(v: float | int, nd: int = 1) -> str:
    """A figure as the evidence texts write it: integers as is, floats with ``nd`` decimals."""
    if isinstance(v, float) and not v.is_integer():
        return f"{v:.{nd}f}"
    if isinstance(v, float):
        return str(int(v))
    return str(v)


def usable(ph: dict[str, Any]) -> bool:
    """A phase that can take part: valid, not deferred, with at least one ok request."""
    return bool(ph.get("valid", True)) and not ph.get("deferred") and (ph.get("ok") or 0) > 0


def usable_delta(delta: dict[str, Any] | None) -> dict[str, Any] | None:
    """The counter delta as evidence: None when it is missing or void by a restart (``reset``)."""
    if not isinstance(delta, dict) or delta.get("reset"):
        return None
    return delta


def counter_value(delta: dict[str, Any] | None, name: str) -> float | None:
    """One common counter's figure in a delta; None when absent or the delta is void (reset).

    Absent is not zero: a counter the server does not report reads None, never 0.
    """
    d = usable_delta(delta)
    v = None if d is None else d.get(name)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def counter_cached(d: dict[str, Any]) -> float:
    """Cached tokens as the counters tell it, every tier the usage field counts.

    Device ``hit_tokens`` plus the tokens a host tier or KV connector supplied
    beyond them (``host_fetched_tokens``, else ``host_hit_tokens``), as a server's
    usage ``cached_tokens`` counts both (vLLM: ``num_cached_tokens`` = local +
    external computed tokens, ``vllm/v1/core/sched/scheduler.py``).

    Args:
        d: A counter delta holding ``hit_tokens`` (tokens).

    Returns:
        Tokens.

    Raises:
        KeyError: ``hit_tokens`` is absent.
    """
    host = next((d[k] for k in USAGE_HOST_KEYS if k in d), 0)
    return d["hit_tokens"] + host


@dataclass(frozen=True, slots=True)
class Tier:
    """One live source of restore evidence in a phase.

    Attributes:
        tier: ``host``, ``device`` or ``usage``.
        key: The restore figure read (``hit_tokens``, ``usage cached_tokens``, ...).
        value: Its value over the phase (the key's unit: tokens or lookups).
        basis: ``(name, value)`` pairs that made the tier live (its lookup counter).
    """

    tier: str
    key: str
    value: float
    basis: tuple[tuple[str, float], ...] = ()

    def text(self) -> str:
        """``hit_tokens 0 (query_tokens 4096)``."""
        b = ", ".join(f"{k} {fmt(v)}" for k, v in self.basis)
        return f"{self.key} {fmt(self.value)}" + (f" ({b})" if b else "")


@dataclass(frozen=True, slots=True)
class PhaseEvidence:
    """The restore evidence of one phase.

    Attributes:
        phase: Phase name.
        tiers: Live tiers, host first, then device, then usage.
        absent: Tier -> why it is absent (``host_lookups 0``); only tiers whose
            counters exist but did not move, or that reset (key ``counter``).
    """

    phase: str
    tiers: tuple[Tier, ...] = ()
    absent: dict[str, str] = field(default_factory=dict)

    @property
    def restored(self) -> bool | None:
        """True: some tier restored; False: every live tier reads 0; None: no evidence."""
        if not self.tiers:
            return None
        return any(t.value > 0 for t in self.tiers)

    def tier(self, name: str) -> Tier | None:
        """The live tier ``name`` (``host``, ``device``, ``usage``), or None."""
        return next((t for t in self.tiers if t.tier == name), None)

    def numbers(self) -> dict[str, float]:
        """Every figure the evidence rests on, by name."""
        out: dict[str, float] = {}
        for t in self.tiers:
            out[t.key] = t.value
            out.update(dict(t.basis))
        return out

    def text(self) -> str:
        """``hit_tokens 0 (query_tokens 4096); host tier absent (host_lookups 0)``."""
        parts = [t.text() for t in self.tiers]
        parts += [f"{tier} tier absent ({why})" for tier, why in self.absent.items()]
        return "; ".join(parts) or "no restore evidence"


def _moved(d: dict[str, Any], keys: tuple[str, ...]) -> tuple[tuple[str, float], ...]:
    return tuple((k, float(d[k])) for k in keys if isinstance(d.get(k), (int, float)) and d[k] > 0)


def _first(d: dict[str, Any], keys: tuple[str, ...]) -> str | None:
    return next((k for k in keys if isinstance(d.get(k), (int, float))), None)


def _counter_tiers(d: dict[str, Any]) -> tuple[list[Tier], dict[str, str]]:
    """The live counter tiers of one usable delta, and why the others are absent."""
    tiers: list[Tier] = []
    absent: dict[str, str] = {}
    hk = _first(d, HOST_KEYS)
    if hk is not None:
        basis = _moved(d, HOST_LOOKUP_KEYS)
        if basis:
            tiers.append(Tier("host", hk, float(d[hk]), basis))
        else:
            looked = [k for k in HOST_LOOKUP_KEYS if k in d]
            absent["host"] = (
                ", ".join(f"{k} {fmt(d[k])}" for k in looked) + " in this phase"
                if looked
                else "no host lookup counter"
            )
    dk = _first(d, DEVICE_KEYS)
    if dk is not None:
        basis = _moved(d, DEVICE_LOOKUP_KEYS)
        if not basis and not any(k in d for k in DEVICE_LOOKUP_KEYS):
            # No lookup counter at all (llama.cpp): the server's prompt work stands in.
            basis = _moved(d, DEVICE_WORK_KEYS) or _moved(d, (dk,))
        if basis:
            tiers.append(Tier("device", dk, float(d[dk]), basis))
        else:
            looked = [k for k in DEVICE_LOOKUP_KEYS + DEVICE_WORK_KEYS if k in d]
            absent["device"] = (
                ", ".join(f"{k} {fmt(d[k])}" for k in looked) + " in this phase"
                if looked
                else "no prompt work counted"
            )
    return tiers, absent


def delta_evidence(
    name: str, delta: dict[str, Any] | None, *, usage_cached: float | None = None, ok: int = 0
) -> PhaseEvidence:
    """The live tiers of one counter delta (a phase's, or the sum over its repeats).

    Args:
        name: What the evidence is about (a phase name or ``STEP/PHASE``).
        delta: Counter increases by common name (``reset`` makes it void), or None.
        usage_cached: Usage ``cached_tokens`` over the same requests, None when
            unknown (some ok answer did not report it): then no usage tier.
        ok: The ok answers the usage figure sums (no usage tier when 0).

    Returns:
        The evidence (rules in the module docstring).
    """
    absent: dict[str, str] = {}
    d = usable_delta(delta)
    if d is None and isinstance(delta, dict) and delta:
        absent["counter"] = RESTARTED
    tiers, why = _counter_tiers(d or {})
    absent.update(why)
    if usage_cached is not None and ok > 0:
        tiers.append(Tier("usage", "usage cached_tokens", float(usage_cached), (("ok answers", float(ok)),)))
    return PhaseEvidence(name, tuple(tiers), absent)


def phase_evidence(ph: dict[str, Any]) -> PhaseEvidence:
    """The live tiers of one summary phase (rules in the module docstring).

    Args:
        ph: A phase of summary.json (any version 1: only ``name``,
            ``counter_delta``, ``tokens`` and ``ok`` are read).

    Returns:
        The evidence; a delta with ``reset`` contributes no counter tier.
    """
    tok = ph.get("tokens") or {}
    known = bool(tok) and not tok.get("cached_unknown")
    return delta_evidence(ph.get("name", "?"), ph.get("counter_delta"),
                          usage_cached=float(tok.get("cached") or 0) if known else None,
                          ok=int(ph.get("ok") or 0))


def tiers_present(deltas: Iterable[dict[str, Any] | None]) -> dict[str, bool]:
    """``{"host": present, "device": present}`` over several deltas (an experiment window).

    A counter tier is present when it is live (its lookups moved, or llama.cpp's
    prompt work) in at least one of the deltas; a void delta (``reset``) counts
    for nothing.
    """
    live: set[str] = set()
    for d in deltas:
        live.update(t.tier for t in delta_evidence("", d).tiers)
    return {"host": "host" in live, "device": "device" in live}


def common_tier(evs: Iterable[PhaseEvidence], order: Sequence[str] = ("host", "device", "usage")) -> str | None:
    """The first tier of ``order`` live in every one of ``evs``; None when none is (or ``evs`` is empty)."""
    evs = list(evs)
    return next((t for t in order if evs and all(e.tier(t) for e in evs)), None)


def figure_on(ev: PhaseEvidence, tier: str) -> Tier | None:
    """The figure a phase is read on when phases are compared on ``tier``.

    ``tier`` itself when it is live in the phase; else (a control without it) the
    first of the phase's own live tiers that reads above 0, else its first live
    tier (reading 0). None without any live tier.
    """
    t = ev.tier(tier)
    if t is not None or not ev.tiers:
        return t
    return next((x for x in ev.tiers if x.value > 0), ev.tiers[0])


def restored_on(ev: PhaseEvidence, tier: str) -> bool | None:
    """Whether a phase restored, read on ``tier`` (``figure_on``): its figure is above 0.

    A tier reading 0 never counts as a restore. None without any live tier.
    """
    t = figure_on(ev, tier)
    return None if t is None else t.value > 0


@dataclass(frozen=True, slots=True)
class PhaseSends:
    """What ``SentBodies.phase`` found about one phase's sends.

    Attributes:
        repeats: Per body sent, in send order: already sent in this incarnation
            (an earlier phase, or earlier in this phase).
        replay: The phase sent at least one body and every one of them was sent
            by an earlier phase of the same incarnation.
    """

    repeats: tuple[bool, ...]
    replay: bool


class SentBodies:
    """The bodies already sent, per incarnation: decides repeats and replays.

    Feed the phases in the order they ran; ``incarnation`` is any key naming the
    server's life they ran in (None: the one of a single run directory).
    """

    def __init__(self) -> None:
        """An empty ledger."""
        self._seen: dict[Hashable, set[Hashable]] = {}

    def phase(self, incarnation: Hashable, hashes: Iterable[Hashable]) -> PhaseSends:
        """Record one phase's sent bodies (``body_sha256``, in send order) and classify them."""
        seen = self._seen.setdefault(incarnation, set())
        before = frozenset(seen)
        sent = list(hashes)
        flags = []
        for h in sent:
            flags.append(h in seen)
            seen.add(h)
        return PhaseSends(tuple(flags), bool(sent) and all(h in before for h in sent))


def _is_prime(name: str) -> bool:
    return name == "prime" or name.startswith("prime")


def replay_orders(
    summary: dict[str, Any], plan: dict[str, Any] | None, records: Iterable[dict[str, Any]]
) -> dict[str, str]:
    """Replay phase name -> order (``forward``, ``reverse``, ``shuffle:SEED``, ...) of one run.

    A replay sends only bodies an earlier phase sent (``SentBodies``). From
    plan.json when it has sequences; otherwise from the records' ``body_sha256``
    in summary phase order, the order then read as ``unknown``. Primes (by name,
    or ``label: prime``) and phases with ``comparable: false`` in the summary are
    left out.
    """
    not_comparable = {
        p.get("name") for p in summary.get("phases") or []
        if p.get("comparable") is False or p.get("label") == "prime"  # a labelled prime (issue 14)
    }
    out: dict[str, str] = {}
    specs = [s for s in (plan or {}).get("phases") or [] if s.get("sequence")]
    from kvreplay.evidence.bodykeys import KeySet, key_of  # numpy, on first use

    if specs:
        names = [spec["name"] for spec in specs]
        for i, keep in enumerate(_replays(names, [partial(KeySet.of_sequence, spec["sequence"]) for spec in specs])):
            if keep and names[i] not in not_comparable:
                out[names[i]] = str(specs[i].get("order", "forward"))
        return out
    by_phase: dict[str, tuple[bytearray, list[Any]]] = {}
    for r in records:  # one pass: the records may be streamed
        if r.get("sent", True) and r.get("body_sha256"):
            buf, odd = by_phase.setdefault(str(r.get("phase")), (bytearray(), []))
            k = key_of(r["body_sha256"])
            if k is None:
                odd.append(r["body_sha256"])
            else:
                buf += k
    names = [ph.get("name", "") for ph in summary.get("phases") or []]
    empty: tuple[bytearray, list[Any]] = (bytearray(), [])
    sets = [partial(_packed, *by_phase.get(n, empty)) for n in names]
    for i, keep in enumerate(_replays(names, sets)):
        if keep and names[i] not in not_comparable:
            out[names[i]] = "unknown"
    return out


def _packed(keys: bytearray, odd: list[Any]) -> KeySet:
    import numpy as np

    from kvreplay.evidence.bodykeys import KEY, KeySet

    return KeySet(np.unique(np.frombuffer(keys, dtype=KEY)), set(odd))


def _replays(names: list[Any], sets: Sequence[Callable[[], KeySet]]) -> list[bool]:
    """Per phase in run order: a replay that is not a prime (``SentBodies``'s rule over a ``KeySet`` each).

    ``sets[i]()`` builds phase ``i``'s set of sent bodies; it is called only when
    needed: not for a phase with nothing sent before it (no replay) that is the last.
    """
    from kvreplay.evidence.bodykeys import KeySet

    seen = KeySet()
    out = []
    for i, (name, make) in enumerate(zip(names, sets, strict=True)):
        last = i == len(names) - 1
        if not len(seen) and last:
            out.append(False)  # nothing sent before: no replay, and no later phase needs its bodies
            continue
        sent = make()
        out.append(bool(len(sent)) and bool(len(seen)) and sent.issubset(seen) and not _is_prime(name))
        if not last:
            seen.update(sent)
    return out
