"""A run's phases as CSV (``kvreplay report RUN_DIR --csv`` writes ``phases.csv``).

One row per phase of summary.json, in run order: its name, label, load (concurrency,
offered rate), counts, wall time, throughput, TTFT/TPOT/ITL/E2E percentiles (measured
ms), prompt/cached/completion tokens and its validity. Written through ``safe_io``.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from kvreplay.rundir import read_summary
from kvreplay.safe_io import atomic_write_text

__all__ = ["PHASES_CSV", "phase_rows", "rows_csv", "write_phases_csv"]

PHASES_CSV = "phases.csv"
_BLOCKS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
_STATS = ("p50", "p90", "p99", "mean")


def phase_rows(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """One flat row per phase of a summary.json (the columns of phases.csv)."""
    rows = []
    for ph in summary.get("phases") or []:
        failed = ph.get("failed") or {}
        tokens = ph.get("tokens") or {}
        row: dict[str, Any] = {
            "phase": ph.get("name"), "label": ph.get("label"), "concurrency": ph.get("concurrency"),
            "offered_rps": ph.get("offered_rps"), "planned": ph.get("planned"), "sent": ph.get("sent"),
            "ok": ph.get("ok"), "failed": sum(v for v in failed.values() if isinstance(v, int)),
            "wall_s": ph.get("wall_s"), "throughput_rps": ph.get("throughput_rps"),
            "output_tokens_per_s": ph.get("output_tokens_per_s"),
        }
        for block in _BLOCKS:
            stats = ph.get(block) or {}
            for s in _STATS:
                row[f"{block.removesuffix('_ms')}_{s}_ms"] = stats.get(s)
        row.update({"prompt_tokens": tokens.get("prompt"), "cached_tokens": tokens.get("cached"),
                    "completion_tokens": tokens.get("completion"), "valid": ph.get("valid")})
        rows.append(row)
    return rows


def rows_csv(rows: list[dict[str, Any]]) -> str:
    """``rows`` as CSV text (header from the first row's keys; None as an empty cell; "" without rows)."""
    if not rows:
        return ""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: "" if v is None else v for k, v in r.items()})
    return buf.getvalue()


def write_phases_csv(run_dir: str | Path) -> Path:
    """Write ``run_dir/phases.csv`` from its summary.json; its path.

    Raises:
        FileNotFoundError: the run directory has no summary.json.
    """
    d = Path(run_dir)
    summary = read_summary(d)
    if summary is None:
        raise FileNotFoundError(f"{d}: no summary.json (run kvreplay report {d} first to rebuild it)")
    path = d / PHASES_CSV
    atomic_write_text(path, rows_csv(phase_rows(summary)))
    return path
