"""The simulator's responses: streamed SSE and plain JSON bodies, usage, first-token wait.

Split out of ``kvreplay.sim.server``: ``Responses`` is a mixin of ``SimServer``
(it uses the server's ``engine``, ``config``, ``_slots``, ``_sleep`` and
``_transfer``); the module docstring of ``kvreplay.sim.server`` gives the wire
shapes (OpenAI chat/completions streams, ``data: [DONE]``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from kvreplay.sim.config import SimConfig
from kvreplay.sim.engine import Generation, SimEngine, Ticket
from kvreplay.sim.faults import FaultSpec

_JSON = "application/json"


def json_response(data: Any, status: int = 200) -> web.Response:
    """``data`` as an ``application/json`` response (orjson) with ``status``."""
    return web.Response(body=orjson.dumps(data), status=status, content_type=_JSON)


def error_response(status: int, message: str, etype: str) -> web.Response:
    """An OpenAI-shaped error body (``{"error": {message, type, param, code}}``) with ``status``."""
    return json_response({"error": {"message": message, "type": etype, "param": None, "code": status}}, status)


class Cut(Exception):
    """Raised inside a handler to drop the connection on purpose."""


class Responses:
    """Response writers of ``SimServer`` (a mixin: the server holds the state)."""

    engine: SimEngine
    config: SimConfig
    _slots: asyncio.Semaphore | None
    # Defined by SimServer (declared here for the type checker).
    _sleep: Callable[[float], Awaitable[None]]
    _transfer: Callable[[float], Awaitable[None]]

    def _usage(self, ticket: Ticket, produced: int) -> dict:
        n = len(ticket.prompt)
        return {
            "prompt_tokens": n,
            "completion_tokens": produced,
            "total_tokens": n + produced,
            "prompt_tokens_details": {"cached_tokens": ticket.cached_tokens},
        }

    async def _wait_first(self, ticket: Ticket, kinds: dict[str, FaultSpec]) -> None:
        stall = kinds.get("stall")
        if stall is not None and stall.get("at", "first") == "first":
            await asyncio.sleep(float(stall.get("s", 1.0)))
        await self._sleep(ticket.prefill_s)
        await self._transfer(ticket.restore_s)
        self.engine.prefilled(ticket)

    async def _stream(
        self,
        request: web.Request,
        chat: bool,
        ticket: Ticket,
        gen: Generation,
        kinds: dict[str, FaultSpec],
        include_usage: bool,
        finish: Any,
    ) -> web.StreamResponse:
        eng = self.engine
        rid = f"{'chatcmpl' if chat else 'cmpl'}-sim-{ticket.seq}"
        created = int(time.time())
        head = {
            "id": rid,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": created,
            "model": eng.model,
        }
        if chat:
            head["system_fingerprint"] = eng.build

        def chunk(piece: str | None, reason: str | None = None, role: bool = False) -> bytes:
            if chat:
                delta: dict[str, Any] = {}
                if role:
                    delta = {"role": "assistant", "content": ""}
                elif piece is not None:
                    delta = {"content": piece}
                choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}
            else:
                choice = {"index": 0, "text": piece or "", "logprobs": None, "finish_reason": reason}
            return b"data: " + orjson.dumps({**head, "choices": [choice]}) + b"\n\n"

        resp = web.StreamResponse(
            status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await resp.prepare(request)
        sent_box = [0]
        try:
            return await self._stream_body(resp, chat, ticket, gen, kinds, include_usage, finish, chunk, head, rid,
                                           sent_box)
        except ConnectionError:
            # The client went away (e.g. its read timeout): account for what was sent and
            # let aiohttp finish quietly (it ignores ConnectionError on a prepared response).
            finish(sent_box[0], "abort", "client_gone")
            return resp

    async def _stream_body(
        self,
        resp: web.StreamResponse,
        chat: bool,
        ticket: Ticket,
        gen: Generation,
        kinds: dict[str, FaultSpec],
        include_usage: bool,
        finish: Any,
        chunk: Any,
        head: dict,
        rid: str,
        sent_box: list[int],
    ) -> web.StreamResponse:
        await self._wait_first(ticket, kinds)
        if chat:
            await resp.write(chunk(None, role=True))
        total = len(gen.pieces)
        after = {k: int(f.get("chunks", 1)) for k, f in kinds.items() if k in ("error-event", "cut", "malformed")}
        stall = kinds.get("stall")
        stall_between = None
        if stall is not None and stall.get("at", "first") == "between":
            stall_between = int(stall.get("chunks", 1))
        sent = 0
        loop = asyncio.get_running_loop()
        itl = self.config.itl_s * self.config.time_scale
        due = loop.time()
        while True:
            # faults that fire once ``sent`` chunks are out (or at the end of the output)
            for kind, k in list(after.items()):
                if sent >= k or sent == total:
                    del after[kind]
                    if kind == "error-event":
                        finish(sent, "error", "error-event")
                        err = {
                            "error": {
                                "message": "simulated engine error mid-stream",
                                "type": "InternalServerError",
                                "param": None,
                                "code": 500,
                            }
                        }
                        await resp.write(b"data: " + orjson.dumps(err) + b"\n\ndata: [DONE]\n\n")
                        await resp.write_eof()
                        return resp
                    if kind == "cut":
                        finish(sent, "abort", "cut")
                        raise Cut
                    if kind == "malformed":
                        await resp.write(b'data: {"id": "' + rid.encode() + b'", "choices": [{"delta": {"content\n\n')
            if sent == total:
                break
            if stall_between is not None and sent == stall_between and sent > 0:
                await asyncio.sleep(float(stall.get("s", 1.0)))  # type: ignore[union-attr]
                due = loop.time()
            if sent:
                # Sleep to an absolute due time, not a relative itl_s: event-loop timers
                # have ~1 ms resolution, so short scaled gaps would otherwise round to 0
                # and collapse decode; this way the average ITL stays itl_s x time_scale.
                due += itl
                wait = due - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
            await resp.write(chunk(gen.pieces[sent]))
            sent += 1
            sent_box[0] = sent
        finish(total, gen.finish_reason, "ok")
        tail = chunk(None, gen.finish_reason)
        if include_usage:
            tail += b"data: " + orjson.dumps({**head, "choices": [], "usage": self._usage(ticket, total)}) + b"\n\n"
        await resp.write(tail + b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _plain(
        self,
        request: web.Request,
        chat: bool,
        ticket: Ticket,
        gen: Generation,
        kinds: dict[str, FaultSpec],
        finish: Any,
    ) -> web.StreamResponse:
        eng = self.engine
        await self._wait_first(ticket, kinds)
        total = len(gen.pieces)
        await self._sleep(self.config.itl_s * max(0, total - 1))
        stall = kinds.get("stall")
        if stall is not None and stall.get("at", "first") == "between":
            await asyncio.sleep(float(stall.get("s", 1.0)))
        if "error-event" in kinds:
            finish(0, "error", "error-event")
            return error_response(500, "simulated engine error", "InternalServerError")
        if "cut" in kinds:
            finish(0, "abort", "cut")
            raise Cut
        finish(total, gen.finish_reason, "ok")
        if "malformed" in kinds:
            return web.Response(body=b'{"id": "x", "choices": [', status=200, content_type=_JSON)
        rid = f"{'chatcmpl' if chat else 'cmpl'}-sim-{ticket.seq}"
        if chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": gen.text},
                "logprobs": None,
                "finish_reason": gen.finish_reason,
            }
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": gen.text, "logprobs": None, "finish_reason": gen.finish_reason}
            obj = "text_completion"
        return json_response(
            {
                "id": rid,
                "object": obj,
                "created": int(time.time()),
                "model": eng.model,
                "choices": [choice],
                "usage": self._usage(ticket, total),
            }
        )
