"""``kvreplay snapshot``: read a server's counters once, or parse a saved dump.

Prints one JSON object::

    {"backend": NAME, "identity": {...}, "common": {...}, "raw": {...},
     "started": FLOAT|null, "units": {...}}

Non-finite raw values (NaN, +Inf, -Inf) are printed as the strings ``"NaN"``,
``"+Inf"`` and ``"-Inf"`` so that the output stays valid JSON. Nothing but
control endpoints is contacted; no generation request is sent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
from pathlib import Path
from typing import Any

from kvreplay.errors import BackendError, ConfigError
from kvreplay.safe_io import echo

NAME = "snapshot"
HELP = "print a server's identity and native cache counters (live or from a saved dump) as JSON"

EXIT_BACKEND = 2
"""Exit status when the server or dump could not be read: 2, as for every bad input (``kvreplay.cli``)."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--target``/``--from-file``, ``--backend``, ``--profile``, ``--timeout``."""
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--target", metavar="URL", help="server root URL, e.g. http://127.0.0.1:8000")
    src.add_argument("--from-file", metavar="DUMP", help="a saved /metrics or /cache body")
    from kvreplay.backends import backend_names

    parser.add_argument(
        "--backend",
        default="auto",
        help=f"auto (probe the server, or tell from the dump), {', '.join(backend_names())}",
    )
    parser.add_argument(
        "--profile", default=None, help="profile name or TOML file (prometheus backend)"
    )
    parser.add_argument("--timeout", type=float, default=10.0, help="bound on the whole read (s)")


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


async def _live(args: argparse.Namespace) -> dict[str, Any]:
    import aiohttp

    from kvreplay.backends import detect, make_backend

    async with aiohttp.ClientSession() as session:
        name = args.backend
        if name == "auto":
            name = await detect(args.target, session)
        backend = make_backend(name, args.target, session, profile=args.profile)
        identity = await backend.identity()
        snap = await backend.snapshot()
    return {
        "backend": name,
        "identity": identity,
        "common": snap.common,
        "raw": snap.raw,
        "started": snap.started,
        "units": getattr(backend, "units", {}),
    }


def _offline(args: argparse.Namespace) -> dict[str, Any]:
    from kvreplay.backends import make_backend, parse_dump

    path = Path(args.from_file)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read dump: {exc.strerror}", path=path) from exc
    try:
        name, identity, raw, common, started = parse_dump(text, args.backend, args.profile)
    except BackendError as exc:
        raise BackendError(f"{path}: {exc}") from exc
    units = getattr(make_backend(name, "", None, args.profile), "units", {})
    return {
        "backend": name,
        "identity": identity,
        "common": common,
        "raw": raw,
        "started": started,
        "units": units,
    }


def run(args: argparse.Namespace) -> int:
    """Print the snapshot JSON.

    Returns:
        0 on success; 2 when the server or dump could not be read
        (``BackendError``, message on stderr), as for bad arguments (ConfigError).
    """
    if args.target:
        from kvreplay.commands.run import check_target

        check_target(args.target, sim=False)
    try:
        out = _offline(args) if args.from_file else asyncio.run(asyncio.wait_for(_live(args), timeout=args.timeout))
    except BackendError as exc:
        echo(f"kvreplay snapshot: {exc}", err=True)
        return EXIT_BACKEND
    except TimeoutError:
        echo(f"kvreplay snapshot: no answer within {args.timeout} s", err=True)
        return EXIT_BACKEND
    json.dump(_jsonable(out), sys.stdout, indent=2, allow_nan=False)
    sys.stdout.write("\n")
    return 0
