"""Offline analysis: KV pool sizing (``fit``) and miss-ratio curves (``simulate``).

Nothing here talks to a server. ``fit`` applies the sizing rule of DESIGN.md
question 5; ``mrc`` computes LRU miss-ratio curves in one pass by stack
distances (Mattson et al. 1970) and checks them against the simulator's own
cache model classes.
"""

from kvreplay.offline.fit import (
    FitInputs,
    FitResult,
    PrintedNeed,
    fit_pool,
    kv_bytes_per_position,
    parse_printed_need,
)

__all__ = [
    "FitInputs",
    "FitResult",
    "PrintedNeed",
    "fit_pool",
    "kv_bytes_per_position",
    "parse_printed_need",
]
