"""Offline analysis: KV pool sizing (``fit``) and miss-ratio curves (``simulate``).

Nothing here talks to a server. ``fit`` applies the sizing rule of DESIGN.md
question 5. ``stack`` computes LRU stack distances for a whole reference string
in one vectorised pass (Mattson et al. 1970); ``mrc`` (radix block model) and
``entries`` (whole-snapshot model) turn them into hit curves over every
capacity, equal to the simulator's own cache classes run once per capacity
(``reference``), which ``simulate`` uses where no one-pass curve exists.
"""

from kvreplay.offline.entries import SnapshotRequest, entries_curve
from kvreplay.offline.fit import (
    FitInputs,
    FitResult,
    PrintedNeed,
    fit_pool,
    kv_bytes_per_position,
    parse_printed_need,
)
from kvreplay.offline.mrc import Curve, block_curve, block_distances
from kvreplay.offline.simulate import SimulateOptions, simulate
from kvreplay.offline.stack import lru_query_distances, lru_stack_distances
from kvreplay.offline.traces import BlockTrace, load_block_trace

__all__ = [
    "BlockTrace",
    "Curve",
    "FitInputs",
    "FitResult",
    "PrintedNeed",
    "SimulateOptions",
    "SnapshotRequest",
    "block_curve",
    "block_distances",
    "entries_curve",
    "fit_pool",
    "kv_bytes_per_position",
    "load_block_trace",
    "lru_query_distances",
    "lru_stack_distances",
    "parse_printed_need",
    "simulate",
]
