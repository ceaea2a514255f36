"""Workloads: retained request bodies, loaded as exact bytes."""

from kvreplay.workload._loader import DEFAULT_MAX_BODY_BYTES, Body, Workload, load_workload

__all__ = ["DEFAULT_MAX_BODY_BYTES", "Body", "Workload", "load_workload"]
