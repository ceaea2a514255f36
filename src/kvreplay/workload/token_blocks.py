"""Block-trace prompts in a real tokenizer's tokens (``kvreplay import mooncake|bailian --tokenizer``).

Without a tokenizer the importers write each hash block as pseudo-words that are one
*simulator* token each (``workload.importers.block_text``); a real BPE vocabulary splits
them into several tokens, so a trace's 512-token blocks grow and its prefix structure
lands on the wrong block boundaries. With one, :class:`TokenBlocks` writes each block as
exactly ``block_tokens`` tokens *of that tokenizer*:

- **Vocabulary.** Words of the bundled MT-Bench text (``synth_corpus``: lower-case
  letters, 2-10 of them, sorted) whose space-led form (``" word"``) is exactly one token of
  the tokenizer, the first :data:`VOCAB_WORDS` found; checked in runs of 64 (a run of
  64 words must be 64 tokens: a space-led word does not merge with its neighbour; a run
  that is not is halved until its words are sorted out).
- **Block text.** Block id ``h``: words drawn by ``random.Random("kvreplay-block:<h>")``
  from that vocabulary, one token each; a shorter block is a prefix of the full one.
- **Alignment.** What every prompt starts with (a BOS; for chat the template's opening,
  ``head``, measured as the common start of two rendered prompts) counts in the first
  block, which gets ``block_tokens - head`` words, so the server's block ``k`` holds
  exactly the trace's block ``k``. For chat the template's closing (``tail``: end of
  message, generation prompt) is taken from the last block, so the whole prompt is
  ``input_length`` tokens.
- **Check.** Every prompt is measured through the tokenizer; one that is not exactly
  ``input_length`` tokens is an error naming its trace line.
"""

from __future__ import annotations

import random
import re
from typing import Any

from kvreplay.errors import ConfigError
from kvreplay.workload.synth_corpus import corpus
from kvreplay.workload.tokenizer_client import Tokenizer, common_prefix_len

__all__ = ["VOCAB_WORDS", "TokenBlocks"]

VOCAB_WORDS = 256
"""Words in a tokenizer's block vocabulary (at most; at least 64 are needed)."""

_RUN = 64
_CANDIDATE = re.compile(r"[a-z]{2,10}")
_PROBES = ("Alpha", "Bravo")


class TokenBlocks:
    """Block texts of exactly ``block_tokens`` tokens of ``tok`` (module docstring).

    Args:
        tok: A connected tokenizer.
        block_tokens: Tokens per hash block.
        chat: Bodies are chat (one user message) rather than completions.

    Raises:
        ConfigError: fewer than 64 one-token words found, or a chat template the
            tokenizer cannot render.
    """

    def __init__(self, tok: Tokenizer, block_tokens: int, *, chat: bool) -> None:
        self.tok = tok
        self.block_tokens = block_tokens
        self.chat = chat
        self.vocab = self._vocabulary()
        a, b = (self._ids(p) for p in _PROBES)
        self.head = common_prefix_len(a, b)
        one = self._ids(" " + self.vocab[0])
        self.tail = len(one) - self.head - 1  # after the content: 0 for completions
        if self.head >= block_tokens:
            raise ConfigError(f"--block-tokens {block_tokens}: every prompt of this tokenizer starts with "
                              f"{self.head} tokens; a block must be longer")

    def _ids(self, text: str) -> list[int]:
        if self.chat:
            return self.tok.chat_ids([{"role": "user", "content": text}])
        return self.tok.prompt_ids(text)

    def _vocabulary(self) -> list[str]:
        words = sorted({w for w in _CANDIDATE.findall(corpus().text)})
        vocab: list[str] = []
        for i in range(0, len(words), _RUN):
            vocab.extend(self._one_token_words(words[i : i + _RUN]))
            if len(vocab) >= VOCAB_WORDS:
                break
        vocab = vocab[:VOCAB_WORDS]
        if len(vocab) < _RUN:
            raise ConfigError(f"--tokenizer: only {len(vocab)} words of the bundled text are one token with a "
                              "leading space; block texts need at least 64")
        return vocab

    def _one_token_words(self, run: list[str]) -> list[str]:
        """The words of ``run`` that are one token with a leading space (a run that is, whole; else its halves)."""
        if len(self.tok.encode("".join(" " + w for w in run))) == len(run):
            return run
        if len(run) == 1:
            return []
        half = len(run) // 2
        return self._one_token_words(run[:half]) + self._one_token_words(run[half:])

    def block(self, hash_id: int, words: int) -> str:
        """Block ``hash_id``'s first ``words`` words (``words`` tokens of the tokenizer)."""
        rng = random.Random(f"kvreplay-block:{hash_id}")
        n = len(self.vocab)
        return "".join(" " + self.vocab[rng.randrange(n)] for _ in range(words))

    def prompt(self, hash_ids: tuple[int, ...], input_length: int) -> str:
        """The prompt text of a trace row: its blocks, the first shortened by ``head``, the last cut."""
        b = self.block_tokens
        parts: list[str] = []
        for k, h in enumerate(hash_ids):
            start = k * b
            end = min(input_length, start + b)
            words = end - start - (self.head if k == 0 else 0)
            if k == len(hash_ids) - 1:
                words -= self.tail
            parts.append(self.block(h, max(words, 1)))
        return "".join(parts)

    def check(self, text: str, input_length: int, where: str) -> None:
        """Refuse a prompt that is not exactly ``input_length`` tokens.

        Raises:
            ConfigError: naming ``where`` (the trace line) and both counts.
        """
        got = len(self._ids(text))
        if got != input_length:
            raise ConfigError(f"{where}: the prompt is {got} tokens in this tokenizer, not input_length "
                              f"{input_length} (a last block shorter than the chat template's closing, or a "
                              "tokenizer that merges space-led words)")

    def describe(self) -> dict[str, Any]:
        """The vocabulary size and the measured head and tail (tokens)."""
        return {"vocabulary": len(self.vocab), "head_tokens": self.head, "tail_tokens": self.tail}
