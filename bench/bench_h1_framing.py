"""Client CPU per streamed token in the runner's HTTP/1.1 response path, without a socket.

Feeds one chunked ``text/event-stream`` response (128 one-token SSE events,
a usage event and ``[DONE]``, each its own chunk) to ``runner.h1._Exchange``
read by read, exactly as ``data_received`` would, and reports
``time.process_time()`` per token for 1 and 8 chunks per read (what a read holds
at C1 and under load). CPU time only, so it is robust to a shared machine; the
SSE accountant's work is included (native or pure Python, as imported).

    .venv/bin/python bench/bench_h1_framing.py
"""

from __future__ import annotations

import time

import orjson

from kvreplay.accounting import IMPLEMENTATION
from kvreplay.runner.h1 import _Exchange

TOKENS = 128


class _Conn:
    def exchange_done(self, x: object) -> None:
        pass


class _Fut:
    def done(self) -> bool:
        return False

    def set_result(self, v: object) -> None:
        pass


def _reads(per_read: int) -> list[bytes]:
    events = [b"data: " + orjson.dumps({"id": "x", "object": "chat.completion.chunk", "choices": [
        {"index": 0, "delta": {"content": f" tok{i}"}, "finish_reason": None}]}) + b"\n\n" for i in range(TOKENS)]
    events += [b'data: {"choices":[],"usage":{"prompt_tokens":1000,"completion_tokens":128}}\n\n',
               b"data: [DONE]\n\n"]
    frames = [b"%x\r\n%s\r\n" % (len(e), e) for e in events] + [b"0\r\n\r\n"]
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    return [head] + [b"".join(frames[i:i + per_read]) for i in range(0, len(frames), per_read)]


def measure(per_read: int, responses: int = 500) -> float:
    """CPU seconds per 1M tokens for ``responses`` responses read ``per_read`` chunks at a time."""
    reads = _reads(per_read)
    t0 = time.process_time()
    for _ in range(responses):
        x = _Exchange(_Conn(), _Fut(), 256)  # type: ignore[arg-type]
        for r in reads:
            x.on_data(r)
        assert x.complete and x.exc_status is None, x.error
    return (time.process_time() - t0) / responses / TOKENS * 1e6


if __name__ == "__main__":
    for n in (1, 8):
        print(f"accountant {IMPLEMENTATION}, {n} chunk(s) per read: {measure(n):.2f} s CPU per 1M tokens")
