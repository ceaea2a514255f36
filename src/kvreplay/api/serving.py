"""Listening servers until stopped: what ``kvreplay serve-sim`` and ``kvreplay record`` share.

``is_loopback`` says whether an address to bind is loopback (both warn when it is
not); ``wait_for_stop`` waits for SIGINT/SIGTERM, a duration, or a caller's stop
event, whichever comes first (the API's callers cannot send a signal).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import signal
from collections.abc import Awaitable, Callable

__all__ = ["Stop", "is_loopback", "wait_for_stop"]

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
