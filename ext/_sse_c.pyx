# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Native twin of the SSE stream accountant.

Same API and results as ``kvreplay.accounting._sse_py`` (the parity tests
compare them on every capture, every chunking and generated streams), but the
hot path runs in C:

* SSE framing (CR / LF / CRLF line ends, ``data:`` / ``event:`` / comment
  lines, blank-line dispatch) is scanned with ``memchr`` over the chunk bytes;
  partial lines and multi-line data are kept in owned C buffers.
* Each event's JSON is walked by a small validating scanner that understands
  the common chunk shape (``choices[].delta.content`` / ``reasoning_content`` /
  ``reasoning`` as plain strings, legacy ``choices[].text``, ``finish_reason:
  null``, ``usage: null``). A delta counts when its JSON string is not ``""``;
  escapes and UTF-8 are validated exactly as orjson does (strict UTF-8, paired
  surrogate escapes, no raw control characters, no leading zeros).
* Every event the scanner does not fully understand, or that carries usage,
  errors, a finish reason, ``timings``, array content, an ``event:`` name,
  duplicate keys, escaped keys, exponents, or anything invalid, is handed to
  the pure twin's ``account_payload`` (orjson), so rare shapes and every error
  message are the pure twin's by construction.
* Visible text for ``text_head`` is decoded only until ``head_chars``
  characters are collected (plain UTF-8 natively, escaped strings with orjson).

Time is always an argument: this module never reads a clock.

Source: WHATWG HTML "Server-sent events" 9.2.6; RFC 8259 (JSON grammar);
SERVERS.md section 5 for the payload shapes of vLLM, SGLang and llama.cpp.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.list cimport PyList_Append
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.string cimport memchr, memcmp, memcpy

import orjson

from kvreplay.accounting._sse_py import account_error_line, account_payload, complete_at_eof
from kvreplay.accounting.events import HEAD_CHARS, MAX_LINE_BYTES, Event, StreamResult
from kvreplay.errors import StreamError

__all__ = ["SSEAccountant"]

ctypedef const unsigned char* cptr

cdef enum:
    MAX_CHOICES = 8
    MAX_DEPTH = 128

# Scanner outcome: OK = the payload is fully understood, FALLBACK = hand it to orjson.
cdef enum:
    OK = 0
    FALLBACK = 1


cdef struct Buf:
    char* p
    Py_ssize_t n
    Py_ssize_t cap


cdef int buf_append(Buf* b, const char* src, Py_ssize_t n) except -1:
    cdef Py_ssize_t need = b.n + n
    cdef Py_ssize_t cap
    cdef char* q
    if need > b.cap:
        cap = b.cap * 2 if b.cap else 512
        while cap < need:
            cap *= 2
        q = <char*>PyMem_Realloc(b.p, cap)
        if q == NULL:
            raise MemoryError()
        b.p = q
        b.cap = cap
    if n:
        memcpy(b.p + b.n, src, n)
    b.n = need
    return 0


cdef struct Scan:
    cptr p
    cptr end
    int nch
    # Per object-choice, in order: the string that may carry visible text
    # (delta.content when delta is an object, else choices[].text).
    cptr str_p[MAX_CHOICES]      # first byte after the opening quote, NULL if none
    Py_ssize_t str_n[MAX_CHOICES]
    bint str_esc[MAX_CHOICES]
    bint reasoning[MAX_CHOICES]


# PLAIN[c] is 1 for bytes a JSON string can hold as they are, without a closer look.
cdef unsigned char PLAIN[256]
cdef int _i
for _i in range(256):
    PLAIN[_i] = 1 if (0x20 <= _i < 0x80 and _i != 34 and _i != 92) else 0


cdef inline void skip_ws(Scan* s) noexcept nogil:
    cdef cptr p = s.p
    while p < s.end and (p[0] == 32 or p[0] == 10 or p[0] == 13 or p[0] == 9):
        p += 1
    s.p = p


cdef inline int hexval(unsigned char c) noexcept nogil:
    if 48 <= c <= 57:
        return c - 48
    if 97 <= c <= 102:
        return c - 87
    if 65 <= c <= 70:
        return c - 55
    return -1


cdef inline int hex4(cptr p) noexcept nogil:
    cdef int a = hexval(p[0]), b = hexval(p[1]), c = hexval(p[2]), d = hexval(p[3])
    if a < 0 or b < 0 or c < 0 or d < 0:
        return -1
    return (a << 12) | (b << 8) | (c << 4) | d


cdef int scan_string(Scan* s, cptr* start, Py_ssize_t* n, bint* esc) noexcept nogil:
    """At an opening quote: validate the string, leave ``s.p`` after its closing quote."""
    cdef cptr p = s.p + 1
    cdef cptr end = s.end
    cdef unsigned char c, c1
    cdef int u, u2
    cdef bint e = False
    start[0] = p
    while p < end:
        c = p[0]
        if PLAIN[c]:  # most bytes: printable ASCII other than '"' and backslash
            p += 1
            continue
        if c == 34:  # '"'
            n[0] = p - start[0]
            esc[0] = e
            s.p = p + 1
            return OK
        if c < 0x80:
            if c == 92:  # backslash
                e = True
                if p + 1 >= end:
                    return FALLBACK
                c1 = p[1]
                if c1 == 117:  # \uXXXX
                    if p + 6 > end:
                        return FALLBACK
                    u = hex4(p + 2)
                    if u < 0:
                        return FALLBACK
                    if 0xD800 <= u <= 0xDBFF:
                        if p + 12 > end or p[6] != 92 or p[7] != 117:
                            return FALLBACK
                        u2 = hex4(p + 8)
                        if not (0xDC00 <= u2 <= 0xDFFF):
                            return FALLBACK
                        p += 12
                    elif 0xDC00 <= u <= 0xDFFF:
                        return FALLBACK
                    else:
                        p += 6
                    continue
                if (c1 == 34 or c1 == 92 or c1 == 47 or c1 == 98 or c1 == 102
                        or c1 == 110 or c1 == 114 or c1 == 116):
                    p += 2
                    continue
                return FALLBACK
            if c < 0x20:
                return FALLBACK
            p += 1
            continue
        # Strict UTF-8 (RFC 3629): no overlongs, no surrogates, max U+10FFFF.
        if 0xC2 <= c <= 0xDF:
            if p + 2 > end or (p[1] & 0xC0) != 0x80:
                return FALLBACK
            p += 2
        elif 0xE0 <= c <= 0xEF:
            if p + 3 > end or (p[1] & 0xC0) != 0x80 or (p[2] & 0xC0) != 0x80:
                return FALLBACK
            if c == 0xE0 and p[1] < 0xA0:
                return FALLBACK
            if c == 0xED and p[1] > 0x9F:
                return FALLBACK
            p += 3
        elif 0xF0 <= c <= 0xF4:
            if (p + 4 > end or (p[1] & 0xC0) != 0x80 or (p[2] & 0xC0) != 0x80
                    or (p[3] & 0xC0) != 0x80):
                return FALLBACK
            if c == 0xF0 and p[1] < 0x90:
                return FALLBACK
            if c == 0xF4 and p[1] > 0x8F:
                return FALLBACK
            p += 4
        else:
            return FALLBACK
    return FALLBACK


cdef int skip_number(Scan* s) noexcept nogil:
    """RFC 8259 number without exponent and with at most 18 integer digits."""
    cdef cptr p = s.p
    cdef cptr end = s.end
    cdef cptr d0
    if p < end and p[0] == 45:  # '-'
        p += 1
    if p >= end:
        return FALLBACK
    d0 = p
    if p[0] == 48:  # '0'
        p += 1
    elif 49 <= p[0] <= 57:
        while p < end and 48 <= p[0] <= 57:
            p += 1
        if p - d0 > 18:
            return FALLBACK  # orjson turns these into floats, or infinity errors
    else:
        return FALLBACK
    if p < end and p[0] == 46:  # '.'
        p += 1
        d0 = p
        while p < end and 48 <= p[0] <= 57:
            p += 1
        if p == d0:
            return FALLBACK
    if p < end and (p[0] == 101 or p[0] == 69):  # exponent: leave it to orjson
        return FALLBACK
    s.p = p
    return OK


cdef inline int skip_lit(Scan* s, const char* lit, Py_ssize_t n) noexcept nogil:
    if s.end - s.p < n or memcmp(s.p, lit, n) != 0:
        return FALLBACK
    s.p += n
    return OK


cdef int skip_value(Scan* s, int depth) noexcept nogil:
    """Validate and skip any JSON value starting at ``s.p`` (whitespace already skipped)."""
    cdef cptr k
    cdef Py_ssize_t kn
    cdef bint ke
    cdef unsigned char c
    if s.p >= s.end:
        return FALLBACK
    c = s.p[0]
    if c == 34:
        return scan_string(s, &k, &kn, &ke)
    if c == 123 or c == 91:  # '{' or '['
        if depth >= MAX_DEPTH:
            return FALLBACK
        s.p += 1
        skip_ws(s)
        if s.p < s.end and s.p[0] == (125 if c == 123 else 93):
            s.p += 1
            return OK
        while True:
            if c == 123:
                if s.p >= s.end or s.p[0] != 34 or scan_string(s, &k, &kn, &ke):
                    return FALLBACK
                skip_ws(s)
                if s.p >= s.end or s.p[0] != 58:
                    return FALLBACK
                s.p += 1
                skip_ws(s)
            if skip_value(s, depth + 1):
                return FALLBACK
            skip_ws(s)
            if s.p >= s.end:
                return FALLBACK
            if s.p[0] == 44:  # ','
                s.p += 1
                skip_ws(s)
                continue
            if s.p[0] == (125 if c == 123 else 93):
                s.p += 1
                return OK
            return FALLBACK
    if c == 116:
        return skip_lit(s, "true", 4)
    if c == 102:
        return skip_lit(s, "false", 5)
    if c == 110:
        return skip_lit(s, "null", 4)
    return skip_number(s)


cdef inline bint key_is(cptr k, Py_ssize_t kn, const char* name, Py_ssize_t n) noexcept nogil:
    return kn == n and memcmp(k, name, n) == 0


# Walks an object's members. ``s.p`` is at '{'. For each member the key is
# returned through k/kn and ``s.p`` is left at the value; the caller consumes
# the value then calls ``obj_next``.
cdef inline int obj_first(Scan* s, cptr* k, Py_ssize_t* kn, bint* more) noexcept nogil:
    cdef bint ke
    s.p += 1
    skip_ws(s)
    if s.p < s.end and s.p[0] == 125:
        s.p += 1
        more[0] = False
        return OK
    more[0] = True
    if s.p >= s.end or s.p[0] != 34 or scan_string(s, k, kn, &ke) or ke:
        return FALLBACK  # escaped keys may spell a key we track
    skip_ws(s)
    if s.p >= s.end or s.p[0] != 58:
        return FALLBACK
    s.p += 1
    skip_ws(s)
    return OK if s.p < s.end else FALLBACK


cdef inline int obj_next(Scan* s, cptr* k, Py_ssize_t* kn, bint* more) noexcept nogil:
    cdef bint ke
    skip_ws(s)
    if s.p >= s.end:
        return FALLBACK
    if s.p[0] == 125:
        s.p += 1
        more[0] = False
        return OK
    if s.p[0] != 44:
        return FALLBACK
    s.p += 1
    skip_ws(s)
    if s.p >= s.end or s.p[0] != 34 or scan_string(s, k, kn, &ke) or ke:
        return FALLBACK
    skip_ws(s)
    if s.p >= s.end or s.p[0] != 58:
        return FALLBACK
    s.p += 1
    skip_ws(s)
    return OK if s.p < s.end else FALLBACK


cdef int scan_delta(Scan* s, cptr* cp, Py_ssize_t* cn, bint* ce, bint* reasoning) noexcept nogil:
    cdef cptr k
    cdef Py_ssize_t kn
    cdef bint more
    cdef bint seen_c = False, seen_rc = False, seen_r = False
    cdef cptr sp
    cdef Py_ssize_t sn
    cdef bint se
    if obj_first(s, &k, &kn, &more):
        return FALLBACK
    while more:
        if key_is(k, kn, "content", 7):
            if seen_c:
                return FALLBACK
            seen_c = True
            if s.p[0] == 34:
                if scan_string(s, cp, cn, ce):
                    return FALLBACK
            elif s.p[0] == 110:
                if skip_lit(s, "null", 4):
                    return FALLBACK
            else:
                return FALLBACK  # array of parts or an odd shape: orjson decides
        elif key_is(k, kn, "reasoning_content", 17) or key_is(k, kn, "reasoning", 9):
            if kn == 9:
                if seen_r:
                    return FALLBACK
                seen_r = True
            else:
                if seen_rc:
                    return FALLBACK
                seen_rc = True
            if s.p[0] == 34:
                if scan_string(s, &sp, &sn, &se):
                    return FALLBACK
                if sn:
                    reasoning[0] = True
            elif skip_value(s, 5):
                return FALLBACK
        elif skip_value(s, 5):
            return FALLBACK
        if obj_next(s, &k, &kn, &more):
            return FALLBACK
    return OK


cdef int scan_choice(Scan* s) noexcept nogil:
    cdef cptr k
    cdef Py_ssize_t kn
    cdef bint more
    cdef int delta_state = 0  # 0 absent, 1 object, 2 other
    cdef bint seen_text = False
    cdef cptr cp = NULL
    cdef Py_ssize_t cn = 0
    cdef bint ce = False
    cdef cptr tp = NULL
    cdef Py_ssize_t tn = 0
    cdef bint te = False
    cdef bint reasoning = False
    cdef int i
    if s.nch >= MAX_CHOICES:
        return FALLBACK
    if obj_first(s, &k, &kn, &more):
        return FALLBACK
    while more:
        if key_is(k, kn, "finish_reason", 13):
            if s.p[0] != 110 or skip_lit(s, "null", 4):
                return FALLBACK  # a finish reason (or a duplicate): orjson decides
        elif key_is(k, kn, "delta", 5):
            if delta_state:
                return FALLBACK
            if s.p[0] == 123:
                delta_state = 1
                if scan_delta(s, &cp, &cn, &ce, &reasoning):
                    return FALLBACK
            else:
                delta_state = 2
                if skip_value(s, 4):
                    return FALLBACK
        elif key_is(k, kn, "text", 4):
            if seen_text:
                return FALLBACK
            seen_text = True
            if s.p[0] == 34:
                if scan_string(s, &tp, &tn, &te):
                    return FALLBACK
            elif skip_value(s, 4):
                return FALLBACK
        elif skip_value(s, 4):
            return FALLBACK
        if obj_next(s, &k, &kn, &more):
            return FALLBACK
    i = s.nch
    s.nch += 1
    if delta_state == 1:
        s.str_p[i] = cp
        s.str_n[i] = cn
        s.str_esc[i] = ce
        s.reasoning[i] = reasoning
    else:
        s.str_p[i] = tp
        s.str_n[i] = tn
        s.str_esc[i] = te
        s.reasoning[i] = False
    return OK


cdef int scan_choices(Scan* s) noexcept nogil:
    s.p += 1
    skip_ws(s)
    if s.p < s.end and s.p[0] == 93:
        s.p += 1
        return OK
    while True:
        if s.p >= s.end:
            return FALLBACK
        if s.p[0] == 123:
            if scan_choice(s):
                return FALLBACK
        elif skip_value(s, 3):  # not an object: ignored, like the pure twin
            return FALLBACK
        skip_ws(s)
        if s.p >= s.end:
            return FALLBACK
        if s.p[0] == 44:
            s.p += 1
            skip_ws(s)
            continue
        if s.p[0] == 93:
            s.p += 1
            return OK
        return FALLBACK


cdef int scan_chunk(Scan* s) noexcept nogil:
    """Walk one event payload; OK only if every field the pure twin reads is simple."""
    cdef cptr k
    cdef Py_ssize_t kn
    cdef bint more
    cdef bint seen_choices = False
    cdef cptr sp
    cdef Py_ssize_t sn
    cdef bint se
    s.nch = 0
    skip_ws(s)
    if s.p >= s.end or s.p[0] != 123:
        return FALLBACK
    if obj_first(s, &k, &kn, &more):
        return FALLBACK
    while more:
        if key_is(k, kn, "choices", 7):
            if seen_choices:
                return FALLBACK
            seen_choices = True
            if s.p[0] == 91:
                if scan_choices(s):
                    return FALLBACK
            elif skip_value(s, 2):
                return FALLBACK
        elif key_is(k, kn, "usage", 5) or key_is(k, kn, "timings", 7) or key_is(k, kn, "x_groq", 6):
            if s.p[0] == 123 or skip_value(s, 2):
                return FALLBACK
        elif key_is(k, kn, "error", 5):
            return FALLBACK
        elif key_is(k, kn, "object", 6):
            if s.p[0] == 34:
                if scan_string(s, &sp, &sn, &se) or se or (sn == 5 and memcmp(sp, "error", 5) == 0):
                    return FALLBACK
            elif skip_value(s, 2):
                return FALLBACK
        elif skip_value(s, 2):
            return FALLBACK
        if obj_next(s, &k, &kn, &more):
            return FALLBACK
    skip_ws(s)
    return OK if s.p == s.end else FALLBACK


cdef inline const char* find_eol(const char* p, const char* end, bint has_cr) noexcept nogil:
    if not has_cr:
        return <const char*>memchr(p, 10, end - p)
    while p < end:
        if p[0] == 10 or p[0] == 13:
            return p
        p += 1
    return NULL


cdef class SSEAccountant:
    """Accounts one streamed response, chunk by chunk (native twin).

    ``feed`` returns a count of completed events rather than a list of
    ``Event`` objects on purpose: the hot path allocates nothing per event
    (apart from the arrival time it appends to ``result.token_ns``).

    Args:
        head_chars: Visible text kept in ``result.text_head`` (characters).
        max_line_bytes: Longest SSE line accepted (bytes, line end excluded).
        keep_events: Also keep every dispatched ``Event`` in ``self.events``.

    Attributes:
        result: The ``StreamResult`` being filled in (same object throughout;
            reading it brings the natively kept counters up to date).
        events: Dispatched events when ``keep_events`` is set, else empty.
        fallbacks: Events handed to orjson (``account_payload``) instead of
            being accounted by the native scanner (native twin only).
    """

    cdef object _r
    cdef list _token_ns
    cdef readonly list events
    cdef readonly long long fallbacks
    cdef bint _keep
    cdef Py_ssize_t _head_chars
    cdef Py_ssize_t _max_line
    cdef Buf _pend
    cdef Buf _data
    cdef bint _has_data
    cdef bint _skip_lf
    cdef bytes _name
    cdef bint _first_byte
    cdef object _last_ns
    # Mirrors of StreamResult fields, written back by _sync_out().
    cdef long long _events
    cdef long long _chunks
    cdef long long _content
    cdef long long _reasoning
    cdef object _first_token
    cdef object _first_content
    cdef object _last_token
    cdef object _last_event
    cdef Py_ssize_t _head_len

    def __cinit__(self):
        self._pend.p = NULL
        self._pend.n = self._pend.cap = 0
        self._data.p = NULL
        self._data.n = self._data.cap = 0

    def __dealloc__(self):
        PyMem_Free(self._pend.p)
        PyMem_Free(self._data.p)

    def __init__(self, *, head_chars=HEAD_CHARS, max_line_bytes=MAX_LINE_BYTES, keep_events=False):
        self._r = StreamResult()
        self._token_ns = self._r.token_ns
        self.events = []
        self._keep = bool(keep_events)
        self._head_chars = head_chars
        self._max_line = max_line_bytes
        self._has_data = False
        self._skip_lf = False
        self._name = b""
        self._first_byte = False
        self._last_ns = 0
        self._events = self._chunks = self._content = self._reasoning = 0
        self._first_token = self._first_content = self._last_token = self._last_event = None
        self._head_len = 0

    @property
    def result(self):
        """The ``StreamResult`` (counters brought up to date on each read)."""
        self._sync_out()
        return self._r

    cdef int _sync_out(self) except -1:
        r = self._r
        r.events = self._events
        r.chunks = self._chunks
        r.content_deltas = self._content
        r.reasoning_deltas = self._reasoning
        r.first_token_ns = self._first_token
        r.first_content_ns = self._first_content
        r.last_token_ns = self._last_token
        r.last_event_ns = self._last_event
        return 0

    cdef int _sync_in(self) except -1:
        r = self._r
        self._events = r.events
        self._chunks = r.chunks
        self._content = r.content_deltas
        self._reasoning = r.reasoning_deltas
        self._first_token = r.first_token_ns
        self._first_content = r.first_content_ns
        self._last_token = r.last_token_ns
        self._last_event = r.last_event_ns
        self._head_len = len(r.text_head)
        return 0

    def feed(self, data, recv_ns):
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
        cdef bytes b = data if type(data) is bytes else bytes(data)
        cdef Py_ssize_t size = PyBytes_GET_SIZE(b)
        if size == 0:
            return 0
        if not self._first_byte:
            self._first_byte = True
            self._r.first_byte_ns = recv_ns
        self._last_ns = recv_ns
        cdef const char* p = PyBytes_AS_STRING(b)
        cdef const char* end = p + size
        cdef const char* q
        cdef const char* line
        cdef Py_ssize_t line_n
        cdef int n = 0
        if self._skip_lf:
            self._skip_lf = False
            if p[0] == 10:
                p += 1
                if p == end:
                    return 0
        cdef bint has_cr = memchr(p, 13, end - p) != NULL
        q = find_eol(p, end, has_cr)
        if q != NULL and (end - 1)[0] == 13:
            self._skip_lf = True  # a CRLF may be split across reads
        if q == NULL:
            buf_append(&self._pend, p, end - p)
            if self._pend.n > self._max_line:
                partial = PyBytes_FromStringAndSize(self._pend.p, self._pend.n)
                self._pend.n = 0
                raise StreamError(
                    f"SSE line longer than {self._max_line} bytes",
                    kind="line_too_long",
                    partial=partial,
                )
            return 0
        while q != NULL:
            if self._pend.n:
                buf_append(&self._pend, p, q - p)
                line = self._pend.p
                line_n = self._pend.n
                self._pend.n = 0  # the bytes stay valid until the next append
            else:
                line = p
                line_n = q - p
            if q[0] == 13 and q + 1 < end and q[1] == 10:
                q += 1
            p = q + 1
            n += self._line(line, line_n, recv_ns)
            q = find_eol(p, end, has_cr)
        if end - p > self._max_line:
            raise StreamError(
                f"SSE line longer than {self._max_line} bytes",
                kind="line_too_long",
                partial=PyBytes_FromStringAndSize(p, end - p),
            )
        buf_append(&self._pend, p, end - p)
        return n

    cdef int _line(self, const char* line, Py_ssize_t n, object recv_ns) except -1:
        cdef const char* c
        cdef const char* v
        cdef Py_ssize_t fn, vn
        cdef int ret = 0
        if n == 0:
            if self._has_data:
                self._has_data = False
                ret = 1
                try:
                    self._dispatch(recv_ns)
                finally:
                    self._data.n = 0
            if len(self._name):
                self._name = b""
            return ret
        if n > self._max_line:
            raise StreamError(
                f"SSE line longer than {self._max_line} bytes",
                kind="line_too_long",
                partial=PyBytes_FromStringAndSize(line, n),
            )
        if line[0] == 58:  # ':' comment
            return 0
        c = <const char*>memchr(line, 58, n)
        if c == NULL:
            fn = n
            v = line + n
            vn = 0
        else:
            fn = c - line
            v = c + 1
            vn = n - fn - 1
            if vn and v[0] == 32:
                v += 1
                vn -= 1
        if fn == 4 and memcmp(line, "data", 4) == 0:
            if self._has_data:
                buf_append(&self._data, "\n", 1)
            buf_append(&self._data, v, vn)
            self._has_data = True
        elif fn == 5 and memcmp(line, "event", 5) == 0:
            self._name = PyBytes_FromStringAndSize(v, vn)
        elif fn == 5 and memcmp(line, "error", 5) == 0:
            account_error_line(self._r, PyBytes_FromStringAndSize(v, vn))
        return 0

    cdef int _dispatch(self, object recv_ns) except -1:
        cdef const char* payload = self._data.p
        cdef Py_ssize_t n = self._data.n
        cdef Scan s
        cdef bint content_seen, reasoning_seen
        cdef int i
        self._events += 1
        self._last_event = recv_ns
        if self._keep:
            self.events.append(
                Event(self._name.decode("utf-8", "replace"), PyBytes_FromStringAndSize(payload, n), recv_ns)
            )
        if n == 6 and memcmp(payload, "[DONE]", 6) == 0:
            self._r.done_marker = True
            return 0
        if n == 0:
            return 0
        s.p = <cptr>payload
        s.end = <cptr>payload + n
        if len(self._name) or scan_chunk(&s) != OK:
            self._fallback(PyBytes_FromStringAndSize(payload, n), recv_ns)
            return 0
        self._chunks += 1
        content_seen = False
        reasoning_seen = False
        for i in range(s.nch):
            if s.reasoning[i]:
                reasoning_seen = True
            if s.str_p[i] != NULL and s.str_n[i] != 0:
                content_seen = True
                if self._head_len < self._head_chars:
                    self._head(s.str_p[i], s.str_n[i], s.str_esc[i])
        if content_seen or reasoning_seen:
            if content_seen:
                self._content += 1
                if self._first_content is None:
                    self._first_content = recv_ns
            if reasoning_seen:
                self._reasoning += 1
            if self._first_token is None:
                self._first_token = recv_ns
            self._last_token = recv_ns
            PyList_Append(self._token_ns, recv_ns)
        return 0

    cdef int _head(self, cptr p, Py_ssize_t n, bint esc) except -1:
        if esc:
            text = orjson.loads(PyBytes_FromStringAndSize(<const char*>p - 1, n + 2))
        else:
            text = PyUnicode_DecodeUTF8(<const char*>p, n, NULL)
        r = self._r
        room = self._head_chars - self._head_len
        r.text_head += text[:room]
        self._head_len = len(r.text_head)
        return 0

    cdef int _fallback(self, bytes payload, object recv_ns) except -1:
        self.fallbacks += 1
        self._sync_out()
        try:
            account_payload(self._r, payload, self._name, recv_ns, self._head_chars)
        finally:
            self._sync_in()
        return 0

    def close(self):
        """End of stream: account what EOF completed and return the result.

        EOF ends a pending line and then a pending event, as if a blank line
        had followed (llama.cpp-family servers end the body right after the
        last ``data:`` line, field case B14). A pending event whose data is not
        a whole JSON object is discarded and ``result.eof_truncated`` is set.

        Returns:
            The final ``StreamResult`` (the same object as ``self.result``).
        """
        if self._pend.n:
            self.feed(b"\n", self._last_ns)
        if self._has_data:
            self._has_data = False
            try:
                if complete_at_eof(PyBytes_FromStringAndSize(self._data.p, self._data.n)):
                    self._dispatch(self._last_ns)
                else:
                    self._r.eof_truncated = True
            finally:
                self._data.n = 0
        self._name = b""
        return self.result
