"""Facade: picks the native SSE accountant or its pure-Python twin.

The pure twin is used when ``KVREPLAY_NO_EXTENSIONS=1`` or on a non-CPython
interpreter. Otherwise the compiled ``_sse_c`` is imported; if that fails the
facade falls back to the pure twin with one ``RuntimeWarning``.
``IMPLEMENTATION`` is ``"native"`` or ``"pure"`` and goes into ``plan.json``.
"""

from __future__ import annotations

import os
import platform
import warnings

from kvreplay.accounting import _sse_py
from kvreplay.accounting.events import Event, StreamResult

__all__ = ["IMPLEMENTATION", "Event", "SSEAccountant", "StreamResult"]

SSEAccountant: type
if os.environ.get("KVREPLAY_NO_EXTENSIONS", "") == "1" or platform.python_implementation() != "CPython":
    SSEAccountant = _sse_py.SSEAccountant
    IMPLEMENTATION = "pure"
else:
    try:
        from kvreplay.accounting import _sse_c
    except ImportError as exc:  # pragma: no cover - depends on the build
        warnings.warn(
            f"kvreplay native SSE accountant not available ({exc}); using the pure-Python twin",
            RuntimeWarning,
            stacklevel=2,
        )
        SSEAccountant = _sse_py.SSEAccountant
        IMPLEMENTATION = "pure"
    else:
        SSEAccountant = _sse_c.SSEAccountant
        IMPLEMENTATION = "native"
