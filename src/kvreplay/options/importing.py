"""The options of ``kvreplay import`` / ``kvreplay.import_workload``: ``ImportConfig``, one field a flag.

``kvreplay.argtypes.add_declared`` derives ``kvreplay import``'s flags from these fields
(group ``import``); the source format's positional (group ``import-format``) takes its
choices and their summaries from the format registry (``kvreplay.workload.formats``, a layer
above), so ``commands/import_cmd.py`` adds it. ``kvreplay.api.importing.import_args`` takes
the object. The defaults the importers share are declared here (``kvreplay.workload``
re-exports them where it uses them).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvreplay.argtypes import integer, number
from kvreplay.options.declare import option
from kvreplay.options.record import RETAINED_PATHS

__all__ = ["DEFAULT_MAX_TOKENS", "DEFAULT_SESSION_MIN_BLOCKS", "IMPORT_CONCURRENCY", "IMPORT_MODEL",
           "MAX_THINK_TIME_S", "SIM_MODEL", "ImportConfig"]

SIM_MODEL = "kvreplay-sim"
"""The model id the simulator serves by default (``/v1/models``; ``kvreplay.sim.config.DEFAULT_MODEL``)."""

IMPORT_MODEL = SIM_MODEL
"""``model`` of every imported body when the source has none and ``--model`` is not given (the simulator's;
``kvreplay.workload.conversation.DEFAULT_MODEL``)."""

DEFAULT_MAX_TOKENS = 256
"""``max_tokens`` of every imported chat body when the source has none and ``--max-tokens`` is not given."""

MAX_THINK_TIME_S = 86_400.0
"""Largest think time accepted (s): a day. A larger one is almost surely a unit error (ms or ns)."""

DEFAULT_SESSION_MIN_BLOCKS = 2
"""Shortest shared full-block prefix (blocks) that joins two requests into one session."""

IMPORT_CONCURRENCY = 64
"""The plan's cap on requests in flight for an imported file (no in-flight count was observed)."""


@dataclass(slots=True, kw_only=True)
class ImportConfig:
    """Every option of ``kvreplay import``, by its flag's ``dest``.

    Which options a format takes is the format's (``kvreplay.workload.formats.ImportFormat.options``);
    the others are ignored for it.

    Attributes:
        format: A format of ``kvreplay.workload.formats`` (required).
        trace: The source file (required).
        out: The workload to write: a ``.jsonl`` file or a folder, by format (required).
        paths: har, openai-batch: comma-separated URL paths whose POST bodies are kept.
        redact_body_secrets: har, openai-batch: keep a body holding a secret, the secret replaced.
        limit: The first N requests (sharegpt: conversations) only; None: all.
        block_tokens: Tokens per hash block; None: the format's (512 mooncake, 16 bailian).
        model: The ``model`` of every body (conversation formats: where the source names none).
        max_tokens: Conversation formats: ``max_tokens`` where the source names none.
        think_time: Conversation formats: think time before every turn after the first (s); None:
            the source's, else 0.
        chat: Chat bodies (one user message) instead of completions.
        concurrency: The plan's cap on requests in flight.
        time_scale: The plan's multiplier on trace offsets.
        sessions: Mooncake: also infer sessions from shared ``hash_ids`` prefixes.
        session_min_blocks: Mooncake sessions: the shortest shared prefix (blocks) continuing one.
        ignore_eos: Add ``"ignore_eos": true`` to every body.
        tokenizer: Mooncake, bailian: a ``/tokenize`` URL or ``tokenizer.json`` whose tokens make each block.
        force: Replace an existing ``out`` (and the files beside it).
    """

    format: str = option(flag=None, required=True, group="import-format", help="source format")
    trace: str = option(flag=None, required=True, group="import",
                        help="source file (Mooncake JSONL: timestamp, input_length, output_length, hash_ids; "
                             "a HAR 1.2 .har file; an OpenAI Batch input .jsonl; a ShareGPT .json)")
    out: str = option(flag="--out", required=True, metavar="WORKLOAD", group="import",
                      help="mooncake, conversation formats: workload file to write (.jsonl); har, openai-batch: "
                           "folder W to create; arrivals and plan are written beside it")
    paths: str = option(",".join(RETAINED_PATHS), flag="--paths", metavar="P1,P2", group="import",
                        help="har, openai-batch: URL paths whose POST bodies are kept (default "
                             "/v1/chat/completions,/v1/completions); other entries are counted and skipped")
    redact_body_secrets: bool = option(False, flag="--redact-body-secrets", action="store_true", group="import",
                                       help="har, openai-batch: keep a body that holds a secret (a key shape, a "
                                            "secret field, its request's credential) with the secret replaced by "
                                            "[REDACTED] instead of skipping it")
    limit: int | None = option(flag="--limit", check=integer(1), metavar="N", group="import",
                               help="first N requests only (sharegpt: first N conversations)")
    block_tokens: int | None = option(flag="--block-tokens", check=integer(1), metavar="T", group="import",
                                      help="tokens per hash block (default: 512 for mooncake, 16 for bailian, as in "
                                           "the published traces)")
    model: str = option(IMPORT_MODEL, flag="--model", group="import",
                        help=f"model field of every body (default {IMPORT_MODEL}; conversation formats: where the "
                             "source names none)")
    max_tokens: int = option(DEFAULT_MAX_TOKENS, flag="--max-tokens", check=integer(1), metavar="N", group="import",
                             help=f"conversation formats: max_tokens of every body where the source names none "
                                  f"(default {DEFAULT_MAX_TOKENS})")
    think_time: float | None = option(flag="--think-time", check=number(0.0, maximum=MAX_THINK_TIME_S, unit="s"),
                                      metavar="S", unit="s", group="import",
                                      help="conversation formats: think time before every turn after the first (s; "
                                           "default: the source's, else 0)")
    chat: bool = option(False, flag="--chat", action="store_true", group="import",
                        help="chat bodies (one user message) instead of completions")
    concurrency: int = option(IMPORT_CONCURRENCY, flag="--concurrency", check=integer(1), group="import",
                              help="the plan's cap on requests in flight")
    time_scale: float = option(1.0, flag="--time-scale", check=number(0, strict=True), group="import",
                               help="the plan's multiplier on trace offsets (0.5 = twice as fast)")
    sessions: bool = option(False, flag="--sessions", action="store_true", group="import",
                            help="mooncake: also infer sessions from shared hash_ids prefixes (a request whose ids "
                                 "extend an earlier request's full blocks continues its session) and write the "
                                 "sessions side file")
    session_min_blocks: int = option(DEFAULT_SESSION_MIN_BLOCKS, flag="--session-min-blocks", check=integer(1),
                                     metavar="K", group="import",
                                     help="mooncake --sessions: shortest shared prefix (blocks) that continues a "
                                          f"session (default {DEFAULT_SESSION_MIN_BLOCKS})")
    ignore_eos: bool = option(False, flag="--ignore-eos", action="store_true", group="import",
                              help='add "ignore_eos": true (vLLM/SGLang) so outputs reach output_length')
    tokenizer: str | None = option(flag="--tokenizer", metavar="URL|tokenizer.json", group="import",
                                   help="mooncake, bailian: write each hash block as exactly --block-tokens tokens of "
                                        "this tokenizer (a server's POST /tokenize: vLLM, llama-server, serve-sim; or "
                                        "a local tokenizer.json), so the trace's prefix structure lands on the "
                                        "server's blocks (default: the simulator's pseudo-words)")
    force: bool = option(False, flag="--force", action="store_true", group="import",
                         help="replace an existing --out file (and the files beside it); a device, FIFO, the source "
                              "itself or a non-empty folder is never replaced")
