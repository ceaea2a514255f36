"""The importer registry: every format ``kvreplay import`` reads, one entry each.

An importer is a function in its own module (``workload/importers.py`` for Mooncake
traces, ``workload/importers_capture.py`` for HAR and OpenAI Batch files,
``workload/import_sharegpt.py`` for ShareGPT conversations, ``workload/import_bailian.py``
for Bailian traces, ``workload/peers.py`` for AIPerf's and vLLM's custom datasets) plus one
``ImportFormat`` entry naming it. ``kvreplay import`` takes its format choices, the
options each format reads and the lines it prints from here; adding a format is its
module, one entry in ``BUILTIN`` below and its tests (docs/architecture.md, "Add an
importer").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvreplay.workload.token_blocks import TokenBlocks

__all__ = ["BUILTIN", "ImportFormat", "format_names", "format_of", "register_format", "unregister_format"]


@dataclass(frozen=True, slots=True)
class ImportFormat:
    """One source format of ``kvreplay import``.

    Attributes:
        name: The format argument (``mooncake``, ``har``, ``openai-batch``).
        summary: What it reads and writes, one line (``kvreplay import --help``).
        options: The ``kvreplay import`` options it takes, as their
            ``kvreplay.options.importing.ImportConfig`` field names (``limit``, ``paths``, ...);
            each is passed to ``run`` as a keyword.
        run: ``run(source, out, **options) -> lines``: import ``source`` into ``out``
            and return what to print (what was written, kept and skipped, how to replay).
            Raises ``WorkloadError`` (a bad source: file, line, field) or ``ConfigError``.
        writes: What ``out`` names, for ``kvreplay.outpath.check_out`` before ``run``:
            ``"jsonl"`` (a ``.jsonl`` workload, the suffix added when missing, with its
            arrivals, plan and sessions side files beside it), ``"folder"`` (a capture
            folder to create, with its arrivals and plan beside it) or ``"file"`` (the
            path as given, nothing beside it).
    """

    name: str
    summary: str
    options: tuple[str, ...]
    run: Callable[..., list[str]]
    writes: str = "file"

    def out_paths(self, out: str) -> tuple[Path, tuple[Path, ...]]:
        """``(the path --out names, the files written beside it)`` for ``writes``."""
        if self.writes == "folder":
            from kvreplay.workload.captureplan import sidecar_paths

            return Path(out), sidecar_paths(out)
        if self.writes == "jsonl":
            from kvreplay.workload.sessions import sessions_path

            wl = Path(out)
            if wl.suffix != ".jsonl":
                wl = wl.with_name(wl.name + ".jsonl")
            stem = wl.with_suffix("")
            return wl, (stem.with_name(stem.name + ".arrivals.json"), stem.with_name(stem.name + ".plan.toml"),
                        sessions_path(wl))
        return Path(out), ()


def _mooncake(source: str, out: str, *, limit: int | None, block_tokens: int | None, model: str, chat: bool,
              concurrency: int, time_scale: float, ignore_eos: bool, sessions: bool,
              session_min_blocks: int, tokenizer: str | None = None) -> list[str]:
    from kvreplay.workload.conversation import amplification_line
    from kvreplay.workload.importers import MOONCAKE_BLOCK_TOKENS, import_mooncake

    block_tokens = block_tokens or MOONCAKE_BLOCK_TOKENS
    blocks = _token_blocks(tokenizer, block_tokens, chat)
    res = import_mooncake(source, out, limit=limit, block_tokens=block_tokens, model=model, chat=chat,
                          concurrency=concurrency, time_scale=time_scale, ignore_eos=ignore_eos,
                          sessions=sessions, session_min_blocks=session_min_blocks, blocks=blocks)
    side = [f"sessions ({res.sessions[1]} inferred from shared hash_ids prefixes) -> {res.sessions[0]}"] \
        if res.sessions else []
    return side + [
        f"{res.requests} bodies ({res.prompt_tokens} prompt tokens, "
        f"{'simulator' if blocks is None else blocks.tok.dialect} tokenizer) -> {res.workload}",
        amplification_line(Path(source), res.workload),
        f"arrivals (ms offsets) -> {res.arrivals}",
        f"plan -> {res.plan}",
        f"  against a server:  kvreplay run --plan {res.plan} --target URL",
        # The entries model matches chat snapshots only; block-level reuse needs the radix model
        # with the trace's block size, or every request misses.
        f"  against the simulator (block-level prefix cache):  kvreplay run --plan {res.plan} "
        f"--target sim --sim-cache radix --sim-block-size {block_tokens}",
    ]


def _capture(fn_name: str) -> Callable[..., list[str]]:
    def run(source: str, out: str, *, paths: tuple[str, ...], redact_body_secrets: bool = False) -> list[str]:
        from kvreplay.workload import importers_capture

        res = getattr(importers_capture, fn_name)(source, out, paths=paths, redact_body_secrets=redact_body_secrets)
        lines = [f"{res.summary.describe()} -> {res.folder}"]
        lines += [f"  re-serialised (exact bytes of 'body' not found in the line): {src}" for src in res.reserialised]
        if res.summary.retained:
            if res.arrivals is not None:
                lines.append(f"arrivals (ms offsets) -> {res.arrivals}")
            lines += [f"plan -> {res.plan}",
                      f"  replay:  kvreplay run {res.folder} --target URL --phase replay:forward:c1",
                      f"  as planned:  kvreplay run --plan {res.plan} --target URL"]
        return lines

    return run


def _sharegpt(source: str, out: str, *, limit: int | None, model: str, max_tokens: int,
              think_time: float | None) -> list[str]:
    from kvreplay.workload.import_sharegpt import import_sharegpt

    return import_sharegpt(source, out, model=model, max_tokens=max_tokens, think_time=think_time or 0.0,
                           limit=limit).lines()


def _bailian(source: str, out: str, *, limit: int | None, block_tokens: int | None, model: str, chat: bool,
             ignore_eos: bool, tokenizer: str | None = None) -> list[str]:
    from kvreplay.workload.import_bailian import BAILIAN_BLOCK_TOKENS, import_bailian

    block_tokens = block_tokens or BAILIAN_BLOCK_TOKENS
    return import_bailian(source, out, block_tokens=block_tokens, model=model, chat=chat, ignore_eos=ignore_eos,
                          limit=limit, blocks=_token_blocks(tokenizer, block_tokens, chat)).lines()


def _token_blocks(tokenizer: str | None, block_tokens: int, chat: bool) -> TokenBlocks | None:
    """``--tokenizer``'s block texts (``workload.token_blocks``), or None for the simulator's pseudo-words."""
    if tokenizer is None:
        return None
    from kvreplay.workload.token_blocks import TokenBlocks
    from kvreplay.workload.tokenizer_client import open_tokenizer

    return TokenBlocks(open_tokenizer(tokenizer), block_tokens, chat=chat)


def _peer(fn_name: str) -> Callable[..., list[str]]:
    def run(source: str, out: str, *, model: str, max_tokens: int) -> list[str]:
        from kvreplay.workload import peers

        return getattr(peers, fn_name)(source, out, model=model, max_tokens=max_tokens).lines()

    return run


_MOONCAKE_OPTIONS = ("limit", "block_tokens", "model", "chat", "concurrency", "time_scale", "ignore_eos",
                     "sessions", "session_min_blocks", "tokenizer")

BUILTIN: tuple[ImportFormat, ...] = (
    ImportFormat("mooncake", "Mooncake JSONL (timestamp, input_length, output_length, hash_ids) -> bodies, "
                 "arrivals, plan", _MOONCAKE_OPTIONS, _mooncake, "jsonl"),
    ImportFormat("har", "a HAR 1.2 .har file -> a folder of the exact bodies, arrivals, plan",
                 ("paths", "redact_body_secrets"),
                 _capture("import_har"), "folder"),
    ImportFormat("openai-batch", "an OpenAI Batch input .jsonl -> a folder of the exact bodies, plan",
                 ("paths", "redact_body_secrets"),
                 _capture("import_openai_batch"), "folder"),
    ImportFormat("sharegpt", "a ShareGPT JSON list of conversations (from human/gpt/system, value) -> one session "
                 "per conversation, one chat body per human turn, sessions side file",
                 ("limit", "model", "max_tokens", "think_time"), _sharegpt, "jsonl"),
    ImportFormat("bailian", "an Alibaba Bailian trace JSONL (chat_id, parent_chat_id, turn, timestamp s, 16-token "
                 "hash_ids) -> one session per chat, one body per request, sessions side file",
                 ("limit", "block_tokens", "model", "chat", "ignore_eos", "tokenizer"), _bailian, "jsonl"),
    ImportFormat("aiperf", "an AIPerf single_turn / multi_turn custom dataset JSONL -> chat bodies, sessions "
                 "(session_id, delay) in the side file", ("model", "max_tokens"), _peer("import_aiperf"), "jsonl"),
    ImportFormat("vllm", "a vllm bench serve custom dataset JSONL (prompt, output_tokens) -> chat bodies",
                 ("model", "max_tokens"), _peer("import_vllm"), "jsonl"),
)
"""The formats kvreplay ships, in the order ``kvreplay import --help`` lists them."""

_FORMATS: dict[str, ImportFormat] = {f.name: f for f in BUILTIN}


def register_format(fmt: ImportFormat) -> None:
    """Add a format (a plugin, or a test's toy one).

    Raises:
        ValueError: a format of that name is already registered.
    """
    if fmt.name in _FORMATS:
        raise ValueError(f"import format {fmt.name!r} is already registered")
    _FORMATS[fmt.name] = fmt


def unregister_format(name: str) -> None:
    """Remove a format added with ``register_format``.

    Raises:
        ValueError: ``name`` is a built-in format or not registered.
    """
    if any(f.name == name for f in BUILTIN) or name not in _FORMATS:
        raise ValueError(f"cannot unregister import format {name!r}")
    del _FORMATS[name]


def format_names() -> tuple[str, ...]:
    """Every registered format's name: the built-in ones in order, then those registered at run time."""
    return tuple(_FORMATS)


def format_of(name: str) -> ImportFormat:
    """The registered format ``name``.

    Raises:
        KeyError: no such format.
    """
    return _FORMATS[name]
