"""What ``kvreplay synth`` draws from: the bundled text, lengths and their distributions.

**Text.** The MT-Bench prompts bundled as the demo workload (``kvreplay/data/workloads/
mtbench-52``, Apache-2.0): every message content in file order, each distinct text once,
joined by a blank line. A body's text starts at a word of that corpus (the corpus is read
as a ring, so a long prompt wraps around to its start) and is cut on the tokenizer's token
boundaries by ``kvreplay.workload.synth``. No download, no repeated single token.

**Lengths.** ``MEAN[:STDDEV]`` (tokens): the mean alone is a constant; with a standard
deviation, a normal draw rounded to an integer and clamped to the smallest legal value.
A histogram file (``--isl-file``) holds one ``TOKENS WEIGHT`` pair a line (a comma works
too; ``#`` starts a comment); a draw picks a line with probability weight / total.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import orjson

from kvreplay.bundled import DEMO_WORKLOAD
from kvreplay.errors import ConfigError

__all__ = ["Corpus", "Histogram", "Length", "corpus", "parse_length", "read_histogram"]

_WORD = re.compile(r"\S+")
_MAX_LINES = 100_000


@dataclass(frozen=True, slots=True)
class Length:
    """A token length: a constant, or a normal draw.

    Attributes:
        mean: Mean (tokens, >= 1).
        stddev: Standard deviation (tokens, >= 0); 0 gives the mean every time.
    """

    mean: int
    stddev: float = 0.0

    def draw(self, rng: random.Random, low: int) -> int:
        """One length, at least ``low`` (tokens)."""
        if self.stddev <= 0:
            return max(low, self.mean)
        return max(low, round(rng.gauss(self.mean, self.stddev)))

    def to_json(self) -> dict[str, float | int]:
        """``{"mean", "stddev"}``."""
        return {"mean": self.mean, "stddev": self.stddev}


def parse_length(text: str, flag: str) -> Length:
    """Parse ``MEAN[:STDDEV]``.

    Raises:
        ConfigError: not two numbers, a mean below 1 or a negative deviation (names ``flag``).
    """
    mean_s, _, sd_s = text.partition(":")
    try:
        mean = int(mean_s)
        sd = float(sd_s) if sd_s else 0.0
    except ValueError:
        raise ConfigError(f"{flag}: {text!r} is not MEAN[:STDDEV] (an integer mean, a number for the deviation)"
                          ) from None
    if mean < 1 or not sd >= 0 or sd == float("inf"):
        raise ConfigError(f"{flag}: {text!r}: the mean must be >= 1 and the deviation a finite number >= 0")
    return Length(mean, sd)


@dataclass(frozen=True, slots=True)
class Histogram:
    """Lengths with weights, from an ``--isl-file``.

    Attributes:
        source: The file's name (no folder: the manifest carries no path).
        values: Lengths (tokens).
        weights: Their weights (> 0).
    """

    source: str
    values: tuple[int, ...]
    weights: tuple[float, ...]

    def draw(self, rng: random.Random, low: int) -> int:
        """One length, at least ``low`` (tokens)."""
        return max(low, rng.choices(self.values, weights=self.weights)[0])

    def to_json(self) -> dict[str, object]:
        """``{"file", "values", "weights"}``."""
        return {"file": self.source, "values": list(self.values), "weights": list(self.weights)}


def read_histogram(path: str | Path) -> Histogram:
    """Read an ``--isl-file``.

    Raises:
        ConfigError: unreadable, empty, or a line that is not ``TOKENS WEIGHT`` with
            tokens >= 1 and weight > 0 (names the file and line).
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--isl-file {p}: cannot read it: {exc}") from None
    values: list[int] = []
    weights: list[float] = []
    for lineno, line in enumerate(text.splitlines()[:_MAX_LINES], 1):
        line = line.split("#", 1)[0].replace(",", " ").strip()
        if not line:
            continue
        fields = line.split()
        try:
            if len(fields) != 2:
                raise ValueError
            v, w = int(fields[0]), float(fields[1])
        except ValueError:
            raise ConfigError(f"--isl-file {p}:{lineno}: expected 'TOKENS WEIGHT', got {line!r}") from None
        if v < 1 or not 0 < w < float("inf"):
            raise ConfigError(f"--isl-file {p}:{lineno}: tokens must be >= 1 and the weight a number > 0")
        values.append(v)
        weights.append(w)
    if not values:
        raise ConfigError(f"--isl-file {p}: no 'TOKENS WEIGHT' line")
    return Histogram(p.name, tuple(values), tuple(weights))


@dataclass(frozen=True, slots=True)
class Corpus:
    """The synth text as a ring of words.

    Attributes:
        text: The whole corpus.
        starts: Character offset of each word.
    """

    text: str
    starts: tuple[int, ...]

    def from_word(self, word: int, min_chars: int) -> str:
        """Text from word ``word`` (mod the word count) on, at least ``min_chars`` long (wrapping around)."""
        start = self.starts[word % len(self.starts)]
        out = self.text[start:]
        while len(out) < min_chars:
            out += "\n\n" + self.text
        return out[:min_chars]


@lru_cache(maxsize=1)
def corpus() -> Corpus:
    """The bundled MT-Bench text (see the module docstring)."""
    seen: set[str] = set()
    parts: list[str] = []
    for f in sorted(DEMO_WORKLOAD.glob("*.json")):
        body = orjson.loads(f.read_bytes())
        for msg in body.get("messages", []):
            content = msg.get("content")
            if isinstance(content, str) and content.strip() and content not in seen:
                seen.add(content)
                parts.append(content.strip())
    text = "\n\n".join(parts)
    return Corpus(text, tuple(m.start() for m in _WORD.finditer(text)))
