"""Shared material for the tiny models: word lists, training corpus, chat template, shape options.

Standard library only: the model makers import it from interpreters that do not
have kvreplay installed (they run this directory's files as scripts).
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Iterator
from typing import Any

__all__ = ["CHATML", "COMMON_WORDS", "SPECIAL_TOKENS", "add_shape_arguments", "corpus_lines", "shape_of",
           "syllable_words"]

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
"""ChatML, the template both tiny models carry (Jinja, as HF and llama.cpp read it)."""

SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>")
"""Token ids 0..4 in both vocabularies."""

# Common English words, so that ordinary prompt text tokenizes to roughly one
# token per word, plus words of the fields kvreplay's workloads come from.
COMMON_WORDS = (
    "the", "of", "and", "to", "in", "is", "you", "that", "it", "he", "was", "for", "on", "are", "as", "with",
    "his", "they", "at", "be", "this", "have", "from", "or", "one", "had", "by", "word", "but", "not", "what",
    "all", "were", "we", "when", "your", "can", "said", "there", "use", "an", "each", "which", "she", "do", "how",
    "their", "if", "will", "up", "other", "about", "out", "many", "then", "them", "these", "so", "some", "her",
    "would", "make", "like", "him", "into", "time", "has", "look", "two", "more", "write", "go", "see", "number",
    "no", "way", "could", "people", "my", "than", "first", "water", "been", "call", "who", "oil", "its", "now",
    "find", "long", "down", "day", "did", "get", "come", "made", "may", "part", "user", "system", "assistant",
    "question", "answer", "please", "explain", "request", "model", "prompt", "cache", "token", "server", "replay",
    "load", "test", "data", "result", "value", "error", "code", "file", "line", "function", "class", "return",
    "list", "string", "true", "false", "null", "hello", "world", "agent", "tool", "call", "json", "text", "input",
    "output", "summary", "report", "document", "page", "section", "context", "history", "message", "thy", "thou",
    "thee", "doth", "hath", "art", "love", "beauty", "time", "eyes", "sweet", "fair", "heart", "make", "still",
    "where", "repository", "map", "project", "first", "lines", "src", "txt", "part", "verses",
)

_CONSONANTS = "bcdfghjklmnprstvwz"
_VOWELS = "aeiou"


def syllable_words(n: int, seed: int) -> list[str]:
    """Generate ``n`` distinct pronounceable words (two or three syllables).

    Args:
        n: How many words.
        seed: Seed of the private ``random.Random``; the same seed gives the same list.

    Returns:
        Words not in ``COMMON_WORDS``, in generation order.
    """
    rng = random.Random(seed)
    seen = set(COMMON_WORDS)
    out: list[str] = []
    while len(out) < n:
        w = "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(rng.randint(2, 3)))
        if w not in seen:
            seen.add(w)
            out.append(w)
    return out


def corpus_lines(n_lines: int, seed: int) -> Iterator[str]:
    """Yield a deterministic training corpus for the BPE tokenizer.

    Args:
        n_lines: Number of lines (each 5 to 30 words and one punctuation mark).
        seed: Seed; the same seed gives the same lines.

    Yields:
        One line of text at a time.
    """
    rng = random.Random(seed)
    words = list(COMMON_WORDS) * 20 + syllable_words(3000, seed)
    punct = [".", ",", "?", "!", ":", ";", "\n"]
    for _ in range(n_lines):
        yield " ".join(rng.choice(words) for _ in range(rng.randint(5, 30))) + rng.choice(punct)


_SHAPE = (("embd", 256), ("layers", 4), ("heads", 4), ("kv_heads", 4), ("ff", 1024), ("ctx", 4096))
"""Model shape options shared by both makers: hidden size, layers, heads, KV heads, FFN size, context (tokens)."""


def add_shape_arguments(ap: argparse.ArgumentParser) -> None:
    """``OUT`` plus ``--seed`` and the shape options of both model makers."""
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    for name, default in _SHAPE:
        ap.add_argument("--" + name.replace("_", "-"), type=int, default=default)


def shape_of(a: argparse.Namespace) -> dict[str, Any]:
    """The keyword arguments ``seed`` and the shape options from parsed arguments."""
    return {"seed": a.seed, **{name: getattr(a, name) for name, _ in _SHAPE}}
