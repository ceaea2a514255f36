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

from kvreplay.api.snapshots import add_arguments, snapshot_args
from kvreplay.errors import BackendError
from kvreplay.safe_io import echo

__all__ = ["EXIT_BACKEND", "add_arguments", "run"]

NAME = "snapshot"
HELP = "print a server's identity and native cache counters (live or from a saved dump) as JSON"

EXIT_BACKEND = 2
"""Exit status when the server or dump could not be read: 2, as for every bad input (``kvreplay.cli``)."""


def run(args: argparse.Namespace) -> int:
    """Print the snapshot JSON.

    Returns:
        0 on success; 2 when the server or dump could not be read
        (``BackendError``, message on stderr), as for bad arguments (ConfigError).
    """
    try:
        out = snapshot_args(args)
    except BackendError as exc:
        echo(f"kvreplay snapshot: {exc}", err=True)
        return EXIT_BACKEND
    json.dump(out, sys.stdout, indent=2, allow_nan=False)
    sys.stdout.write("\n")
    return 0
