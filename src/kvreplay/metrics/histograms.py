"""Latency histograms: HdrHistogram in integer microseconds, 1 µs to 1 h, 3 significant digits.

Stored as HdrHistogram interval logs (the format HdrHistogram's ``HistogramLogReader``
and ``HistogramLogProcessor`` read; written with ``hdrh.log.HistogramLogWriter``),
one file per phase and metric. Out-of-range values are counted, never dropped
silently (``hdrh``'s ``record_value`` returns False for them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogWriter

__all__ = ["HIGHEST_US", "LOWEST_US", "METRICS", "LatencySet", "PhaseHistograms", "new_histogram"]

LOWEST_US = 1
HIGHEST_US = 3_600_000_000
SIG_FIGS = 3
METRICS = ("ttft", "itl", "tpot", "e2e", "queue", "ttft_from_intended", "e2e_from_intended")
"""ttft: sent -> first token; itl: gap between token events; tpot: (last - first token) /
(completion tokens - 1); e2e: sent -> done. Open loop only (wrk2's corrected
latencies): queue: intended -> sent (dispatch delay); ttft_from_intended and
e2e_from_intended: measured from the intended send time."""


def new_histogram() -> HdrHistogram:
    """An empty histogram for µs values from 1 µs to 1 h at 3 significant digits."""
    return HdrHistogram(LOWEST_US, HIGHEST_US, SIG_FIGS)


@dataclass(slots=True)
class LatencySet:
    """One histogram with its out-of-range count.

    Attributes:
        hist: The histogram (values in µs).
        out_of_range: Values ``record_value`` refused (above 1 h).
    """

    hist: HdrHistogram = field(default_factory=new_histogram)
    out_of_range: int = 0
    sum_us: int = 0

    def record_ns(self, value_ns: int) -> None:
        """Record one latency given in ns (rounded to µs, at least 1 µs)."""
        us = max(LOWEST_US, (value_ns + 500) // 1000)
        if self.hist.record_value(us):
            self.sum_us += us
        else:
            self.out_of_range += 1

    def summary_ms(self) -> dict[str, float | int | None]:
        """``{n, mean, p50, p90, p99, max}`` in ms (None when empty)."""
        h = self.hist
        n = h.get_total_count()
        if n == 0:
            return {"n": 0, "mean": None, "p50": None, "p90": None, "p99": None, "max": None}

        def ms(us: float) -> float:
            return round(us / 1000.0, 3)

        # One pass over the counts (hdrh's get_mean_value walks every bucket in
        # Python); the mean comes from the exact running sum instead.
        pct = h.get_percentile_to_value_dict([50, 90, 99])
        return {
            "n": n,
            "mean": ms(self.sum_us / n),
            "p50": ms(pct[50]),
            "p90": ms(pct[90]),
            "p99": ms(pct[99]),
            "max": ms(h.get_max_value()),
        }


@dataclass(slots=True)
class PhaseHistograms:
    """The histograms of one phase, one ``LatencySet`` per metric in ``METRICS``."""

    sets: dict[str, LatencySet] = field(default_factory=lambda: {m: LatencySet() for m in METRICS})

    def write_logs(self, out_dir: Path, phase: str, start_s: float, end_s: float) -> dict[str, str]:
        """Write one HdrHistogram interval log per non-empty metric.

        Args:
            out_dir: The run's ``histograms/`` folder.
            phase: Phase name (file prefix).
            start_s, end_s: Interval bounds (s, run-relative).

        Returns:
            metric -> relative file name.
        """
        out_dir.mkdir(parents=True, exist_ok=True)
        files = {}
        for metric, ls in self.sets.items():
            if ls.hist.get_total_count() == 0:
                continue
            name = f"{phase}.{metric}.hlog"
            with open(out_dir / name, "w") as f:
                w = HistogramLogWriter(f)
                w.output_comment(f"kvreplay phase={phase} metric={metric} unit=us")
                w.output_log_format_version()
                w.output_legend()
                w.output_interval_histogram(ls.hist, start_s, end_s, 1000.0)
            files[metric] = name
        return files
