"""``kvreplay snapshot``: read a server's counters once, or parse a saved dump.

Prints one JSON object::

    {"backend": NAME, "identity": {...}, "common": {...}, "raw": {...},
     "started": FLOAT|null, "units": {...}}

Non-finite raw values (NaN, +Inf, -Inf) are printed as the strings ``"NaN"``,
``"+Inf"`` and ``"-Inf"`` so that the output stays valid JSON. Nothing but
control endpoints is contacted; no generation request is sent.

A thin layer over ``kvreplay.api.snapshots`` (``kvreplay.snapshot``), which declares
the options and reads the server; this module prints the JSON and maps a failed read
to exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys

from kvreplay.api.snapshots import snapshot_args
from kvreplay.argtypes import add_declared
from kvreplay.errors import BackendError
from kvreplay.options.declare import from_dests
from kvreplay.options.snapshot import SnapshotConfig
from kvreplay.safe_io import echo

__all__ = ["EXIT_BACKEND", "add_arguments", "run"]

NAME = "snapshot"
HELP = "print a server's identity and native cache counters (live or from a saved dump) as JSON"

EXIT_BACKEND = 2
"""Exit status when the server or dump could not be read: 2, as for every bad input (``kvreplay.cli``)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--target`` or ``--from-file``, ``--backend``, ``--profile``, ``--timeout``: ``SnapshotConfig``."""
    from kvreplay.backends import backend_names

    add_declared(parser.add_mutually_exclusive_group(required=True), SnapshotConfig, ("snapshot-source",))
    add_declared(parser, SnapshotConfig, ("snapshot",))
    for action in parser._actions:  # the backends' names are known here, above kvreplay.options
        if action.dest == "backend":
            action.help = f"auto (probe the server, or tell from the dump), {', '.join(backend_names())}"


def run(args: argparse.Namespace) -> int:
    """Print the snapshot JSON.

    Returns:
        0 on success; 2 when the server or dump could not be read
        (``BackendError``, message on stderr), as for bad arguments (ConfigError).
    """
    try:
        out = snapshot_args(from_dests(SnapshotConfig, vars(args)))
    except BackendError as exc:
        echo(f"kvreplay snapshot: {exc}", err=True)
        return EXIT_BACKEND
    json.dump(out, sys.stdout, indent=2, allow_nan=False)
    sys.stdout.write("\n")
    return 0
