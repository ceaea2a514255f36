"""Facade: picks the native prefix-chain hasher or its pure-Python twin.

Same switch as ``kvreplay.accounting.sse``: the pure twin under
``KVREPLAY_NO_EXTENSIONS=1`` or on a non-CPython interpreter, else the
compiled ``_hash_c``, falling back with one ``RuntimeWarning`` if it does not
import. ``IMPLEMENTATION`` is ``"native"`` or ``"pure"``.
"""

from __future__ import annotations

import os
import platform
import warnings

from kvreplay.workload import _chain
from kvreplay.workload._chain import DEFAULT_BLOCK_BYTES, LINK_BYTES, BodySpans, PrefixChain

__all__ = [
    "DEFAULT_BLOCK_BYTES",
    "IMPLEMENTATION",
    "LINK_BYTES",
    "BodySpans",
    "PrefixChain",
    "body_spans",
    "prefix_chain",
]

if os.environ.get("KVREPLAY_NO_EXTENSIONS", "") == "1" or platform.python_implementation() != "CPython":
    body_spans = _chain.body_spans
    prefix_chain = _chain.prefix_chain
    IMPLEMENTATION = "pure"
else:
    try:
        from kvreplay.workload import _hash_c
    except ImportError as exc:  # pragma: no cover - depends on the build
        warnings.warn(
            f"kvreplay native prefix-chain hasher not available ({exc}); using the pure-Python twin",
            RuntimeWarning,
            stacklevel=2,
        )
        body_spans = _chain.body_spans
        prefix_chain = _chain.prefix_chain
        IMPLEMENTATION = "pure"
    else:
        body_spans = _hash_c.body_spans
        prefix_chain = _hash_c.prefix_chain
        IMPLEMENTATION = "native"
