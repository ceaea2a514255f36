r"""Linear scans of JSON bytes: where a value ends, where each string token is.

Used where kvreplay needs *byte positions* in a JSON text it must not
re-serialise (the exact ``body`` span of an OpenAI Batch line; the string tokens
of a body whose secrets are redacted in place). Each scan trusts a text already
known to be valid JSON (``orjson.loads`` accepted it) and costs O(n) time and
O(1) extra memory: string ends are found with ``bytes.find`` (a quote preceded
by an even number of backslashes closes the string), structure with one
compiled character-class search. No backtracking regular expression is run over
a whole value (a ``"(?:[^"\\]|\\.)*"`` match keeps per-character state and
cost 127 times a 60 MB line in memory).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

__all__ = ["iter_strings", "string_end", "value_end", "ws"]

_WS = b" \t\r\n"
_STRUCT = re.compile(rb'["\[\]{}]')
_SCALAR = re.compile(rb"-?[0-9][0-9.eE+\-]*|true|false|null")


def ws(b: bytes, i: int) -> int:
    """First index at or after ``i`` that is not JSON whitespace."""
    n = len(b)
    while i < n and b[i] in _WS:
        i += 1
    return i


def string_end(b: bytes, i: int) -> int:
    """End (exclusive) of the JSON string whose opening quote is ``b[i]``.

    Raises:
        ValueError: no closing quote.
    """
    j = i + 1
    while True:
        j = b.find(b'"', j)
        if j < 0:
            raise ValueError("unterminated string")
        k = j - 1
        while b[k] == 0x5C:  # backslash
            k -= 1
        if (j - 1 - k) % 2 == 0:
            return j + 1
        j += 1


def value_end(b: bytes, i: int) -> int:
    """End (exclusive) of the JSON value starting at ``b[i]``.

    Raises:
        ValueError: no value there, an unterminated string or unbalanced brackets.
    """
    c = b[i : i + 1]
    if c == b'"':
        return string_end(b, i)
    if c in (b"{", b"["):
        depth = 0
        pos = i
        while True:
            m = _STRUCT.search(b, pos)
            if m is None:
                raise ValueError("unbalanced brackets")
            t = m.start()
            ch = b[t]
            if ch == 0x22:  # '"'
                pos = string_end(b, t)
                continue
            depth += 1 if ch in (0x5B, 0x7B) else -1
            pos = t + 1
            if depth == 0:
                return pos
    m = _SCALAR.match(b, i)
    if not m:
        raise ValueError(f"no JSON value at byte {i}")
    return m.end()


def iter_strings(b: bytes) -> Iterator[tuple[int, int, bool]]:
    """Every string token of a JSON text: ``(start, end, is_key)``, in order.

    ``start`` is the opening quote, ``end`` one past the closing quote; ``is_key``
    is True for an object member's name (the next non-space byte is ``:``).

    Raises:
        ValueError: an unterminated string.
    """
    pos = 0
    while True:
        t = b.find(b'"', pos)
        if t < 0:
            return
        end = string_end(b, t)
        j = ws(b, end)
        yield t, end, b[j : j + 1] == b":"
        pos = end
