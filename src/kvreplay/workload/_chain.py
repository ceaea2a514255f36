"""Prefix chains of request bodies (pure-Python twin; native twin: ``ext/_hash_c.pyx``).

A prefix chain is a list of hash links over the exact bytes of a body, so that
two bodies sharing their first k units share their first k links:

* **chat** (``messages``): one link per message object, over the bytes of that
  element of the ``messages`` array exactly as it appears in the raw body
  (found by scanning the bytes, never by re-serialising);
* **completions** (``prompt``): one link per ``block_bytes`` block of the raw
  prompt value (the bytes between the quotes of a string prompt, the whole
  array of a list prompt); the last block may be short.

``link_k = BLAKE2b-128(link_{k-1} || unit_k)``. ``link_{-1}`` is a seed that
separates the two kinds and folds in the body's ``tools`` value (chat
templates render tool definitions ahead of the system message, so different
tools never share a cached prefix). Body identity stays SHA-256 (``Body.sha256``).

Source: RFC 7693 (BLAKE2) through ``hashlib.blake2b``; RFC 8259 (JSON strings
and structure) for the byte scan.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from kvreplay.errors import WorkloadError

__all__ = ["DEFAULT_BLOCK_BYTES", "LINK_BYTES", "BodySpans", "PrefixChain", "body_spans", "prefix_chain"]

DEFAULT_BLOCK_BYTES = 1024
"""Block size for completions prompts (bytes)."""

LINK_BYTES = 16
"""Size of one chain link (bytes; BLAKE2b digest size)."""

_SEED_CHAT = b"kvreplay/prefix-chain/v1/chat"
_SEED_COMPLETIONS = b"kvreplay/prefix-chain/v1/completions"

_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[{}\[\]]', re.DOTALL)
_WS = b" \t\n\r"


@dataclass(frozen=True, slots=True)
class PrefixChain:
    """The prefix chain of one body.

    Attributes:
        kind: ``"chat"`` or ``"completions"``.
        links: One 16-byte BLAKE2b digest per unit (message or block), in order.
        ends: Bytes hashed up to and including unit k (cumulative, same length
            as ``links``): the size of the prefix that link k stands for.
    """

    kind: str
    links: tuple[bytes, ...]
    ends: tuple[int, ...]

    def shared(self, other: PrefixChain) -> int:
        """Number of leading links this chain shares with ``other``."""
        n = 0
        for a, b in zip(self.links, other.links, strict=False):
            if a != b:
                break
            n += 1
        return n


@dataclass(frozen=True, slots=True)
class BodySpans:
    """Byte spans ``(start, end)`` (end exclusive) found in a raw body.

    Attributes:
        messages: Each element of the top-level ``messages`` array, or None when absent.
        prompt: The top-level ``prompt`` value (a string's bytes between its
            quotes, or an array with its brackets), or None when absent.
        tools: The top-level ``tools`` value, or None when absent.
    """

    messages: tuple[tuple[int, int], ...] | None
    prompt: tuple[int, int] | None
    tools: tuple[int, int] | None


def _is_key(raw: bytes, end: int) -> int:
    """Offset of the value after a key string ending at ``end``, or -1 if no ':' follows."""
    n = len(raw)
    while end < n and raw[end] in _WS:
        end += 1
    if end < n and raw[end] == 58:  # ':'
        end += 1
        while end < n and raw[end] in _WS:
            end += 1
        return end
    return -1


def body_spans(raw: bytes) -> BodySpans:
    """Find the byte spans of ``messages`` elements, ``prompt`` and ``tools`` in a raw body.

    The body must be a JSON object (the workload loader checks that first).
    Only top-level keys count; when a key repeats, the last one wins (as in
    orjson). Keys written with escapes are not recognised.

    Args:
        raw: The exact body bytes.

    Returns:
        The spans found.
    """
    depth = 0
    key: bytes | None = None
    messages: list[tuple[int, int]] | None = None
    cur_msgs: list[tuple[int, int]] | None = None
    elem_start = -1
    prompt = tools = None
    open_start = -1  # start of the array/object value of a tracked key
    for m in _TOKEN.finditer(raw):
        t = raw[m.start()]
        if t == 34:  # string
            if depth == 1:
                vstart = _is_key(raw, m.end())
                if vstart >= 0:
                    key = m.group()
                elif key == b'"prompt"':
                    prompt = (m.start() + 1, m.end() - 1)
                    key = None
            continue
        if t == 123 or t == 91:  # { [
            depth += 1
            if depth == 2 and key in (b'"messages"', b'"prompt"', b'"tools"'):
                open_start = m.start()
                if key == b'"messages"':
                    cur_msgs = [] if t == 91 else None
            elif depth == 3 and cur_msgs is not None and t == 123:
                elem_start = m.start()
        else:  # } ]
            if depth == 3 and cur_msgs is not None and t == 125 and elem_start >= 0:
                cur_msgs.append((elem_start, m.end()))
                elem_start = -1
            elif depth == 2 and open_start >= 0:
                if key == b'"messages"':
                    messages = cur_msgs
                    cur_msgs = None
                elif key == b'"prompt"':
                    prompt = (open_start, m.end())
                elif key == b'"tools"':
                    tools = (open_start, m.end())
                open_start = -1
                key = None
            depth -= 1
    return BodySpans(tuple(messages) if messages is not None else None, prompt, tools)


def _link(prev: bytes, view: memoryview) -> bytes:
    h = hashlib.blake2b(prev, digest_size=LINK_BYTES)
    h.update(view)
    return h.digest()


def prefix_chain(raw: bytes, *, block_bytes: int = DEFAULT_BLOCK_BYTES) -> PrefixChain:
    """Compute the prefix chain of one raw body.

    Args:
        raw: The exact body bytes (a chat or completions request object).
        block_bytes: Block size for a completions prompt (bytes, > 0).

    Returns:
        The chain; a chat body has one link per message, a completions body
        one per started block of its prompt.

    Raises:
        WorkloadError: the body has neither a ``messages`` array nor a
            ``prompt`` (field ``messages``), or ``block_bytes`` < 1.
    """
    if block_bytes < 1:
        raise WorkloadError(f"block size must be at least 1 byte, not {block_bytes}")
    spans = body_spans(raw)
    view = memoryview(raw)
    links: list[bytes] = []
    ends: list[int] = []
    total = 0
    if spans.messages is not None:
        prev = _link(hashlib.blake2b(_SEED_CHAT, digest_size=LINK_BYTES).digest(),
                     view[spans.tools[0] : spans.tools[1]] if spans.tools else view[:0])
        for a, b in spans.messages:
            prev = _link(prev, view[a:b])
            total += b - a
            links.append(prev)
            ends.append(total)
        return PrefixChain("chat", tuple(links), tuple(ends))
    if spans.prompt is not None:
        prev = hashlib.blake2b(_SEED_COMPLETIONS, digest_size=LINK_BYTES).digest()
        a, b = spans.prompt
        for s in range(a, b, block_bytes):
            e = min(s + block_bytes, b)
            prev = _link(prev, view[s:e])
            total += e - s
            links.append(prev)
            ends.append(total)
        return PrefixChain("completions", tuple(links), tuple(ends))
    raise WorkloadError("neither a 'messages' array nor a 'prompt': no prefix chain", field="messages")
