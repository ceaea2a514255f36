"""The one place where backend adapters talk HTTP and translate aiohttp errors.

Every adapter request goes through :func:`fetch`, so a refused connection, a
timeout or a broken response becomes a :class:`~kvreplay.errors.BackendError`
(raised ``from`` the aiohttp exception) in exactly one place, as httpx does.
Adapters never send generation requests: only the GET/POST control endpoints
named in SERVERS.md (``/metrics``, ``/cache``, ``/v1/models``, ``/version``,
``/props``, ``/get_server_info``, ``/reset_prefix_cache``, ``/flush_cache``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import aiohttp

from kvreplay.errors import BackendError
from kvreplay.runner.http import read_upto

__all__ = ["Reply", "fetch", "fetch_json", "read_upto"]

DEFAULT_TIMEOUT_S = 5.0
"""Bound on one control request (s); counters are small and local."""

MAX_BODY_BYTES = 16 * 1024 * 1024
"""Largest control response read (bytes); a 2,200-line vLLM scrape is ~160 KB."""


@dataclass(frozen=True, slots=True)
class Reply:
    """One control-endpoint response.

    Attributes:
        status: HTTP status code.
        text: The body decoded as UTF-8 (invalid bytes replaced); empty when
            ``fetch`` was told not to decode (then see ``chunks``).
        content_type: The response ``Content-Type`` without parameters, lower case.
        chunks: The body as it arrived, undecoded and unjoined (``fetch(decode=False)``:
            a large scrape is joined and decoded by its parser, off the event loop).
        body_bytes: The body's size (bytes).
    """

    status: int
    text: str
    content_type: str
    chunks: tuple[bytes, ...] = ()
    body_bytes: int = 0

    @property
    def ok(self) -> bool:
        """True for a 2xx status."""
        return 200 <= self.status < 300


def join_url(base_url: str, path: str) -> str:
    """``base_url`` (with or without a trailing slash) joined with an absolute ``path``.

    A query on the base (``http://h:8000/?api_key=K``) follows the path's own query
    (``/metrics?api_key=K``): never glued after it as ``?api_key=K/metrics``.
    """
    base, q, query = base_url.partition("?")
    joined = base.rstrip("/") + path
    if not q:
        return joined
    query = query.partition("#")[0]
    return joined + ("&" if "?" in path else "?") + query if query else joined


async def fetch(
    session: aiohttp.ClientSession,
    method: str,
    base_url: str,
    path: str,
    *,
    accept: str = "application/json",
    timeout_s: float = DEFAULT_TIMEOUT_S,
    decode: bool = True,
) -> Reply:
    """Send one control request and read the whole body.

    Any HTTP status is returned (callers decide what 404 or 501 means); only a
    failure to get a response at all is raised.

    Args:
        session: The caller's aiohttp session (not closed here).
        method: ``"GET"`` or ``"POST"``.
        base_url: Server root, e.g. ``http://127.0.0.1:8000``.
        path: Absolute path with optional query, e.g. ``/metrics``.
        accept: The ``Accept`` header; ``text/plain`` for Prometheus scrapes, because
            prometheus_client >= 0.26 answers an OpenMetrics Accept with escaped
            names (SERVERS.md section 6).
        timeout_s: Total bound on the request (s).
        decode: False: keep the body as the chunks that arrived (``Reply.chunks``), ``text`` empty.

    Returns:
        The status, decoded body and content type.

    Raises:
        BackendError: connection refused or reset, timeout, body over
            ``MAX_BODY_BYTES``, or any other aiohttp client error; ``.url`` is set.
    """
    url = join_url(base_url, path)
    try:
        for attempt in (1, 2):
            try:
                async with session.request(
                    method,
                    url,
                    # never compressed: the run's session does not decompress (auto_decompress=False),
                    # and prometheus_client's ASGI app gzips a scrape when aiohttp's default
                    # Accept-Encoding allows it (vLLM's /metrics/, filtered: issue 31 item 3)
                    headers={"Accept": accept, "Accept-Encoding": "identity"},
                    timeout=aiohttp.ClientTimeout(total=timeout_s),
                    allow_redirects=False,
                ) as resp:
                    ctype = (resp.headers.get("Content-Type") or "").split(";")[0].strip().lower()
                    if not decode:
                        parts: list[bytes] = []
                        got = 0
                        async for chunk in resp.content.iter_any():
                            parts.append(chunk)
                            got += len(chunk)
                            if got > MAX_BODY_BYTES:
                                raise BackendError(f"{method} {url}: body over {MAX_BODY_BYTES} bytes", url=url)
                        return Reply(resp.status, "", ctype, tuple(parts), got)
                    body = await read_upto(resp.content, MAX_BODY_BYTES)
                    if len(body) > MAX_BODY_BYTES:
                        raise BackendError(f"{method} {url}: body over {MAX_BODY_BYTES} bytes", url=url)
                    return Reply(resp.status, body.decode("utf-8", errors="replace"), ctype, (), len(body))
            except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError):
                # A pooled keep-alive connection the server closed after a stream
                # (llama-server does): control requests are idempotent, so once more
                # on a fresh connection (field case B11).
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")  # pragma: no cover
    except TimeoutError as exc:
        raise BackendError(f"{method} {url}: no response within {timeout_s} s", url=url) from exc
    except aiohttp.ClientError as exc:
        raise BackendError(f"{method} {url}: {type(exc).__name__}: {exc}", url=url) from exc


async def fetch_json(
    session: aiohttp.ClientSession,
    base_url: str,
    path: str,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Any | None:
    """GET ``path`` and decode its JSON body.

    Returns:
        The decoded value, or None when the status is not 2xx or the body is not
        JSON (the endpoint is absent or belongs to another server family).

    Raises:
        BackendError: the server could not be reached (see :func:`fetch`).
    """
    reply = await fetch(session, "GET", base_url, path, timeout_s=timeout_s)
    if not reply.ok:
        return None
    try:
        return json.loads(reply.text)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the stack
        return None
