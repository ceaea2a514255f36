"""The tiny model makers are deterministic and need no download."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from kvreplay import testing as kt

pytestmark = [pytest.mark.real_server, pytest.mark.timeout(300)]


def digest(path: Path) -> dict[str, str]:
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def test_gguf_same_seed_same_bytes(tmp_path, tiny_gguf_model):
    again = kt.make_tiny_gguf(tmp_path / "again.gguf")
    other = kt.make_tiny_gguf(tmp_path / "other.gguf", seed=1)
    assert digest(again)["again.gguf"] == digest(tiny_gguf_model)["tiny.gguf"]
    assert digest(other)["other.gguf"] != digest(again)["again.gguf"]
    assert 20e6 < tiny_gguf_model.stat().st_size < 50e6


def test_hf_same_seed_same_files(tmp_path, tiny_hf_model):
    again = kt.make_tiny_hf(tmp_path / "again")
    d0, d1 = digest(tiny_hf_model), digest(again)
    assert d0 == d1
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= set(
        d0
    )
