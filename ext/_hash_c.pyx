# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""Native twin of ``kvreplay.workload._chain`` (prefix chains of request bodies).

The byte scan that finds the ``messages`` elements, the ``prompt`` and the
``tools`` value runs in C over the raw body; hashing is BLAKE2b-128 through
``hashlib`` exactly as in the pure twin, so both return equal
``BodySpans`` / ``PrefixChain`` values for every body (tests/unit/workload).

Source: RFC 8259 (JSON strings and structure); RFC 7693 (BLAKE2).
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.string cimport memchr, memcmp

import hashlib

from kvreplay.errors import WorkloadError
from kvreplay.workload._chain import (
    _SEED_CHAT,
    _SEED_COMPLETIONS,
    DEFAULT_BLOCK_BYTES,
    LINK_BYTES,
    BodySpans,
    PrefixChain,
)

__all__ = ["body_spans", "prefix_chain"]

cdef enum Key:
    K_NONE = 0
    K_OTHER = 1
    K_MESSAGES = 2
    K_PROMPT = 3
    K_TOOLS = 4


cdef inline bint is_ws(unsigned char c) noexcept nogil:
    return c == 32 or c == 9 or c == 10 or c == 13


cdef Key classify(const unsigned char* p, Py_ssize_t n) noexcept nogil:
    # p..p+n is the key with its quotes
    if n == 10 and memcmp(p, b'"messages"', 10) == 0:
        return K_MESSAGES
    if n == 8 and memcmp(p, b'"prompt"', 8) == 0:
        return K_PROMPT
    if n == 7 and memcmp(p, b'"tools"', 7) == 0:
        return K_TOOLS
    return K_OTHER


def body_spans(bytes raw):
    """Find the byte spans of ``messages`` elements, ``prompt`` and ``tools`` in a raw body.

    Same contract as ``kvreplay.workload._chain.body_spans``.

    Args:
        raw: The exact body bytes (a JSON object).

    Returns:
        A ``BodySpans``.
    """
    cdef const unsigned char* s = <const unsigned char*>PyBytes_AS_STRING(raw)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(raw)
    cdef Py_ssize_t i = 0, j, k, v
    cdef const unsigned char* q
    cdef Py_ssize_t depth = 0
    cdef Key key = K_NONE
    cdef Py_ssize_t elem_start = -1, open_start = -1
    cdef unsigned char c
    cdef bint in_msgs = False
    cdef bint closed
    cur = None
    messages = None
    prompt = None
    tools = None
    while i < n:
        c = s[i]
        if c == 34:  # string token: find its closing quote
            j = i + 1
            closed = False
            while j < n:
                q = <const unsigned char*>memchr(s + j, 34, n - j)
                if q == NULL:
                    break
                j = q - s
                # The quote closes the string unless an odd run of backslashes precedes it.
                k = j - 1
                while k > i and s[k] == 92:
                    k -= 1
                if (j - 1 - k) % 2 == 0:
                    closed = True
                    break
                j += 1
            if not closed:  # unterminated: the pure regex skips the quote alone
                i += 1
                continue
            if depth == 1:
                v = j + 1
                while v < n and is_ws(s[v]):
                    v += 1
                if v < n and s[v] == 58:
                    key = classify(s + i, j + 1 - i)
                elif key == K_PROMPT:
                    prompt = (i + 1, j)
                    key = K_NONE
            i = j + 1
            continue
        if c == 123 or c == 91:
            depth += 1
            if depth == 2 and (key == K_MESSAGES or key == K_PROMPT or key == K_TOOLS):
                open_start = i
                if key == K_MESSAGES:
                    in_msgs = c == 91
                    cur = [] if in_msgs else None
            elif depth == 3 and in_msgs and c == 123:
                elem_start = i
        elif c == 125 or c == 93:
            if depth == 3 and in_msgs and c == 125 and elem_start >= 0:
                cur.append((elem_start, i + 1))
                elem_start = -1
            elif depth == 2 and open_start >= 0:
                if key == K_MESSAGES:
                    messages = cur
                    cur = None
                    in_msgs = False
                elif key == K_PROMPT:
                    prompt = (open_start, i + 1)
                elif key == K_TOOLS:
                    tools = (open_start, i + 1)
                open_start = -1
                key = K_NONE
            depth -= 1
        i += 1
    return BodySpans(tuple(messages) if messages is not None else None, prompt, tools)


cdef bytes _link(bytes prev, object view):
    h = hashlib.blake2b(prev, digest_size=LINK_BYTES)
    h.update(view)
    return h.digest()


def prefix_chain(bytes raw, *, Py_ssize_t block_bytes=DEFAULT_BLOCK_BYTES):
    """Compute the prefix chain of one raw body (same contract as the pure twin).

    Args:
        raw: The exact body bytes (a chat or completions request object).
        block_bytes: Block size for a completions prompt (bytes, > 0).

    Returns:
        A ``PrefixChain``.

    Raises:
        WorkloadError: no ``messages`` array and no ``prompt``, or ``block_bytes`` < 1.
    """
    cdef Py_ssize_t a, b, st, e, total = 0
    if block_bytes < 1:
        raise WorkloadError(f"block size must be at least 1 byte, not {block_bytes}")
    spans = body_spans(raw)
    view = memoryview(raw)
    links = []
    ends = []
    if spans.messages is not None:
        seed = hashlib.blake2b(_SEED_CHAT, digest_size=LINK_BYTES).digest()
        prev = _link(seed, view[spans.tools[0] : spans.tools[1]] if spans.tools else view[:0])
        for a, b in spans.messages:
            prev = _link(prev, view[a:b])
            total += b - a
            links.append(prev)
            ends.append(total)
        return PrefixChain("chat", tuple(links), tuple(ends))
    if spans.prompt is not None:
        prev = hashlib.blake2b(_SEED_COMPLETIONS, digest_size=LINK_BYTES).digest()
        a, b = spans.prompt
        st = a
        while st < b:
            e = st + block_bytes if st + block_bytes < b else b
            prev = _link(prev, view[st:e])
            total += e - st
            links.append(prev)
            ends.append(total)
            st += block_bytes
        return PrefixChain("completions", tuple(links), tuple(ends))
    raise WorkloadError("neither a 'messages' array nor a 'prompt': no prefix chain", field="messages")
