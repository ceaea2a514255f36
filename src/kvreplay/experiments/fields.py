"""Field helpers shared by the experiment file's parser and the step kinds.

The parser (``experiments.window.spec``) and every step kind (``experiments.steps``)
validate TOML values with these, so a duration or a name reads the same in every
table. Nothing here imports another part of ``experiments``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from kvreplay.argtypes import BOUND_RE, seconds
from kvreplay.errors import ConfigError

__all__ = ["BOUND_RE", "NAME_RE", "Where", "parse_duration", "transport_failures"]

NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
"""A step, arm or phase name: letters, digits, ``_``, ``.``, ``-``."""
# BOUND_RE (re-exported): its home is kvreplay.argtypes, the command line's --abort-if reads it too.


def parse_duration(value: Any, *, path: Path | None = None, line: int | None = None, fld: str = "") -> float:
    """``90`` / ``"90s"`` / ``"70m"`` / ``"1.5h"`` / ``"250ms"`` -> seconds.

    Raises:
        ConfigError: not a non-negative duration (naming ``path``, ``line``, ``fld``).
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    if isinstance(value, str) and (secs := seconds(value)) is not None:  # kvreplay.argtypes: the grammar's home
        return secs
    raise ConfigError(f"not a duration: {value!r} (e.g. 90s, 70m, 1h)", path=path, line=line, field=fld)


def transport_failures(data: dict[str, Any], path: Path | None, line: int | None, table: str) -> int | None:
    """A table's ``max_transport_failures``: None when absent, else a whole number >= 0 (0 = never abort).

    Raises:
        ConfigError: not a whole number >= 0, naming ``table.max_transport_failures``.
    """
    n = data.get("max_transport_failures")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 0):
        raise ConfigError("must be a whole number >= 0 (0: never abort on transport failures)", path=path,
                          line=line, field=f"{table}.max_transport_failures")
    return n


class Where:
    """Where a step's table is, for errors: the file, the line of its ``[[step]]`` and its field name.

    Attributes:
        path: The experiment file.
        line: Line of the step's ``[[step]]`` header (None if unknown).
        fld: The step's field name, like ``step[3]``.
    """

    __slots__ = ("fld", "line", "path")

    def __init__(self, path: Path, line: int | None, fld: str) -> None:
        self.path, self.line, self.fld = path, line, fld

    def error(self, message: str, key: str | None = None) -> ConfigError:
        """A ``ConfigError`` naming the file, the line and ``fld.key`` (``fld`` alone without a key)."""
        return ConfigError(message, path=self.path, line=self.line,
                           field=f"{self.fld}.{key}" if key else self.fld)

    def duration(self, value: Any, key: str) -> float:
        """``parse_duration`` of the step's ``key``.

        Raises:
            ConfigError: not a non-negative duration, naming ``fld.key``.
        """
        return parse_duration(value, path=self.path, line=self.line, fld=f"{self.fld}.{key}")
