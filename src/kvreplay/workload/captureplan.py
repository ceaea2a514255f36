"""The files beside a capture folder ``W``: ``W.arrivals.json`` and ``W.plan.toml``, and TOML escaping.

Written by ``kvreplay record`` and the HAR / OpenAI Batch importers (through
``workload.capture``) and, for its names, by ``kvreplay import mooncake``.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from kvreplay.safe_io import atomic_write_bytes

__all__ = ["sidecar_paths", "toml_comment", "toml_str", "write_plan"]


def sidecar_paths(folder: str | Path) -> tuple[Path, Path]:
    """``(W.arrivals.json, W.plan.toml)`` beside the folder ``W``."""
    w = Path(folder)
    return w.with_name(w.name + ".arrivals.json"), w.with_name(w.name + ".plan.toml")


def toml_str(s: str) -> str:
    r"""``s`` as a TOML basic string (quotes included): ``\``, ``"`` and every control character escaped.

    TOML 1.0 ("String"): a basic string may hold any Unicode character but ``"``,
    ``\`` and the control characters U+0000-U+001F and U+007F, which are written
    as ``\uXXXX`` here (a newline in a path then stays inside its string).

    Raises:
        ValueError: ``s`` holds a lone surrogate (a file name that is not UTF-8), which
            no TOML file can hold.
    """
    out = []
    for c in s:
        o = ord(c)
        if 0xD800 <= o <= 0xDFFF:
            raise ValueError("holds bytes that are not UTF-8; a TOML plan cannot name it")
        if c in ('"', "\\"):
            out.append("\\" + c)
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\u{o:04X}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def toml_comment(s: str) -> str:
    r"""``s`` made safe as the text of one TOML comment line (control characters shown as ``\xNN``)."""
    return "".join(f"\\x{ord(c):02x}" if ord(c) < 0x20 and c != "\t" or ord(c) == 0x7F
                   else f"\\u{ord(c):04x}" if 0xD800 <= ord(c) <= 0xDFFF else c for c in s)


def write_plan(
    folder: str | Path,
    arrivals_ms: list[float] | None,
    concurrency: int,
    comment: str,
    *,
    fsync: bool = True,
) -> tuple[Path | None, Path]:
    """Write ``W.arrivals.json`` (when ``arrivals_ms`` is given) and ``W.plan.toml`` beside ``W``.

    The plan names ``W`` as given (paths are as given: run from the same
    directory, as for ``kvreplay import mooncake``) and one phase ``capture``,
    forward order; open loop over the arrivals (``trace:``), or a closed loop
    at ``concurrency`` when there are no arrivals (OpenAI Batch input has no
    times).

    Args:
        folder: The capture folder ``W``.
        arrivals_ms: Arrival offsets (ms, first = 0), one per body, or None.
        concurrency: The phase's cap on requests in flight (>= 1).
        comment: First comment line of the plan (what made it); no newline.
        fsync: Sync each file and its directory (``safe_io.atomic_write_bytes``); False for the
            proxy's periodic rewrites, which stay atomic (rename) without a disk flush on the
            event loop (about 4 ms each on a busy disk); its last write syncs.

    Returns:
        The arrivals path (None when not written) and the plan path.
    """
    arrivals, plan = sidecar_paths(folder)
    lines = [f"# {toml_comment(comment)}", "# Paths are as given on the command line: run from the same directory.",
             f"workload = {toml_str(str(folder))}", "", "[[phase]]", 'name = "capture"',
             'order = "forward"', f"concurrency = {max(1, concurrency)}"]
    if arrivals_ms is not None:
        atomic_write_bytes(arrivals, orjson.dumps(arrivals_ms), fsync=fsync)
        lines += [f"arrival = {toml_str('trace:' + str(arrivals))}", "time_scale = 1.0"]
    atomic_write_bytes(plan, ("\n".join(lines) + "\n").encode(), fsync=fsync)
    return (arrivals if arrivals_ms is not None else None), plan
