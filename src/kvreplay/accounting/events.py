"""Types shared by both SSE accountant twins (pure ``_sse_py`` and native ``_sse_c``).

They live in a Python module that the ``.pyx`` imports, so both paths return
identical types and compare equal field by field (parity tests rely on it).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np

__all__ = ["Accountant", "Event", "StreamResult", "cached_tokens_of", "end_marker_in", "itl_gaps_ns",
           "itl_summary_ns", "reasoning_tokens_of", "usage_counts"]

HEAD_CHARS = 256
"""Default bound on the response text kept per request (characters)."""

MAX_LINE_BYTES = 1 << 20
"""Default bound on one SSE line (bytes); longer is a ``StreamError``."""

ERROR_BYTES = 1024
"""Bound on a server error message kept in a record (characters)."""


@dataclass(frozen=True, slots=True)
class Event:
    """One dispatched SSE event, kept only when the accountant runs with ``keep_events``.

    Attributes:
        name: The ``event:`` field, ``""`` when absent.
        data: The joined ``data:`` lines (bytes, without the final LF).
        recv_ns: Arrival time of the chunk that completed it (ns, caller's clock).
    """

    name: str
    data: bytes
    recv_ns: int


@dataclass(slots=True, kw_only=True)
class StreamResult:
    """What one streamed response did, as accounted from its bytes.

    A *token event* is a data event whose delta carries non-empty content or
    non-empty reasoning text (any channel). A role-only prelude
    (``{"role":"assistant","content":""}``), a finish chunk with an empty delta
    and a usage-only chunk (``choices: []``) are not token events, so they never
    move TTFT (field cases B02, B04).

    Attributes:
        events: SSE events dispatched (a blank line ended a non-empty data buffer).
        chunks: Events whose data was a JSON payload (``[DONE]`` excluded).
        content_deltas: Chunks with non-empty visible content (``delta.content``,
            text parts of an array ``content``, or legacy ``choices[].text``).
        reasoning_deltas: Chunks with non-empty hidden reasoning
            (``delta.reasoning_content``, ``delta.reasoning``, thinking parts).
        first_byte_ns: Arrival of the first non-empty chunk of the body (ns).
        first_token_ns: Arrival of the first token event on any channel (TTFT end).
        first_content_ns: Arrival of the first visible-content token event.
        last_token_ns: Arrival of the last token event.
        token_ns: Arrival of every token event, in order (ITL = successive gaps), as
            an ``array('q')``: 8 bytes per token event, so a long stream's client
            memory stays small (a list of ints costs about 40 bytes each).
        last_event_ns: Arrival of the last dispatched event of any kind,
            ``[DONE]`` included (the end of the answer for E2E).
        finish_reason: Last non-null ``finish_reason`` seen.
        done_marker: ``data: [DONE]`` was seen.
        usage: The last ``usage`` object seen, verbatim (top level, else
            ``x_groq.usage``); None when the stream carried none.
        timings: llama.cpp's ``timings`` object verbatim, last seen.
        error: Message of the last error event (``data: {"error":...}``,
            ``event: error`` or a legacy ``error:`` line), at most 1 KiB.
        error_events: Number of error events.
        text_head: The first ``head_chars`` characters of visible content.
        eof_truncated: The body ended inside an event whose data was not a
            whole JSON object (a cut connection); that event was discarded.
    """

    events: int = 0
    chunks: int = 0
    content_deltas: int = 0
    reasoning_deltas: int = 0
    first_byte_ns: int | None = None
    first_token_ns: int | None = None
    first_content_ns: int | None = None
    last_token_ns: int | None = None
    token_ns: array = field(default_factory=lambda: array("q"))
    last_event_ns: int | None = None
    finish_reason: str | None = None
    done_marker: bool = False
    usage: dict | None = None
    timings: dict | None = None
    error: str | None = None
    error_events: int = 0
    text_head: str = ""
    eof_truncated: bool = False

    @property
    def prompt_tokens(self) -> int | None:
        """``usage.prompt_tokens`` (tokens), None when not reported."""
        return _int(self.usage, "prompt_tokens")

    @property
    def completion_tokens(self) -> int | None:
        """``usage.completion_tokens`` (tokens), None when not reported."""
        return _int(self.usage, "completion_tokens")

    @property
    def cached_tokens(self) -> int | None:
        """Cached prompt tokens the server reported; None when it did not say."""
        return cached_tokens_of(self.usage)

    @property
    def reasoning_tokens(self) -> int | None:
        """``usage.completion_tokens_details.reasoning_tokens``; None when absent."""
        return reasoning_tokens_of(self.usage)

    @property
    def eof_before_finish(self) -> bool:
        """The stream ended with no ``finish_reason``, no ``[DONE]`` and no error event.

        Meaningful after ``close()``: the server (or the connection) stopped
        mid-answer (field case B14, cut variant). A stream that ends at EOF after
        its finish chunk without ``[DONE]`` (llama.cpp family) is not this.
        """
        return self.finish_reason is None and not self.done_marker and self.error_events == 0

    @property
    def output_tokens(self) -> int:
        """Generated tokens: ``usage.completion_tokens``, else token events on all channels.

        When the server sent no usage this counts non-empty deltas (one per
        chunk), which ``output_tokens_estimated`` flags (field case B06).
        """
        c = self.completion_tokens
        return c if c is not None else self.content_deltas + self.reasoning_deltas

    @property
    def output_tokens_estimated(self) -> bool:
        """True when ``output_tokens`` was counted from deltas, not reported in usage."""
        return self.completion_tokens is None

    @property
    def content_tokens(self) -> int:
        """Visible (non-reasoning) output tokens (field case B06).

        ``completion_tokens - reasoning_tokens`` when usage gives both; all of
        ``completion_tokens`` when usage gives no reasoning count and no
        reasoning was streamed; else the count of content deltas (an estimate).
        """
        c, rt = self.completion_tokens, self.reasoning_tokens
        if c is not None and rt is not None:
            return c - rt
        if c is not None and self.reasoning_deltas == 0:
            return c
        return self.content_deltas

    @property
    def itl_ns(self) -> list[int]:
        """Inter-token latencies: gaps between successive token events (ns); len = tokens - 1."""
        return itl_gaps_ns(self.token_ns).tolist()

    @property
    def visible(self) -> bool:
        """True when any visible content was streamed (not reasoning-only)."""
        return self.content_deltas > 0


class Accountant(Protocol):
    """What both SSE accountant twins offer: the type of ``accounting.SSEAccountant``.

    The pure ``_sse_py.SSEAccountant`` and the native ``_sse_c.SSEAccountant`` (its
    stub: ``_sse_c.pyi``); ``accounting.sse`` picks one.
    """

    events: list[Event]

    def __init__(self, *, head_chars: int = ..., max_line_bytes: int = ..., keep_events: bool = ...) -> None: ...

    @property
    def result(self) -> StreamResult:
        """The figures so far (final after ``close``)."""
        ...

    def feed(self, data: bytes, recv_ns: int) -> int:
        """Account ``data`` received at ``recv_ns`` (ns); returns the number of SSE events it completed."""
        ...

    def close(self) -> StreamResult:
        """End of stream: account what is left and return the result."""
        ...


def _int(d: dict | None, key: str) -> int | None:
    if not isinstance(d, dict):
        return None
    v = d.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def cached_tokens_of(usage: dict | None) -> int | None:
    """Cached prompt tokens from an OpenAI-style usage object.

    Reads ``prompt_tokens_details.cached_tokens`` (OpenAI, vLLM, SGLang,
    llama.cpp), else ``input_tokens_details.cached_tokens`` (Responses API), else
    DeepSeek's ``prompt_cache_hit_tokens``. Absent or null is None, never 0
    (SERVERS.md: vLLM drops a 0 behind a truthiness check).

    Args:
        usage: The usage object, or None.

    Returns:
        Tokens, or None when the server did not say.
    """
    if not isinstance(usage, dict):
        return None
    for key in ("prompt_tokens_details", "input_tokens_details"):
        v = _int(usage.get(key), "cached_tokens")
        if v is not None:
            return v
    return _int(usage, "prompt_cache_hit_tokens")


def reasoning_tokens_of(usage: dict | None) -> int | None:
    """``completion_tokens_details.reasoning_tokens`` (or Responses' output details); None if absent."""
    if not isinstance(usage, dict):
        return None
    for key in ("completion_tokens_details", "output_tokens_details"):
        v = _int(usage.get(key), "reasoning_tokens")
        if v is not None:
            return v
    return None


def usage_counts(usage: dict | None) -> tuple[int | None, int | None, int | None, int | None]:
    """``(prompt, completion, cached, reasoning)`` tokens of a usage object, read once.

    The same values as ``StreamResult``'s ``prompt_tokens``, ``completion_tokens``,
    ``cached_tokens`` and ``reasoning_tokens`` properties (each None when not
    reported); the runner reads them once a request and passes them along.
    """
    if type(usage) is not dict:  # noqa: E721 - a dict subclass takes the general path below
        if not isinstance(usage, dict):
            return (None, None, None, None)
        return _usage_counts(usage)
    get = usage.get
    pt, ct, d = get("prompt_tokens"), get("completion_tokens"), get("prompt_tokens_details")
    if (type(pt) is int and type(ct) is int and type(d) is dict and type(c := d.get("cached_tokens")) is int
            and "completion_tokens_details" not in usage and "output_tokens_details" not in usage):
        # the common shape (OpenAI, vLLM, SGLang): the same values as the general path, read
        # without its calls (issue 43 item 2; tests/unit/runner/test_record_path.py)
        return pt, ct, c, None
    return _usage_counts(usage)


def _usage_counts(usage: dict) -> tuple[int | None, int | None, int | None, int | None]:
    pt, ct = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return (pt if isinstance(pt, int) and not isinstance(pt, bool) else None,
            ct if isinstance(ct, int) and not isinstance(ct, bool) else None,
            cached_tokens_of(usage), reasoning_tokens_of(usage))


def itl_gaps_ns(token_ns: Sequence[int]) -> np.ndarray:
    """Gaps between successive token arrivals (ns) as an int64 numpy array.

    Args:
        token_ns: ``StreamResult.token_ns`` (``array('q')``, or any int sequence).

    Returns:
        Shape ``(max(0, len(token_ns) - 1),)``; no Python int is made per token.
    """
    import numpy as np  # on first use: a run's start-up does not pay for numpy (issue 35)

    if isinstance(token_ns, array) and token_ns.typecode == "q":
        t = np.frombuffer(token_ns, dtype=np.int64)
    else:
        t = np.asarray(token_ns, dtype=np.int64)
    return np.diff(t)


def itl_summary_ns(token_ns: array) -> tuple[int, int, int, int] | None:
    """ITL summary of one stream: ``(n, total_ns, max_ns, p50_ns)`` of its inter-token gaps.

    The pure twin of the native ``_sse_c.itl_summary_ns`` (``accounting.sse``
    picks one); both give the same ints.

    Args:
        token_ns: Token arrival times (ns), ``array('q')`` or any int sequence.

    Returns:
        ``n`` gaps (``len(token_ns) - 1``), their sum, their maximum and their upper
        median (the value at index ``n // 2`` of the sorted gaps); None below two arrivals.
    """
    if len(token_ns) < 2:
        return None
    gs = itl_gaps_ns(token_ns)
    n = len(gs)
    total, top = int(gs.sum()), int(gs.max())
    gs.partition(n // 2)
    return n, total, top, int(gs[n // 2])



def end_marker_in(prev: bytes, chunk: bytes) -> bool:
    """Whether ``chunk``, or the 16 bytes around its start (``prev``'s last 8, its first 8), holds an end marker.

    The pure twin of the native ``_sse_c.end_marker_in`` (``accounting.sse`` picks one); the
    capture proxy asks it of every read of a stream until the stream ended
    (``recorder._relay._Tally``); after the first token it feeds the accountant only when
    this answers True, and the accountant decides. The markers are the
    stream's last event ``data: [DONE]`` and a usage object ``"usage"`` (the final chunk of
    an OpenAI-style stream with ``stream_options.include_usage``; SERVERS.md).

    Args:
        prev: The read before ``chunk`` (only its last 8 bytes are looked at); ``b""`` for none.
        chunk: One upstream read of the stream.

    Returns:
        True when ``b"[DONE]"`` or ``b'"usage"'`` is in ``chunk`` or cut between the two reads.
    """
    if b"[DONE]" in chunk or b'"usage"' in chunk:
        return True
    seen = prev[-8:] + chunk[:8]
    return b"[DONE]" in seen or b'"usage"' in seen
