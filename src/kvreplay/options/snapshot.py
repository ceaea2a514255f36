"""The options of ``kvreplay snapshot`` / ``kvreplay.snapshot``: ``SnapshotConfig``, one field a flag.

``kvreplay.argtypes.add_declared`` derives ``kvreplay snapshot``'s flags from these fields:
group ``snapshot-source`` (``--target`` or ``--from-file``: the command line makes them a
required, mutually exclusive pair), then group ``snapshot``; ``kvreplay.api.snapshots``
takes the object.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvreplay.argtypes import number
from kvreplay.options.declare import option

__all__ = ["SnapshotConfig"]


@dataclass(slots=True, kw_only=True)
class SnapshotConfig:
    """Every option of ``kvreplay snapshot``, by its flag's ``dest`` (one of ``target`` and ``from_file``).

    Attributes:
        target: The server's root URL.
        from_file: A saved /metrics or /cache body.
        backend: ``auto`` (probe the server, or tell from the dump) or a backend's name.
        profile: A profile name or TOML file (prometheus backend).
        timeout: Bound on the whole read (s).
    """

    target: str | None = option(flag="--target", metavar="URL", group="snapshot-source",
                                help="server root URL, e.g. http://127.0.0.1:8000")
    from_file: str | None = option(flag="--from-file", metavar="DUMP", group="snapshot-source",
                                   help="a saved /metrics or /cache body")
    backend: str = option("auto", flag="--backend", group="snapshot",
                          help="auto (probe the server, or tell from the dump), or a backend's name")
    profile: str | None = option(flag="--profile", group="snapshot",
                                 help="profile name or TOML file (prometheus backend)")
    timeout: float = option(10.0, flag="--timeout", check=number(0, strict=True, unit="s"), unit="s",
                            group="snapshot",
                            help="bound on the whole read (s)")
