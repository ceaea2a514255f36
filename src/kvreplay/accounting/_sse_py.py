"""Pure-Python twin of the SSE stream accountant.

Incremental parser for ``text/event-stream`` bodies of OpenAI-compatible
streaming responses. Feed it socket chunks as they arrive; it dispatches an
event at each blank line, decodes the event's JSON (orjson) and accounts
tokens, usage, finish reason, errors and llama.cpp ``timings``.

The native twin (``_sse_c``) scans the same bytes without decoding most
events, and hands every event it does not fully understand to
:func:`account_payload` below, so the two agree on every input by
construction; the parity tests check that they do.

Source: WHATWG HTML "Server-sent events", 9.2.6 (lines end in CR, LF or CRLF;
``:`` starts a comment; one leading space after the colon is stripped; an
event is dispatched at a blank line and only when its data buffer is
non-empty). Payload shapes: SERVERS.md section 5 (OpenAI chat / legacy
completions, vLLM, SGLang, llama.cpp).

Deliberate departures from a browser ``EventSource``:

* EOF completes a pending event whose data is a whole JSON object (or
  ``[DONE]``): llama.cpp-family servers may end the body right after the last
  ``data:`` line (field case B14). A cut one is discarded, as WHATWG does, and
  flagged in ``StreamResult.eof_truncated``.
* An event with empty data is counted but not decoded (no error).
* Every line, complete or pending, is bounded by ``max_line_bytes``.
* A leading UTF-8 BOM is not stripped (no inference server sends one; orjson
  then reports the event as malformed); ``id:`` / ``retry:`` are ignored.
"""

from __future__ import annotations

import orjson

from kvreplay.accounting.events import (
    ERROR_BYTES,
    HEAD_CHARS,
    MAX_LINE_BYTES,
    Event,
    StreamResult,
)
from kvreplay.errors import StreamError

__all__ = ["SSEAccountant", "account_error_line", "account_payload", "complete_at_eof"]

_DONE = b"[DONE]"


def _error_message(err: object) -> str:
    if isinstance(err, dict):
        msg = err.get("message")
        if isinstance(msg, str) and msg:
            return msg[:ERROR_BYTES]
        return orjson.dumps(err).decode()[:ERROR_BYTES]
    if isinstance(err, str):
        return err[:ERROR_BYTES]
    return orjson.dumps(err).decode()[:ERROR_BYTES]


def _line_too_long(line: bytes, limit: int) -> StreamError:
    return StreamError(f"SSE line longer than {limit} bytes", kind="line_too_long", partial=line)


class SSEAccountant:
    """Accounts one streamed response, chunk by chunk (pure-Python twin).

    ``feed`` returns a count of completed events rather than a list of
    ``Event`` objects on purpose: the hot path allocates nothing per event.
    Pass ``keep_events=True`` to also collect every ``Event`` in ``.events``
    (tests, debugging).

    Args:
        head_chars: Visible text kept in ``result.text_head`` (characters).
        max_line_bytes: Longest SSE line accepted (bytes, line end excluded).
        keep_events: Also keep every dispatched ``Event`` in ``self.events``.

    Attributes:
        result: The ``StreamResult`` being filled in (same object throughout).
        events: Dispatched events when ``keep_events`` is set, else empty.
    """

    def __init__(
        self,
        *,
        head_chars: int = HEAD_CHARS,
        max_line_bytes: int = MAX_LINE_BYTES,
        keep_events: bool = False,
    ) -> None:
        self.result = StreamResult()
        self.events: list[Event] = []
        self._keep = keep_events
        self._head_chars = head_chars
        self._max_line = max_line_bytes
        self._pend = bytearray()
        self._skip_lf = False
        self._data: list[bytes] = []
        self._name = b""
        self._last_ns = 0

    def feed(self, data: bytes, recv_ns: int) -> int:
        """Consume one socket chunk of the stream.

        Args:
            data: Bytes as received; may split a line, an event or a UTF-8 sequence.
            recv_ns: Arrival time of the chunk (ns, caller's clock; never read here).

        Returns:
            Number of SSE events this chunk completed (including ``[DONE]``).

        Raises:
            StreamError: a line over ``max_line_bytes`` (kind ``line_too_long``;
                ``.partial`` is that line as received so far), or an event whose
                data is not a JSON object (kind ``malformed``; ``.partial`` is the
                event's data). Events completed earlier in the same chunk are
                accounted before the error is raised.
        """
        if not data:
            return 0
        r = self.result
        if r.first_byte_ns is None:
            r.first_byte_ns = recv_ns
        self._last_ns = recv_ns
        if self._skip_lf:
            self._skip_lf = False
            if data[0] == 10:
                data = data[1:]
                if not data:
                    return 0
        if b"\n" not in data and b"\r" not in data:
            self._pend += data
            if len(self._pend) > self._max_line:
                line, self._pend = bytes(self._pend), bytearray()
                raise _line_too_long(line, self._max_line)
            return 0
        if self._pend:
            buf = bytes(self._pend) + data
            self._pend = bytearray()
        else:
            buf = data
        if b"\r" in buf:
            if buf[-1] == 13:
                self._skip_lf = True
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buf.split(b"\n")
        rest = lines.pop()
        check = len(buf) > self._max_line
        n = 0
        for line in lines:
            if not line:
                if self._data:
                    n += 1
                    payload, self._data = b"\n".join(self._data), []
                    self._dispatch(payload, recv_ns)
                self._name = b""
                continue
            if check and len(line) > self._max_line:
                raise _line_too_long(line, self._max_line)
            if line[0] == 58:  # ':' comment
                continue
            c = line.find(b":")
            if c < 0:
                fname, value = line, b""
            else:
                fname, value = line[:c], line[c + 1 :]
                if value[:1] == b" ":
                    value = value[1:]
            if fname == b"data":
                self._data.append(value)
            elif fname == b"event":
                self._name = value
            elif fname == b"error":
                account_error_line(r, value)
        if len(rest) > self._max_line:
            raise _line_too_long(rest, self._max_line)
        self._pend += rest
        return n

    def close(self) -> StreamResult:
        """End of stream: account what EOF completed and return the result.

        EOF ends a pending line and then a pending event, as if a blank line
        had followed: llama.cpp-family servers may end the body right after
        the last ``data:`` line (field case B14). A pending event whose data
        is not valid JSON (a connection cut inside it) is discarded, as WHATWG
        discards incomplete events, and ``result.eof_truncated`` is set. The
        completed event is stamped with the arrival time of the last chunk.

        Returns:
            The final ``StreamResult`` (the same object as ``self.result``).
        """
        if self._pend:
            self.feed(b"\n", self._last_ns)  # ends the pending line, nothing else
        if self._data:
            payload = b"\n".join(self._data)
            self._data = []
            if complete_at_eof(payload):
                self._dispatch(payload, self._last_ns)
            else:
                self.result.eof_truncated = True
        self._name = b""
        return self.result

    def _dispatch(self, payload: bytes, recv_ns: int) -> None:
        r = self.result
        r.events += 1
        r.last_event_ns = recv_ns
        if self._keep:
            self.events.append(Event(self._name.decode("utf-8", "replace"), payload, recv_ns))
        if payload == _DONE:
            r.done_marker = True
            return
        if payload:
            account_payload(r, payload, self._name, recv_ns, self._head_chars)


def complete_at_eof(payload: bytes) -> bool:
    """True when an event cut by EOF is still whole: ``[DONE]``, empty, or a JSON object."""
    if payload in (_DONE, b""):
        return True
    try:
        return isinstance(orjson.loads(payload), dict)
    except orjson.JSONDecodeError:
        return False


def account_error_line(r: StreamResult, value: bytes) -> None:
    """Account a legacy llama.cpp ``error: {...}`` line (not SSE data).

    Args:
        r: The result to update (``error_events``, ``error``).
        value: The line after ``error:`` and one optional space (bytes).
    """
    r.error_events += 1
    try:
        err = orjson.loads(value)
    except orjson.JSONDecodeError:
        err = value.decode("utf-8", "replace")
    r.error = _error_message(err)


def account_payload(r: StreamResult, payload: bytes, name: bytes, recv_ns: int, head_chars: int) -> None:
    """Account one non-empty, non-``[DONE]`` event payload into ``r``.

    The single source of truth for what a chunk means; the native twin calls
    it for every event its scanner does not fully understand.

    Args:
        r: The result to update.
        payload: The event's data (its ``data:`` lines joined by LF).
        name: The event's ``event:`` field, ``b""`` when absent.
        recv_ns: Arrival of the chunk that completed the event (ns).
        head_chars: Bound on ``r.text_head`` (characters).

    Raises:
        StreamError: ``payload`` is not JSON, or is JSON but not an object
            (kind ``malformed``, ``.partial`` = payload).
    """
    try:
        obj = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        raise StreamError(f"SSE data is not JSON: {exc}", partial=payload) from exc
    r.chunks += 1
    if not isinstance(obj, dict):
        raise StreamError("SSE data is not a JSON object", partial=payload)
    if name == b"error" or obj.get("error") is not None:
        r.error_events += 1
        r.error = _error_message(obj.get("error", obj))
    elif obj.get("object") == "error":
        r.error_events += 1
        r.error = _error_message(obj)
    usage = obj.get("usage")
    if isinstance(usage, dict):
        r.usage = usage
    else:
        xg = obj.get("x_groq")
        if isinstance(xg, dict) and isinstance(xg.get("usage"), dict):
            r.usage = xg["usage"]
    timings = obj.get("timings")
    if isinstance(timings, dict):
        r.timings = timings
    choices = obj.get("choices")
    if not choices or not isinstance(choices, list):
        return
    content_seen = False
    reasoning_seen = False
    for ch in choices:
        if not isinstance(ch, dict):
            continue
        fr = ch.get("finish_reason")
        if fr is not None:
            r.finish_reason = fr if isinstance(fr, str) else orjson.dumps(fr).decode()
        delta = ch.get("delta")
        if isinstance(delta, dict):
            content = delta.get("content")
            if isinstance(content, str):
                if content:
                    content_seen = True
                    _head(r, content, head_chars)
            elif isinstance(content, list):
                for part in content:
                    if not isinstance(part, dict):
                        continue
                    ptype = part.get("type")
                    if ptype in ("thinking", "reasoning"):
                        if _has_text(part.get(ptype)) or _has_text(part.get("text")):
                            reasoning_seen = True
                    else:
                        t = part.get("text")
                        if isinstance(t, str) and t:
                            content_seen = True
                            _head(r, t, head_chars)
            for key in ("reasoning_content", "reasoning"):
                rv = delta.get(key)
                if isinstance(rv, str) and rv:
                    reasoning_seen = True
        else:
            text = ch.get("text")
            if isinstance(text, str) and text:
                content_seen = True
                _head(r, text, head_chars)
    if content_seen or reasoning_seen:
        if content_seen:
            r.content_deltas += 1
            if r.first_content_ns is None:
                r.first_content_ns = recv_ns
        if reasoning_seen:
            r.reasoning_deltas += 1
        if r.first_token_ns is None:
            r.first_token_ns = recv_ns
        r.last_token_ns = recv_ns
        r.token_ns.append(recv_ns)


def _head(r: StreamResult, text: str, head_chars: int) -> None:
    room = head_chars - len(r.text_head)
    if room > 0:
        r.text_head += text[:room]


def _has_text(v: object) -> bool:
    if isinstance(v, str):
        return bool(v)
    if isinstance(v, list):
        return any(isinstance(p, dict) and _has_text(p.get("text")) for p in v)
    return False
