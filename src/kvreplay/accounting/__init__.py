"""Stream accounting: the SSE accountant twins and their shared types."""

from kvreplay.accounting.events import Event, StreamResult
from kvreplay.accounting.sse import IMPLEMENTATION, SSEAccountant

__all__ = ["IMPLEMENTATION", "Event", "SSEAccountant", "StreamResult"]
