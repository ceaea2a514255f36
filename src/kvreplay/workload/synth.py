r"""Synthetic workloads sized in the server's own tokens, frozen as exact bodies (``kvreplay synth``).

Each body is an ordinary streaming request (``stream_options.include_usage``, so every
record has usage) whose prompt is exactly its designed input length (ISL) in the given
tokenizer (``kvreplay.workload.tokenizer_client``) and whose output is forced to its
designed length (OSL: ``max_tokens``, ``ignore_eos`` and, where the server takes it,
``min_tokens``). Text comes from the bundled MT-Bench prompts (``synth_corpus``), cut on
token boundaries: the tokenizer encodes a stretch of text, the ids are cut, decoded and the
whole prompt measured again through the tokenizer, adjusting the cut until the prompt is
exactly ISL tokens (never a cut inside a character or before trailing whitespace, which
would merge with what follows). A text that cannot reach ISL exactly (a merge skips over
it) is replaced by one from another start of the corpus (48 tries, then an error).

**Prefix groups.** ``prefix_tokens = P`` and ``prefix_groups = K``: a share of the requests
(``prefix_share``) start with their group's shared prefix of exactly P tokens of the whole
prompt (groups assigned in turn, request i of the sharing ones to group i mod K); the rest
is the request's own text. Completions: the prompt is the prefix text then the own text.
Chat: the prefix is a system message, sized so that the rendered prompts of a group agree
on exactly their first P tokens (the template's tokens up to the user message included).
Every body's own text starts on a token no earlier body of its group (or, without a group,
no earlier body) starts on at that position, so a body shares with the earlier ones exactly
its designed prefix: P for a group member after the group's leader, and ``head_tokens``
(what every prompt of this tokenizer starts with: a BOS, a chat template's opening;
measured) for a leader or a body without a group.

**Conversations.** ``turns = T`` > 1: each of the ``requests`` sessions has T turns; turn
k+1 resends turn k's prompt, a stand-in answer of turn k's OSL tokens and a new user text
of its own (ISL - P tokens), with ``think_time_s`` before it (the sessions side file of
``kvreplay.workload.sessions``). Live history (``--history live``) replaces the stand-in
answers with the server's at replay.

**Manifest** (``W.synth.json`` beside ``W.jsonl``, never in the bodies): the options, the
tokenizer's identity, ``head_tokens``, the groups and one row per body (its designed
``prompt_tokens``, ``max_tokens``, ``group``, ``leader``, ``shared_tokens``: designed
tokens shared with an earlier body). ``W.jsonl`` holds no time, host or path: the same
options and tokenizer write the same bytes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from kvreplay.errors import ConfigError
from kvreplay.safe_io import atomic_write_bytes, atomic_write_json
from kvreplay.workload.sessions import Turn, sessions_path, write_sessions
from kvreplay.workload.synth_corpus import Corpus, Histogram, Length, corpus
from kvreplay.workload.tokenizer_client import Tokenizer, common_prefix_len

__all__ = ["MANIFEST_SUFFIX", "SynthResult", "SynthSpec", "manifest_path", "synthesize", "write_synth"]

MANIFEST_SUFFIX = ".synth.json"
"""``W.jsonl``'s manifest is ``W.synth.json``."""

_FIT_TRIES = 16
_START_TRIES = 48
_PROBES = ("Alpha", "Bravo", "the")
"""Texts whose prompts' common prefix is what every prompt starts with (the head; after a chat
prefix, the group's shared part): one of them a word a vocabulary holds whole, so that a tokenizer
splitting a lone space before an unknown word (SentencePiece: "▁", "A", ...) does not count that
space in the head."""


@dataclass(frozen=True, slots=True)
class SynthSpec:
    """What to synthesize (token counts in the tokenizer's tokens).

    Attributes:
        requests: Bodies (sessions when ``turns`` > 1), >= 1.
        isl: Prompt length of a first turn, shared prefix included.
        osl: Output length (``max_tokens``).
        prefix_tokens: Shared prefix length P (0: none).
        prefix_groups: Groups K, each with its own prefix.
        prefix_share: Fraction of requests that start with a group prefix (0..1).
        turns: Turns per session (1: no sessions).
        think_time_s: Think time before each later turn (s).
        api: ``completions`` or ``chat``.
        model: The bodies' ``model``.
        seed: Seed of every draw.
        min_tokens: Put ``min_tokens`` = OSL in the bodies (never for llama-server, which has no such field).
    """

    requests: int
    isl: Length | Histogram
    osl: Length
    model: str
    prefix_tokens: int = 0
    prefix_groups: int = 1
    prefix_share: float = 1.0
    turns: int = 1
    think_time_s: float = 0.0
    api: str = "completions"
    seed: int = 0
    min_tokens: bool = True

    def check(self) -> None:
        """Refuse inconsistent options.

        Raises:
            ConfigError: naming the flag.
        """
        if self.requests < 1:
            raise ConfigError("--requests must be >= 1")
        if self.api not in ("completions", "chat"):
            raise ConfigError("--api must be completions or chat")
        if self.prefix_tokens < 0 or self.prefix_groups < 1:
            raise ConfigError("--prefix-tokens must be >= 0 and --prefix-groups >= 1")
        if not 0.0 <= self.prefix_share <= 1.0:
            raise ConfigError("--prefix-share must be between 0 and 1")
        if self.turns < 1 or not 0 <= self.think_time_s < float("inf"):
            raise ConfigError("--turns must be >= 1 and --think-time a finite number >= 0")
        if isinstance(self.isl, Length) and self.prefix_tokens and self.isl.mean <= self.prefix_tokens:
            raise ConfigError(f"--isl {self.isl.mean} must exceed --prefix-tokens {self.prefix_tokens}: "
                              "the ISL is the whole prompt, shared prefix included")


@dataclass(slots=True)
class SynthResult:
    """The synthesized workload.

    Attributes:
        bodies: The exact bodies, in workload order.
        manifest: The manifest (without ``workload``/``workload_sha256``, added on writing).
        turns: The sessions side file's turns, or None without conversations.
    """

    bodies: list[bytes]
    manifest: dict[str, Any]
    turns: list[Turn] | None = None


def manifest_path(out: str | Path) -> Path:
    """``W.synth.json`` for ``W.jsonl`` (the manifest's place)."""
    p = Path(out)
    return p.with_name((p.name[:-6] if p.name.endswith(".jsonl") else p.name) + MANIFEST_SUFFIX)


@dataclass
class _Group:
    text: str
    ids: list[int]
    leader: int = -1
    members: int = 0
    next_tokens: set[int] = field(default_factory=set)


class _Builder:
    def __init__(self, spec: SynthSpec, tok: Tokenizer) -> None:
        self.spec = spec
        self.tok = tok
        self.rng = random.Random(spec.seed)
        self.corpus: Corpus = corpus()
        self.chat = spec.api == "chat"
        self.head = self._head()
        self.first_tokens: set[int] = set()

    # -- rendering ------------------------------------------------------------------------------
    def _render(self, prefix: str | None, own: str, history: list[Any] | None = None) -> list[int]:
        """Ids of a prompt: ``history`` (completions: text; chat: messages) or the group prefix, then ``own``."""
        if self.chat:
            msgs: list[dict[str, Any]] = list(history) if history else (
                [{"role": "system", "content": prefix}] if prefix is not None else [])
            return self.tok.chat_ids([*msgs, {"role": "user", "content": own}])
        head = history[0] if history else (prefix or "")
        return self.tok.prompt_ids(head + own)

    def _head(self) -> int:
        first, *rest = (self._render(None, p) for p in _PROBES)
        return min(common_prefix_len(first, r) for r in rest)

    def _source(self, word: int, tokens: int, lead: str) -> list[int]:
        """Ids of corpus text from ``word`` on (after ``lead``), at least ``tokens`` + 16 of them.

        A tokenizer that puts a space before every text it encodes (SentencePiece's "add space
        prefix", as llama-server's tiny GGUF: ``encode(" word")`` is a lone space then "▁word",
        decoded " " + " word") would make every text after a prefix start on the same lone-space
        token, and every group member share one token more than designed: that token is dropped
        (:meth:`_fit` puts the lead back once).
        """
        chars = tokens * 8 + 64
        for _ in range(12):
            ids = self.tok.encode(lead + self.corpus.from_word(word, chars))
            if lead and len(ids) > 1 and not self.tok.decode(ids[:1]).strip():
                ids = ids[1:]  # the lead is put back by _fit
            if len(ids) >= tokens + 16:
                return ids
            chars *= 2
        raise ConfigError(f"the tokenizer gives fewer than {tokens} tokens for {chars} characters of text")

    def _fit(self, render: Callable[[str], list[int]], src: list[int], target: int,
             guess: int, lead: str = "") -> tuple[str, list[int]] | None:
        """Cut ``src`` so that ``render(decode(cut))`` is exactly ``target`` tokens; None when this text cannot.

        The text is ``lead`` then the corpus text: a decoded leading space is dropped first (a
        tokenizer with a space prefix decodes "▁word" as " word"; sent as such, it would
        encode as a lone space and " word", every prompt starting on that one token).
        """
        n = guess
        seen: set[int] = set()
        for _ in range(_FIT_TRIES):
            if n < 1 or n > len(src) or n in seen:  # back to a cut already tried: a merge skips the target here
                return None
            seen.add(n)
            text = self.tok.decode(src[:n])
            text = lead + (text[1:] if text.startswith(" ") else text)
            # a cut inside a character's bytes, or trailing whitespace that would merge with what follows
            if "\ufffd" in text or text != text.rstrip():
                n -= 1
                continue
            ids = render(text)
            if len(ids) == target:
                return text, ids
            n += target - len(ids)
        return None

    # -- pieces ---------------------------------------------------------------------------------
    def group_prefix(self, g: int) -> _Group:
        """The group's prefix: exactly P tokens of the whole prompt, starting on a fresh token."""
        p = self.spec.prefix_tokens
        for _ in range(_START_TRIES):
            src = self._source(self.rng.randrange(len(self.corpus.starts)), p, "")
            if self.chat:
                def shared(t: str) -> list[int]:
                    first, *rest = (self._render(t, " " + probe) for probe in _PROBES)
                    return first[: min(common_prefix_len(first, r) for r in rest)]
                got = self._fit(shared, src, p, max(1, p - self.head))
            else:
                got = self._fit(lambda t: self._render(None, t), src, p, max(1, p - self.head))
            if got is None:
                continue
            text, ids = got
            if len(ids) > self.head and ids[self.head] not in self.first_tokens:
                self.first_tokens.add(ids[self.head])
                return _Group(text, ids)
        raise ConfigError(f"group {g}'s prefix: no start in the corpus of {_START_TRIES} tried gives exactly "
                          f"{p} tokens in this tokenizer with a first token of its own")

    def first_turn(self, group: _Group | None, isl: int, i: int) -> tuple[str, list[int]]:
        """Request ``i``'s own text (after its group's prefix), the prompt exactly ``isl`` tokens."""
        base = len(group.ids) if group else self.head
        lead = " " if group else ""
        prefix = group.text if group else None

        def render(t: str) -> list[int]:
            return self._render(prefix, t)

        for _ in range(_START_TRIES):
            src = self._source(self.rng.randrange(len(self.corpus.starts)), isl - base, lead)
            got = self._fit(render, src, isl, max(1, isl - base), lead)
            if got is None:
                continue
            text, ids = got
            if group:
                if ids[:base] != group.ids:
                    continue  # the own text merged with the prefix's last token: another start
                if ids[base] not in group.next_tokens:
                    group.next_tokens.add(ids[base])
                    return text, ids
            elif ids[base] not in self.first_tokens:
                self.first_tokens.add(ids[base])
                return text, ids
        raise ConfigError(f"request {i}: no start in the corpus of {_START_TRIES} tried gives a prompt of exactly "
                          f"{isl} tokens in this tokenizer with a token of its own after its prefix")

    def later_turn(self, history: list[Any], prev_ids: list[int], answer_tokens: int, own_tokens: int,
                   i: int) -> tuple[list[Any], str, list[int]]:
        """The next turn: the history, a stand-in answer of ``answer_tokens``, a new user text."""
        target = len(prev_ids) + answer_tokens + own_tokens
        for _ in range(_START_TRIES):
            word = self.rng.randrange(len(self.corpus.starts))
            ans_src = self._source(word, answer_tokens, "")
            answer = self.tok.decode(ans_src[:answer_tokens])
            if self.chat:
                hist: list[Any] = [*history, {"role": "assistant", "content": answer}]
            else:
                hist = [history[0] + answer + "\n\n"]
            src = self._source(self.rng.randrange(len(self.corpus.starts)), own_tokens, "")

            def render(t: str, hist: list[Any] = hist) -> list[int]:
                return self._render(None, t, hist)

            got = self._fit(render, src, target, own_tokens)
            if got is not None:
                return hist, got[0], got[1]
        raise ConfigError(f"body {i}: no start in the corpus of {_START_TRIES} tried gives a turn of exactly "
                          f"{target} tokens in this tokenizer")


def _body(spec: SynthSpec, prompt: str | list[Any], osl: int) -> bytes:
    obj: dict[str, Any] = {"model": spec.model}
    obj["messages" if spec.api == "chat" else "prompt"] = prompt
    obj["max_tokens"] = osl
    if spec.min_tokens:
        obj["min_tokens"] = osl
    obj["ignore_eos"] = True
    obj["stream"] = True
    obj["stream_options"] = {"include_usage": True}
    return orjson.dumps(obj)


def _draw_isl(spec: SynthSpec, rng: random.Random) -> int:
    return spec.isl.draw(rng, spec.prefix_tokens + 1)


def synthesize(spec: SynthSpec, tok: Tokenizer) -> SynthResult:
    """Build the bodies, sessions and manifest of ``spec`` in ``tok``'s tokens.

    Args:
        spec: The options (checked here).
        tok: A connected tokenizer.

    Returns:
        The bodies (exact bytes), the manifest and the sessions' turns (None when ``turns`` is 1).

    Raises:
        ConfigError: inconsistent options, a tokenizer that cannot render or cut exactly,
            a corpus out of distinct starts.
    """
    spec.check()
    if spec.min_tokens and tok.dialect == "llama":  # llama-server has no min_tokens; ignore_eos forces the length
        spec = dataclasses.replace(spec, min_tokens=False)
    b = _Builder(spec, tok)
    rng = random.Random(spec.seed ^ 0x5EED)  # lengths: a stream of their own, apart from the text's
    p = spec.prefix_tokens
    n_share = round(spec.prefix_share * spec.requests) if p else 0
    sharing = sorted(random.Random(spec.seed ^ 0x6A0F).sample(range(spec.requests), n_share))
    group_of = {r: k % spec.prefix_groups for k, r in enumerate(sharing)}
    groups: dict[int, _Group] = {}
    bodies: list[bytes] = []
    rows: list[dict[str, Any]] = []
    turns: list[Turn] = []
    prev_osl = 0
    for r in range(spec.requests):
        g = group_of.get(r)
        if g is not None and g not in groups:
            groups[g] = b.group_prefix(g)
        grp = groups.get(g) if g is not None else None
        isl = _draw_isl(spec, rng)
        osl = spec.osl.draw(rng, 1)
        text, ids = b.first_turn(grp, isl, len(bodies))
        if grp is not None:
            leader = grp.leader < 0
            if leader:
                grp.leader = len(bodies)
            grp.members += 1
            shared = (b.head if bodies else 0) if leader else p
        else:
            leader, shared = False, (b.head if bodies else 0)
        history: list[Any]
        if spec.api == "chat":
            history = ([{"role": "system", "content": grp.text}] if grp else []) + [{"role": "user", "content": text}]
            prompt: str | list[Any] = history
        else:
            history = [(grp.text if grp else "") + text]
            prompt = history[0]
        session = f"s{r:05d}"
        for k in range(spec.turns):
            if k:
                own = _draw_isl(spec, rng) - p
                hist, text, new_ids = b.later_turn(history, ids, prev_osl, own, len(bodies))
                osl = spec.osl.draw(rng, 1)
                shared = common_prefix_len(ids, new_ids)
                ids = new_ids
                if spec.api == "chat":
                    history = [*hist, {"role": "user", "content": text}]
                    prompt = history
                else:
                    history = [hist[0] + text]
                    prompt = history[0]
            rows.append({"body": len(bodies), "session": session if spec.turns > 1 else None, "turn": k,
                         "group": g, "leader": leader and k == 0, "prompt_tokens": len(ids), "max_tokens": osl,
                         "shared_tokens": shared})
            if spec.turns > 1:
                turns.append(Turn(len(bodies), session, k, spec.think_time_s if k else 0.0))
            bodies.append(_body(spec, prompt, osl))
            prev_osl = osl
    manifest: dict[str, Any] = {
        "kvreplay_synth": 1,
        "api": spec.api,
        "model": spec.model,
        "seed": spec.seed,
        "requests": spec.requests,
        "turns": spec.turns,
        "think_time_s": spec.think_time_s,
        "isl": spec.isl.to_json(),
        "osl": spec.osl.to_json(),
        "prefix_tokens": p,
        "prefix_groups": spec.prefix_groups,
        "prefix_share": spec.prefix_share,
        "min_tokens": spec.min_tokens,
        "tokenizer": tok.identity(),
        "head_tokens": b.head,
        "groups": [{"group": g, "prefix_tokens": len(grp.ids), "leader": grp.leader, "members": grp.members,
                    "prefix_sha256": hashlib.sha256(orjson.dumps(grp.ids)).hexdigest()}
                   for g, grp in sorted(groups.items())],
        "bodies": rows,
    }
    return SynthResult(bodies, manifest, turns if spec.turns > 1 else None)


def write_synth(out: str | Path, result: SynthResult, *, force: bool = False) -> list[Path]:
    """Write ``W.jsonl`` (one body a line), its manifest ``W.synth.json`` and, with conversations, its sessions file.

    Args:
        out: The workload file (``.jsonl``).
        result: What :func:`synthesize` built.
        force: Replace an existing workload (and its side files).

    Returns:
        The paths written, the workload first.

    Raises:
        ConfigError: ``out`` does not end in ``.jsonl``, exists without ``force``, or
            its folder is missing.
    """
    path = Path(out)
    if not path.name.endswith(".jsonl"):
        raise ConfigError(f"--out {path}: a synthetic workload is a .jsonl file (one body a line)")
    if path.exists() and not force:
        raise ConfigError(f"--out {path} exists; give --force to replace it")
    if not path.parent.is_dir():
        raise ConfigError(f"--out {path}: folder {path.parent} does not exist")
    data = b"".join(body + b"\n" for body in result.bodies)
    atomic_write_bytes(path, data)
    written = [path]
    side = sessions_path(path)
    if result.turns is not None:
        written.append(write_sessions(path, result.turns))
    elif side.exists() and force:
        side.unlink()  # a replaced workload keeps no stale sessions
    manifest = {"workload": path.name, "workload_sha256": hashlib.sha256(data).hexdigest(), **result.manifest}
    mpath = manifest_path(path)
    atomic_write_json(mpath, manifest)
    written.append(mpath)
    return written
