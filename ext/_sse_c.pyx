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
from cpython cimport array as carray
from cpython.list cimport PyList_Append
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.string cimport memchr, memcmp, memcpy

import orjson

from kvreplay.accounting._sse_py import account_error_line, account_payload, complete_at_eof
from kvreplay.accounting.events import HEAD_CHARS, MAX_LINE_BYTES, Event, StreamResult
from kvreplay.accounting.events import itl_summary_ns as _itl_summary_py
from kvreplay.errors import StreamError

__all__ = ["SSEAccountant", "hdr_record_gaps", "itl_summary_ns"]

include "_sse_scan.pxi"
include "_sse_end.pxi"


cdef enum:
    MAX_PREFIX = 1024  # longest payload prefix kept for scan_chunk_after (bytes)


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
    cdef carray.array _token_ns
    cdef readonly list events
    cdef readonly long long fallbacks
    cdef bint _keep
    cdef Py_ssize_t _head_chars
    cdef Py_ssize_t _max_line
    cdef Buf _pend
    cdef Buf _data
    # The bytes of the last scanned payload before its ``choices`` value: a payload
    # that starts with them resumes the scan there (scan_chunk_after).
    cdef Buf _pfx
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
    # Visible text collected since the last _sync_out (joined onto text_head there:
    # one concatenation per read of ``result``, not one per token event).
    cdef list _head_parts

    def __cinit__(self):
        self._pend.p = NULL
        self._pend.n = self._pend.cap = 0
        self._data.p = NULL
        self._data.n = self._data.cap = 0
        self._pfx.p = NULL
        self._pfx.n = self._pfx.cap = 0

    def __dealloc__(self):
        PyMem_Free(self._pend.p)
        PyMem_Free(self._data.p)
        PyMem_Free(self._pfx.p)

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
        self._head_parts = []

    @property
    def result(self):
        """The ``StreamResult`` (counters brought up to date on each read)."""
        self._sync_out()
        return self._r

    cdef int _sync_out(self) except -1:
        r = self._r
        if self._head_parts:
            r.text_head = r.text_head + "".join(self._head_parts)
            self._head_parts.clear()
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
        cdef Py_ssize_t ntok
        cdef const char* payload = self._data.p
        cdef Py_ssize_t n = self._data.n
        cdef Scan s
        cdef bint content_seen, reasoning_seen
        cdef int i, rc
        cdef cptr choices_at
        cdef Py_ssize_t pn
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
        if len(self._name):
            self._fallback(PyBytes_FromStringAndSize(payload, n), recv_ns)
            return 0
        s.end = <cptr>payload + n
        pn = self._pfx.n
        if pn and n > pn and memcmp(payload, self._pfx.p, pn) == 0:
            # Same bytes as the last payload up to its choices: only the rest is walked.
            s.p = <cptr>payload + pn
            rc = scan_chunk_after(&s)
        else:
            s.p = <cptr>payload
            rc = scan_chunk(&s, &choices_at)
            if rc == OK and choices_at != NULL and choices_at - <cptr>payload <= MAX_PREFIX:
                self._pfx.n = 0
                buf_append(&self._pfx, payload, choices_at - <cptr>payload)
        if rc != OK:
            self._fallback(PyBytes_FromStringAndSize(payload, n), recv_ns)
            return 0
        # Decode the text the head still needs before touching any state: bytes the
        # scanner let through but UTF-8 decoding rejects go to orjson, which raises
        # the same StreamError (malformed) as the pure twin, never UnicodeDecodeError.
        # The finish reason (the last choice's that has one, as the pure twin's loop leaves
        # it) and the usage object are read before any state changes, as the heads are.
        fr = None
        usage = None
        try:
            for i in range(s.nch):
                if s.fr_p[i] != NULL:
                    fr = PyUnicode_DecodeUTF8(<const char*>s.fr_p[i], s.fr_n[i], NULL)
            if s.usage_p != NULL:
                usage = orjson.loads(PyBytes_FromStringAndSize(<const char*>s.usage_p, s.usage_n))
        except ValueError:  # UnicodeDecodeError, orjson.JSONDecodeError: orjson decides, as below
            self._fallback(PyBytes_FromStringAndSize(payload, n), recv_ns)
            return 0
        heads = None
        if self._head_len < self._head_chars:
            heads = []
            room = self._head_chars - self._head_len
            try:
                for i in range(s.nch):
                    if room <= 0:
                        break
                    if s.str_p[i] != NULL and s.str_n[i] != 0:
                        text = self._decode(s.str_p[i], s.str_n[i], s.str_esc[i])
                        heads.append(text)
                        room -= len(text)
            except ValueError:  # UnicodeDecodeError, orjson.JSONDecodeError
                self._fallback(PyBytes_FromStringAndSize(payload, n), recv_ns)
                return 0
        self._chunks += 1
        if usage is not None:
            self._r.usage = usage
        if fr is not None:
            self._r.finish_reason = fr
        content_seen = False
        reasoning_seen = False
        for i in range(s.nch):
            if s.reasoning[i]:
                reasoning_seen = True
            if s.str_p[i] != NULL and s.str_n[i] != 0:
                content_seen = True
        if heads:
            for text in heads:
                room = self._head_chars - self._head_len
                if room <= 0:
                    break
                if len(text) > room:
                    text = text[:room]
                self._head_parts.append(text)
                self._head_len += len(text)
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
            ntok = len(self._token_ns)
            carray.resize_smart(self._token_ns, ntok + 1)
            self._token_ns.data.as_longlongs[ntok] = recv_ns
        return 0

    cdef object _decode(self, cptr p, Py_ssize_t n, bint esc):
        if esc:
            return orjson.loads(PyBytes_FromStringAndSize(<const char*>p - 1, n + 2))
        return PyUnicode_DecodeUTF8(<const char*>p, n, NULL)

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


# -- inter-token latency (ITL) of one stream, without numpy --------------------------

cdef void _select_nth(long long* a, Py_ssize_t n, Py_ssize_t k) noexcept nogil:
    """Reorder ``a[0:n]`` so that ``a[k]`` is its k-th smallest value (0-based; Hoare quickselect)."""
    cdef Py_ssize_t lo = 0
    cdef Py_ssize_t hi = n - 1
    cdef Py_ssize_t i, j
    cdef long long pivot, t
    while lo < hi:
        pivot = a[lo + (hi - lo) // 2]
        i = lo
        j = hi
        while i <= j:
            while a[i] < pivot:
                i += 1
            while a[j] > pivot:
                j -= 1
            if i <= j:
                t = a[i]
                a[i] = a[j]
                a[j] = t
                i += 1
                j -= 1
        if k <= j:
            hi = j
        elif k >= i:
            lo = i
        else:
            return


def itl_summary_ns(token_ns):
    """ITL summary of one stream: ``(n, total_ns, max_ns, p50_ns)`` of its inter-token gaps.

    Args:
        token_ns: Token arrival times (ns), ``array('q')`` (``StreamResult.token_ns``);
            any other sequence goes to the pure twin (``events.itl_summary_ns``).

    Returns:
        ``n`` gaps (``len(token_ns) - 1``), their sum, their maximum and their upper
        median (the value at index ``n // 2`` of the sorted gaps), all ints; None
        below two arrivals. Exactly the pure twin's figures.
    """
    cdef carray.array t
    cdef Py_ssize_t n, i
    cdef long long g, total = 0, top
    cdef long long* v
    cdef long long* buf
    if type(token_ns) is not carray.array or token_ns.typecode != "q":
        return _itl_summary_py(token_ns)
    t = token_ns
    n = len(t) - 1
    if n < 1:
        return None
    v = t.data.as_longlongs
    buf = <long long*>PyMem_Malloc(n * sizeof(long long))
    if buf == NULL:
        raise MemoryError()
    top = v[1] - v[0]
    for i in range(n):
        g = v[i + 1] - v[i]
        buf[i] = g
        total += g
        if g > top:
            top = g
    _select_nth(buf, n, n // 2)
    g = buf[n // 2]
    PyMem_Free(buf)
    return (n, total, top, g)


cdef extern from *:
    int __builtin_clzll(unsigned long long) nogil


def hdr_record_gaps(size_t counts_addr, Py_ssize_t counts_len, long long mask, int unit, int half_mag,
                    long long half_count, token_ns):
    """Record a stream's inter-token gaps straight into an HdrHistogram's counts (µs).

    The counts index is HdrHistogram's (``hdrh``'s ``_counts_index_for``, as
    ``metrics.histograms.LatencySet`` computes it): bucket from the bit length
    of ``value | mask``, sub-bucket by shift. Each gap (ns) is rounded to µs as
    ``(ns + 500) // 1000`` and raised to at least 1 µs; an index at or beyond
    ``counts_len`` is counted out of range, not recorded.

    Args:
        counts_addr: Address of the histogram's counts (``ctypes.addressof(h.counts)``,
            64-bit unsigned ints); the caller keeps the histogram alive.
        counts_len, mask, unit, half_mag, half_count: The histogram's ``counts_len``,
            ``sub_bucket_mask``, ``unit_magnitude``, ``sub_bucket_half_count_magnitude``
            and ``sub_bucket_half_count``.
        token_ns: Token arrival times (ns), ``array('q')``.

    Returns:
        ``(recorded, out_of_range, sum_us, min_us, max_us)`` of the recorded gaps
        (min/max None when none was recorded); None when ``token_ns`` is not an
        ``array('q')`` (the caller takes the pure path).
    """
    cdef carray.array t
    cdef Py_ssize_t n, i
    cdef long long g, us, lo = 0, hi = 0, total = 0, bucket, idx, rec = 0, oor = 0
    cdef long long* v
    cdef unsigned long long* counts = <unsigned long long*>counts_addr
    if type(token_ns) is not carray.array or token_ns.typecode != "q":
        return None
    t = token_ns
    n = len(t) - 1
    v = t.data.as_longlongs
    for i in range(n):
        g = v[i + 1] - v[i]
        us = (g + 500) // 1000 if g >= -500 else -1  # floor division for negative gaps, then raised to 1
        if us < 1:
            us = 1
        if us > (1LL << 52):
            us = 1LL << 52
        bucket = (64 - __builtin_clzll(<unsigned long long>(us | mask))) - unit - half_mag - 1
        idx = ((bucket + 1) << half_mag) + (us >> (bucket + unit)) - half_count
        if idx >= counts_len:
            oor += 1
            continue
        counts[idx] += 1
        if rec == 0 or us < lo:
            lo = us
        if rec == 0 or us > hi:
            hi = us
        rec += 1
        total += us
    if rec == 0:
        return (0, oor, 0, None, None)
    return (rec, oor, total, lo, hi)
