"""Errors raised by kvreplay.

Every error is a ``KvreplayError``; the ones caused by bad input also derive
from ``ValueError`` so callers can catch either (as aiohttp and asyncpg do)::

    KvreplayError
    ├─ ConfigError(KvreplayError, ValueError)    .path .line .field
    ├─ WorkloadError(KvreplayError, ValueError)  .path .line .body_index .field
    ├─ StreamError                               .partial: bytes received so far, .kind
    └─ BackendError                              .url
        └─ IdentityDriftError                    .before .after

Per-request failures (connect, timeout, HTTP status, stream errors) are never
raised out of the runner: they become records whose ``status`` names the class.
Run-level aborts (auth, identity drift, a counter that went down, deadlines)
are not raised either: the runner stops new requests and records the reason in
``summary.json`` (``aborted``), so nothing measured is lost.
"""

from __future__ import annotations

__all__ = [
    "BackendError",
    "ConfigError",
    "IdentityDriftError",
    "KvreplayError",
    "StreamError",
    "WorkloadError",
]


def _where(path: object, line: int | None, field: str | None) -> str:
    parts = []
    if path is not None:
        parts.append(str(path) + (f":{line}" if line is not None else ""))
    elif line is not None:
        parts.append(f"line {line}")
    if field:
        parts.append(f"field {field!r}")
    return ", ".join(parts)


class KvreplayError(Exception):
    """Base class of every error kvreplay raises on purpose."""


class ConfigError(KvreplayError, ValueError):
    """A plan, profile or command-line value is invalid.

    Attributes:
        path: File the value came from, or None for the command line.
        line: 1-based line in that file where known, else None.
        field: Dotted name of the offending key, where known.
        message: The message without its location prefix.
    """

    def __init__(
        self, message: str, *, path: object = None, line: int | None = None, field: str | None = None
    ) -> None:
        self.path, self.line, self.field, self.message = path, line, field, message
        where = _where(path, line, field)
        super().__init__(f"{where}: {message}" if where else message)


class WorkloadError(KvreplayError, ValueError):
    """A request body cannot be replayed; raised before any request is sent.

    Attributes:
        path: The file holding the body.
        line: 1-based line for JSONL workloads, else None.
        body_index: 0-based index of the body in the workload, where known.
        field: The JSON key at fault, where known.
        message: The message as given, without the ``path:line, field`` prefix of ``str(exc)``.
    """

    def __init__(
        self,
        message: str,
        *,
        path: object = None,
        line: int | None = None,
        body_index: int | None = None,
        field: str | None = None,
    ) -> None:
        self.path, self.line, self.body_index, self.field = path, line, body_index, field
        self.message = message
        where = _where(path, line, field)
        super().__init__(f"{where}: {message}" if where else message)


class StreamError(KvreplayError):
    """A response stream cannot be parsed.

    Attributes:
        kind: ``"line_too_long"`` or ``"malformed"``.
        partial: The bytes of the stream received so far (bounded by the line limit).
    """

    def __init__(self, message: str, *, kind: str = "malformed", partial: bytes = b"") -> None:
        self.kind = kind
        self.partial = partial
        super().__init__(message)


class BackendError(KvreplayError):
    """A server's counters or identity could not be read or make no sense."""

    def __init__(self, message: str, *, url: str | None = None) -> None:
        self.url = url
        super().__init__(message)


class IdentityDriftError(BackendError):
    """The server's identity (model, version, cache configuration) changed mid-run."""

    def __init__(self, before: dict, after: dict) -> None:
        self.before, self.after = before, after
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        super().__init__(f"server identity changed: {', '.join(changed)}")
