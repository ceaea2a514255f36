"""What a phase's figures can and cannot show about restores (the evidence rules).

Every diagnosis finding rests on these rules, so that it never contradicts the
records:

*Absent is not zero.* A counter family takes part in a phase only when its
lookup/query counter moved in that phase. The host (KV connector, CPU RAM)
tier is *live* when ``host_lookups`` or ``host_query_tokens`` increased; the
device prefix cache is live when ``lookups`` or ``query_tokens`` increased, or,
for a server that exports no lookup counter for it (llama.cpp's
``prompt_tokens_cached_total``), when its hit counter is present and the server
did prompt work (``prompt_tokens`` or ``computed_tokens`` increased) or the hit
counter itself moved. A family that is exported but did not move is *absent*
for the phase, with the reason (vLLM prints
``vllm:external_prefix_cache_queries_total 0`` without any connector: that is no
host tier, not a host tier that restored nothing).

*Restore signal.* A live tier restores what its restore counter says:
host ``host_fetched_tokens``, else ``host_reused_tokens``, else
``host_hit_tokens``, else ``host_hits`` (lookups); device ``hit_tokens``, else
``hits``. The usage ``cached_tokens`` total counts too, but only when every ok
answer reported it. A phase *restored some* when any of these is above zero, and
*restored none* only when every one of them is zero and at least one exists; with
none it is no evidence either way.

*One tier across the compared phases.* The order rules compare replays on the
first tier live in every one of them: the host tier when its lookups moved in
each (host-tier findings need host lookups > 0), else the device prefix cache
(a server without a host tier: device hit tokens), else usage ``cached_tokens``.

*Primes are no evidence.* Only replays count: phases every body of which an
earlier phase of the same run already sent (plan.json ``sequence`` hashes; for a
run without plan.json, the records' ``body_sha256``). A phase whose name is
``prime`` or starts with ``prime`` never counts, nor one marked
``comparable: false`` (a missing key reads true).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kvreplay.report.cells import fmt

__all__ = [
    "DEVICE_KEYS",
    "HOST_KEYS",
    "PhaseEvidence",
    "Tier",
    "phase_evidence",
    "replay_orders",
    "usable",
]

HOST_KEYS = ("host_fetched_tokens", "host_reused_tokens", "host_hit_tokens", "host_hits")
"""Host-tier restore counters, most preferred first."""
HOST_LOOKUP_KEYS = ("host_lookups", "host_query_tokens")
DEVICE_KEYS = ("hit_tokens", "hits")
"""Device-tier restore counters, most preferred first."""
DEVICE_LOOKUP_KEYS = ("lookups", "query_tokens")
DEVICE_WORK_KEYS = ("prompt_tokens", "computed_tokens")


def usable(ph: dict[str, Any]) -> bool:
    """A phase that can take part: valid, not deferred, with at least one ok request."""
    return bool(ph.get("valid", True)) and not ph.get("deferred") and (ph.get("ok") or 0) > 0


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
            counters exist but did not move, or that reset.
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


def phase_evidence(ph: dict[str, Any]) -> PhaseEvidence:
    """The live tiers of one summary phase (rules in the module docstring).

    Args:
        ph: A phase of summary.json (any version 1: only ``counter_delta``,
            ``tokens`` and ``ok`` are read).

    Returns:
        The evidence; a delta with ``reset`` contributes no counter tier.
    """
    d = ph.get("counter_delta") or {}
    tiers: list[Tier] = []
    absent: dict[str, str] = {}
    if d.get("reset"):
        if d:
            absent["counter"] = "the server restarted during the phase"
        d = {}
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
    tok = ph.get("tokens") or {}
    if tok and not tok.get("cached_unknown") and (ph.get("ok") or 0) > 0:
        tiers.append(
            Tier("usage", "usage cached_tokens", float(tok.get("cached") or 0),
                 (("ok answers", float(ph["ok"])),))
        )
    return PhaseEvidence(ph.get("name", "?"), tuple(tiers), absent)


def _is_prime(name: str) -> bool:
    return name == "prime" or name.startswith("prime")


def replay_orders(
    summary: dict[str, Any], plan: dict[str, Any] | None, records: Iterable[dict[str, Any]]
) -> dict[str, str]:
    """Replay phase name -> order (``forward``, ``reverse``, ``shuffle:SEED``, ...).

    A replay sends only bodies an earlier phase sent. From plan.json when it has
    sequences; otherwise from the records' ``body_sha256`` in summary phase
    order, the order then read as ``unknown``. Primes (by name, or ``label: prime``)
    and phases with ``comparable: false`` in the summary are left out.
    """
    not_comparable = {
        p.get("name") for p in summary.get("phases") or []
        if p.get("comparable") is False or p.get("label") == "prime"  # a labelled prime (issue 14)
    }
    out: dict[str, str] = {}
    seen: set[str] = set()
    specs = [s for s in (plan or {}).get("phases") or [] if s.get("sequence")]
    if specs:
        for spec in specs:
            hashes = {s["body_sha256"] for s in spec["sequence"]}
            name = spec["name"]
            if hashes <= seen and not _is_prime(name) and name not in not_comparable:
                out[name] = str(spec.get("order", "forward"))
            seen |= hashes
        return out
    by_phase: dict[str, set[str]] = {}
    for r in records:  # one pass: the records may be streamed
        if r.get("sent", True) and r.get("body_sha256"):
            by_phase.setdefault(str(r.get("phase")), set()).add(r["body_sha256"])
    for ph in summary.get("phases") or []:
        name = ph.get("name", "")
        hashes = by_phase.get(name, set())
        if hashes and hashes <= seen and not _is_prime(name) and name not in not_comparable:
            out[name] = "unknown"
        seen |= hashes
    return out
