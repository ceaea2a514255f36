"""Per-replica and fleet totals of one phase (summary.json ``phases[].replicas`` and ``phases[].fleet``).

A fleet run's records name their replica (``replica``: the URL as given, or null
with ``replica_reason``; ``runner.fleet``). ``FleetStats.add`` accounts one
record under its replica; ``to_json`` gives::

    replicas: [{"url", "requests", "ok", "tokens": {"prompt", "cached", "completion"},
                "hit_rate" (cached / prompt, null without prompt tokens),
                "ttft_ms", "itl_ms" ({n, mean, p50, p90, p99, max} of ok requests),
                "counter_delta" (that replica's own counters over the phase, or null)}]
    fleet: {"requests", "ok", "tokens", "hit_rate" (the sums over ``replicas``),
            "unattributed": {"requests", "reasons": {reason: n}, "tokens"} (sent records naming no replica),
            "balance": {"requests_max_over_mean", "prompt_tokens_max_over_mean"},
            "attribution": "per_request" | "header" | "phase_only" | "mixed",
            "note": text | null}

``requests`` counts sent records; tokens come from the usage of ok ones.
``attribution``: how records were attributed (``replica_source``); ``phase_only``
when no record could be (above C1 without a header): then only each replica's
``counter_delta`` tells how the phase split, which the note says.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvreplay.metrics.histograms import PhaseHistograms

__all__ = ["FleetStats"]


class _Replica:
    __slots__ = ("cached", "completion", "hists", "ok", "prompt", "requests")

    def __init__(self) -> None:
        self.requests = 0
        self.ok = 0
        self.prompt = 0
        self.cached = 0
        self.completion = 0
        self.hists = PhaseHistograms()

    def tokens(self) -> dict[str, int]:
        return {"prompt": self.prompt, "cached": self.cached, "completion": self.completion}


def _hit_rate(cached: int, prompt: int) -> float | None:
    return round(cached / prompt, 6) if prompt else None


def _max_over_mean(values: list[int]) -> float | None:
    if not values or not sum(values):
        return None
    return round(max(values) / (sum(values) / len(values)), 6)


class FleetStats:
    """Running per-replica totals of one phase.

    Args:
        urls: The replicas listed for the run, in order (each gets an entry, with zero requests too).
    """

    def __init__(self, urls: Sequence[str] = ()) -> None:
        self.by_url: dict[str, _Replica] = {u: _Replica() for u in urls}
        self.unattributed = _Replica()
        self.reasons: dict[str, int] = {}
        self.sources: dict[str, int] = {}
        self.counter_deltas: dict[str, Any] = {}

    def add(self, rec: dict[str, Any], token_ns: Sequence[int] | None = None) -> None:
        """Account one sent record under its ``replica`` (not-sent records are skipped).

        Args:
            rec: A record of records.jsonl.
            token_ns: Its token arrival times (ns) for ITL; None when rebuilding from records.
        """
        if not rec.get("sent", True):
            return
        url = rec.get("replica")
        if url is None:
            r = self.unattributed
            reason = rec.get("replica_reason") or "none"
            self.reasons[reason] = self.reasons.get(reason, 0) + 1
        else:
            r = self.by_url.get(url) or self.by_url.setdefault(url, _Replica())
            src = rec.get("replica_source") or "counters"
            self.sources[src] = self.sources.get(src, 0) + 1
        r.requests += 1
        if rec.get("status") != "ok":
            return
        r.ok += 1
        u = rec.get("usage") or {}
        r.prompt += u.get("prompt_tokens") or 0
        r.cached += u.get("cached_tokens") or 0
        r.completion += u.get("completion_tokens") or 0
        if url is None:
            return
        s = r.hists.sets
        if rec.get("ttft_ns") is not None:
            s["ttft"].record_ns(rec["ttft_ns"])
        if token_ns is not None and len(token_ns) > 1:
            s["itl"].record_gaps_of(token_ns)

    def to_payload(self) -> dict[str, Any]:
        """A worker's totals, for ``merge_payload`` in the coordinator (``--workers``, ``--ray``; picklable)."""
        def one(r: _Replica) -> dict[str, Any]:
            hs = {m: r.hists.sets[m].hist.encode() if r.hists.sets[m].hist.get_total_count() else None
                  for m in ("ttft", "itl")}
            return {"requests": r.requests, "ok": r.ok, "prompt": r.prompt, "cached": r.cached,
                    "completion": r.completion, "hists": hs}

        return {"replicas": {u: one(r) for u, r in self.by_url.items()}, "unattributed": one(self.unattributed),
                "reasons": dict(self.reasons), "sources": dict(self.sources),
                "counter_deltas": dict(self.counter_deltas)}

    def merge_payload(self, p: dict[str, Any]) -> None:
        """Add one worker's ``to_payload`` (counts summed, histograms added; counter deltas kept when given)."""
        def add(r: _Replica, q: dict[str, Any]) -> None:
            r.requests += q["requests"]
            r.ok += q["ok"]
            r.prompt += q["prompt"]
            r.cached += q["cached"]
            r.completion += q["completion"]
            for m, enc in q["hists"].items():
                if enc is not None:
                    r.hists.sets[m].hist.decode_and_add(enc)

        for u, q in p["replicas"].items():
            add(self.by_url.get(u) or self.by_url.setdefault(u, _Replica()), q)
        add(self.unattributed, p["unattributed"])
        for k, n in p["reasons"].items():
            self.reasons[k] = self.reasons.get(k, 0) + n
        for k, n in p["sources"].items():
            self.sources[k] = self.sources.get(k, 0) + n
        if p["counter_deltas"]:
            self.counter_deltas = dict(p["counter_deltas"])

    def attribution(self) -> str:
        """``per_request`` (counters), ``header``, ``mixed`` or ``phase_only`` (no record attributed)."""
        if not self.sources:
            return "phase_only"
        if len(self.sources) > 1:
            return "mixed"
        return "per_request" if "counters" in self.sources else "header"

    def to_json(self) -> dict[str, Any]:
        """``{"replicas": [...], "fleet": {...}}`` (module docstring)."""
        reps: list[dict[str, Any]] = []
        for url, r in self.by_url.items():
            reps.append({"url": url, "requests": r.requests, "ok": r.ok, "tokens": r.tokens(),
                         "hit_rate": _hit_rate(r.cached, r.prompt),
                         "ttft_ms": r.hists.sets["ttft"].summary_ms(), "itl_ms": r.hists.sets["itl"].summary_ms(),
                         "counter_delta": self.counter_deltas.get(url)})
        tot = {k: sum(e["tokens"][k] for e in reps) for k in ("prompt", "cached", "completion")}
        how = self.attribution()
        note = None
        if how == "phase_only":
            note = ("no record names its replica (above C1 without a replica header): per-replica totals "
                    "are the replicas' own counter deltas over the phase only")
        elif self.reasons:
            note = (f"{self.unattributed.requests} sent records name no replica: "
                    + ", ".join(f"{k} {v}" for k, v in sorted(self.reasons.items())))
        fleet = {
            "requests": sum(e["requests"] for e in reps),
            "ok": sum(e["ok"] for e in reps),
            "tokens": tot,
            "hit_rate": _hit_rate(tot["cached"], tot["prompt"]),
            "unattributed": {"requests": self.unattributed.requests, "reasons": dict(sorted(self.reasons.items())),
                             "tokens": self.unattributed.tokens()},
            "balance": {"requests_max_over_mean": _max_over_mean([e["requests"] for e in reps]),
                        "prompt_tokens_max_over_mean": _max_over_mean([e["tokens"]["prompt"] for e in reps])},
            "attribution": how,
            "note": note,
        }
        return {"replicas": reps, "fleet": fleet}
