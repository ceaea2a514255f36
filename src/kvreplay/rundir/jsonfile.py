"""JSON documents of a run or experiment directory, read leniently (None when missing or not JSON).

Writes go through ``kvreplay.safe_io.atomic_write_json`` (indented, atomic,
registered secrets redacted).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from kvreplay.errors import ConfigError

__all__ = ["read_json", "read_json_checked", "read_object"]


def read_json(path: Path) -> Any:
    """The JSON document in a run-directory file, or None when it is missing, unreadable or not JSON.

    Args:
        path: e.g. ``summary.json``, ``plan.json``, ``verdict.json``, ``ab.json``.

    Returns:
        The parsed value (any JSON type; the caller checks the shape), or None.
    """
    try:
        return orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None


def read_object(path: Path) -> dict[str, Any] | None:
    """``read_json`` of a file that holds a JSON object; None for any other value."""
    data = read_json(path)
    return data if isinstance(data, dict) else None


def read_json_checked(path: Path) -> Any:
    """The JSON document in ``path``, for input the user named (``kvreplay compare DIR ...``).

    Raises:
        ConfigError: it cannot be read or is not JSON ("cannot read: ...", naming the file).
    """
    try:
        return orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read: {exc}", path=path) from exc
