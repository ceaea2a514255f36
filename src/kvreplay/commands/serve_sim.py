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
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from kvreplay.api.serving import is_loopback, wait_for_stop
from kvreplay.argtypes import integer
from kvreplay.sim.config import add_arguments as add_sim_arguments
from kvreplay.sim.config import config_and_calibration
from kvreplay.sim.routing import ROUTER_POLICIES

NAME = "serve-sim"
HELP = "run the embedded simulator server (OpenAI-compatible, cache models, faults)"

__all__ = ["HELP", "NAME", "add_arguments", "is_loopback", "run", "serve", "wait_for_stop"]



def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--host``, ``--port``, ``--duration`` and the simulator options (no prefix)."""
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="TCP port; 0 picks a free one (default 0)")
    parser.add_argument(
        "--duration", type=float, default=None, metavar="S",
        help="stop after S seconds (default: run until interrupted)",
    )
    fleet = parser.add_argument_group("fleet (N replicas behind a router: docs/fleets.md)")
    fleet.add_argument(
        "--replicas", type=integer(1), default=1, metavar="N",
        help="simulated replicas behind a router (default 1: one server, no router)",
    )
    fleet.add_argument(
        "--router", choices=ROUTER_POLICIES, default=None,
        help="the router's policy (default round_robin; given with --replicas 1, a router fronts the one replica)",
    )
    fleet.add_argument(
        "--router-seed", type=integer(0), default=0, metavar="S", help="seed of --router random (default 0)"
    )
    add_sim_arguments(parser, prefix="")


async def serve(args: argparse.Namespace, *, ready: asyncio.Event | None = None) -> int:
    """Serve until interrupted or ``--duration`` elapses.

    Args:
        args: Parsed options of this command.
        ready: Set once the server listens (for in-process tests).

    Returns:
        Exit status 0.
    """
    from kvreplay.sim.server import SimServer

    cfg, calibration = config_and_calibration(args, prefix="")
    if not is_loopback(args.host):
        print(
            f"kvreplay serve-sim: warning: binding {args.host}, not loopback; the simulator has no authentication",
            file=sys.stderr,
        )
    if args.replicas > 1 or args.router is not None:
        return await _serve_fleet(args, cfg, calibration, ready)
    srv = SimServer(cfg, calibration=calibration)
    try:
        url = await srv.start(host=args.host, port=args.port)
    except OSError as exc:
        print(f"kvreplay serve-sim: error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}"
              " (use --port 0 for a free port)", file=sys.stderr)
        return 2
    print(f"kvreplay-sim listening on {url} (cache={cfg.cache}, time_scale={cfg.time_scale})", flush=True)
    try:
        await wait_for_stop(args.duration, ready)
    finally:
        await srv.stop()
    return 0


async def _serve_fleet(args: argparse.Namespace, cfg: Any, calibration: Any, ready: asyncio.Event | None) -> int:
    """``serve`` with ``--replicas``/``--router``: the embedded fleet until stopped."""
    from kvreplay.sim.fleet import start_fleet

    policy = args.router or "round_robin"
    try:
        fleet = await start_fleet(args.replicas, policy, config=cfg, calibration=calibration, seed=args.router_seed,
                                  host=args.host, router_port=args.port)
    except OSError as exc:
        print(f"kvreplay serve-sim: error: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}"
              " (use --port 0 for a free port)", file=sys.stderr)
        return 2
    seed = f", seed={args.router_seed}" if policy == "random" else ""
    lines = [f"kvreplay-sim listening on {fleet.router_url} (router={policy}{seed}, replicas={args.replicas},"
             f" cache={cfg.cache}, time_scale={cfg.time_scale})"]
    lines += [f"kvreplay-sim replica {i} listening on {url}" for i, url in enumerate(fleet.replica_urls)]
    lines.append("run flags: " + " ".join(fleet.target_args()))
    print("\n".join(lines), flush=True)
    try:
        await wait_for_stop(args.duration, ready)
    finally:
        await fleet.stop()
    return 0


def run(args: argparse.Namespace) -> int:
    """Entry point of the subcommand (see module docstring)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - non-POSIX
        return asyncio.run(serve(args))
    return uvloop.run(serve(args))
