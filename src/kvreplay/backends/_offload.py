"""Parse large counter scrapes in another process, so a read never stalls the event loop.

A 5 MB ``/metrics`` (45k series) takes prometheus_client's parser over a second
of CPU. In a worker *thread* that second holds the GIL: the event loop gets it
back only at each switch interval, and every socket read of the requests in
flight waits behind it (issue 30: TTFT = E2E = 9.6 s for the requests in flight
during such a read). So a scrape of ``OFFLOAD_BYTES`` or more is parsed in one
worker *process*: ``python -m kvreplay.backends._parse_worker``, started at the
first large scrape and kept (a plain subprocess, not ``multiprocessing``, which
would re-run the caller's ``__main__`` in the child). A thread of this process
sends it the function and the text over a pipe and reads back the pickled
result, so the only work here is that unpickling (a few ms for 45k series,
interrupted by the switch interval like any thread's). Smaller scrapes (a vLLM
scrape is ~160 KB) stay in a thread, where they cost less than the trip; one
under ``INLINE_BYTES`` (a filtered read: vLLM's is 3.5 KB) is parsed on the
loop, where it costs less than waking a thread on a busy machine.

A ``BackendError`` raised while parsing comes back as a ``BackendError`` with
the same message; a worker that died is replaced at the next large scrape.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import pickle
import struct
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from kvreplay.errors import BackendError

__all__ = ["INLINE_BYTES", "OFFLOAD_BYTES", "parse_in_worker", "parse_off_loop", "shutdown_worker"]

OFFLOAD_BYTES = 256 << 10
"""Scrapes of this many characters or more are parsed in the worker process."""
INLINE_BYTES = 8 << 10
"""Scrapes under this many characters are parsed on the event loop: vLLM's filtered read (3.5 KB,
15 series) in 0.7 ms, 8 KB of hostile lines (120 labels each, under ``_prom.check_scrape``'s bounds)
in 4 ms on a loaded two-core machine; a thread's round trip cost 1-5 ms there (issue 31 item 3)."""

T = TypeVar("T")
_LEN = struct.Struct("<Q")
_lock = threading.Lock()
_proc: subprocess.Popen[bytes] | None = None


def _start() -> subprocess.Popen[bytes]:
    root = str(Path(__file__).resolve().parents[2])  # the directory holding the kvreplay package
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.Popen([sys.executable, "-m", "kvreplay.backends._parse_worker"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)


def _read_exact(f: Any, n: int) -> bytes:
    data = f.read(n)
    if data is None or len(data) != n:
        raise EOFError("the parser process closed its pipe")
    return data


def parse_in_worker(fn: Callable[..., T], text: str | tuple[bytes, ...], *args: Any) -> T:
    """``fn(text, *args)`` in the worker process (blocking; call it from a thread).

    Raises:
        BackendError: raised by ``fn`` (same message), or the worker died.
    """
    global _proc
    payload = pickle.dumps((fn, text, args), protocol=pickle.HIGHEST_PROTOCOL)
    with _lock:
        if _proc is None or _proc.poll() is not None:
            _proc = _start()
        proc = _proc
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(_LEN.pack(len(payload)) + payload)
            proc.stdin.flush()
            (n,) = _LEN.unpack(_read_exact(proc.stdout, _LEN.size))
            ok, value = pickle.loads(_read_exact(proc.stdout, n))
        except (OSError, EOFError, pickle.UnpicklingError) as exc:
            _stop(proc)
            _proc = None
            raise BackendError(f"the scrape parser process died: {exc}") from exc
    if not ok:
        raise BackendError(value)
    return value


def _stop(proc: subprocess.Popen[bytes]) -> None:
    try:
        if proc.stdin is not None:
            proc.stdin.close()
        proc.wait(timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        proc.kill()
        proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def shutdown_worker() -> None:
    """Stop the worker process, if one was started (a later large scrape starts a new one)."""
    global _proc
    with _lock:
        if _proc is not None:
            _stop(_proc)
            _proc = None


atexit.register(shutdown_worker)


async def parse_off_loop(fn: Callable[..., T], text: str | tuple[bytes, ...], *args: Any) -> T:
    """``fn(text, *args)``: in the worker process for large text, in a thread for mid-sized, on the loop for small.

    Args:
        fn: A module-level function (pickled by name), e.g. ``_prometheus.parse_scrape``.
        text: The scrape, as text or as the bytes that arrived (``fn`` decodes them).
        args: Further picklable arguments.

    Raises:
        BackendError: raised by ``fn``, or the worker process died.
    """
    size = len(text) if isinstance(text, str) else sum(len(c) for c in text)
    if size < INLINE_BYTES:
        return fn(text, *args)
    if size < OFFLOAD_BYTES:
        return await asyncio.to_thread(fn, text, *args)
    return await asyncio.to_thread(parse_in_worker, fn, text, *args)
