"""Workloads: retained request bodies, loaded as exact bytes."""

from kvreplay.workload._loader import DEFAULT_MAX_BODY_BYTES, Body, Workload, load_workload
from kvreplay.workload.chain import (
    DEFAULT_BLOCK_BYTES,
    BodySpans,
    PrefixChain,
    body_spans,
    prefix_chain,
)

__all__ = [
    "DEFAULT_BLOCK_BYTES",
    "DEFAULT_MAX_BODY_BYTES",
    "Body",
    "BodySpans",
    "PrefixChain",
    "Workload",
    "body_spans",
    "load_workload",
    "prefix_chain",
]
