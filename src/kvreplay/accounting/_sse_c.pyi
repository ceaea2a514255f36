"""Type stub for the native SSE accountant (ext/_sse_c.pyx); same API as ``_sse_py``."""

from collections.abc import Sequence

from kvreplay.accounting.events import Event, StreamResult

class SSEAccountant:
    events: list[Event]
    fallbacks: int
    def __init__(
        self, *, head_chars: int = ..., max_line_bytes: int = ..., keep_events: bool = ...
    ) -> None: ...
    @property
    def result(self) -> StreamResult: ...
    def feed(self, data: bytes, recv_ns: int) -> int: ...
    def close(self) -> StreamResult: ...

def itl_summary_ns(token_ns: Sequence[int]) -> tuple[int, int, int, int] | None: ...
def end_marker_in(prev: bytes, chunk: bytes) -> bool: ...
def hdr_record_gaps(
    counts_addr: int,
    counts_len: int,
    mask: int,
    unit: int,
    half_mag: int,
    half_count: int,
    token_ns: Sequence[int],
) -> tuple[int, int, int, int | None, int | None] | None: ...
