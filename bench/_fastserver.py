"""A minimal, fast OpenAI-style streaming server for client-overhead benchmarks.

It answers every ``POST`` on one keep-alive HTTP/1.1 connection with a
``text/event-stream`` body in chunked transfer encoding: a role chunk, ``tokens``
one-token content chunks (the last with ``finish_reason``), a usage-only chunk
(``choices: []``, ``prompt_tokens_details.cached_tokens``) and ``data: [DONE]``.
Zero delay: every event is precomputed bytes written with its own
``transport.write`` (one send per event, as token-streaming servers do), with
one loop yield between events so concurrent streams interleave; the head, the role
event and the first token go in one write from the request's own read callback
(issue 43 item 2: the server adds nothing to the C1 TTFT floor but its parse). The request body
is read in full (Content-Length) and otherwise ignored.

Run as a process of its own, pinned to one core::

    python bench/_fastserver.py --cpu 1 --tokens 128     # prints "PORT <n>" on stdout

Loopback only; port 0 (the kernel picks); stops on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys

import orjson


def _frame(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def _event(obj: object) -> bytes:
    return _frame(b"data: " + orjson.dumps(obj) + b"\n\n")


def build_events(tokens: int, prompt_tokens: int) -> list[bytes]:
    """The chunked-encoded SSE frames of one response (headers excluded)."""
    base = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "bench",
    }
    out = [
        _event(
            {
                **base,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": ""},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                ],
            }
        )
    ]
    for i in range(tokens):
        fr = "length" if i == tokens - 1 else None
        out.append(
            _event(
                {
                    **base,
                    "choices": [
                        {
                            "index": 0,
                            "delta": {"content": f" tok{i % 100}"},
                            "logprobs": None,
                            "finish_reason": fr,
                        }
                    ],
                }
            )
        )
    out.append(
        _event(
            {
                **base,
                "choices": [],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "total_tokens": prompt_tokens + tokens,
                    "completion_tokens": tokens,
                    "prompt_tokens_details": {"cached_tokens": 0},
                },
            }
        )
    )
    out.append(_frame(b"data: [DONE]\n\n"))
    out.append(b"0\r\n\r\n")
    return out


HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n"
)


class _Conn(asyncio.Protocol):
    def __init__(self, events: list[bytes], yield_every: int) -> None:
        self.events = events
        self.yield_every = yield_every
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None
        self.busy = False
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if not self.busy:
            self._next()

    def _next(self) -> None:
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            return
        head = bytes(self.buf[:end]).lower()
        i = head.find(b"content-length:")
        n = (
            int(head[i + 15 : head.find(b"\r\n", i) if head.find(b"\r\n", i) > 0 else None])
            if i >= 0
            else 0
        )
        if len(self.buf) < end + 4 + n:
            return
        del self.buf[: end + 4 + n]
        t = self.transport
        assert t is not None
        # The answer's head, role event and first token leave from this callback in one
        # write: the server adds no loop iteration and no second segment to the C1 TTFT floor.
        if self.yield_every < 0:  # burst: the whole response in one write (cheapest server)
            t.write(self.events[0])
            if self.buf:
                self._next()
            return
        t.write(HEAD + self.events[0] + self.events[1])
        if len(self.events) == 2:
            if self.buf:
                self._next()
            return
        self.busy = True
        asyncio.get_running_loop().create_task(self._respond())

    async def _respond(self) -> None:
        """The events after the first token, one write each, yielding every ``yield_every``."""
        t = self.transport
        assert t is not None
        k = self.yield_every
        for i, ev in enumerate(self.events):
            if i < 2:
                continue  # written with the head
            if self.closed:
                return
            t.write(ev)
            if k and i % k == k - 1:
                await asyncio.sleep(0)
        self.busy = False
        if self.buf:
            self._next()


async def serve(tokens: int, prompt_tokens: int, yield_every: int) -> None:
    """Listen on 127.0.0.1:0, print ``PORT n``, serve until a signal."""
    events = build_events(tokens, prompt_tokens)
    if yield_every < 0:
        events = [HEAD + b"".join(events)]
    loop = asyncio.get_running_loop()
    srv = await loop.create_server(lambda: _Conn(events, yield_every), "127.0.0.1", 0, backlog=1024)
    port = srv.sockets[0].getsockname()[1]
    print(f"PORT {port}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    srv.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cpu", type=int, default=None, help="pin to this core (os.sched_setaffinity)")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--prompt-tokens", type=int, default=1024)
    ap.add_argument(
        "--yield-every",
        type=int,
        default=1,
        help="yield to the loop every N events (0: never; -1: burst, one write per response)",
    )
    a = ap.parse_args()
    if a.cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {a.cpu})
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover
        pass
    asyncio.run(serve(a.tokens, a.prompt_tokens, a.yield_every))
    sys.exit(0)


if __name__ == "__main__":
    main()
