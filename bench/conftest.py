"""Shared fixtures for the benchmarks (kept out of ``testpaths``; run with ``pytest bench/``)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SSE_DIR = ROOT / "fixtures" / "sse"
BENCH_CAPTURES = [
    "openai_chat_gpt-4.1-nano_text.chunks.jsonl",
    "groq_chat_llama-3.3-70b_text.chunks.jsonl",
    "deepseek_chat_deepseek-reasoner_reasoning.chunks.jsonl",
]


def load_capture(name: str) -> bytes:
    """SSE body of a capture (same rules as tests/parity/sse_captures.py)."""
    path = SSE_DIR / name
    raw = path.read_bytes()
    if path.suffix == ".http":
        return raw.partition(b"\n\n")[2]
    if name.endswith(".chunks.jsonl"):
        return b"".join(b"data: " + line + b"\n\n" for line in raw.splitlines() if line.strip())
    return raw


def split_reads(data: bytes, how: str) -> list[bytes]:
    """``whole``: one read; ``event``: one read per SSE event (a token per packet); N: N-byte reads."""
    if how == "whole":
        return [data]
    if how == "event":
        return [e + b"\n\n" for e in data.split(b"\n\n") if e]
    n = int(how)
    return [data[i : i + n] for i in range(0, len(data), n)]


@pytest.fixture(params=BENCH_CAPTURES, ids=lambda n: n.split("_")[0])
def capture_bytes(request) -> bytes:
    """One of the larger corpus streams, framed as SSE."""
    return load_capture(request.param)
