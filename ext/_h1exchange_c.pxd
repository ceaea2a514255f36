# Typed fields of the runner's HTTP/1.1 exchange, for its compiled twin (setup.py: _exchange_copy).
#
# Cython's pure-Python mode: this file makes ``_Exchange`` of ``src/kvreplay/runner/_h1exchange.py``
# (compiled from a copy: setup.py writes it and this file under build/cython/kvreplay/runner/, where
# Cython looks for the module's .pxd by the module's name) a ``cdef class``; the methods are the .py's own.
# tests/parity/test_h1exchange_parity.py checks that the build is a cdef class with every slot a C field.
# Every field named in the class's ``__slots__`` is declared here, ``public`` (``runner.h1`` and
# ``runner.h1relay`` read and set them). Ints that can exceed a C long stay objects (times in ns).

cdef class _Exchange:
    cdef public object acc, body, conn, ctype, error, exc_status, fut, headers_ns, http_status, location
    cdef public object on_body, parser, picked, pieces, reason, timeout_kind, want
    cdef public object done_ns, idle_first, idle_from, last_rx_ns
    cdef public Py_ssize_t body_len, framing_run, head_bytes, head_chars, interim
    cdef public bint chunked, close_after, complete, framed
    cdef public int state
