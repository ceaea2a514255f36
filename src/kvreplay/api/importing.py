r"""Import a workload from another source: the behaviour of ``kvreplay import`` and ``kvreplay.import_workload``.

``kvreplay import`` (``commands/import_cmd.py``) prints the importer's lines; its options are
``kvreplay.options.importing.ImportConfig``; this module checks them against the format's own
options and runs the format's importer from the registry (``kvreplay.workload.formats``).
Example::

    kvreplay import mooncake fixtures/traces/mooncake_fast25_conversation_trace.jsonl \\
        --out runs/mc/mooncake.jsonl --limit 500
"""

from __future__ import annotations

import os
from dataclasses import fields
from typing import Any, TypedDict

from kvreplay.errors import ConfigError, WorkloadError
from kvreplay.options.importing import ImportConfig
from kvreplay.outpath import check_out

__all__ = ["ImportConfig", "ImportResult", "import_args", "import_workload"]

PathLike = str | os.PathLike[str]


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


def import_args(args: ImportConfig | object) -> list[str]:
    """Run the format's importer on ``kvreplay import``'s options; returns the lines to print.

    ``args`` is an ``ImportConfig`` (an older caller's object of parsed flags by their ``dest`` is
    read into one).

    Raises:
        ConfigError: an option out of range for the format (``--limit``, ``--block-tokens``,
            ``--concurrency``, ``--time-scale``, ``--paths``); an ``--out`` that would clobber
            something (``kvreplay.outpath.check_out``: an existing file without ``--force``, a
            device or FIFO, the source itself, a missing parent folder).
        WorkloadError: a bad source (file, line, field); out of memory.
    """
    from kvreplay.workload.formats import format_of

    if not isinstance(args, ImportConfig):
        from kvreplay.options.declare import from_dests

        args = from_dests(ImportConfig, vars(args))
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

    Each value goes through its flag's own check (``ImportConfig``'s declarations:
    ``argtypes.integer(1)`` for ``max_tokens``, ``number(0, ...)`` for ``think_time``...): a
    switch must be a bool, a number a number (not a bool), a text option a string; ``None`` is
    accepted where the flag's default is ``None``.

    Raises:
        ConfigError: the first bad value, with its keyword as the field.
    """
    from kvreplay.argtypes import CheckError

    declared = {f.name: f for f in fields(ImportConfig)}
    for key, value in options.items():
        f = declared.get(key)
        if f is None:
            continue  # import_workload names it
        m = f.metadata
        if value is None and f.default is None:
            continue
        if m.get("action") == "store_true":
            if not isinstance(value, bool):
                raise ConfigError(f"must be True or False, not {value!r}", field=key)
            continue
        check = m.get("check")
        if isinstance(value, bool) or (check is None and not isinstance(value, str)) \
                or not isinstance(value, (str, int, float)):
            raise ConfigError(f"must be {'a string' if check is None else 'a number'}, not {value!r}", field=key)
        if check is not None:
            try:
                check(str(value))
            except (CheckError, ValueError, TypeError) as exc:
                raise ConfigError(f"{value!r}: {exc}", field=key) from None
        if m.get("choices") is not None and value not in m["choices"]:
            raise ConfigError(f"{value!r} is not one of {', '.join(map(str, m['choices']))}", field=key)


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
    known = {f.name for f in fields(ImportConfig)} - {"format", "trace", "out"}
    for key in options:
        if key not in known:
            raise ConfigError(f"unknown option {key!r}", field=key)
    args = ImportConfig(format=fmt, trace=os.fspath(source), out=os.fspath(out), **options)
    return {"format": fmt, "source": args.trace, "out": args.out, "lines": import_args(args)}
