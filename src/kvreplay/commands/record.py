r"""``kvreplay record``: a transparent recording proxy that retains exact bodies from live traffic.

Example::

    kvreplay serve-sim --port 8000 &                 # or any OpenAI-compatible server
    kvreplay record --upstream http://127.0.0.1:8000 --listen 127.0.0.1:8100 --out runs/cap
    #   ... point clients at http://127.0.0.1:8100, then Ctrl-C ...
    kvreplay run runs/cap --target http://127.0.0.1:8000 --phase replay:forward:c1
    kvreplay run --plan runs/cap.plan.toml --target http://...    # open loop at captured times

Every request is forwarded byte for byte and every response streamed back as it
arrives (see ``kvreplay.commands._record_proxy``); POST bodies to ``--paths``
are retained as ``W/NNNNNN.json`` with a manifest ``W/capture.jsonl`` and
``W.arrivals.json`` + ``W.plan.toml`` beside ``W`` (``kvreplay.workload.capture``).
The listening URL is printed on stdout (``kvreplay record listening on URL``)
and flushed, so scripts can read it. Stops on SIGINT/SIGTERM (exit 0) or after
``--duration`` seconds, leaving a complete workload; a summary goes to stderr.
Binds loopback unless ``--listen`` says otherwise, and warns when it does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from concurrent.futures import Executor
from pathlib import Path

from kvreplay.safe_io import echo

NAME = "record"
HELP = "record live traffic through a transparent proxy into a replayable workload (exact bodies)"

__all__ = ["HELP", "NAME", "add_arguments", "parse_listen", "record", "run"]


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


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register ``record``'s options."""
    p.add_argument("--upstream", required=True, metavar="URL",
                   help="the server to forward to (http://host:port[/prefix])")
    p.add_argument("--listen", default="127.0.0.1:0", metavar="HOST:PORT",
                   help="address to listen on (default 127.0.0.1:0, a free port, printed)")
    p.add_argument("--out", required=True, metavar="W",
                   help="capture folder to create (bodies + capture.jsonl); W.arrivals.json and "
                        "W.plan.toml are written beside it")
    p.add_argument("--max-bodies", type=int, default=None, metavar="N",
                   help="stop retaining after N bodies (still proxying)")
    p.add_argument("--max-bytes", default=None, metavar="SIZE",
                   help="stop retaining when bodies would pass SIZE in total (e.g. 500MB, 2GiB); "
                        "still proxying")
    p.add_argument("--paths", default="/v1/chat/completions,/v1/completions", metavar="P1,P2",
                   help="comma-separated URL paths whose POST bodies are retained (others are only "
                        "proxied); default /v1/chat/completions,/v1/completions")
    p.add_argument("--redact-body-secrets", action="store_true",
                   help="retain a body that holds a secret (a key shape, a secret field, the request's own "
                        "credential) with the secret replaced by [REDACTED] (both hashes in the manifest) "
                        "instead of skipping it")
    p.add_argument("--duration", type=float, default=None, metavar="S",
                   help="stop after S seconds (default: until SIGINT/SIGTERM)")


async def record(args: argparse.Namespace, *, ready: asyncio.Event | None = None) -> int:
    """Run the proxy until interrupted or ``--duration`` elapses.

    Args:
        args: Parsed options of this command.
        ready: Set once the proxy listens (in-process tests).

    Returns:
        Exit status: 0, or 2 when the address cannot be bound.

    Raises:
        ConfigError: bad options, or ``--out`` exists and is not empty.
    """
    from kvreplay.clock import now_ns
    from kvreplay.commands._record_proxy import RecordingProxy
    from kvreplay.commands.serve_sim import is_loopback, wait_for_stop
    from kvreplay.errors import ConfigError
    from kvreplay.workload.capture import CaptureWriter, parse_size

    if not args.upstream.startswith(("http://", "https://")):
        raise ConfigError(f"must be an http:// or https:// URL, not {args.upstream!r}", field="--upstream")
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
        echo(f"kvreplay record: error: cannot listen on {host}:{port}: {exc.strerror or exc}", err=True)
        return 2
    echo(f"kvreplay record listening on {url} -> {args.upstream}, retaining {','.join(paths)} "
         f"into {args.out}")
    try:
        await wait_for_stop(args.duration, ready)
    finally:
        await proxy.stop()
        await asyncio.sleep(0)  # the last queued writes (manifest close) run now
    s = writer.summary
    if writer.io_error:
        echo(f"kvreplay record: error: writing the capture failed ({writer.io_error}); what is on disk "
             "before that point is complete", err=True)
    echo(f"kvreplay record: {proxy.requests} requests proxied; {s.describe()}", err=True)
    if s.retained:
        from kvreplay.workload.capture import sidecar_paths

        arrivals, plan = sidecar_paths(args.out)
        echo(f"kvreplay record: workload {args.out} (+ {arrivals.name}, {plan.name}); replay with\n"
             f"  kvreplay run {args.out} --target URL --phase replay:forward:c1\n"
             f"  kvreplay run --plan {plan} --target URL   (open loop at the captured arrival times)", err=True)
    return 0


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


def run(args: argparse.Namespace) -> int:
    """Entry point of the subcommand (see module docstring)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - non-POSIX
        return asyncio.run(record(args))
    return uvloop.run(record(args))
