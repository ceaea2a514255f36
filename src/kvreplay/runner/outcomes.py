"""Turning hostile values and client failures into records (issue 17: every position gets a record).

A server may send numbers no real answer holds (a usage count near 2^64, a
negative count); the runner's summary, histograms and ``report`` would crash or
overflow on them, so such an outcome becomes ``malformed`` before it is
accounted. An unexpected exception while sending or accounting becomes a
``client_error`` record carrying the exception's text, so the position is not
lost and the run exits non-zero.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from typing import overload

from kvreplay.accounting import StreamResult
from kvreplay.accounting.events import ERROR_BYTES, usage_counts
from kvreplay.redaction import redact, redact_obj
from kvreplay.runner.backend import Snapshot
from kvreplay.runner.http import RequestOutcome

__all__ = ["MAX_COUNT", "NO_COUNTS", "check_usage", "client_error_outcome", "finite_snapshot",
           "redact_outcome"]

MAX_COUNT = 1 << 53
"""Largest token count accepted from a server (exclusive); 2^53 keeps every sum exact as a float."""

Counts = tuple[int | None, int | None, int | None, int | None]
NO_COUNTS: Counts = (None, None, None, None)
"""The usage counts of a request without usage (``accounting.events.usage_counts(None)``)."""


def check_usage(out: RequestOutcome) -> Counts:
    """Mark ``out`` ``malformed`` (in place) when its HTTP status or a usage count is out of range; its counts.

    Ranges: HTTP status 100-999 (RFC 9110 section 15: three digits); usage
    ``prompt_tokens``, ``completion_tokens``, cached and reasoning tokens in
    ``[0, 2^53)``. The offending usage object is dropped from the stream result
    (``usage_raw`` is then null), so nothing downstream sums it.

    Returns:
        ``(prompt, completion, cached, reasoning)`` tokens as ``accounting.events.usage_counts``
        reads them from the usage kept (``NO_COUNTS`` when there is none or it was dropped);
        the runner passes them to ``RecordMaking.record`` instead of reading them again.
    """
    r = out.stream
    st = out.http_status
    if st is not None and not 100 <= st <= 999:
        out.status, out.http_status = "malformed", None
        out.error = f"HTTP status out of range: {str(st)[:40]}"
        return usage_counts(r.usage)
    if r.usage is None:
        return NO_COUNTS
    try:
        vals: Counts = usage_counts(r.usage)
    except Exception:  # noqa: BLE001 - a usage object shaped to break the readers
        vals = (-1, None, None, None)
    for v in vals:  # ints or None (usage_counts); a loop, not any(): once a request
        if v is not None and not 0 <= v < MAX_COUNT:
            break
    else:
        return vals
    r.usage = None
    out.status = "malformed"
    out.error = "usage value out of range (a count outside [0, 2^53))"
    return NO_COUNTS


def client_error_outcome(out: RequestOutcome, exc: BaseException) -> RequestOutcome:
    """A ``client_error`` outcome keeping ``out``'s times, with ``exc``'s type and text (<= 1 KiB)."""
    return RequestOutcome("client_error", None, out.sent_ns, out.headers_ns, out.done_ns, StreamResult(),
                          error=f"{type(exc).__name__}: {exc}"[:ERROR_BYTES])


def redact_outcome(out: RequestOutcome) -> RequestOutcome:
    """Redact registered secrets (``kvreplay.redaction``) from every server-supplied string of ``out``, in place.

    Fields: ``error``, the stream's ``error``, ``text_head``, ``finish_reason``,
    ``usage`` and ``timings`` (every string inside, keys too). A secret cut by an
    earlier truncation loses its trailing prefix as well.

    Returns:
        ``out`` itself.
    """
    if out.error:
        out.error = redact(out.error)
    r = out.stream
    if r.error:
        r.error = redact(r.error)
    if r.text_head:
        r.text_head = redact(r.text_head)
    if r.finish_reason:
        r.finish_reason = redact(r.finish_reason)
    if r.usage is not None:
        r.usage = redact_obj(r.usage)
    if r.timings is not None:
        r.timings = redact_obj(r.timings)
    return out


@overload
def finite_snapshot(snap: Snapshot, notice: Callable[[str], None], seen: set[str]) -> Snapshot: ...
@overload
def finite_snapshot(snap: None, notice: Callable[[str], None], seen: set[str]) -> None: ...
def finite_snapshot(snap: Snapshot | None, notice: Callable[[str], None], seen: set[str]) -> Snapshot | None:
    """``snap`` without NaN or infinite values (raw and common); each name dropped is noticed once.

    A counter that is NaN or infinite cannot be differenced or drawn (``report
    --html`` would break), so it is absent, as if the server did not report it.

    Args:
        snap: A counter read (None passes through).
        notice: Called with one line per newly dropped name.
        seen: Names already noticed (updated).
    """
    if snap is None:
        return None
    bad_c = [k for k, v in snap.common.items() if isinstance(v, float) and not math.isfinite(v)]
    bad_r = [k for k, v in snap.raw.items() if isinstance(v, float) and not math.isfinite(v)]
    if not bad_c and not bad_r:
        return snap
    for k in bad_c + bad_r:
        if k not in seen:
            seen.add(k)
            notice(f"counter {k[:200]} is not a finite number (NaN or infinite): left out")
    common = {k: v for k, v in snap.common.items() if k not in bad_c}
    raw = {k: v for k, v in snap.raw.items() if k not in bad_r}
    return replace(snap, common=common, raw=raw)
