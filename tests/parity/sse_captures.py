"""SSE captures from fixtures/sse/ and ways to cut them into socket reads.

Importable as ``parity.sse_captures`` (``tests/`` is on the pytest pythonpath).
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SSE_DIR = ROOT / "fixtures" / "sse"
SSE_CAPTURES = sorted(p for p in SSE_DIR.iterdir() if p.suffix in (".sse", ".http", ".jsonl"))
CHUNKINGS = ["whole", "1-byte", "crlf-split", "seed-0", "seed-1", "4096"]


def load_capture(path: Path | str) -> bytes:
    """The SSE body of a capture (see fixtures/sse/README.md for the three formats)."""
    path = SSE_DIR / path if isinstance(path, str) else path
    raw = path.read_bytes()
    if path.suffix == ".http":
        head, sep, body = raw.partition(b"\r\n\r\n")
        if not sep:
            head, sep, body = raw.partition(b"\n\n")
        assert sep and head.startswith(b"HTTP/"), path
        return body
    if path.name.endswith(".chunks.jsonl"):
        return b"".join(b"data: " + line + b"\n\n" for line in raw.splitlines() if line.strip())
    return raw


def split(data: bytes, chunking: str) -> list[bytes]:
    """Cut ``data`` into reads.

    ``whole``: one read. ``1-byte``: every byte alone. ``crlf-split``: LF line
    ends turned into CRLF and every read ending between CR and LF.
    ``seed-N``: random read sizes 1..200 from ``random.Random(N)``. A number:
    fixed-size reads of that many bytes.
    """
    if chunking == "whole":
        return [data]
    if chunking == "1-byte":
        return [data[i : i + 1] for i in range(len(data))]
    if chunking == "crlf-split":
        crlf = data.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n")
        return _cut_crlf(crlf)
    if chunking.startswith("seed-"):
        rng = random.Random(int(chunking[5:]))
        out, i = [], 0
        while i < len(data):
            n = rng.randint(1, 200)
            out.append(data[i : i + n])
            i += n
        return out
    size = int(chunking)
    return [data[i : i + size] for i in range(0, len(data), size)]


def _cut_crlf(crlf: bytes) -> list[bytes]:
    out, start = [], 0
    i = crlf.find(b"\r\n")
    while i >= 0:
        out.append(crlf[start : i + 1])  # ends with CR; the next read starts with LF
        start = i + 1
        i = crlf.find(b"\r\n", start + 1)
    if start < len(crlf):
        out.append(crlf[start:])
    return out


def run(cls, chunks: list[bytes], *, times: list[int] | None = None, **kwargs) -> tuple:
    """Feed ``chunks`` to a fresh ``cls(**kwargs)``; read i arrives at ``times[i]`` (default 1000*i ns).

    Returns:
        ``(result as a dict, events, counts per feed, error)`` where error is
        ``None`` or ``(type name, kind, partial, message)`` of the first
        ``StreamError`` (feeding stops there).
    """
    acc = cls(keep_events=True, **kwargs)
    counts, err = [], None
    for i, chunk in enumerate(chunks):
        try:
            counts.append(acc.feed(chunk, times[i] if times else 1000 * i))
        except Exception as exc:  # noqa: BLE001 - compared as data
            err = (type(exc).__name__, getattr(exc, "kind", None), getattr(exc, "partial", None), str(exc))
            break
    result = acc.close()
    return dataclasses.asdict(result), list(acc.events), counts, err
