"""Reading a TOML file the user wrote: one place that turns every way it can fail into a ``ConfigError``.

Plans (``--plan``), experiment files, simulator settings and backend profiles all come
through ``read_toml``: a missing or unreadable file, bytes that are not UTF-8 (TOML 1.0
requires UTF-8: https://toml.io/en/v1.0.0, "Spec") and invalid TOML each give exit 2 with
the file, the line and what was wrong, never a traceback.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from kvreplay.errors import ConfigError

__all__ = ["field_line", "key_line", "parse_toml", "read_file_bytes", "read_toml"]


def parse_toml(data: bytes, *, where: object) -> tuple[str, dict[str, Any]]:
    """Decode ``data`` as UTF-8 and parse it as TOML.

    Args:
        data: The file's bytes.
        where: The file's name for messages.

    Returns:
        ``(text, table)``.

    Raises:
        ConfigError: not UTF-8 (the line of the first bad byte named) or invalid TOML (its line).
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"not UTF-8 (byte {exc.start}: {data[exc.start:exc.start + 1]!r}); TOML files are UTF-8",
                          path=where, line=line) from None
    try:
        return text, tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML: {exc}", path=where, line=getattr(exc, "lineno", None)) from None


def read_toml(path: str | Path, *, what: str = "file") -> tuple[str, dict[str, Any]]:
    """Read and parse the TOML file at ``path``.

    Args:
        path: The file.
        what: What it is, for the not-found message (``"plan file"``, ``"experiment file"``).

    Returns:
        ``(text, table)``.

    Raises:
        ConfigError: not found, unreadable, not UTF-8, or invalid TOML (file and line named).
    """
    p = Path(path)
    return parse_toml(read_file_bytes(p, what=what), where=p)


def read_file_bytes(path: str | Path, *, what: str = "file") -> bytes:
    """The exact bytes of the TOML file at ``path`` (``parse_toml`` them; an experiment keeps them).

    Raises:
        ConfigError: not found or unreadable (file named).
    """
    p = Path(path)
    try:
        return p.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{what} not found", path=p) from None
    except OSError as exc:
        raise ConfigError(f"cannot read {what}: {exc.strerror or exc}", path=p) from None


def key_line(text: str, key: str) -> int | None:
    """The 1-based line of the first ``key = ...`` in ``text`` (bare or quoted key), else None.

    For messages about a value the TOML parser accepted but its reader refused.
    """
    import re

    pat = re.compile(rf"""^\s*(?:{re.escape(key)}|"{re.escape(key)}"|'{re.escape(key)}')\s*=""")
    for i, ln in enumerate(text.splitlines()):
        if pat.match(ln):
            return i + 1
    return None


_PART = r"""[A-Za-z0-9_-]+|"[^"\n]*"|'[^'\n]*'"""  # one key of a dotted key: bare, basic or literal


def _key_path(key: str) -> list[str]:
    """``common."hits".unit`` -> ``["common", "hits", "unit"]`` (quotes dropped; TOML 1.0, "Keys")."""
    import re

    return [x.strip("\"'") for x in re.findall(_PART, key)]


def field_line(text: str, field: str) -> int | None:
    """The 1-based line of a dotted ``field`` (``common.hit_tokens.unit``, ``series[1]``) in ``text``, else None.

    The longest leading part of ``field`` that heads a table (``[common.hit_tokens]``,
    ``[common."hit_tokens"]``) is found first, then the first key between that header and the
    next whose dotted path starts the rest (``unit``; ``hit_tokens.unit`` or ``hit_tokens = {...}``
    under ``[common]``; an index ``[i]`` is dropped: the list's key names the line); a field
    that is itself a table is its header's line; a top-level key (``common.hit_tokens.unit =``
    too) is found before the first header. For messages about a value the TOML parser
    accepted but its reader refused (a profile's fields).
    """
    import re

    parts = [re.sub(r"\[\d+\]$", "", x) for x in field.split(".")]
    lines = text.splitlines()
    path = rf"((?:{_PART})(?:\s*\.\s*(?:{_PART}))*)"
    headers = [(i, _key_path(m.group(1))) for i, ln in enumerate(lines)
               if (m := re.match(rf"^\s*\[\s*{path}\s*\]\s*(?:#.*)?$", ln))]
    start, end, rest = 0, len(lines), parts
    for k in range(len(parts), 0, -1):
        hit = [i for i, h in headers if h == parts[:k]]
        if hit:
            if k == len(parts):
                return hit[0] + 1
            start, rest = hit[0] + 1, parts[k:]
            end = next((i for i, _ in headers if i > hit[0]), len(lines))
            break
    else:
        end = headers[0][0] if headers else len(lines)
    key = re.compile(rf"^\s*{path}\s*=")
    for i in range(start, end):
        m = key.match(lines[i])
        if m and rest[: len(got := _key_path(m.group(1)))] == got:
            return i + 1
    return None
