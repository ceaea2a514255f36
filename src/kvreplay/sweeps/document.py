"""The sweep directory's own files: ``sweep.json`` (written after every point), ``points.csv``, and reading them.

Layout::

    DIR/sweep.json        format kvreplay-sweep/1: the options, points[], knee, stopped
    DIR/points/NN-c4/     one ordinary run directory per point (report, compare, load_run)
    DIR/points.csv        --csv: one row per point
    DIR/report.html       the sweep's curves (kvreplay.sweeps.report)

Every write goes through ``safe_io`` (registered secrets replaced, written atomically).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvreplay.errors import ConfigError
from kvreplay.report.csvfile import rows_csv
from kvreplay.rundir import read_object
from kvreplay.safe_io import atomic_write_json, atomic_write_text

__all__ = ["CSV_NAME", "POINTS_DIR", "SWEEP_FORMAT", "SWEEP_JSON", "csv_rows", "is_sweep_dir", "points_csv",
           "read_sweep", "write_points_csv", "write_sweep"]

SWEEP_FORMAT = "kvreplay-sweep/1"
SWEEP_JSON = "sweep.json"
CSV_NAME = "points.csv"
POINTS_DIR = "points"

_CSV_STATS = ("p50", "p90", "p99")


def write_sweep(sweep_dir: Path, doc: dict[str, Any]) -> Path:
    """Write ``doc`` as ``sweep_dir/sweep.json`` (atomically, secrets redacted); its path."""
    path = sweep_dir / SWEEP_JSON
    atomic_write_json(path, {"format": SWEEP_FORMAT, **doc})
    return path


def is_sweep_dir(path: Path) -> bool:
    """Whether ``path`` is a folder holding a sweep.json."""
    return (path / SWEEP_JSON).is_file()


def read_sweep(sweep_dir: Path) -> dict[str, Any]:
    """``sweep_dir/sweep.json``.

    Raises:
        ConfigError: absent, not a JSON object, or of another format.
    """
    doc = read_object(sweep_dir / SWEEP_JSON)
    if doc is None or doc.get("format") != SWEEP_FORMAT:
        raise ConfigError(f"not a sweep directory (no {SWEEP_JSON} of format {SWEEP_FORMAT})", path=sweep_dir)
    return doc


def csv_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """One flat row per point of a sweep.json document (the columns of ``points_csv``)."""
    kind = doc.get("kind", "concurrency")
    rows = []
    for p in doc.get("points") or []:
        cache = p.get("cache") or {}
        row: dict[str, Any] = {
            kind: p.get(kind), "phase": p.get("phase"), "run_dir": p.get("run_dir"), "records": p.get("records"),
            "ok": p.get("ok"), "wall_s": p.get("wall_s"), "throughput_rps": p.get("throughput_rps"),
            "output_tokens_per_s": p.get("output_tokens_per_s"), "goodput_rps": p.get("goodput_rps"),
            "slo_attainment": p.get("slo_attainment"), "cached_share": p.get("cached_share"),
            "cache_declared": cache.get("declared"), "cache_verified": cache.get("verified"),
            "cache_reason": cache.get("reason"), "limit_broken": p.get("limit_broken"),
        }
        for block in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
            stats = p.get(block) or {}
            for s in _CSV_STATS:
                row[f"{block.removesuffix('_ms')}_{s}_ms"] = stats.get(s)
        rows.append(row)
    return rows


def points_csv(rows: list[dict[str, Any]]) -> str:
    """``rows`` as CSV text (``report.csvfile.rows_csv``: None as an empty cell)."""
    return rows_csv(rows)


def write_points_csv(sweep_dir: Path, doc: dict[str, Any]) -> Path:
    """Write ``sweep_dir/points.csv`` from ``doc``; its path."""
    path = sweep_dir / CSV_NAME
    atomic_write_text(path, points_csv(csv_rows(doc)))
    return path
