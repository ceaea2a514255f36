"""Read a server's counters once: the behaviour of ``kvreplay snapshot`` and ``kvreplay.snapshot``.

``kvreplay snapshot`` (``commands/snapshot.py``) prints the JSON; its options are
``kvreplay.options.snapshot.SnapshotConfig``; this module reads the server (or a saved dump) through the
backend registry (``snapshot_args_async``). Nothing but control endpoints is contacted;
no generation request is sent. Examples::

    kvreplay snapshot --target http://127.0.0.1:8000
    kvreplay snapshot --from-file fixtures/metrics/vllm/nvcr-25.09.prom --backend vllm
"""

from __future__ import annotations

import asyncio
import math
import os
from pathlib import Path
from typing import Any, TypedDict

from kvreplay.errors import BackendError, ConfigError
from kvreplay.options.snapshot import SnapshotConfig

PathLike = str | os.PathLike[str]

__all__ = ["Snapshot", "SnapshotConfig", "snapshot", "snapshot_args", "snapshot_args_async", "snapshot_async"]


class Snapshot(TypedDict):
    """One read of a server's counters, as ``kvreplay snapshot`` prints it.

    ``backend`` is the family that read it (``vllm``, ``sglang``, ``halogen``...);
    ``identity`` the server's model, version and cache configuration; ``common`` the
    counters under the common names of ``kvreplay.evidence.vocab`` (tokens, bytes, seconds);
    ``raw`` the server's own series by name; ``started`` the server's start time (Unix s)
    where it says; ``units`` the unit of each common name. Non-finite raw values (NaN,
    +Inf, -Inf) are the strings ``"NaN"``, ``"+Inf"`` and ``"-Inf"``, so the whole is valid JSON.
    """

    backend: str
    identity: dict[str, Any]
    common: dict[str, Any]
    raw: dict[str, Any]
    started: float | None
    units: dict[str, str]


def _jsonable(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("+Inf" if value > 0 else "-Inf")
    if isinstance(value, dict):
        return {k: _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


async def _live(args: SnapshotConfig) -> dict[str, Any]:
    import aiohttp

    from kvreplay.backends import detect, make_backend

    target = args.target or ""  # a live read has a target (_check)
    async with aiohttp.ClientSession() as session:
        name = args.backend
        if name == "auto":
            name = await detect(target, session)
        backend = make_backend(name, target, session, profile=args.profile)
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


def _offline(args: SnapshotConfig) -> dict[str, Any]:
    from kvreplay.backends import make_backend, parse_dump

    path = Path(args.from_file or "")  # an offline read has a dump (snapshot_args)
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


def _check(args: SnapshotConfig) -> None:
    if args.target:
        from kvreplay.api.run import check_target

        check_target(args.target, sim=False)


async def snapshot_args_async(args: SnapshotConfig) -> Snapshot:
    """Read ``args.target`` live (bounded by ``args.timeout`` s) or parse ``args.from_file``.

    Raises:
        ConfigError: a target that is not an http(s) URL, an unreadable dump.
        BackendError: the server or dump could not be read, or no answer within the timeout.
    """
    _check(args)
    if args.from_file:
        out = _offline(args)
    else:
        try:
            out = await asyncio.wait_for(_live(args), timeout=args.timeout)
        except TimeoutError:
            raise BackendError(f"no answer within {args.timeout} s", url=args.target) from None
    snap: Snapshot = _jsonable(out)
    return snap


def snapshot_args(args: SnapshotConfig) -> Snapshot:
    """``snapshot_args_async`` on a fresh event loop (what ``kvreplay snapshot`` runs)."""
    _check(args)  # before a loop starts, as the command always did
    if args.from_file:
        snap: Snapshot = _jsonable(_offline(args))
        return snap
    return asyncio.run(snapshot_args_async(args))


def _args(target: str | None, from_file: PathLike | None, backend: str, profile: str | None,
          timeout_s: float) -> SnapshotConfig:
    if (target is None) == (from_file is None):
        raise ConfigError("give target or from_file (one of them)", field="target")
    return SnapshotConfig(target=target, from_file=None if from_file is None else os.fspath(from_file),
                          backend=backend, profile=profile, timeout=timeout_s)


async def snapshot_async(target: str | None = None, *, from_file: PathLike | None = None, backend: str = "auto",
                         profile: str | None = None, timeout_s: float = 10.0) -> Snapshot:
    """Read a server's identity and cache counters once (``kvreplay snapshot``), in the running event loop.

    Args:
        target: The server's root URL, e.g. ``"http://127.0.0.1:8000"`` (or give ``from_file``).
        from_file: A saved ``/metrics`` or ``/cache`` body to parse instead of a live server.
        backend: ``"auto"`` (probe the server, or tell from the dump) or a family name
            of ``kvreplay.backends.backend_names()``.
        profile: A profile name or TOML file (``backend="prometheus"``).
        timeout_s: Bound on the whole live read (seconds).

    Returns:
        The ``Snapshot``, as ``kvreplay snapshot`` prints it.

    Raises:
        ConfigError: neither or both of target and from_file, a target that is not a URL,
            an unreadable dump.
        BackendError: the server or dump could not be read; no answer within ``timeout_s``.

    Example::

        snap = await kvreplay.snapshot_async("http://127.0.0.1:8000")
        print(snap["backend"], snap["common"].get("prefix_cache_hits"))
    """
    return await snapshot_args_async(_args(target, from_file, backend, profile, timeout_s))


def snapshot(target: str | None = None, *, from_file: PathLike | None = None, backend: str = "auto",
             profile: str | None = None, timeout_s: float = 10.0) -> Snapshot:
    """Read a server's counters once (``kvreplay snapshot``); blocks until read. Arguments as ``snapshot_async``.

    Example::

        snap = kvreplay.snapshot(from_file="fixtures/metrics/vllm/nvcr-25.09.prom")
        print(snap["backend"], snap["common"])

    Raises:
        ConfigError, BackendError: as ``snapshot_async``.
    """
    return snapshot_args(_args(target, from_file, backend, profile, timeout_s))
