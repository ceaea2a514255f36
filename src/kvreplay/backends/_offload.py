"""Parse large counter scrapes in another process, so a read never stalls the event loop.

A 5 MB ``/metrics`` (45k series) takes prometheus_client's parser over a second
of CPU. In a worker *thread* that second holds the GIL: the event loop gets it
back only at each switch interval, and every socket read of the requests in
flight waits behind it (issue 30: TTFT = E2E = 9.6 s for the requests in flight
during such a read). So a scrape of ``OFFLOAD_BYTES`` or more is parsed in one
worker *process* (``concurrent.futures.ProcessPoolExecutor``, one worker, started
at the first large scrape from a ``forkserver`` that preloads only this package,
so no ``__main__`` is re-run); the loop's own work is sending the text and
unpickling the result (a few ms for 45k series). Smaller scrapes (a vLLM scrape
is ~160 KB, a filtered one a few KB) stay in a thread, where they cost less
than the trip to the process.

A ``BackendError`` raised while parsing comes back as a ``BackendError`` with
the same message; a worker that died is replaced at the next large scrape.
"""

from __future__ import annotations

import asyncio
import multiprocessing
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, TypeVar

from kvreplay.errors import BackendError

__all__ = ["OFFLOAD_BYTES", "parse_off_loop", "shutdown_pool"]

OFFLOAD_BYTES = 256 << 10
"""Scrapes of this many characters or more are parsed in the worker process."""

T = TypeVar("T")
_pool: ProcessPoolExecutor | None = None


@dataclass(frozen=True, slots=True)
class _Failed:
    message: str


def _guarded(fn: Callable[..., Any], text: str, *args: Any) -> Any:
    """Run in the worker: a ``BackendError`` becomes a plain value (its kwargs need not pickle)."""
    try:
        return fn(text, *args)
    except BackendError as exc:
        return _Failed(str(exc))


def _get_pool() -> ProcessPoolExecutor:
    global _pool
    if _pool is None:
        methods = multiprocessing.get_all_start_methods()
        ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
        if "forkserver" in methods:
            ctx.set_forkserver_preload(["kvreplay.backends._prometheus"])  # never __main__
        _pool = ProcessPoolExecutor(max_workers=1, mp_context=ctx)
    return _pool


def shutdown_pool() -> None:
    """Stop the worker process, if one was started (a later large scrape starts a new one)."""
    global _pool
    if _pool is not None:
        _pool.shutdown(wait=True, cancel_futures=True)
        _pool = None


async def parse_off_loop(fn: Callable[..., T], text: str, *args: Any) -> T:
    """``fn(text, *args)`` off the event loop: in the worker process for large text, else a thread.

    Args:
        fn: A module-level function (it is pickled by name), e.g. ``_prometheus.parse_scrape``.
        text: The scrape.
        args: Further picklable arguments.

    Raises:
        BackendError: raised by ``fn``, or the worker process died.
    """
    if len(text) < OFFLOAD_BYTES:
        return await asyncio.to_thread(fn, text, *args)
    global _pool
    loop = asyncio.get_running_loop()
    try:
        out = await loop.run_in_executor(_get_pool(), _guarded, fn, text, *args)
    except BrokenProcessPool as exc:
        _pool = None
        raise BackendError(f"the scrape parser process died: {exc}") from exc
    if isinstance(out, _Failed):
        raise BackendError(out.message)
    return out
