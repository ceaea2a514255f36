"""Typed results of the Python API: a run's ``summary.json`` as frozen dataclasses.

``RunResult`` mirrors summary.json (docs/summary-schema.md): its phases are
``PhaseResult`` with ``tokens`` (``Tokens``) and latency digests (``Latency``, in
milliseconds: measured ``ttft_ms``... and model ``ttft_model_ms``..., see ``PhaseResult``;
a figure not measured is NaN, with a ``get`` / ``*_or_none`` accessor giving None).
The whole summary stays readable as ``RunResult.summary`` and a phase's as
``PhaseResult.raw``, so a key added to summary.json is never out of reach.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from kvreplay.errors import ConfigError
from kvreplay.rundir import RECORDS, SUMMARY, iter_records, read_plan
from kvreplay.rundir.jsonfile import read_object

__all__ = ["Latency", "PhaseResult", "RunResult", "Tokens"]


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


NAN = math.nan
"""The value of a figure that was not measured (``Latency.p50`` of a phase without a sample,
``PhaseResult.cached_ratio`` without a cached-token count): NaN, which every comparison
answers False (``assert ratio >= 0.9`` fails) and ``math.isnan`` recognises. The ``*_or_none``
accessors give None instead."""

Stat = Literal["mean", "p50", "p90", "p99", "max"]


def _nan(value: Any) -> float:
    n = _num(value)
    return NAN if n is None else n


@dataclass(frozen=True)
class Latency:
    """A latency digest of one phase, in milliseconds.

    Which milliseconds the attribute of ``PhaseResult`` says: ``ttft_ms`` (and the other
    ``*_ms``) are measured wall-clock ms; ``ttft_model_ms`` (and the other ``*_model_ms``) are
    the simulator's model ms (measured / ``--sim-time-scale``, what ``RunResult.table()``
    prints), equal to the measured ones against a real server.

    A figure without a sample (``n == 0``) is NaN (``math.nan``; every comparison with it is
    False); ``get("p50")`` gives None instead.

    Attributes:
        n: Samples.
        mean, p50, p90, p99, max: The digest (ms; NaN without a sample).
    """

    n: int = 0
    mean: float = NAN
    p50: float = NAN
    p90: float = NAN
    p99: float = NAN
    max: float = NAN

    def get(self, stat: Stat) -> float | None:
        """One figure of the digest, None where it was not measured (instead of NaN).

        Example:
            >>> Latency().get("p50") is None, Latency(n=1, p50=2.0).get("p50")
            (True, 2.0)
        """
        value: float = getattr(self, stat)
        return None if math.isnan(value) else value

    @property
    def measured(self) -> bool:
        """Whether the digest has a sample (``n > 0``)."""
        return self.n > 0

    def scaled(self, factor: float) -> Latency:
        """The digest with every figure multiplied by ``factor`` (``n`` kept)."""
        return Latency(n=self.n, mean=self.mean * factor, p50=self.p50 * factor, p90=self.p90 * factor,
                       p99=self.p99 * factor, max=self.max * factor)

    @classmethod
    def from_json(cls, d: Any) -> Latency:
        """From a summary.json digest (``{"n", "mean", "p50", "p90", "p99", "max"}``); empty when absent."""
        if not isinstance(d, dict):
            return cls()
        return cls(n=int(d.get("n") or 0), mean=_nan(d.get("mean")), p50=_nan(d.get("p50")), p90=_nan(d.get("p90")),
                   p99=_nan(d.get("p99")), max=_nan(d.get("max")))


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
    """One phase of a run (an entry of summary.json ``phases``; docs/summary-schema.md).

    Latencies come twice: ``ttft_ms``, ``itl_ms``, ``tpot_ms``, ``e2e_ms`` and ``queue_ms`` are
    **measured** wall-clock milliseconds; ``ttft_model_ms``, ``itl_model_ms``, ``tpot_model_ms``
    and ``e2e_model_ms`` are **model** milliseconds, the measured ones divided by the
    simulator's time scale (``time_scale``; what ``RunResult.table()`` and the report print),
    and equal to the measured ones against a real server or at scale 1.

    Attributes:
        name: The phase name (``prime`` in ``prime:forward:c1``).
        planned, sent, ok: Requests planned, sent and answered with a complete stream.
        valid: False when the phase is marked invalid (``invalid_reasons`` says why).
        invalid_reasons: Why it is invalid (empty when valid).
        wall_s: The phase's wall time (s; None when nothing was sent).
        tokens: Token totals (``Tokens``).
        ttft_ms, itl_ms, tpot_ms, e2e_ms, queue_ms: Measured latency digests (ms).
        ttft_model_ms, itl_model_ms, tpot_model_ms, e2e_model_ms: The same in model ms.
        time_scale: The simulator's time scale that converts them (None: no conversion).
        throughput_rps: ``ok / wall_s`` (requests/s; None without a wall time).
        output_tokens_per_s: Completion tokens / ``wall_s`` (tokens/s; None without a wall time).
        counter_delta: The server's counter increases over the phase under common names
            (``hits``, ``hit_tokens``, ``evictions``...; units in summary.json ``units``); only
            numeric values; None without counters.
        counter_reset: The counters showed a server restart during the phase.
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
    itl_ms: Latency = field(default_factory=Latency)
    tpot_ms: Latency = field(default_factory=Latency)
    queue_ms: Latency = field(default_factory=Latency)
    time_scale: float | None = None
    throughput_rps: float | None = None
    output_tokens_per_s: float | None = None
    counter_delta: dict[str, float] | None = None
    counter_reset: bool = False
    invalid_reasons: tuple[str, ...] = ()

    def _model(self, measured: Latency) -> Latency:
        return measured if self.time_scale is None else measured.scaled(1.0 / self.time_scale)

    @property
    def ttft_model_ms(self) -> Latency:
        """Time to first token in model ms (measured / ``time_scale``)."""
        return self._model(self.ttft_ms)

    @property
    def itl_model_ms(self) -> Latency:
        """Inter-token latency in model ms (measured / ``time_scale``)."""
        return self._model(self.itl_ms)

    @property
    def tpot_model_ms(self) -> Latency:
        """Time per output token in model ms (measured / ``time_scale``)."""
        return self._model(self.tpot_ms)

    @property
    def e2e_model_ms(self) -> Latency:
        """End-to-end latency in model ms (measured / ``time_scale``)."""
        return self._model(self.e2e_ms)

    @property
    def cached_ratio(self) -> float:
        """``tokens.cached / tokens.prompt``: the share of prompt tokens served from the cache.

        NaN (``math.nan``: every comparison False) when no prompt token was counted or no
        response reported cached tokens; ``cached_ratio_or_none`` gives None then.

        Example:
            >>> PhaseResult.from_json({"name": "replay", "tokens": {"prompt": 200, "cached": 150}}).cached_ratio
            0.75
        """
        ratio = self.cached_ratio_or_none
        return NAN if ratio is None else ratio

    @property
    def cached_ratio_or_none(self) -> float | None:
        """``cached_ratio``, None where it is not known (instead of NaN)."""
        if self.tokens.cached is None or not self.tokens.prompt:
            return None
        return self.tokens.cached / self.tokens.prompt

    @classmethod
    def from_json(cls, d: dict[str, Any], time_scale: float | None = None) -> PhaseResult:
        """From one summary.json phase object (missing keys read as zero / absent).

        Args:
            d: The phase object.
            time_scale: The run's converting simulator time scale (``report.units.sim_time_scale``),
                or None.
        """
        delta = d.get("counter_delta")
        counters = ({k: float(v) for k, v in delta.items() if _num(v) is not None}
                    if isinstance(delta, dict) else None)
        reasons = d.get("invalid_reasons")
        return cls(name=str(d.get("name", "")), planned=int(d.get("planned") or 0), sent=int(d.get("sent") or 0),
                   ok=int(d.get("ok") or 0), valid=bool(d.get("valid", True)), wall_s=_num(d.get("wall_s")),
                   tokens=Tokens.from_json(d.get("tokens")), ttft_ms=Latency.from_json(d.get("ttft_ms")),
                   e2e_ms=Latency.from_json(d.get("e2e_ms")), raw=d, itl_ms=Latency.from_json(d.get("itl_ms")),
                   tpot_ms=Latency.from_json(d.get("tpot_ms")), queue_ms=Latency.from_json(d.get("queue_ms")),
                   time_scale=time_scale, throughput_rps=_num(d.get("throughput_rps")),
                   output_tokens_per_s=_num(d.get("output_tokens_per_s")), counter_delta=counters,
                   counter_reset=bool(isinstance(delta, dict) and delta.get("reset")),
                   invalid_reasons=tuple(str(r) for r in reasons) if isinstance(reasons, list) else ())


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
        """From a summary dict (as written to summary.json) and the run directory.

        The phases' model-ms digests use the simulator time scale of the directory's plan.json
        (``report.units.sim_time_scale``; none without one).
        """
        from kvreplay.report.units import sim_time_scale

        scale = sim_time_scale(read_plan(Path(run_dir)), summary)
        return cls(run_dir=Path(run_dir), plan_sha256=summary.get("plan_sha256"),
                   records=int(summary.get("records") or 0), aborted=summary.get("aborted") or None,
                   phases=tuple(PhaseResult.from_json(p, scale) for p in summary.get("phases") or ()
                                if isinstance(p, dict)),
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
