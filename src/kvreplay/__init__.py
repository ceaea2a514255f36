"""kvreplay: replay exact retained request bodies against LLM inference servers.

It sends the bodies in a frozen order at a fixed concurrency, streams every
response through a native SSE accountant, and records prefill vs decode latency
beside the server's own prefix-cache counters.

``kvreplay.load_run(path)`` reads a run directory back for a notebook (imported
lazily, so ``import kvreplay`` stays light).
"""

__version__ = "0.1.0"

__all__ = ["__version__", "load_run"]


def __getattr__(name: str) -> object:  # no typing import: `kvreplay --help` starts light
    if name == "load_run":
        from kvreplay.rundir import load_run

        return load_run
    raise AttributeError(f"module 'kvreplay' has no attribute {name!r}")
