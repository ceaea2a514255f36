"""``kvreplay serve-sim``: run the embedded simulator as a standalone server.

Binds 127.0.0.1 unless ``--host`` says otherwise (and warns when it does: the
simulator has no authentication). ``--port 0`` (the default) picks a free port;
the chosen URL is printed on stdout as ``kvreplay-sim listening on URL`` and
flushed, so scripts can read it. Stops on SIGINT/SIGTERM (exit 0) or after
``--duration`` seconds.

``--replicas N`` (N > 1, or any N with ``--router``) runs the embedded fleet
(``kvreplay.sim.fleet``): N replicas, each on its own free port with its own
cache and ``/metrics``, behind a router on ``--port`` that picks a replica per
request (``--router round_robin|random|prefix_affinity``, ``--router-seed`` for
``random``) and names it in the ``x-kvreplay-replica`` response header. It
prints ``kvreplay-sim listening on ROUTER_URL (...)``, one ``kvreplay-sim
replica I listening on URL`` line per replica, and the run flags that name the
fleet (``--target ROUTER_URL --replica URL ...``).

A thin layer over ``kvreplay.api.serving`` (``kvreplay.serve_sim``), which declares
the options and starts the servers; this module prints their URLs and waits.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from kvreplay.api.serving import is_loopback, start_sim_args, wait_for_stop
from kvreplay.options.serve import SERVE_FLEET_TITLE, ServeSimConfig

NAME = "serve-sim"
HELP = "run the embedded simulator server (OpenAI-compatible, cache models, faults)"

__all__ = ["HELP", "NAME", "add_arguments", "is_loopback", "run", "serve", "wait_for_stop"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--host``, ``--port``, ``--duration``, the fleet options (``ServeSimConfig``), the simulator's options."""
    from kvreplay.argtypes import add_declared
    from kvreplay.sim.config import add_arguments as add_sim_arguments

    add_declared(parser, ServeSimConfig, ("serve",))
    add_declared(parser.add_argument_group(SERVE_FLEET_TITLE), ServeSimConfig, ("serve-fleet",))
    add_sim_arguments(parser, prefix="")


async def serve(args: argparse.Namespace | ServeSimConfig, *, ready: asyncio.Event | None = None) -> int:
    """Serve until interrupted or ``--duration`` elapses.

    Args:
        args: Parsed options of this command.
        ready: Set once the server listens (for in-process tests).

    Returns:
        Exit status 0, or 2 when the address cannot be bound.
    """
    from kvreplay.sim.config import config_and_calibration_of

    if not isinstance(args, ServeSimConfig):
        args = ServeSimConfig.from_dests(vars(args))
    cfg, calibration = config_and_calibration_of(args.sim, flag_prefix="--")
    if not is_loopback(args.host):
        print(
            f"kvreplay serve-sim: warning: binding {args.host}, not loopback; the simulator has no authentication",
            file=sys.stderr,
        )
    try:
        served = await start_sim_args(args, cfg, calibration)
    except OSError as exc:
        print(f"kvreplay serve-sim: error: {exc.strerror or exc} (use --port 0 for a free port)", file=sys.stderr)
        return 2
    if served.router is None:
        print(f"kvreplay-sim listening on {served.url} (cache={cfg.cache}, time_scale={cfg.time_scale})", flush=True)
    else:
        seed = f", seed={served.router_seed}" if served.router == "random" else ""
        lines = [f"kvreplay-sim listening on {served.url} (router={served.router}{seed}, replicas={args.replicas},"
                 f" cache={cfg.cache}, time_scale={cfg.time_scale})"]
        lines += [f"kvreplay-sim replica {i} listening on {url}" for i, url in enumerate(served.replica_urls)]
        lines.append("run flags: " + " ".join(served.target_args))
        print("\n".join(lines), flush=True)
    try:
        await wait_for_stop(args.duration, ready)
    finally:
        await served.stop()
    return 0


def run(args: argparse.Namespace) -> int:
    """Entry point of the subcommand (see module docstring)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - non-POSIX
        return asyncio.run(serve(args))
    return uvloop.run(serve(args))
