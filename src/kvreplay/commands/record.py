r"""``kvreplay record``: a transparent recording proxy that retains exact bodies from live traffic.

Example::

    kvreplay serve-sim --port 8000 &                 # or any OpenAI-compatible server
    kvreplay record --upstream http://127.0.0.1:8000 --listen 127.0.0.1:8100 --out runs/cap
    #   ... point clients at http://127.0.0.1:8100, then Ctrl-C ...
    kvreplay run runs/cap --target http://127.0.0.1:8000 --phase replay:forward:c1
    kvreplay run --plan runs/cap.plan.toml --target http://...    # open loop at captured times

A thin layer over ``kvreplay.api.recording`` (``kvreplay.record``), which declares the
options and runs the proxy: every request is forwarded byte for byte and every response
streamed back as it arrives; POST bodies to ``--paths`` are retained as
``W/NNNNNN.json`` with a manifest ``W/capture.jsonl`` and ``W.arrivals.json`` +
``W.plan.toml`` beside ``W`` (``kvreplay.workload.capture``).
The listening URL is printed on stdout (``kvreplay record listening on URL``)
and flushed, so scripts can read it. Stops on SIGINT/SIGTERM (exit 0) or after
``--duration`` seconds, leaving a complete workload; a summary goes to stderr.
Binds loopback unless ``--listen`` says otherwise, and warns when it does.
"""

from __future__ import annotations

import argparse
import asyncio

from kvreplay.api.recording import parse_listen, record_args_async
from kvreplay.argtypes import add_declared
from kvreplay.options.record import RecordConfig
from kvreplay.redaction import redact_url
from kvreplay.safe_io import echo

NAME = "record"
HELP = "record live traffic through a transparent proxy into a replayable workload (exact bodies)"

__all__ = ["HELP", "NAME", "add_arguments", "parse_listen", "record", "run"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register ``record``'s options: ``RecordConfig``'s fields."""
    add_declared(p, RecordConfig, ("record",))


async def record(args: argparse.Namespace, *, ready: asyncio.Event | None = None) -> int:
    """Run the proxy until interrupted or ``--duration`` elapses, printing what it does.

    Args:
        args: Parsed options of this command.
        ready: Set once the proxy listens (in-process tests).

    Returns:
        Exit status: 0, or 2 when the address cannot be bound.

    Raises:
        ConfigError: bad options, or ``--out`` exists and is not empty.
    """
    paths = ",".join(x.strip() for x in args.paths.split(",") if x.strip())

    def listening(url: str) -> None:
        echo(f"kvreplay record listening on {url} -> {redact_url(args.upstream)}, retaining {paths} into "
             f"{args.out}")

    try:
        r = await record_args_async(args, ready=ready, on_listening=listening)
    except OSError as exc:
        echo(f"kvreplay record: error: {exc.strerror or exc}", err=True)
        return 2
    if r.io_error:
        echo(f"kvreplay record: error: writing the capture failed ({r.io_error}); what is on disk "
             "before that point is complete", err=True)
    echo(f"kvreplay record: {r.requests} requests proxied; {r.description}", err=True)
    if r.retained and r.arrivals is not None and r.plan is not None:
        echo(f"kvreplay record: workload {args.out} (+ {r.arrivals.name}, {r.plan.name}); replay with\n"
             f"  kvreplay run {args.out} --target URL --phase replay:forward:c1\n"
             f"  kvreplay run --plan {r.plan} --target URL   (open loop at the captured arrival times)", err=True)
    return 0


def run(args: argparse.Namespace) -> int:
    """Entry point of the subcommand (see module docstring)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - non-POSIX
        return asyncio.run(record(args))
    return uvloop.run(record(args))
