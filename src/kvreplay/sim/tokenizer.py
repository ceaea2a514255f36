r"""The simulator's tokenizer approximation and chat template.

Real servers count tokens with the model's BPE vocabulary. The simulator has no
model, so it uses a deterministic, documented approximation that lands near a
GPT-style BPE count for English and code (about 1.3 tokens per word), is stable
across Python versions and platforms, and keeps message boundaries on token
boundaries so that prefix caching behaves as it does on a real server.

**Pieces.** Text is cut by one regular expression, in this order of preference:

1. an optional single leading space plus a run of letters (Unicode ``\w``
   without digits and ``_``); runs longer than 6 letters are cut into chunks
   of at most 6 (only the first chunk keeps the space);
2. an optional single leading space plus a run of digits, cut into chunks of
   at most 3 digits;
3. an optional single leading space plus a run of other visible characters
   (punctuation, symbols), or a run of ``_``, cut into chunks of at most 3;
4. any other run of whitespace, as one piece (``"  x"`` is ``" "``-run ``"  "``
   then ``"x"``; ``" x"`` is the single piece ``" x"``).

Each piece is one token. Its id is ``SPECIAL_IDS_END + blake2b(piece, 4 bytes)
% (2**31 - SPECIAL_IDS_END)``: the same piece always has the same id.

**Chat template** (ChatML-like; special markers are one token each)::

    <|im_start|>{role}\n{content}<|im_end|>\n      one per message
    <|im_start|>assistant\n                         the generation prompt

Each segment is tokenized on its own and the results are concatenated, so a
message's tokens never depend on its neighbours. ``tools`` (when present) are
rendered as a leading ``tools`` message holding their canonical JSON. A content
list keeps its ``text`` parts joined by ``\n``; other parts (images, audio)
count as one ``<|media|>`` token each.

**Boundaries** kept per prompt (token offsets, used as cache checkpoints):
``system_end`` (after the leading system/developer messages and tools; 0 when
there are none), ``messages_end`` (after the last message) and ``prompt_end``
(after the generation prompt = the full prompt length). A completions request
(``prompt``) has ``system_end = 0`` and ``messages_end = prompt_end``.

Example: ``pieces("Hello, world!") == ["Hello", ",", " world", "!"]``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

import orjson

__all__ = [
    "IM_END",
    "IM_START",
    "MEDIA",
    "SPECIAL_IDS_END",
    "Prompt",
    "count_tokens",
    "detokenize",
    "pieces",
    "render_body",
    "render_messages",
    "token_id",
    "tokenize_text",
]

IM_START = 1
"""Token id of ``<|im_start|>``."""
IM_END = 2
"""Token id of ``<|im_end|>``."""
MEDIA = 3
"""Token id standing for one non-text content part."""
SPECIAL_IDS_END = 1000
"""Ids below this are reserved for special tokens."""

_LETTER_CHUNK = 6
_DIGIT_CHUNK = 3
_OTHER_CHUNK = 3
_PIECE_RE = re.compile(r" ?[^\W\d_]+| ?\d+| ?[^\s\w]+| ?_+|\s+")
_CONTENT_CACHE = 8192


def pieces(text: str) -> list[str]:
    """Cut text into token pieces (see the module docstring).

    Args:
        text: Any Unicode text.

    Returns:
        The pieces in order; ``"".join(pieces(text)) == text``.
    """
    out: list[str] = []
    for m in _PIECE_RE.finditer(text):
        p = m.group()
        if p.isspace():
            out.append(p)
            continue
        lead = " " if p[0] == " " else ""
        body = p[1:] if lead else p
        if body[0].isdigit():
            step = _DIGIT_CHUNK
        elif body[0].isalpha():
            step = _LETTER_CHUNK
        else:
            step = _OTHER_CHUNK
        if len(body) <= step:
            out.append(p)
            continue
        out.append(lead + body[:step])
        out.extend(body[i : i + step] for i in range(step, len(body), step))
    return out


_SPECIAL_TEXT = {IM_START: "<|im_start|>", IM_END: "<|im_end|>", MEDIA: "<|media|>"}
_PIECES: dict[int, str] = {}
_MAX_PIECES = 1 << 20


@lru_cache(maxsize=65536)
def token_id(piece: str) -> int:
    """The stable id of one piece (never below ``SPECIAL_IDS_END``); remembered for :func:`detokenize`."""
    h = int.from_bytes(hashlib.blake2b(piece.encode("utf-8"), digest_size=4).digest(), "big")
    tid = SPECIAL_IDS_END + h % (2**31 - SPECIAL_IDS_END)
    if len(_PIECES) < _MAX_PIECES:
        _PIECES.setdefault(tid, piece)
    return tid


def detokenize(ids: Sequence[int]) -> str:
    """The text of token ids this process has produced (ids are hashes: there is no vocabulary to invert).

    The pieces of every text tokenized in this process (up to about a million distinct
    pieces) are remembered, so the ids a ``/tokenize`` answered can be turned back into
    text; special ids give their marker (``<|im_start|>``...).

    Args:
        ids: Token ids.

    Returns:
        The pieces joined; ``detokenize(tokenize_text(t)) == t``.

    Raises:
        ValueError: an id this process never produced (named with its index).
    """
    out: list[str] = []
    for i, tid in enumerate(ids):
        text = _SPECIAL_TEXT.get(tid) if tid < SPECIAL_IDS_END else _PIECES.get(tid)
        if text is None:
            raise ValueError(f"tokens[{i}] = {tid} is not an id this simulator has produced")
        out.append(text)
    return "".join(out)


@lru_cache(maxsize=_CONTENT_CACHE)
def tokenize_text(text: str) -> tuple[int, ...]:
    """Token ids of a text (memoized: repeated system blocks cost nothing).

    Args:
        text: Any Unicode text.

    Returns:
        One id per piece.
    """
    return tuple(token_id(p) for p in pieces(text))


def count_tokens(text: str) -> int:
    """Number of tokens of a text."""
    return len(tokenize_text(text))


@dataclass(frozen=True, slots=True)
class Prompt:
    """A rendered prompt: tokens plus checkpoint offsets.

    Attributes:
        tokens: Token ids of the full prompt (what prefill processes).
        system_end: Offset after the leading system block (tokens; 0 if none).
        messages_end: Offset after the last rendered message (tokens).
    """

    tokens: tuple[int, ...]
    system_end: int
    messages_end: int

    @property
    def prompt_end(self) -> int:
        """Full prompt length (tokens)."""
        return len(self.tokens)

    def __len__(self) -> int:
        return len(self.tokens)


def _content_text(content: object) -> tuple[str, int]:
    """Text of a message content and its count of non-text parts."""
    if content is None:
        return "", 0
    if isinstance(content, str):
        return content, 0
    if isinstance(content, Sequence):
        texts: list[str] = []
        media = 0
        for part in content:
            if isinstance(part, Mapping) and part.get("type") == "text":
                texts.append(str(part.get("text", "")))
            elif isinstance(part, str):
                texts.append(part)
            else:
                media += 1
        return "\n".join(texts), media
    return str(content), 0


_NL = tokenize_text("\n")


def _message_tokens(role: str, content: object, extra: str = "") -> tuple[int, ...]:
    text, media = _content_text(content)
    if extra:
        text = f"{text}\n{extra}" if text else extra
    return (
        (IM_START,)
        + tokenize_text(role)
        + _NL
        + (MEDIA,) * media
        + tokenize_text(text)
        + (IM_END,)
        + _NL
    )


_GEN_PROMPT = (IM_START, *tokenize_text("assistant"), *_NL)


def render_messages(
    messages: Sequence[Mapping[str, object]], *, tools: object = None, add_generation_prompt: bool = True
) -> Prompt:
    r"""Render chat messages with the template of the module docstring.

    Args:
        messages: OpenAI-style messages (``role``, ``content``; assistant
            ``tool_calls`` are rendered as their canonical JSON after the content).
        tools: The request's ``tools`` list, or None.
        add_generation_prompt: Append ``<|im_start|>assistant\n``.

    Returns:
        The rendered prompt with its boundaries.

    Raises:
        ValueError: ``messages`` is not a list of objects with a string ``role``.
    """
    toks: list[int] = []
    system_end = 0
    in_system = True
    if tools:
        toks.extend(_message_tokens("tools", orjson.dumps(tools, option=orjson.OPT_SORT_KEYS).decode()))
        system_end = len(toks)
    for i, msg in enumerate(messages):
        role = msg.get("role") if isinstance(msg, Mapping) else None
        if not isinstance(role, str):
            raise ValueError(f"messages[{i}] is not an object with a string 'role'")
        extra = ""
        if msg.get("tool_calls"):
            extra = orjson.dumps(msg["tool_calls"], option=orjson.OPT_SORT_KEYS).decode()
        toks.extend(_message_tokens(role, msg.get("content"), extra))
        if in_system and role in ("system", "developer"):
            system_end = len(toks)
        else:
            in_system = False
    messages_end = len(toks)
    if add_generation_prompt:
        toks.extend(_GEN_PROMPT)
    return Prompt(tokens=tuple(toks), system_end=system_end, messages_end=messages_end)


def render_body(body: Mapping[str, object]) -> Prompt:
    """Render a chat or completions request body.

    Args:
        body: A decoded request body with ``messages`` (chat) or ``prompt``
            (completions: a string, a list of token ids, or a list of strings,
            which are joined).

    Returns:
        The rendered prompt.

    Raises:
        ValueError: The body has neither ``messages`` nor a usable ``prompt``.
    """
    if "messages" in body:
        msgs = body["messages"]
        if not isinstance(msgs, list):
            raise ValueError("'messages' must be a list")
        return render_messages(msgs, tools=body.get("tools"))
    if "prompt" in body:
        prompt = body["prompt"]
        if isinstance(prompt, str):
            toks = tokenize_text(prompt)
        elif isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            toks = tuple(prompt)
        elif isinstance(prompt, list) and all(isinstance(t, str) for t in prompt):
            toks = tokenize_text("".join(prompt))
        else:
            raise ValueError("'prompt' must be a string, a list of strings or a list of token ids")
        return Prompt(tokens=toks, system_end=0, messages_end=len(toks))
    raise ValueError("body has neither 'messages' nor 'prompt'")
