"""Facade: picks the native SSE accountant or its pure-Python twin.

The pure twin is used when ``KVREPLAY_NO_EXTENSIONS=1`` or on a non-CPython
interpreter. Otherwise the compiled ``_sse_c`` is imported; if that fails the
facade falls back to the pure twin with one ``RuntimeWarning``.
``IMPLEMENTATION`` is ``"native"`` or ``"pure"`` and goes into ``plan.json``.
The ITL helper ``itl_summary_ns`` (a record's ITL summary) and the capture
proxy's end-of-stream check ``end_marker_in`` come from the same side; ``hdr_record_gaps``
is native only (None on the pure side, whose histograms take the numpy path).
"""

from __future__ import annotations

import os
import platform
import warnings
from collections.abc import Callable

from kvreplay.accounting import _sse_py, events
from kvreplay.accounting.events import Accountant, Event, StreamResult

__all__ = ["IMPLEMENTATION", "Event", "SSEAccountant", "StreamResult", "end_marker_in", "hdr_record_gaps",
           "itl_summary_ns"]

hdr_record_gaps: Callable[..., tuple[int, int, int, int | None, int | None] | None] | None = None
"""The native ``_sse_c.hdr_record_gaps`` (ITL gaps straight into HdrHistogram counts); None on the pure side."""

def _why_pure(exc: ImportError) -> str:
    """Why the compiled twin is not used: not built (an sdist installed without a compiler), or not loadable.

    Python words a submodule missing from a package being initialised as "most likely due to a
    circular import"; the spec lookup tells the two cases apart.
    """
    import importlib.util

    try:
        spec = importlib.util.find_spec("kvreplay.accounting._sse_c")
    except (ImportError, ValueError):
        spec = None
    return "no compiler at install time" if spec is None else f"the compiled twin does not load: {exc}"


SSEAccountant: type[Accountant]
if os.environ.get("KVREPLAY_NO_EXTENSIONS", "") == "1" or platform.python_implementation() != "CPython":
    SSEAccountant = _sse_py.SSEAccountant
    IMPLEMENTATION = "pure"
    itl_summary_ns = events.itl_summary_ns
    end_marker_in = events.end_marker_in
else:
    try:
        from kvreplay.accounting import _sse_c
    except ImportError as exc:  # depends on the build (tests/unit/accounting/test_pure_fallback_message.py)
        warnings.warn(f"kvreplay: pure-Python accountant ({_why_pure(exc)}); same results, slower", RuntimeWarning,
                      stacklevel=2)
        SSEAccountant = _sse_py.SSEAccountant
        IMPLEMENTATION = "pure"
        itl_summary_ns = events.itl_summary_ns
        end_marker_in = events.end_marker_in
    else:
        SSEAccountant = _sse_c.SSEAccountant
        IMPLEMENTATION = "native"
        itl_summary_ns = _sse_c.itl_summary_ns
        end_marker_in = _sse_c.end_marker_in
        hdr_record_gaps = _sse_c.hdr_record_gaps
