"""``records.parquet``: records.jsonl as one Parquet table for notebooks (optional extra).

Install with ``pip install 'kvreplay[parquet]'`` (pyarrow). Nested record
fields are flattened with dots (``usage.cached_tokens``); the free-form
``usage_raw``, ``timings`` and ``counter_delta`` objects are kept as JSON
strings, since their keys differ between servers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

__all__ = ["JSON_COLUMNS", "flatten_record", "write_parquet"]

JSON_COLUMNS = ("usage_raw", "timings", "counter_delta")


def flatten_record(rec: dict[str, Any]) -> dict[str, Any]:
    """One record as flat columns: nested dicts joined with dots, ``JSON_COLUMNS`` as JSON text."""
    out: dict[str, Any] = {}
    for k, v in rec.items():
        if k in JSON_COLUMNS:
            out[k] = None if v is None else orjson.dumps(v).decode()
        elif isinstance(v, dict):
            for k2, v2 in v.items():
                out[f"{k}.{k2}"] = v2
        else:
            out[k] = v
    return out


def write_parquet(records: list[dict[str, Any]], path: Path) -> Path:
    """Write records to ``path`` as Parquet.

    Raises:
        ImportError: pyarrow is not installed (``kvreplay[parquet]``).
    """
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise ImportError("--parquet needs pyarrow: pip install 'kvreplay[parquet]'") from exc
    rows = [flatten_record(r) for r in records]
    cols: list[str] = []
    for r in rows:
        cols += [c for c in r if c not in cols]
    table = pa.table({c: [r.get(c) for r in rows] for c in cols}) if rows else pa.table({})
    pq.write_table(table, path)
    return path
