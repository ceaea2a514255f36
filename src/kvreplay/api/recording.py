r"""Record live traffic through a transparent proxy: the behaviour of ``kvreplay record`` and ``kvreplay.record``.

Every request is forwarded byte for byte and every response streamed back as it
arrives (``kvreplay.recorder``); POST bodies to ``paths`` are retained
as ``W/NNNNNN.json`` with a manifest ``W/capture.jsonl`` and ``W.arrivals.json`` +
``W.plan.toml`` beside ``W`` (``kvreplay.workload.capture``). ``kvreplay record``
(``commands/record.py``) prints; its options are ``kvreplay.options.record.RecordConfig``;
this module runs the proxy until stopped (``record_args_async``).
Example::

    import kvreplay
    r = kvreplay.record("http://127.0.0.1:8000", "runs/cap", duration=60,
                        on_listening=lambda url: print("point clients at", url))
    print(r.requests, r.retained, r.refused, r.workload, r.plan)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
from collections.abc import Callable, Iterable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path

from kvreplay.api.serving import Stop
from kvreplay.options.record import RecordConfig
from kvreplay.safe_io import echo

__all__ = ["RecordConfig", "RecordResult", "parse_listen", "record", "record_args_async", "record_async"]

PathLike = str | os.PathLike[str]


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6; a bare ``PORT`` means 127.0.0.1) -> ``(host, port)``.

    Raises:
        ConfigError: not of that form, or a port outside 0-65535.
    """
    from kvreplay.errors import ConfigError

    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", text
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or int(port) > 65535:
        raise ConfigError(f"must be HOST:PORT (e.g. 127.0.0.1:8100), not {text!r}", field="--listen")
    return host, int(port)


@dataclass(frozen=True)
class RecordResult:
    """What one recording did, once the proxy has stopped.

    Attributes:
        url: The proxy's listening URL (``http://HOST:PORT``).
        upstream: The server it forwarded to (its ``user:password@`` shown as the redaction marker).
        paths: The URL paths whose POST bodies were retained.
        workload: The capture folder (a workload: ``NNNNNN.json`` bodies + ``capture.jsonl``).
        arrivals: ``W.arrivals.json`` beside it, or None when no body was retained (not written).
        plan: ``W.plan.toml`` beside it (open loop at the captured times), or None likewise.
        requests: Requests proxied (all paths and methods).
        retained: Bodies written.
        retained_bytes: Their total size (bytes).
        skipped: Requests not retained, by reason (``path``, ``method``, ``invalid``, ``secret``,
            ``encoding``, ``too_large``, ``memory``, ``incomplete``, ``limit``: see
            ``kvreplay.workload.capture.CaptureSummary``).
        limit_reached: ``max_bodies``/``max_bytes`` when one stopped retention, else None.
        io_error: Why writing the capture failed, or None; what is on disk before it is complete.
        description: The summary line ``kvreplay record`` prints (``N bodies (B bytes) retained; skipped: ...``).
    """

    url: str
    upstream: str
    paths: tuple[str, ...]
    workload: Path
    arrivals: Path | None
    plan: Path | None
    requests: int
    retained: int
    retained_bytes: int
    skipped: dict[str, int] = field(default_factory=dict)
    limit_reached: str | None = None
    io_error: str | None = None
    description: str = ""

    @property
    def refused(self) -> int:
        """Requests proxied but not retained (the sum of ``skipped``)."""
        return sum(self.skipped.values())


class _BadRequestLog(logging.Filter):
    """aiohttp's "Error handling request" tracebacks as one line each, at most ``burst`` per ``window_s``.

    aiohttp's server logs every request it cannot parse (a bad ``Content-Length``, a chunk
    size that is not hex, TLS bytes on the plain port) with ``logger.exception``: a full
    traceback on stderr, so any client could flood the terminal (issue 44). Installed on the
    ``aiohttp.server`` logger for a recording, this drops those records and prints instead
    ``kvreplay record: malformed request from PEER: WHAT`` through ``safe_io.echo`` (redacted,
    control characters escaped: the client's bytes are in the message); past ``burst`` lines
    in a window the rest are counted (``suppressed``) and said in one line when the next
    window opens. Other records pass untouched.

    Attributes:
        shown: Lines printed.
        suppressed: Malformed requests not printed (rate limit), in all.
    """

    def __init__(self, *, burst: int = 5, window_s: float = 10.0, clock: Callable[[], float] | None = None) -> None:
        super().__init__()
        import time

        self.burst, self.window_s = burst, window_s
        self._clock = clock or time.monotonic
        self._window_at = self._clock()
        self._in_window = 0
        self._held = 0  # suppressed in the current window, not yet said
        self.shown = 0
        self.suppressed = 0

    def filter(self, record: logging.LogRecord) -> bool:
        """False (dropped) for a request aiohttp could not handle, after the one-line account."""
        if not record.exc_info or not record.getMessage().startswith("Error handling request"):
            return True
        now = self._clock()
        if now - self._window_at >= self.window_s:
            self.flush()
            self._window_at, self._in_window = now, 0
        if self._in_window >= self.burst:
            self._held += 1
            self.suppressed += 1
            return False
        self._in_window += 1
        self.shown += 1
        exc = record.exc_info[1]
        what = " ".join(x.strip() for x in str(exc).splitlines() if x.strip())[:200] or type(exc).__name__
        peer = record.getMessage().rpartition(" from ")[2] or "?"
        echo(f"kvreplay record: malformed request from {peer}: {what}", err=True)
        return False

    def flush(self) -> None:
        """Say how many were not shown since the last account (one line; nothing when none)."""
        if self._held:
            echo(f"kvreplay record: {self._held} more malformed requests not shown", err=True)
            self._held = 0


async def record_args_async(args: RecordConfig | object, *, ready: asyncio.Event | None = None,
                            stop: Stop | None = None,
                            on_listening: Callable[[str], object] | None = None) -> RecordResult:
    """Run the proxy of ``kvreplay record``'s options until SIGINT/SIGTERM, ``--duration`` or ``stop``.

    ``args`` is a ``RecordConfig`` (an older caller's object of parsed flags by their ``dest`` is
    read into one).

    Warns on stderr when ``--listen`` is not loopback. ``on_listening(url)`` is called
    once the proxy listens; ``ready`` is set once the stop signals are watched.

    Returns:
        The ``RecordResult`` once the proxy has stopped and the capture is closed.

    Raises:
        ConfigError: bad options (``--duration`` not a finite number > 0), or ``--out`` refused by
            ``kvreplay.outpath.check_out`` (not a new or empty folder, a missing parent, ``W.plan.toml``
            or ``W.arrivals.json`` existing without ``--force``, a device or FIFO).
        OSError: the address cannot be bound (``strerror``: ``cannot listen on HOST:PORT: why``);
            no capture folder is left behind.
    """
    from kvreplay.api.serving import is_loopback, wait_for_stop
    from kvreplay.clock import now_ns
    from kvreplay.errors import ConfigError
    from kvreplay.outpath import check_out
    from kvreplay.recorder import RecordingProxy
    from kvreplay.redaction import redact_url, register_url
    from kvreplay.workload.capture import CaptureWriter, parse_size, sidecar_paths

    if not isinstance(args, RecordConfig):
        from kvreplay.options.declare import from_dests

        args = from_dests(RecordConfig, vars(args))
    duration = args.duration
    if duration is not None and (isinstance(duration, bool) or not isinstance(duration, (int, float))
                                 or not math.isfinite(duration) or duration <= 0):
        raise ConfigError(f"must be a number of seconds > 0, not {duration!r}", field="--duration")
    check_out(args.out, force=args.force, folder=True, siblings=sidecar_paths(args.out),
              make_parents=True)
    if not args.upstream.startswith(("http://", "https://")):
        raise ConfigError(f"must be an http:// or https:// URL, not {redact_url(args.upstream)!r}",
                          field="--upstream")
    try:
        register_url(args.upstream)  # its credentials: in no output (redaction)
    except ValueError as exc:
        raise ConfigError(f"credentials in the upstream URL: {exc}", field="--upstream") from None
    if "?" in args.upstream or "#" in args.upstream:
        raise ConfigError(f"{redact_url(args.upstream)!r}: an upstream URL takes no query or fragment (each "
                          "request's own path and query are forwarded)", field="--upstream")
    host, port = parse_listen(args.listen)
    if args.max_bodies is not None and args.max_bodies < 0:
        raise ConfigError("must be >= 0", field="--max-bodies")
    max_bytes = parse_size(args.max_bytes) if args.max_bytes is not None else None
    paths = tuple(x.strip() for x in args.paths.split(",") if x.strip())
    if not paths or not all(x.startswith("/") for x in paths):
        raise ConfigError("must be comma-separated URL paths starting with /", field="--paths")
    io = _LoopLater(asyncio.get_running_loop())
    writer = CaptureWriter(args.out, max_bodies=args.max_bodies, max_bytes=max_bytes, paths=paths,
                           origin_ns=now_ns(), io=io, observed_concurrency=True,
                           redact_body_secrets=args.redact_body_secrets)
    if not is_loopback(host):
        echo(f"kvreplay record: warning: listening on {host}, not loopback; anyone who can reach it "
             "can use the upstream through it, and their bodies are written to disk", err=True)
    proxy = RecordingProxy(args.upstream, writer)
    try:
        url = await proxy.start(host, port)
    except OSError as exc:
        writer.close()
        await asyncio.sleep(0)
        _remove_if_unused(writer.folder)
        raise OSError(exc.errno, f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    if on_listening is not None:
        on_listening(url)
    bad_requests = _BadRequestLog()
    server_log = logging.getLogger("aiohttp.server")
    server_log.addFilter(bad_requests)
    try:
        await wait_for_stop(args.duration, ready, stop)
    finally:
        await proxy.stop()
        await asyncio.sleep(0)  # the last queued writes (manifest close) run now
        server_log.removeFilter(bad_requests)
        bad_requests.flush()
    s = writer.summary
    arrivals, plan = sidecar_paths(args.out) if s.retained else (None, None)
    return RecordResult(url=url, upstream=redact_url(args.upstream), paths=paths, workload=writer.folder,
                        arrivals=arrivals,
                        plan=plan, requests=proxy.requests, retained=s.retained, retained_bytes=s.retained_bytes,
                        skipped=dict(s.skipped), limit_reached=s.limit_reached,
                        io_error=writer.io_error, description=s.describe())


def _record_args(upstream: str, out: PathLike, listen: str, paths: str | Iterable[str], max_bodies: int | None,
                 max_bytes: int | str | None, redact_body_secrets: bool, duration: float | None) -> RecordConfig:
    return RecordConfig(upstream=upstream, out=os.fspath(out), listen=listen,
                        paths=paths if isinstance(paths, str) else ",".join(paths), max_bodies=max_bodies,
                        max_bytes=None if max_bytes is None else str(max_bytes),
                        redact_body_secrets=redact_body_secrets, duration=duration)


async def record_async(upstream: str, out: PathLike, *, listen: str = "127.0.0.1:0",
                       paths: str | Iterable[str] = ("/v1/chat/completions", "/v1/completions"),
                       max_bodies: int | None = None, max_bytes: int | str | None = None,
                       redact_body_secrets: bool = False, duration: float | None = None, stop: Stop | None = None,
                       on_listening: Callable[[str], object] | None = None) -> RecordResult:
    """Record live traffic through a transparent proxy (``kvreplay record``), in the running event loop.

    Args:
        upstream: The server to forward to (``http://host:port[/prefix]`` or ``https://``).
        out: The capture folder to create (must not exist, or be empty).
        listen: ``HOST:PORT`` to listen on (default ``127.0.0.1:0``: loopback, a free port);
            a non-loopback host is warned about on stderr.
        paths: URL paths whose POST bodies are retained (a list, or ``"P1,P2"``); others are only proxied.
        max_bodies: Stop retaining after N bodies (still proxying).
        max_bytes: Stop retaining when the bodies would pass this total (bytes, or ``"500MB"``, ``"2GiB"``).
        redact_body_secrets: Retain a body holding a secret with it replaced by ``[REDACTED]``
            instead of skipping it.
        duration: Stop after this many seconds (None: no limit).
        stop: Stop when this ``asyncio.Event`` is set, or when the awaitable this callable returns
            completes. Without ``duration`` or ``stop``, it runs until SIGINT/SIGTERM (main thread only).
        on_listening: Called with the proxy's URL once it listens (point clients at it).

    Returns:
        The ``RecordResult``: the URL, the counts retained and refused, the workload, arrivals and plan paths.

    Raises:
        ConfigError: bad options, or ``out`` exists and is not empty.
        OSError: the address cannot be bound (no capture folder left behind).

    Example::

        stop = asyncio.Event()
        task = asyncio.ensure_future(kvreplay.record_async(url, "runs/cap", stop=stop, on_listening=urls.append))
        ...  # send requests to urls[0]
        stop.set()
        result = await task
    """
    args = _record_args(upstream, out, listen, paths, max_bodies, max_bytes, redact_body_secrets, duration)
    return await record_args_async(args, stop=stop, on_listening=on_listening)


def record(upstream: str, out: PathLike, *, listen: str = "127.0.0.1:0",
           paths: str | Iterable[str] = ("/v1/chat/completions", "/v1/completions"),
           max_bodies: int | None = None, max_bytes: int | str | None = None, redact_body_secrets: bool = False,
           duration: float | None = None, stop: Stop | None = None,
           on_listening: Callable[[str], object] | None = None) -> RecordResult:
    """Synchronous ``record_async`` (its own event loop, uvloop where installed); same arguments and result.

    ``stop`` as a callable suits another thread: e.g.
    ``stop=lambda: asyncio.to_thread(threading_event.wait)``.
    """
    coro = record_async(upstream, out, listen=listen, paths=paths, max_bodies=max_bodies, max_bytes=max_bytes,
                        redact_body_secrets=redact_body_secrets, duration=duration, stop=stop,
                        on_listening=on_listening)
    try:
        import uvloop
    except ImportError:  # pragma: no cover - non-POSIX
        return asyncio.run(coro)
    return uvloop.run(coro)


def _remove_if_unused(folder: Path) -> None:
    """Remove a capture folder that holds nothing but an empty manifest (the proxy never listened)."""
    from kvreplay.workload.capture import MANIFEST

    with contextlib.suppress(OSError):
        if [p.name for p in folder.iterdir()] == [MANIFEST] and not (folder / MANIFEST).stat().st_size:
            (folder / MANIFEST).unlink()
            folder.rmdir()


class _LoopLater(Executor):
    """Runs each file write as a callback of the event loop, after what is running now (FIFO).

    The proxy admits a body and starts forwarding it before the loop gets to the
    write, so the body's open/write/rename (about 0.2 ms of CPU on the ext4 disk
    measured) is off the request's path to the upstream. A writer thread would
    take it off the loop entirely but competes for the GIL; on the 2-core machine
    measured the two were within noise of each other (bench/bench_record.py), and
    this one keeps every write in order on one thread with no locking.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def submit(self, fn, /, *args, **kwargs):  # noqa: D102
        self._loop.call_soon(lambda: fn(*args, **kwargs))

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:  # noqa: D102
        pass
