"""Listening servers: the behaviour of ``kvreplay serve-sim`` and ``kvreplay.serve_sim``, and what ``record`` shares.

``serve_sim_async`` (an async context manager) and ``serve_sim`` (a context manager,
the servers on a thread of their own) start the embedded simulator, or with
``replicas``/``router`` the embedded fleet, and give its URLs (``ServedSim``);
``kvreplay serve-sim`` (``commands/serve_sim.py``) starts the same through
``start_sim_args`` (its options: ``kvreplay.options.serve.ServeSimConfig``) and prints
them. ``is_loopback`` says whether an address to bind
is loopback (both commands warn when it is not); ``wait_for_stop`` waits for
SIGINT/SIGTERM, a duration, or a caller's stop event, whichever comes first (the
API's callers cannot send a signal). Example::

    with kvreplay.serve_sim(time_scale=0, replicas=2, router="prefix_affinity") as s:
        kvreplay.replay(kvreplay.DEMO_WORKLOAD, phases=["a:forward:c4"], target=s.url,
                        replica=list(s.replica_urls))
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import signal
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from kvreplay.options.serve import ServeSimConfig

__all__ = ["ServeSimConfig", "ServedSim", "Stop", "is_loopback", "serve_sim", "serve_sim_async", "start_sim_args",
           "wait_for_stop"]

Stop = asyncio.Event | Callable[[], Awaitable[object]]
"""How an API caller stops a server: an ``asyncio.Event`` to set, or a callable returning an awaitable that ends."""


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback addresses (127.0.0.0/8, ::1)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def wait_for_stop(duration: float | None, ready: asyncio.Event | None = None, stop: Stop | None = None) -> None:
    """Wait for SIGINT/SIGTERM, ``duration`` seconds when given (None = no limit), or ``stop``.

    The signal handlers are installed on the running loop for the wait (where the
    platform allows: not outside the main thread) and removed again before this
    returns, also when the wait is cancelled. ``ready``, when given, is set once
    the handlers are in place. ``stop``, when given, ends the wait when the event
    is set or the awaitable it returns completes.
    """
    signalled = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, signalled.set)
    if ready is not None:
        ready.set()
    waits: list[asyncio.Future[object]] = [asyncio.ensure_future(signalled.wait())]
    if stop is not None:
        waits.append(asyncio.ensure_future(stop.wait() if isinstance(stop, asyncio.Event) else stop()))
    try:
        await asyncio.wait(waits, timeout=duration, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waits:
            w.cancel()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                loop.remove_signal_handler(sig)


@dataclass(frozen=True)
class ServedSim:
    """The embedded simulator (or fleet) while it listens.

    Attributes:
        url: The server's base URL (``http://HOST:PORT``), or the router's with a fleet: the ``--target``.
        replica_urls: The replicas' base URLs in index order (the ``--replica`` URLs); ``()`` for one server.
        router: The router's policy (``round_robin``, ``random``, ``prefix_affinity``), or None for one server.
        router_seed: Seed of the ``random`` policy.
        config: The ``kvreplay.sim.config.SimConfig`` every replica runs.
        target_args: The run flags that name it (``["--target", URL]``, plus ``--replica URL`` per replica).
    """

    url: str
    replica_urls: tuple[str, ...]
    router: str | None
    router_seed: int
    config: Any
    target_args: tuple[str, ...]
    _stop: Callable[[], Awaitable[None]] = field(repr=False, compare=False)

    async def stop(self) -> None:
        """Stop every server (the router first, then the replicas); idempotent as the servers' own stop."""
        await self._stop()


async def start_sim_args(args: ServeSimConfig | object, config: Any = None, calibration: Any = None) -> ServedSim:
    """Start what ``kvreplay serve-sim``'s options describe, on the running loop (call ``stop()`` after).

    Args:
        args: The options (``kvreplay.options.serve.ServeSimConfig``; an older caller's object of
            parsed flags by their ``dest`` is read into one).
        config: The ``SimConfig`` when already read from ``args`` (with ``calibration``), else read here
            (``kvreplay.sim.config.config_and_calibration_of``).
        calibration: The calibration that set ``config``, served in ``/version``.

    Raises:
        ConfigError: bad simulator options.
        OSError: the address cannot be bound (``strerror``: ``cannot listen on HOST:PORT: why``).
    """
    if not isinstance(args, ServeSimConfig):
        args = ServeSimConfig.from_dests(vars(args))
    if config is None:
        from kvreplay.sim.config import config_and_calibration_of

        config, calibration = config_and_calibration_of(args.sim, flag_prefix="--")
    return await _start(args, config, calibration)


async def _start(args: ServeSimConfig, cfg: Any, calibration: Any) -> ServedSim:
    try:
        if args.replicas > 1 or args.router is not None:
            from kvreplay.sim.fleet import start_fleet

            policy = args.router or "round_robin"
            fleet = await start_fleet(args.replicas, policy, config=cfg, calibration=calibration,
                                      seed=args.router_seed, host=args.host, router_port=args.port)
            return ServedSim(fleet.router_url, tuple(fleet.replica_urls), policy, args.router_seed, cfg,
                             tuple(fleet.target_args()), fleet.stop)
        from kvreplay.sim.server import SimServer

        srv = SimServer(cfg, calibration=calibration)
        url = await srv.start(host=args.host, port=args.port)
        return ServedSim(url, (), None, args.router_seed, cfg, ("--target", url), srv.stop)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from exc


def _serve_args(host: str, port: int, replicas: int, router: str | None, router_seed: int,
                options: dict[str, Any]) -> ServeSimConfig:
    from kvreplay.api._keywords import config_for
    from kvreplay.errors import ConfigError
    from kvreplay.options.run import SIM_FLEET_KEYWORDS, SIM_KEYWORDS

    own = {"host", "port", "duration"}
    for key in options:
        if key not in own and key.replace("-", "_") not in SIM_KEYWORDS - SIM_FLEET_KEYWORDS:
            raise ConfigError(f"unknown option {key!r}", field=key)
    values = {"host": host, "port": port, "replicas": replicas, "router": router, "router_seed": router_seed,
              **{k: v for k, v in options.items() if k in own}}
    return config_for(ServeSimConfig, values, {k: v for k, v in options.items() if k not in own}, fleet=False)


@contextlib.asynccontextmanager
async def serve_sim_async(*, host: str = "127.0.0.1", port: int = 0, replicas: int = 1, router: str | None = None,
                          router_seed: int = 0, **options: Any) -> AsyncIterator[ServedSim]:
    """Run the embedded simulator (``kvreplay serve-sim``) on the running loop for the ``async with`` block.

    Args:
        host: Address to bind (default loopback; the simulator has no authentication).
        port: TCP port (0: a free one), the router's with a fleet.
        replicas: Simulated replicas behind a router (1: one server, no router).
        router: The router's policy (``round_robin``, ``random``, ``prefix_affinity``); given with
            ``replicas=1``, a router fronts the one replica.
        router_seed: Seed of ``router="random"``.
        **options: ``kvreplay serve-sim``'s simulator options by their Python names, e.g.
            ``time_scale=0``, ``cache="radix"``, ``device_blocks=64``.

    Yields:
        The ``ServedSim`` (its URLs); every server is stopped when the block ends.

    Raises:
        ConfigError: an unknown or bad option.
        OSError: the address cannot be bound.
    """
    from kvreplay.errors import ConfigError

    for name, value in (("replicas", replicas), ("router_seed", router_seed)):
        if not isinstance(value, int) or value < (1 if name == "replicas" else 0):
            raise ConfigError(f"must be an integer >= {1 if name == 'replicas' else 0}", field=name)
    served = await start_sim_args(_serve_args(host, port, replicas, router, router_seed, options))
    try:
        yield served
    finally:
        await served.stop()


@contextlib.contextmanager
def serve_sim(*, host: str = "127.0.0.1", port: int = 0, replicas: int = 1, router: str | None = None,
              router_seed: int = 0, **options: Any) -> Iterator[ServedSim]:
    """``serve_sim_async`` for synchronous code: the servers run on an event loop in a thread of their own.

    Same arguments, result and errors; the servers stop (and the thread ends) when the ``with`` block ends.
    """
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="kvreplay-serve-sim", daemon=True)
    thread.start()
    cm = serve_sim_async(host=host, port=port, replicas=replicas, router=router, router_seed=router_seed,
                         **options)
    try:
        served = asyncio.run_coroutine_threadsafe(cm.__aenter__(), loop).result()
        try:
            yield served
        finally:
            asyncio.run_coroutine_threadsafe(cm.__aexit__(None, None, None), loop).result()
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()
