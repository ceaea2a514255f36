"""kvreplay: replay exact retained request bodies against LLM inference servers.

It sends the bodies in a frozen order at a fixed concurrency, streams every
response through a native SSE accountant, and records prefill vs decode latency
beside the server's own prefix-cache counters.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
