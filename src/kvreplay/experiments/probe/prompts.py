"""Probe prompts sized in tokens, and the target's token counter.

A probe prompt is a chat body of two messages::

    system: "<tag> <nonce>. " + filler words     (the prefix a cache may keep)
    user:   "<fresh tail>"                         (new on every call)

The nonce at the very start of a cold leg's system block makes its prefix new to
the server, so nothing can be reused; a warm leg resends the exact system text of
an earlier call with a fresh tail. Filler words come from a fixed list of short,
common English words (one token each on GPT-style BPE vocabularies and on the
simulator's tokenizer), drawn by a seeded generator, so the same seed gives the
same bytes.

Sizing: the target's token count of a body is ``c0 + c1 * words``, nearly
exactly. ``TokenCounter`` measures it on the target (``/tokenize`` where the
server has one, else ``usage.prompt_tokens`` of a one-token calibration request),
two calibration points give ``c0`` and ``c1``, and each built prompt is checked
and corrected (at most three rounds) where ``/tokenize`` exists. Every request
made for calibration is kept in ``TokenCounter.calls`` (unplanned requests).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from kvreplay.clock import now_ns
from kvreplay.runner.http import send_body

__all__ = ["FILLER_WORDS", "ProbeBody", "TokenCounter", "chat_body", "filler", "tail_text"]

FILLER_WORDS = [
    "the", "of", "and", "to", "in", "is", "it", "that", "for", "on", "was", "with", "as", "at", "by", "be", "this",
    "from", "or", "have", "an", "not", "are", "but", "had", "his", "they", "you", "were", "her", "all", "she", "there",
    "one", "can", "their", "we", "him", "been", "has", "when", "who", "will", "more", "no", "if", "out", "so", "said",
    "what", "up", "its", "about", "into", "than", "them", "only", "other", "new", "some", "could", "time", "these",
    "two", "may", "then", "do", "first", "any", "my", "now", "such", "like", "our", "over", "man", "me", "even",
    "most", "made", "after", "also", "did", "many", "before", "must", "years", "back", "much", "where", "your", "way",
    "well", "down", "should", "very", "just", "make", "know", "see", "long", "get", "here", "both", "under", "last",
    "never", "us", "each", "take", "life", "great", "might", "old", "same", "come", "work", "part", "while",
]
"""Short words: each is one token with its leading space on BPE vocabularies."""


def filler(seed: str, words: int) -> str:
    """``words`` filler words drawn by a generator seeded with ``seed``.

    Args:
        seed: Any string (same seed, same text).
        words: Number of words (>= 0).

    Returns:
        The words joined by single spaces (no leading or trailing space).
    """
    rng = random.Random(hashlib.sha256(seed.encode()).digest())
    return " ".join(rng.choices(FILLER_WORDS, k=max(0, words)))


def tail_text(seed: str, words: int = 12) -> str:
    """A fresh user turn: a question followed by seeded filler (``words`` words)."""
    return "Reply with one word. " + filler("tail:" + seed, words)


def chat_body(model: str, system: str, user: str, *, max_tokens: int = 1) -> bytes:
    """The exact bytes of one probe request (streamed, usage included, greedy)."""
    body = {
        "model": model,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    return orjson.dumps(body)


@dataclass(frozen=True, slots=True)
class ProbeBody:
    """A built probe request.

    Attributes:
        raw: The body bytes.
        system: The system text (reused by warm legs).
        words: Filler words in the system block.
        target_tokens: Requested prompt size (tokens).
        counted_tokens: The target's count before sending (tokens); None when
            the target has no ``/tokenize``.
    """

    raw: bytes
    system: str
    words: int
    target_tokens: int
    counted_tokens: int | None


@dataclass
class TokenCounter:
    """Counts prompt tokens on the target and sizes prompts from the count.

    Args:
        session: aiohttp session.
        base_url: Target root URL.
        model: Model id put in bodies.
        headers: Request headers (Content-Type, Authorization).

    Attributes:
        mode: ``tokenize-chat`` (``/tokenize`` with messages), ``tokenize-text``
            (``/tokenize`` with text, template overhead from one calibration
            request), or ``usage`` (calibration requests only).
        c0: Tokens of a body with no filler (tokens).
        c1: Tokens per filler word (tokens).
        overhead_tokens: Chat-template tokens around the messages (``tokenize-text`` mode).
        calls: Every calibration request: endpoint, body SHA-256, status, tokens.
    """

    session: aiohttp.ClientSession
    base_url: str
    model: str
    headers: dict[str, str]
    mode: str | None = None
    c0: float = 0.0
    c1: float = 1.0
    overhead_tokens: int = 0
    calls: list[dict[str, Any]] = field(default_factory=list)

    def _note(
        self, endpoint: str, raw: bytes, status: Any, tokens: int | None, purpose: str
    ) -> None:
        self.calls.append(
            {
                "endpoint": endpoint,
                "purpose": purpose,
                "body_sha256": hashlib.sha256(raw).hexdigest(),
                "body_bytes": len(raw),
                "status": status,
                "tokens": tokens,
                "t_ns": now_ns(),
            }
        )

    async def _tokenize(self, payload: dict[str, Any], purpose: str) -> int | None:
        raw = orjson.dumps(payload)
        for attempt in (1, 2):
            try:
                async with self.session.post(
                    self.base_url + "/tokenize", data=raw, headers=self.headers
                ) as resp:
                    status = resp.status
                    data = await resp.read()
                break
            except (aiohttp.ClientOSError, aiohttp.ServerDisconnectedError) as exc:
                # A pooled keep-alive connection the server had closed (llama-server
                # closes it after a stream): once more on a fresh one (field case B11).
                if attempt == 2:
                    self._note("/tokenize", raw, f"error: {type(exc).__name__}", None, purpose)
                    return None
            except aiohttp.ClientError as exc:
                self._note("/tokenize", raw, f"error: {type(exc).__name__}", None, purpose)
                return None
        count = None
        if status == 200:
            try:
                obj = orjson.loads(data)
            except orjson.JSONDecodeError:
                obj = None
            if isinstance(obj, dict):
                if isinstance(obj.get("count"), int):
                    count = obj["count"]
                elif isinstance(obj.get("tokens"), list):
                    count = len(obj["tokens"])
        if count == 0:
            # No non-empty prompt is 0 tokens: the server ignored the payload's shape
            # (llama-server answers {"messages": ...} with {"tokens": []}), so this
            # way of counting is unsupported there and the next one is tried.
            count = None
        self._note("/tokenize", raw, status, count, purpose)
        return count

    async def _usage(self, raw: bytes, purpose: str) -> int | None:
        out = await send_body(
            self.session,
            self.base_url + "/v1/chat/completions",
            raw,
            headers=self.headers,
            head_chars=0,
        )
        tokens = out.stream.prompt_tokens if out.status == "ok" else None
        self._note("/v1/chat/completions", raw, out.http_status or out.status, tokens, purpose)
        return tokens

    async def count_body(self, raw: bytes, purpose: str = "check") -> int | None:
        """The target's prompt tokens for a body, by ``/tokenize`` (None in ``usage`` mode)."""
        body = orjson.loads(raw)
        if self.mode == "tokenize-chat":
            return await self._tokenize(
                {"model": self.model, "messages": body["messages"], "add_generation_prompt": True},
                purpose,
            )
        if self.mode == "tokenize-text":
            total = 0
            for m in body["messages"]:
                n = await self._tokenize(
                    {
                        "model": self.model,
                        "prompt": m["content"],
                        "content": m["content"],
                        "add_special_tokens": False,
                    },
                    purpose,
                )
                if n is None:
                    return None
                total += n
            return total + self.overhead_tokens
        return None

    async def calibrate(self, system_head: str = "probe calibration.") -> None:
        """Measure ``c0`` and ``c1`` with two bodies (0 and 2000 filler words)."""
        user = tail_text("calibration")
        bodies = [
            chat_body(self.model, (system_head + " " + filler("cal", w)).strip(), user)
            for w in (0, 2000)
        ]
        first = orjson.loads(bodies[0])["messages"]
        n = await self._tokenize(
            {"model": self.model, "messages": first, "add_generation_prompt": True},
            "calibrate: /tokenize with messages",
        )
        if n is not None:
            self.mode = "tokenize-chat"
        else:
            text_n = await self._tokenize(
                {
                    "model": self.model,
                    "prompt": first[0]["content"],
                    "content": first[0]["content"],
                    "add_special_tokens": False,
                },
                "calibrate: /tokenize with text",
            )
            if text_n is not None:
                self.mode = "tokenize-text"
                user_n = await self._tokenize(
                    {
                        "model": self.model,
                        "prompt": user,
                        "content": user,
                        "add_special_tokens": False,
                    },
                    "calibrate: /tokenize with text",
                )
                whole = await self._usage(
                    bodies[0], "calibrate: template overhead from usage.prompt_tokens"
                )
                if user_n is None or whole is None:
                    self.mode = "usage"
                else:
                    self.overhead_tokens = whole - text_n - user_n
            else:
                self.mode = "usage"
        counts = []
        for raw in bodies:
            if self.mode == "usage":
                counts.append(await self._usage(raw, "calibrate: usage.prompt_tokens"))
            else:
                counts.append(await self.count_body(raw, "calibrate: size of a body"))
        if counts[0] is None or counts[1] is None or counts[1] <= counts[0]:
            raise RuntimeError(
                f"cannot count tokens on the target (mode {self.mode}, counts {counts})"
            )
        self.c0 = float(counts[0])
        self.c1 = (counts[1] - counts[0]) / 2000.0

    async def build(
        self, target_tokens: int, system_head: str, seed: str, tail_seed: str
    ) -> ProbeBody:
        """A body of about ``target_tokens`` prompt tokens (exact where ``/tokenize`` exists).

        Args:
            target_tokens: Wanted prompt size (tokens).
            system_head: Text that starts the system block (e.g. the nonce).
            seed: Seed of the filler (same seed, same system bytes).
            tail_seed: Seed of the user turn.
        """
        user = tail_text(tail_seed)
        words = max(0, round((target_tokens - self.c0) / self.c1))
        counted = None
        for _ in range(3):
            system = (system_head + " " + filler(seed, words)).strip()
            raw = chat_body(self.model, system, user)
            if self.mode == "usage":
                return ProbeBody(raw, system, words, target_tokens, None)
            counted = await self.count_body(raw, f"size check for {target_tokens} tokens")
            if counted is None or counted == target_tokens:
                break
            step = round((target_tokens - counted) / self.c1)
            if step == 0:
                break
            words = max(0, words + step)
        else:
            system = (system_head + " " + filler(seed, words)).strip()
            raw = chat_body(self.model, system, user)
            counted = await self.count_body(raw, f"size check for {target_tokens} tokens")
        return ProbeBody(raw, system, words, target_tokens, counted)

    def observe(self, body: ProbeBody, prompt_tokens: int | None) -> None:
        """Learn from a sent body's ``usage.prompt_tokens`` (``usage`` mode only).

        Without ``/tokenize`` nothing checks a body before it is sent, and the
        system head (nonce, tag) differs from the calibration body's by a few
        tokens; the intercept ``c0`` is re-estimated from the last body sent.
        """
        if self.mode == "usage" and prompt_tokens is not None:
            self.c0 = prompt_tokens - self.c1 * body.words

    def body_with_system(self, system: str, tail_seed: str) -> bytes:
        """A body that reuses ``system`` exactly with a fresh tail (a warm leg)."""
        return chat_body(self.model, system, tail_text(tail_seed))
