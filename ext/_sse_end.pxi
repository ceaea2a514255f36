# Included by _sse_c.pyx: the capture proxy's per-read check for a stream's end (``end_marker_in``).
#
# The pure twin is ``kvreplay.accounting.events.end_marker_in``; both answer the same for any two
# byte strings (tests/unit/accounting/test_end_marker_twins.py). The markers are the OpenAI-style
# stream's last event (``data: [DONE]``) and its usage object (``"usage"``, a final chunk with
# ``stream_options.include_usage``): SERVERS.md, "usage fields".

cdef extern from "string.h" nogil:
    void *memmem(const void *haystack, size_t haystacklen, const void *needle, size_t needlelen)

cdef const char* _DONE_M = b"[DONE]"
cdef const char* _USAGE_M = b'"usage"'


cdef inline bint _has_marker(const char* p, Py_ssize_t n) noexcept nogil:
    return memmem(p, n, _DONE_M, 6) != NULL or memmem(p, n, _USAGE_M, 7) != NULL


def end_marker_in(bytes prev not None, bytes chunk not None):
    """Whether ``chunk``, or the 16 bytes around its start (``prev``'s last 8, its first 8), holds an end marker.

    Native twin of ``events.end_marker_in`` (glibc's ``memmem``, no bytes object made a read).

    Args:
        prev: The read before ``chunk`` (only its last 8 bytes are looked at); ``b""`` for none.
        chunk: One upstream read of the stream.

    Returns:
        True when ``b"[DONE]"`` or ``b'"usage"'`` is in ``chunk`` or cut between the two reads.
    """
    cdef const char* c = PyBytes_AS_STRING(chunk)
    cdef Py_ssize_t n = PyBytes_GET_SIZE(chunk)
    cdef Py_ssize_t a = PyBytes_GET_SIZE(prev)
    cdef Py_ssize_t b = n if n < 8 else 8
    cdef char buf[16]
    if _has_marker(c, n):
        return True
    if a > 8:
        a = 8
    memcpy(buf, PyBytes_AS_STRING(prev) + PyBytes_GET_SIZE(prev) - a, a)
    memcpy(buf + a, c, b)
    return _has_marker(buf, a + b)
