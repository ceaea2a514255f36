"""Native twin of the SSE stream accountant (first cut: the pure twin compiled by Cython).

Incremental parser for ``text/event-stream`` bodies of OpenAI-compatible
streaming responses. Feed it socket chunks as they arrive; it dispatches an
event at each blank line, decodes the event's JSON (orjson) and accounts
tokens, usage, finish reason, errors and llama.cpp ``timings``.

Source: WHATWG HTML "Server-sent events", 9.2.6 (lines end in CR, LF or CRLF;
``:`` starts a comment; one leading space after the colon is stripped; an
event is dispatched at a blank line and only when its data buffer is
non-empty; an incomplete event at EOF is discarded). Payload shapes:
SERVERS.md section 5 (OpenAI chat / legacy completions, vLLM, SGLang, llama.cpp).
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

__all__ = ["SSEAccountant"]

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


class SSEAccountant:
    """Accounts one streamed response, chunk by chunk (pure-Python twin).

    Args:
        head_chars: Visible text kept in ``result.text_head`` (characters).
        max_line_bytes: Longest SSE line accepted (bytes).
        keep_events: Also keep every dispatched ``Event`` in ``self.events``.
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
        self._buf = b""
        self._skip_lf = False
        self._data: list[bytes] = []
        self._name = b""
        self._seen = 0
        self._closed = False

    def feed(self, data: bytes, recv_ns: int) -> int:
        """Consume one socket chunk of the stream.

        Args:
            data: Bytes as received; may split a line, an event or a UTF-8 sequence.
            recv_ns: Arrival time of the chunk (ns, caller's clock; never read here).

        Returns:
            Number of SSE events this chunk completed.

        Raises:
            StreamError: a line over ``max_line_bytes`` (kind ``line_too_long``) or
                an event whose data is not JSON (kind ``malformed``); ``.partial``
                holds the bytes of the pending line or event.
        """
        if not data:
            return 0
        r = self.result
        if r.first_byte_ns is None:
            r.first_byte_ns = recv_ns
        buf = self._buf + data if self._buf else data
        if self._skip_lf:
            self._skip_lf = False
            if buf[:1] == b"\n":
                buf = buf[1:]
        if b"\r" in buf:
            if buf.endswith(b"\r"):
                self._skip_lf = True
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = buf.split(b"\n")
        rest = lines.pop()
        if len(rest) > self._max_line:
            raise StreamError(
                f"SSE line longer than {self._max_line} bytes", kind="line_too_long", partial=rest
            )
        self._buf = rest
        n = 0
        for line in lines:
            if not line:
                if self._data:
                    n += 1
                    self._dispatch(b"\n".join(self._data), recv_ns)
                    self._data = []
                self._name = b""
                continue
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
                # Older llama.cpp builds write `error: {...}` lines (not SSE data).
                r.error_events += 1
                r.error = _error_message(_loads_or_text(value))
        return n

    def close(self) -> StreamResult:
        """End of stream: discard an incomplete event (WHATWG) and return the result."""
        self._closed = True
        self._buf = b""
        self._data = []
        return self.result

    def _dispatch(self, payload: bytes, recv_ns: int) -> None:
        r = self.result
        r.events += 1
        if self._keep:
            self.events.append(Event(self._name.decode("utf-8", "replace"), payload, recv_ns))
        if payload == _DONE:
            r.done_marker = True
            return
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            raise StreamError(f"SSE data is not JSON: {exc}", partial=payload) from exc
        r.chunks += 1
        if not isinstance(obj, dict):
            raise StreamError("SSE data is not a JSON object", partial=payload)
        if self._name == b"error" or "error" in obj and obj["error"] is not None:
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
                r.finish_reason = fr if isinstance(fr, str) else str(fr)
            delta = ch.get("delta")
            if isinstance(delta, dict):
                content = delta.get("content")
                if isinstance(content, str):
                    if content:
                        content_seen = True
                        self._head(content)
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
                                self._head(t)
                for key in ("reasoning_content", "reasoning"):
                    rv = delta.get(key)
                    if isinstance(rv, str) and rv:
                        reasoning_seen = True
            else:
                text = ch.get("text")
                if isinstance(text, str) and text:
                    content_seen = True
                    self._head(text)
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

    def _head(self, text: str) -> None:
        r = self.result
        room = self._head_chars - len(r.text_head)
        if room > 0:
            r.text_head += text[:room]


def _has_text(v: object) -> bool:
    if isinstance(v, str):
        return bool(v)
    if isinstance(v, list):
        return any(isinstance(p, dict) and _has_text(p.get("text")) for p in v)
    return False


def _loads_or_text(value: bytes) -> object:
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return value.decode("utf-8", "replace")
