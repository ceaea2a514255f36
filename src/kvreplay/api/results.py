"""Typed results of the Python API: a run's ``summary.json`` as frozen dataclasses.

``RunResult`` mirrors summary.json (docs/summary-schema.md): its phases are
``PhaseResult`` with ``tokens`` (``Tokens``) and latency digests (``Latency``, in
milliseconds). The whole summary stays readable as ``RunResult.summary`` and a
phase's as ``PhaseResult.raw``, so a key added to summary.json is never out of reach.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvreplay.errors import ConfigError
from kvreplay.rundir import RECORDS, SUMMARY, iter_records, read_plan
from kvreplay.rundir.jsonfile import read_object

__all__ = ["Latency", "PhaseResult", "RunResult", "Tokens"]


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class Latency:
    """A latency digest of one phase (milliseconds; None where the phase had no sample).

    Attributes:
        n: Samples.
        mean, p50, p90, p99, max: The digest, in ms.
    """

    n: int = 0
    mean: float | None = None
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    max: float | None = None

    @classmethod
    def from_json(cls, d: Any) -> Latency:
        """From a summary.json digest (``{"n", "mean", "p50", "p90", "p99", "max"}``); empty when absent."""
        if not isinstance(d, dict):
            return cls()
        return cls(n=int(d.get("n") or 0), mean=_num(d.get("mean")), p50=_num(d.get("p50")), p90=_num(d.get("p90")),
                   p99=_num(d.get("p99")), max=_num(d.get("max")))


@dataclass(frozen=True)
class Tokens:
    """A phase's token totals from the responses' usage (summary.json ``tokens``).

    Attributes:
        prompt: Prompt tokens the server reported.
        cached: Of those, tokens the server served from its prefix cache (None when no
            response reported it).
        completion: Generated tokens.
        cached_unknown: Responses that did not say how many tokens were cached.
    """

    prompt: int = 0
    cached: int | None = None
    completion: int = 0
    cached_unknown: int = 0

    @classmethod
    def from_json(cls, d: Any) -> Tokens:
        """From summary.json's ``tokens`` object (missing keys: zero, ``cached`` None)."""
        if not isinstance(d, dict):
            return cls()
        cached = d.get("cached")
        return cls(prompt=int(d.get("prompt") or 0), cached=int(cached) if isinstance(cached, int) else None,
                   completion=int(d.get("completion") or 0), cached_unknown=int(d.get("cached_unknown") or 0))


@dataclass(frozen=True)
class PhaseResult:
    """One phase of a run (an entry of summary.json ``phases``).

    Attributes:
        name: The phase name (``prime`` in ``prime:forward:c1``).
        planned, sent, ok: Requests planned, sent and answered with a complete stream.
        valid: False when the phase is marked invalid (``invalid_reasons`` says why).
        wall_s: The phase's wall time (s).
        tokens: Token totals (``Tokens``).
        ttft_ms, e2e_ms: Time to first token and end-to-end latency digests (ms).
        raw: The phase's whole summary.json object.
    """

    name: str
    planned: int
    sent: int
    ok: int
    valid: bool
    wall_s: float | None
    tokens: Tokens
    ttft_ms: Latency
    e2e_ms: Latency
    raw: dict[str, Any] = field(repr=False, compare=False)

    @property
    def cached_ratio(self) -> float | None:
        """``tokens.cached / tokens.prompt``: the share of prompt tokens served from the cache.

        None when no prompt token was counted or no response reported cached tokens.

        Example:
            >>> PhaseResult.from_json({"name": "replay", "tokens": {"prompt": 200, "cached": 150}}).cached_ratio
            0.75
        """
        if self.tokens.cached is None or not self.tokens.prompt:
            return None
        return self.tokens.cached / self.tokens.prompt

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> PhaseResult:
        """From one summary.json phase object (missing keys read as zero / absent)."""
        return cls(name=str(d.get("name", "")), planned=int(d.get("planned") or 0), sent=int(d.get("sent") or 0),
                   ok=int(d.get("ok") or 0), valid=bool(d.get("valid", True)), wall_s=_num(d.get("wall_s")),
                   tokens=Tokens.from_json(d.get("tokens")), ttft_ms=Latency.from_json(d.get("ttft_ms")),
                   e2e_ms=Latency.from_json(d.get("e2e_ms")), raw=d)


@dataclass(frozen=True)
class RunResult:
    """A finished run: its directory and summary.json, typed.

    Attributes:
        run_dir: The run directory (records.jsonl, summary.json, plan.json, reports).
        plan_sha256: The frozen plan's digest (equal for two runs of the same plan).
        records: Records written (one per request sent or not sent).
        aborted: The abort reason object, or None when the run completed.
        phases: The phases, in run order.
        summary: summary.json as a dict.

    Example:
        >>> r = kvreplay.replay("mtbench-52", phases=["prime:forward:c1:first8",
        ...                     "replay:reverse:c1:first8"], sim={"time_scale": 0})  # doctest: +SKIP
        >>> r.phase("replay").cached_ratio >= 0.9  # doctest: +SKIP
        True
    """

    run_dir: Path
    plan_sha256: str | None
    records: int
    aborted: Any
    phases: tuple[PhaseResult, ...]
    summary: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_summary(cls, summary: dict[str, Any], run_dir: str | Path) -> RunResult:
        """From a summary dict (as written to summary.json) and the run directory."""
        return cls(run_dir=Path(run_dir), plan_sha256=summary.get("plan_sha256"),
                   records=int(summary.get("records") or 0), aborted=summary.get("aborted") or None,
                   phases=tuple(PhaseResult.from_json(p) for p in summary.get("phases") or () if isinstance(p, dict)),
                   summary=summary)

    @classmethod
    def from_dir(cls, run_dir: str | Path) -> RunResult:
        """Read a run directory's summary.json.

        Raises:
            ConfigError: summary.json is missing or not a JSON object (``kvreplay.load_run``
                reads older or killed runs, rebuilding their summary).
        """
        summary = read_object(Path(run_dir) / SUMMARY)
        if summary is None:
            raise ConfigError(f"no readable {SUMMARY} (kvreplay.load_run rebuilds it from the records)",
                              path=run_dir)
        return cls.from_summary(summary, run_dir)

    def phase(self, name: str) -> PhaseResult:
        """The phase called ``name``.

        Raises:
            KeyError: no such phase (the message lists the run's phases).
        """
        for ph in self.phases:
            if ph.name == name:
                return ph
        raise KeyError(f"no phase {name!r} in {self.run_dir} (phases: {', '.join(p.name for p in self.phases)})")

    def statuses(self) -> dict[str, int]:
        """Records per status (``ok``, ``http_error``, ``not_sent``...), read from records.jsonl."""
        return dict(Counter(str(r.get("status")) for r in iter_records(self.run_dir / RECORDS)))

    def plan(self) -> dict[str, Any]:
        """plan.json as a dict (empty when the directory has none)."""
        return read_plan(self.run_dir) or {}

    def table(self) -> str:
        """The phase table that ``kvreplay run`` prints (Markdown)."""
        from kvreplay.report.markdown import render_table
        from kvreplay.report.units import sim_time_scale

        return render_table(self.summary, sim_time_scale(self.plan()))
