"""Capture folders: retained bodies written as a workload, with a manifest, arrivals and a plan.

A capture folder ``W`` is a workload that ``kvreplay run`` takes as it is
(``kvreplay.workload.load_workload``): it holds only

- ``W/000000.json``, ``W/000001.json``, ... : the retained request bodies, the
  exact bytes received, numbered in arrival order (6 digits; more than a
  million bodies still sort, as names only grow longer);
- ``W/capture.jsonl``: the manifest, one JSON line per body (its keys are
  listed in ``CaptureWriter.complete``). Its suffix is not ``.json``, so the
  loader does not take it for a body.

Beside the folder, as ``kvreplay import mooncake`` writes them:
``W.arrivals.json`` (a JSON list of arrival offsets in ms from the first
retained body, one per body) and ``W.plan.toml`` (the workload and one
open-loop phase with ``arrival = "trace:W.arrivals.json"``, which replays
the bodies at the times they arrived).

Crash safety: each body is written to a temporary name in ``W`` (``.NNNNNN.json.tmp``,
not ``*.json``) and renamed into place, so a body file is either complete or
absent; a manifest line is written and flushed per body; the arrivals and the
plan are rewritten atomically (temporary file + rename) as bodies arrive and
once more at ``close``.

Secrets: request headers are retained only from ``ALLOWED_HEADERS``; the values
of credential headers (``Authorization``, ``Proxy-Authorization``, cookies,
and any header whose name says key, token, secret, auth, session or password)
are collected per request by :func:`secrets_of` and removed from everything
written (:func:`redact`), so a server that echoes the key leaves no copy. A body
that holds a secret of any kind (:mod:`kvreplay.workload.secrets`: its own
credentials in any JSON encoding, well-known key shapes, secret fields) is not
retained (``skipped: secret``), or retained with the secrets replaced when the
writer is made with ``redact_body_secrets``.

Encoded bodies: the retained body is the *decoded* one (``Content-Encoding``
gzip, deflate or identity, :mod:`kvreplay.workload.encoding`, under the body cap);
a :class:`Pending` takes the bytes as they arrive so no body is ever held whole
in its encoded form, and every pending body together holds at most ``budget_bytes``.
"""

from __future__ import annotations

import re
import time
from array import array
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from kvreplay.errors import ConfigError, WorkloadError
from kvreplay.options.importing import IMPORT_CONCURRENCY  # kvreplay import's --concurrency default
from kvreplay.options.record import RETAINED_PATHS  # record's and import's --paths default
from kvreplay.safe_io import atomic_write_bytes
from kvreplay.workload._loader import DEFAULT_MAX_BODY_BYTES, Body, check_body
from kvreplay.workload.captureplan import sidecar_paths, toml_comment, toml_str, write_plan
from kvreplay.workload.encoding import BodyDecoder, DecodeRefused
from kvreplay.workload.jsonscan import TooLargeToParse, loads_bounded
from kvreplay.workload.secrets import (
    ALLOWED_HEADERS,
    REDACTED,
    find_secrets,
    redact,
    redact_body,
    retained_headers,
    secrets_of,
)

__all__ = [
    "ALLOWED_HEADERS",
    "DEFAULT_PATHS",
    "MANIFEST",
    "REDACTED",
    "Pending",
    "CaptureSummary",
    "CaptureWriter",
    "Slot",
    "parse_size",
    "redact",
    "retained_headers",
    "secrets_of",
    "sidecar_paths",
    "toml_comment",
    "toml_str",
    "write_plan",
]

MANIFEST = "capture.jsonl"
"""Name of the manifest inside a capture folder."""

DEFAULT_PATHS = RETAINED_PATHS
"""URL paths whose request bodies are retained by default (``kvreplay.options.record.RETAINED_PATHS``)."""

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?)b?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes from ``"500000"``, ``"64MiB"``, ``"1.5G"``, ``"10kb"`` (k/M/G/T: 1000-based, KiB...: 1024).

    Raises:
        ConfigError: not a size.
    """
    m = _SIZE.match(text)
    if not m:
        raise ConfigError(f"not a size: {text!r} (e.g. 500000, 64MiB, 2GB)", field="--max-bytes")
    num, unit, binary = float(m.group(1)), m.group(2).lower(), m.group(3)
    base = 1024 if binary else 1000
    return int(num * base ** " kmgt".index(unit or " "))


def _atomic_body_write(path: Path, data: bytes) -> None:
    """A retained body through the output sink: atomic, no symlink followed, not synced one by one."""
    atomic_write_bytes(path, data, fsync=False)


DEFAULT_BUDGET_BYTES = 256 << 20
"""Default cap on the decoded bytes held by all bodies being received at once (bytes)."""


@dataclass(slots=True)
class Slot:
    """One retained body, from admission until its manifest line is written.

    Attributes:
        index: 0-based position in the capture (file ``NNNNNN.json``).
        body: The checked body (exact bytes, sha256, kind, stream flag).
        arrival_ns: When it arrived (ns, caller's clock, e.g. ``clock.now_ns``).
        path: URL path it was sent to.
        headers: Allow-listed request headers (see :func:`retained_headers`).
        secrets: Credential values of its request (kept in memory only).
        in_flight_at_arrival: Retained requests in flight at the proxy when it arrived,
            itself included (>= 1): the client's concurrency as the server saw it.
        ended: The answer's end was relayed (``CaptureWriter.ended``): no longer in flight,
            though its manifest line is not written yet.
    """

    index: int
    body: Body
    arrival_ns: int
    path: str
    headers: dict[str, str]
    secrets: list[str]
    in_flight_at_arrival: int = 1
    done: bool = False
    ended: bool = False
    extra: dict = field(default_factory=dict)


class Pending:
    """A body being received: its bytes are fed in as they arrive, decoded under a cap.

    Memory: the decoded bytes held by every pending body of one writer together stay
    under the writer's ``budget_bytes``; a body that would pass it is refused
    (``memory``) and its bytes released, still forwarded.

    Attributes:
        state: ``open`` while receiving; ``done`` after ``finish``; otherwise the
            reason it was refused.
    """

    __slots__ = ("arrival_ns", "decoder", "headers", "held", "in_flight_at_arrival", "method", "path",
                 "secrets", "state", "writer")

    def __init__(self, writer: CaptureWriter, decoder: BodyDecoder, method: str, path: str, arrival_ns: int,
                 headers: object, secrets: list[str]) -> None:
        self.writer, self.decoder = writer, decoder
        self.method, self.path, self.arrival_ns = method, path, arrival_ns
        self.headers, self.secrets = headers, secrets
        self.in_flight_at_arrival = 1
        self.held = 0
        self.state = "open"

    def release(self) -> None:
        """Give back the decoded bytes held (to the writer's budget)."""
        self.writer.buffered -= self.held
        self.held = 0
        self.decoder.out = bytearray()

    def feed(self, chunk: bytes) -> None:
        """Received bytes of the body (as sent, still encoded); never raises."""
        if self.state != "open" or not chunk:
            return
        try:
            self.decoder.feed(chunk)
        except DecodeRefused as exc:
            self.writer.abandon(self, exc.reason, exc.detail)
            return
        grown = len(self.decoder.out) - self.held
        w = self.writer
        if grown > 0 and w.buffered + grown > w.budget_bytes:
            w.abandon(self, "memory", f"bodies being received would hold more than {w.budget_bytes} "
                                      "decoded bytes together (the capture's memory budget)")
            return
        w.buffered += grown
        self.held += grown


@dataclass(slots=True)
class CaptureSummary:
    """Counts of one capture (or import).

    Attributes:
        retained: Bodies written.
        retained_bytes: Their total size (bytes).
        skipped: Requests not retained, by reason (``"path"``: not a retained
            path; ``"method"``: not POST; ``"invalid"``: not a chat/completions
            JSON body; ``"secret"``: the body holds a secret (``workload.secrets``:
            a key shape, a secret field or a credential from its own headers);
            ``"encoding"``: a ``Content-Encoding`` not decoded, or bytes not valid
            for it; ``"too_large"``: the decoded body passes the body cap;
            ``"memory"``: bodies being received would pass the memory budget;
            ``"incomplete"``: the body did not arrive whole; ``"limit"``: after
            ``max_bodies``/``max_bytes``). Each reason but ``path``, ``method``,
            ``invalid`` and ``limit`` also gets a manifest line (``skipped``, ``detail``).
        limit_reached: Which limit stopped retention, or None.
    """

    retained: int = 0
    retained_bytes: int = 0
    skipped: dict[str, int] = field(default_factory=dict)
    limit_reached: str | None = None

    def skip(self, reason: str) -> None:
        """Count one request not retained, for ``reason``."""
        self.skipped[reason] = self.skipped.get(reason, 0) + 1

    def describe(self) -> str:
        """One line: ``N bodies (B bytes) retained; skipped: reason n, ...``."""
        sk = ", ".join(f"{k} {v}" for k, v in sorted(self.skipped.items())) or "none"
        lim = f"; stopped retaining at {self.limit_reached}" if self.limit_reached else ""
        return f"{self.retained} bodies ({self.retained_bytes} bytes) retained; skipped: {sk}{lim}"


class CaptureWriter:
    """Writes a capture folder as bodies arrive (see module docstring for the layout).

    Use ``admit`` when a request arrives (before forwarding), ``complete``
    when its response ends (or is cut), ``flush_sidecars`` now and then and
    ``close`` once. Single-threaded: call from one event loop or thread.

    Args:
        folder: The folder ``W`` to create; it must not exist or be empty.
        max_bodies: Stop retaining after this many bodies (None: no limit).
        max_bytes: Stop retaining when the next body would take the total past
            this many bytes (None: no limit).
        paths: URL paths whose POST bodies are retained.
        max_body_bytes: Largest single body retained (bytes); a larger one is
            ``"invalid"`` (the loader would refuse it).
        origin_ns: Capture start (ns, the caller's clock).
        timed: Arrival times are real (a live capture, a HAR): write
            ``W.arrivals.json`` and an open-loop plan. False (OpenAI Batch
            input has no times): no arrivals, a closed-loop plan at C64.
        io: An executor that runs the file writes in submission order (one
            worker, or the proxy's event-loop ``call_soon``), so a body is on
            disk before its manifest line and the writes leave the request's
            path. None: written inline. Its owner drains it after ``close``.
        observed_concurrency: The bodies arrive live (``kvreplay record``): the
            plan's cap is the most retained requests observed in flight at once
            (each manifest line keeps ``in_flight_at_arrival``), said in the
            plan's comment. False (imports): ``IMPORT_CONCURRENCY`` (64).
        budget_bytes: Most decoded bytes held by bodies still being received, all
            together (bytes); past it a body is forwarded but not retained (``memory``).
        redact_body_secrets: A body holding a secret (``workload.secrets``) is retained
            with the secret replaced (``redacted`` and ``received_sha256`` in its
            manifest line) instead of being skipped (``secret``).

    Raises:
        ConfigError: ``folder`` exists and is not an empty directory, or cannot be created.
    """

    def __init__(
        self,
        folder: str | Path,
        *,
        max_bodies: int | None = None,
        max_bytes: int | None = None,
        paths: tuple[str, ...] = DEFAULT_PATHS,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        origin_ns: int = 0,
        timed: bool = True,
        io: Executor | None = None,
        observed_concurrency: bool = False,
        budget_bytes: int = DEFAULT_BUDGET_BYTES,
        redact_body_secrets: bool = False,
    ) -> None:
        self.folder = Path(folder)
        try:
            toml_str(str(self.folder))  # the plan beside it names it: refuse now what it could not hold
        except ValueError as exc:
            shown = str(self.folder).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            raise ConfigError(str(exc), path=shown, field="--out") from exc
        if self.folder.exists() and (not self.folder.is_dir() or any(self.folder.iterdir())):
            raise ConfigError("exists and is not an empty folder; choose a new --out", path=self.folder,
                              field="--out")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            self._manifest = open(self.folder / MANIFEST, "ab")  # noqa: SIM115 - held open until close()
        except OSError as exc:
            raise ConfigError(f"cannot create the capture folder: {exc}", path=self.folder,
                              field="--out") from exc
        self.max_bodies, self.max_bytes = max_bodies, max_bytes
        self.observed_concurrency = observed_concurrency
        self.paths = frozenset(paths)
        self.max_body_bytes = max_body_bytes
        self.origin_ns = origin_ns
        self.timed = timed
        self._io = io
        self.io_error: str | None = None
        self.summary = CaptureSummary()
        self._t0_ns: int | None = None  # the first retained body's arrival (ns)
        self._arrivals_ms = array("d")  # one offset per retained body (ms, rounded once: 8 bytes a body)
        self._sidecar_s = 0.0  # how long the last sidecar rewrite took (s, in the writing thread)
        self._sidecar_at = 0.0  # when the last rewrite was asked for (time.monotonic)
        self.in_flight = 0
        self.peak_in_flight = 0
        self.budget_bytes = budget_bytes
        self.buffered = 0
        self.redact_body_secrets = redact_body_secrets
        self._dirty = False
        self._closed = False
        self._open: dict[int, Slot] = {}

    def begin(
        self,
        method: str,
        path: str,
        arrival_ns: int,
        headers: object = (),
        *,
        content_encoding: str | None = None,
    ) -> Pending | None:
        """A request arrives: decide from its line and headers whether its body may be retained.

        Args:
            method: HTTP method.
            path: URL path (no query).
            arrival_ns: Arrival time (ns, the caller's clock): its first byte.
            headers: The request headers (for the allow-list and the secrets).
            content_encoding: The request's ``Content-Encoding``, if any.

        Returns:
            A :class:`Pending` to feed the body's received bytes into, then to pass
            to ``finish``; or None when not retained (the reason is counted in
            ``summary.skipped``: ``path``, ``method``, ``limit``, ``encoding``).
        """
        s = self.summary
        if path not in self.paths:
            s.skip("path")
            return None
        if method != "POST":
            s.skip("method")
            return None
        if s.limit_reached:
            s.skip("limit")
            return None
        if self.max_bodies is not None and s.retained >= self.max_bodies:
            s.limit_reached = f"--max-bodies {self.max_bodies}"
            s.skip("limit")
            return None
        try:
            decoder = BodyDecoder(content_encoding, self.max_body_bytes)
        except DecodeRefused as exc:
            self._skip_line(exc.reason, exc.detail, path, arrival_ns)
            return None
        pending = Pending(self, decoder, method, path, arrival_ns, headers, secrets_of(headers))
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        pending.in_flight_at_arrival = self.in_flight
        return pending

    def _skip_line(self, reason: str, detail: str, path: str, arrival_ns: int) -> None:
        """Count a request not retained and say why in the manifest (a line with ``skipped``, no ``index``)."""
        self.summary.skip(reason)
        line = {"skipped": reason, "detail": detail, "path": path,
                "since_start_ms": round((arrival_ns - self.origin_ns) / 1e6, 3)}
        self._do(self._append, orjson.dumps(line) + b"\n")

    def abandon(self, pending: Pending, reason: str = "incomplete",
                detail: str = "the request body did not arrive whole") -> None:
        """Give up a pending body (not forwarded whole, or the proxy stopped); counted as ``reason``."""
        if pending.state != "open":
            return
        pending.state = reason
        pending.release()
        self.in_flight -= 1
        self._skip_line(reason, detail, pending.path, pending.arrival_ns)

    def finish(self, pending: Pending) -> Slot | None:
        """The whole body was received: check it and, if retained, write it now (atomically).

        Returns:
            The slot to pass to ``complete``, or None when not retained (counted in
            ``summary.skipped``: ``too_large``/``encoding``/``memory`` (refused while
            it arrived), ``limit``, ``secret``, ``invalid``).

        Raises:
            OSError: the body cannot be written inline (no ``io``).
        """
        if pending.state != "open":
            return None
        s = self.summary
        pending.state = "done"
        self.in_flight -= 1
        try:
            raw = pending.decoder.finish()
        except DecodeRefused as exc:
            pending.release()
            self._skip_line(exc.reason, exc.detail, pending.path, pending.arrival_ns)
            return None
        pending.release()
        if self.max_bytes is not None and s.retained_bytes + len(raw) > self.max_bytes:
            s.limit_reached = s.limit_reached or f"--max-bytes {self.max_bytes}"
            s.skip("limit")
            return None
        if self.max_bodies is not None and s.retained >= self.max_bodies:
            s.limit_reached = s.limit_reached or f"--max-bodies {self.max_bodies}"
        if s.limit_reached:
            s.skip("limit")
            return None
        index = s.retained
        name = f"{index:06d}.json"
        path = self.folder / name
        try:
            doc = loads_bounded(raw)  # parsed once for the checks and the secret scan
            body = check_body(raw, index, path, None, self.max_body_bytes, doc=doc)
        except (orjson.JSONDecodeError, WorkloadError):
            s.skip("invalid")
            return None
        except TooLargeToParse:
            s.skip("memory")
            return None
        extra: dict = {}
        try:
            found = find_secrets(raw, pending.secrets, doc=doc)
        except MemoryError:  # a body of millions of values under an address-space limit
            s.skip("memory")
            return None
        if found:
            red = redact_body(raw, pending.secrets) if self.redact_body_secrets else None
            if red is None:
                self._skip_line("secret", "; ".join(sorted({f.kind for f in found})) + " in the body",
                                pending.path, pending.arrival_ns)
                return None
            extra = {"redacted": sorted({str(f) for f in found}), "received_sha256": body.sha256}
            raw = red
            body = check_body(raw, index, path, None, self.max_body_bytes)
        if pending.decoder.encoding != "identity":
            extra["content_encoding"] = pending.decoder.encoding
            extra["received_bytes"] = pending.decoder.received
        self._do(_atomic_body_write, path, raw)
        s.retained += 1
        s.retained_bytes += len(raw)
        if self._t0_ns is None:
            self._t0_ns = pending.arrival_ns
        self._arrivals_ms.append(round((pending.arrival_ns - self._t0_ns) / 1e6, 3))
        self._dirty = True
        self.in_flight += 1  # until ``complete``
        slot = Slot(index, body, pending.arrival_ns, pending.path, retained_headers(pending.headers, pending.secrets),
                    pending.secrets, pending.in_flight_at_arrival, extra=extra)
        self._open[index] = slot
        return slot

    def ended(self, slot: Slot) -> None:
        """The answer's end was relayed to the client (a stream's ``[DONE]`` or final usage chunk).

        The request stops counting as in flight now, not when its handler returns: a client
        that sends its next request as soon as it has read ``[DONE]`` (the OpenAI Python SDK)
        overlaps nothing, though the proxy may still be closing the exchange (issue 42 item 9).
        """
        if not slot.done and not slot.ended:
            slot.ended = True
            self.in_flight -= 1

    def admit(
        self,
        method: str,
        path: str,
        raw: bytes,
        arrival_ns: int,
        headers: object = (),
        *,
        content_encoding: str | None = None,
    ) -> Slot | None:
        """A whole body at once (importers): ``begin``, ``feed`` and ``finish`` in one call.

        Args:
            method: HTTP method.
            path: URL path (no query).
            raw: The request body as received (bytes, encoded as ``content_encoding`` says).
            arrival_ns: Arrival time (ns, the caller's clock).
            headers: The request headers (for the allow-list and the secrets).
            content_encoding: The request's ``Content-Encoding``, if any.

        Returns:
            The slot to pass to ``complete``, or None when not retained (the
            reason is counted in ``summary.skipped``).

        Raises:
            OSError: the body cannot be written (disk full, ...).
        """
        pending = self.begin(method, path, arrival_ns, headers, content_encoding=content_encoding)
        if pending is None:
            return None
        pending.feed(raw)
        return self.finish(pending)

    def complete(
        self,
        slot: Slot,
        *,
        status: int | None,
        outcome: str,
        usage: object = None,
        ttft_ns: int | None = None,
        e2e_ns: int | None = None,
        error: str | None = None,
        extra: dict | None = None,
    ) -> None:
        """Write the body's manifest line (once; later calls are ignored) and flush it.

        The line's keys: ``index``, ``file``, ``body_sha256``, ``body_bytes``,
        ``arrival_ms`` (offset from the first retained body, as in
        ``W.arrivals.json``), ``since_start_ms`` (from ``origin_ns``), ``path``,
        ``headers`` (allow-listed), ``stream`` (the body's flag), ``status``
        (upstream HTTP status, None when none came), ``outcome``, ``usage``
        (verbatim when a JSON object under 4 KiB, else None),
        ``cached_tokens`` (``prompt_tokens_details.cached_tokens`` and its
        variants, None when not reported), ``ttft_ms`` and ``e2e_ms`` (from
        arrival at the proxy to the first token / the end of the response,
        ms) and ``error`` (upstream error message, at most 1 KiB, when any).
        The whole line passes through :func:`redact` with the request's secrets.

        Args:
            slot: From ``admit``.
            status: Upstream HTTP status.
            outcome: ``complete``, ``upstream_error`` (no response),
                ``client_gone`` (the client left mid-response) or ``interrupted``
                (the proxy stopped first).
            usage: The response's ``usage`` object.
            ttft_ns: Arrival to first token event (ns), None when not streamed.
            e2e_ns: Arrival to the end of the response (ns).
            error: Upstream error message.
            extra: More keys for the line (importers: ``source``, ``custom_id``,
                ``reserialised``).
        """
        from kvreplay.accounting.events import cached_tokens_of

        if slot.done:
            return
        slot.done = True
        if not slot.ended:
            self.in_flight -= 1
        self._open.pop(slot.index, None)
        if usage is not None:
            try:
                if not isinstance(usage, dict) or len(orjson.dumps(usage)) > 4096:
                    usage = None
            except TypeError:
                usage = None
        line = {
            "index": slot.index,
            "file": f"{slot.index:06d}.json",
            "body_sha256": slot.body.sha256,
            "body_bytes": slot.body.body_bytes,
            "arrival_ms": round((slot.arrival_ns - (self._t0_ns or 0)) / 1e6, 3),
            "in_flight_at_arrival": slot.in_flight_at_arrival,
            "since_start_ms": round((slot.arrival_ns - self.origin_ns) / 1e6, 3),
            "path": slot.path,
            "headers": slot.headers,
            "stream": slot.body.stream,
            "status": status,
            "outcome": outcome,
            "usage": usage,
            "cached_tokens": cached_tokens_of(usage) if isinstance(usage, dict) else None,
            "ttft_ms": None if ttft_ns is None else round(ttft_ns / 1e6, 3),
            "e2e_ms": None if e2e_ns is None else round(e2e_ns / 1e6, 3),
        }
        if error:
            line["error"] = error[:1024]
        if slot.extra:
            line.update(slot.extra)
        if extra:
            line.update(extra)
        self._do(self._append, redact(orjson.dumps(line), slot.secrets) + b"\n")

    def _append(self, data: bytes) -> None:
        self._manifest.write(data)
        self._manifest.flush()

    def _do(self, fn: Callable[..., object], *args: object) -> None:
        """Run a file operation inline, or queue it on ``io``; the first OSError is kept in ``io_error``."""
        if self._io is None:
            fn(*args)
            return

        def run() -> None:
            try:
                fn(*args)
            except OSError as exc:
                if self.io_error is None:
                    self.io_error = f"{type(exc).__name__}: {exc}"

        self._io.submit(run)

    def arrivals_ms(self) -> list[float]:
        """Arrival offsets of the retained bodies (ms from the first, µs resolution), in retention order."""
        return self._arrivals_ms.tolist()

    SIDECAR_SHARE = 0.05
    """At most this share of the wall time goes to rewriting the sidecars while bodies arrive."""

    def flush_sidecars(self, *, comment: str = "kvreplay record", now: float | None = None) -> None:
        """Rewrite ``W.arrivals.json`` and ``W.plan.toml`` when bodies arrived since the last call.

        Atomic (written beside, renamed over) every time; synced to disk only by the last
        write (``close``): a periodic rewrite does not hold the proxy's event loop for a disk flush.
        The rewrite (the arrivals' JSON, the files) runs where the manifest's writes run (the
        ``io`` executor) on a copy of the offsets (8 bytes a body); since its cost grows with
        the capture (1.2 ms at 5,000 bodies), a rewrite is skipped until ``1 / SIDECAR_SHARE``
        times the last one's duration has passed since it was asked for, so that rewrites
        take at most 5% of the time however long the capture. ``close`` always writes.

        Args:
            comment: The plan's comment line.
            now: ``time.monotonic()`` (tests); None: read here.
        """
        if not self._dirty:
            return
        t = time.monotonic() if now is None else now
        if not self._closed and t - self._sidecar_at < self._sidecar_s / self.SIDECAR_SHARE:
            return  # the last rewrite was slow: wait (still dirty)
        self._sidecar_at = t
        self._dirty = False
        text = f"{comment}: {self.summary.describe()}"
        if self.observed_concurrency:
            # The cap is what the client kept in flight, not more: an open-loop replay against a
            # slower server could otherwise put far more requests in flight than the original traffic.
            cap = max(1, self.peak_in_flight)
            text += f"; concurrency = the most requests in flight observed ({cap})"
        else:
            cap = IMPORT_CONCURRENCY  # an import has no in-flight count to observe
        self._do(self._write_sidecars, array("d", self._arrivals_ms) if self.timed else None, cap, text,
                 self._closed)

    def _write_sidecars(self, arrivals: array | None, cap: int, text: str, fsync: bool) -> None:
        t = time.perf_counter()
        write_plan(self.folder, arrivals.tolist() if arrivals is not None else None, cap, text, fsync=fsync)
        self._sidecar_s = time.perf_counter() - t

    def close(self, *, comment: str = "kvreplay record") -> CaptureSummary:
        """Write the sidecars a last time and close the manifest; returns the summary.

        Bodies still open (``complete`` not called: the response had not ended)
        get their manifest line now, with outcome ``interrupted``.
        """
        if not self._closed:
            for slot in sorted(self._open.values(), key=lambda s: s.index):
                self.complete(slot, status=None, outcome="interrupted")
            self._closed = True
            self._dirty = True
            if self.summary.retained:
                self.flush_sidecars(comment=comment)
            self._do(self._manifest.close)
        return self.summary
