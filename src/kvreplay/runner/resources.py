"""The client's own resources, checked before the first request (issue 17).

Every request in flight holds one socket, so a run at concurrency C needs about
C open files plus the run directory's files and the interpreter's own. Under a
smaller limit the client's ``EMFILE`` failures would be recorded as the server's
``connect`` errors; so the soft limit is raised when the hard limit allows,
else the run is refused before anything is sent.
"""

from __future__ import annotations

from kvreplay.errors import ConfigError

__all__ = ["FD_MARGIN", "ensure_open_files"]

FD_MARGIN = 64
"""Open files kept beside one socket per request in flight (run files, counters, interpreter)."""


def ensure_open_files(concurrency: int, *, field: str = "--phase") -> int:
    """Make sure ``concurrency + FD_MARGIN`` files can be open; returns the soft limit in force.

    Raises:
        ConfigError: the hard limit is below what is needed (exit 2), naming
            both figures and the two ways out.
    """
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return -1
    need = concurrency + FD_MARGIN
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    inf = resource.RLIM_INFINITY
    if soft == inf or soft >= need:
        return soft
    if hard == inf or hard >= need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
        return need
    raise ConfigError(
        f"concurrency {concurrency} needs about {need} open files, but the open-file limit is {soft} "
        f"(hard limit {hard}): raise it (ulimit -n {need}) or lower the concurrency",
        field=field,
    )
