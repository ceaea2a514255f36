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

import json
import re
from collections.abc import Iterator
from typing import Any

import orjson

__all__ = ["LARGE_JSON_BYTES", "TooLargeToParse", "iter_strings", "loads_bounded", "string_end", "value_end", "ws"]

LARGE_JSON_BYTES = 8 << 20
"""Documents over this size (bytes) are parsed by :func:`loads_bounded`'s allocation-checked path."""


class TooLargeToParse(MemoryError):
    """A JSON document whose parsed form does not fit in the memory this process may allocate.

    Attributes:
        size: The document's size (bytes).
    """

    def __init__(self, size: int) -> None:
        self.size = size
        super().__init__(f"{size / (1 << 20):.1f} MiB of JSON does not fit in the memory this process may "
                         "allocate (RLIMIT_AS, free memory)")


def _address_space_limited() -> bool:
    """Whether this process runs under a finite ``RLIMIT_AS`` (where a failed allocation is possible)."""
    try:
        import resource
    except ImportError:  # not POSIX
        return False
    return resource.getrlimit(resource.RLIMIT_AS)[0] != resource.RLIM_INFINITY


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads_bounded(data: bytes | bytearray | memoryview) -> Any:
    """``orjson.loads(data)``, except that running out of memory is an exception, never a crash.

    orjson (3.13) does not survive a failed allocation: under an address-space limit
    (``RLIMIT_AS``) a 60 MiB line killed the process with SIGSEGV inside ``orjson.loads``
    (issue 44 item 7). So when this process has such a limit, a document over
    ``LARGE_JSON_BYTES`` is parsed by the standard library's ``json`` instead, whose
    every allocation is checked, with orjson's verdicts kept (``NaN``/``Infinity`` and
    invalid UTF-8 refused); it is slower (about 3 times) and needs the decoded text
    besides the bytes. Without a limit an allocation does not fail (the kernel's
    out-of-memory killer acts instead), and orjson parses everything.

    Raises:
        orjson.JSONDecodeError: not JSON (as orjson raises it).
        TooLargeToParse: the parsed document does not fit in memory (a ``MemoryError``).
    """
    if len(data) <= LARGE_JSON_BYTES or not _address_space_limited():
        return orjson.loads(data)
    try:
        text = bytes(data).decode("utf-8")
        return json.loads(text, parse_constant=_no_constant)
    except MemoryError:
        raise TooLargeToParse(len(data)) from None
    except UnicodeDecodeError as exc:
        raise orjson.JSONDecodeError(f"str is not valid UTF-8: byte {exc.start}", "", 0) from None
    except json.JSONDecodeError as exc:
        raise orjson.JSONDecodeError(exc.msg, "", exc.pos) from None
    except (ValueError, RecursionError) as exc:
        raise orjson.JSONDecodeError(str(exc), "", 0) from None

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
