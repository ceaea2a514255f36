r"""Import a workload from another source: the behaviour of ``kvreplay import`` and ``kvreplay.import_workload``.

``kvreplay import`` (``commands/import_cmd.py``) prints the importer's lines; this module
declares the options (``add_arguments``), checks them against the format's own options
and runs the format's importer from the registry (``kvreplay.workload.formats``).
Example::

    kvreplay import mooncake fixtures/traces/mooncake_fast25_conversation_trace.jsonl \\
        --out runs/mc/mooncake.jsonl --limit 500
"""

from __future__ import annotations

import argparse
from typing import Any, TypedDict

from kvreplay.api._options import PathLike, fspath, namespace_for
from kvreplay.errors import ConfigError, WorkloadError
from kvreplay.outpath import check_out

__all__ = ["ImportResult", "add_arguments", "import_args", "import_workload"]


class ImportResult(TypedDict):
    """What ``kvreplay import`` did.

    ``format``, ``source``, ``out`` (the workload written) and ``lines``, the importer's
    account as the command prints it (what was written, kept and skipped, and how to
    replay it), one string per line.
    """

    format: str
    source: str
    out: str
    lines: list[str]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Register ``import``'s options."""
    from kvreplay.argtypes import integer, number
    from kvreplay.workload.capture import IMPORT_CONCURRENCY
    from kvreplay.workload.conversation import DEFAULT_MAX_TOKENS, DEFAULT_MODEL
    from kvreplay.workload.formats import format_names, format_of
    from kvreplay.workload.importers import DEFAULT_SESSION_MIN_BLOCKS
    from kvreplay.workload.sessions import MAX_THINK_TIME_S

    p.add_argument("format", choices=format_names(),
                   help="source format: " + "; ".join(f"{n}: {format_of(n).summary}" for n in format_names()))
    p.add_argument(
        "trace",
        help="source file (Mooncake JSONL: timestamp, input_length, output_length, hash_ids; "
        "a HAR 1.2 .har file; an OpenAI Batch input .jsonl; a ShareGPT .json)",
    )
    p.add_argument(
        "--out",
        required=True,
        metavar="WORKLOAD",
        help="mooncake, conversation formats: workload file to write (.jsonl); har, openai-batch: folder W to create; "
        "arrivals and plan are written beside it",
    )
    p.add_argument(
        "--paths",
        default="/v1/chat/completions,/v1/completions",
        metavar="P1,P2",
        help="har, openai-batch: URL paths whose POST bodies are kept (default "
        "/v1/chat/completions,/v1/completions); other entries are counted and skipped",
    )
    p.add_argument("--redact-body-secrets", action="store_true",
                   help="har, openai-batch: keep a body that holds a secret (a key shape, a secret field, its "
                        "request's credential) with the secret replaced by [REDACTED] instead of skipping it")
    p.add_argument("--limit", type=int, default=None, metavar="N",
                   help="first N requests only (sharegpt: first N conversations)")
    p.add_argument(
        "--block-tokens",
        type=int,
        default=None,
        metavar="T",
        help="tokens per hash block (default: 512 for mooncake, 16 for bailian, as in the published traces)",
    )
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help=f"model field of every body (default {DEFAULT_MODEL}; conversation formats: where the "
                        "source names none)")
    p.add_argument("--max-tokens", type=integer(1), default=DEFAULT_MAX_TOKENS, metavar="N",
                   help=f"conversation formats: max_tokens of every body where the source names none "
                        f"(default {DEFAULT_MAX_TOKENS})")
    p.add_argument("--think-time", type=number(0.0, maximum=MAX_THINK_TIME_S, unit="s"), default=None,
                   metavar="S", help="conversation formats: think time before every turn after the first (s; "
                                     "default: the source's, else 0)")
    p.add_argument(
        "--chat", action="store_true", help="chat bodies (one user message) instead of completions"
    )
    p.add_argument(
        "--concurrency", type=int, default=IMPORT_CONCURRENCY, help="the plan's cap on requests in flight"
    )
    p.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="the plan's multiplier on trace offsets (0.5 = twice as fast)",
    )
    p.add_argument("--sessions", action="store_true",
                   help="mooncake: also infer sessions from shared hash_ids prefixes (a request whose ids extend "
                        "an earlier request's full blocks continues its session) and write the sessions side file")
    p.add_argument("--session-min-blocks", type=integer(1), default=DEFAULT_SESSION_MIN_BLOCKS,
                   metavar="K", help="mooncake --sessions: shortest shared prefix (blocks) that continues a "
                                     f"session (default {DEFAULT_SESSION_MIN_BLOCKS})")
    p.add_argument(
        "--ignore-eos",
        action="store_true",
        help='add "ignore_eos": true (vLLM/SGLang) so outputs reach output_length',
    )
    p.add_argument("--tokenizer", default=None, metavar="URL|tokenizer.json",
                   help="mooncake, bailian: write each hash block as exactly --block-tokens tokens of this "
                        "tokenizer (a server's POST /tokenize: vLLM, llama-server, serve-sim; or a local "
                        "tokenizer.json), so the trace's prefix structure lands on the server's blocks "
                        "(default: the simulator's pseudo-words)")
    p.add_argument("--force", action="store_true",
                   help="replace an existing --out file (and the files beside it); a device, FIFO, the source "
                        "itself or a non-empty folder is never replaced")


def import_args(args: argparse.Namespace) -> list[str]:
    """Run the format's importer on parsed options; returns the lines to print.

    Raises:
        ConfigError: an option out of range for the format (``--limit``, ``--block-tokens``,
            ``--concurrency``, ``--time-scale``, ``--paths``); an ``--out`` that would clobber
            something (``kvreplay.outpath.check_out``: an existing file without ``--force``, a
            device or FIFO, the source itself, a missing parent folder).
        WorkloadError: a bad source (file, line, field); out of memory.
    """
    from kvreplay.workload.formats import format_of

    fmt = format_of(args.format)
    if "limit" in fmt.options and args.limit is not None and args.limit < 1:
        raise ConfigError("--limit must be >= 1", field="--limit")
    if "block_tokens" in fmt.options and ((args.block_tokens is not None and args.block_tokens < 1)
                                          or args.concurrency < 1 or args.time_scale <= 0):
        raise ConfigError(
            "--block-tokens and --concurrency must be >= 1, --time-scale > 0",
            field="--block-tokens",
        )
    out, beside = fmt.out_paths(args.out)
    check_out(out, force=args.force, inputs=[args.trace], folder=fmt.writes == "folder", siblings=beside,
              make_parents=True)
    options = {k: getattr(args, k) for k in fmt.options}
    if "paths" in options:
        paths = tuple(x.strip() for x in args.paths.split(",") if x.strip())
        if not paths or not all(x.startswith("/") for x in paths):
            raise ConfigError("must be comma-separated URL paths starting with /", field="--paths")
        options["paths"] = paths
    try:
        return fmt.run(args.trace, args.out, **options)
    except MemoryError:  # under an address-space limit (RLIMIT_AS): one line, not a traceback
        raise WorkloadError("ran out of memory importing it (the process's address-space limit, "
                            "RLIMIT_AS, or free memory)", path=args.trace) from None


def _check_options(options: dict[str, Any]) -> None:
    """Check keyword options as the command line checks its flags: the same types, ranges and choices.

    Each value goes through its flag's own parser (``argtypes.integer(1)`` for ``max_tokens``,
    ``number(0, ...)`` for ``think_time``, the format's choices...): a switch must be a bool,
    a number a number (not a bool), a text option a string; ``None`` is accepted where the
    flag's default is ``None``.

    Raises:
        ConfigError: the first bad value, with its keyword as the field.
    """
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    actions = {a.dest: a for a in parser._actions}
    for key, value in options.items():
        a = actions.get(key)
        if a is None:
            continue  # namespace_for names it
        if value is None and a.default is None:
            continue
        if a.nargs == 0:  # a switch (store_true)
            if not isinstance(value, bool):
                raise ConfigError(f"must be True or False, not {value!r}", field=key)
            continue
        if isinstance(value, bool) or (a.type is None and not isinstance(value, str)) \
                or not isinstance(value, (str, int, float)):
            raise ConfigError(f"must be {'a string' if a.type is None else 'a number'}, not {value!r}", field=key)
        if callable(a.type):
            try:
                a.type(str(value))
            except (argparse.ArgumentTypeError, ValueError, TypeError) as exc:
                raise ConfigError(f"{value!r}: {exc}", field=key) from None
        if a.choices is not None and value not in a.choices:
            raise ConfigError(f"{value!r} is not one of {', '.join(map(str, a.choices))}", field=key)


def import_workload(fmt: str, source: PathLike, out: PathLike, **options: Any) -> ImportResult:
    """Make a workload (bodies, arrivals, plan; a sessions side file) from another source (``kvreplay import``).

    Args:
        fmt: A format of ``kvreplay.workload.formats`` (``mooncake``, ``har``, ``openai-batch``,
            ``sharegpt``, ``bailian``...).
        source: The source file (a Mooncake JSONL trace, a HAR file, an OpenAI Batch input...).
        out: The workload to write: a ``.jsonl`` file (mooncake, conversation formats) or a
            folder to create (har, openai-batch); arrivals and plan are written beside it.
        **options: Any other option of ``kvreplay import`` by its Python name, e.g.
            ``limit=500``, ``chat=True``, ``model="m"``, ``paths="/v1/chat/completions"``.

    Returns:
        The ``ImportResult`` (with the importer's lines).

    Raises:
        ConfigError: an unknown format or option, an option of the wrong type or out of range
            (checked as ``kvreplay import`` checks its flags; the keyword named).
        WorkloadError: a bad source (file, line, field).

    Example::

        res = kvreplay.import_workload("mooncake", "fixtures/traces/mooncake_fast25_conversation_trace.jsonl",
                                       "runs/mc/mooncake.jsonl", limit=50)
        for line in res["lines"]:
            print(line)
    """
    from kvreplay.workload.formats import format_names

    if fmt not in format_names():
        raise ConfigError(f"unknown format {fmt!r}: one of {', '.join(format_names())}", field="format")
    _check_options(options)
    values = {"format": fmt, "trace": fspath(source), "out": fspath(out), **options}
    args = namespace_for(add_arguments, values, None)
    return {"format": fmt, "source": args.trace, "out": args.out, "lines": import_args(args)}
