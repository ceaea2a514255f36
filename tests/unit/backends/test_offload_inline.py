"""Where a scrape is parsed by size (``backends._offload``): on the loop under INLINE_BYTES, else in a thread."""

from __future__ import annotations

import asyncio
import threading

from kvreplay.backends._offload import INLINE_BYTES, OFFLOAD_BYTES, parse_off_loop


def thread_of(text: str | tuple[bytes, ...]) -> int:
    return threading.get_ident()


def test_small_scrapes_are_parsed_on_the_loop_and_larger_ones_in_a_thread() -> None:
    async def body() -> list[bool]:
        loop_thread = threading.get_ident()
        sizes = [0, INLINE_BYTES - 1, INLINE_BYTES, OFFLOAD_BYTES - 1]
        texts = ["x" * n for n in sizes[:3]] + [(b"y" * (sizes[3] - 5), b"z" * 5)]  # chunks count by their sum
        return [await parse_off_loop(thread_of, t) == loop_thread for t in texts]

    assert INLINE_BYTES == 8192
    assert asyncio.run(body()) == [True, True, False, False]
