"""Fixtures for the ``real_server`` tests: tiny models, real vLLM / llama-server processes.

The servers are installed by ``scripts/setup_real_servers.sh`` (``make test`` runs
it first). When an install is missing the tests skip, except under ``CI=true``,
where a missing install fails the fixture and any skip of a ``real_server`` test
is turned into a failure (a skip there would hide that the claims were not checked).

Servers run on a free 127.0.0.1 port, are polled for readiness within a bound,
and are stopped by their process id at the end of the module, also when a test
fails. Server logs are kept in the session's temporary directory; a failing
start prints their tail.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kvreplay import testing as kt

ROOT = Path(__file__).resolve().parents[3]
BUNDLED_WORKLOAD = ROOT / "fixtures" / "workloads" / "mtbench-52"
IN_CI = os.environ.get("CI", "").lower() == "true"


def require(found: object, what: str) -> None:
    """Skip (fail under CI=true) when an install is missing."""
    if found:
        return
    msg = f"{what} is not installed: run scripts/setup_real_servers.sh (make test does)"
    if IN_CI:
        pytest.fail(f"CI=true: {msg}", pytrace=False)
    pytest.skip(msg)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if (IN_CI and rep.skipped and item.get_closest_marker("real_server") is not None
            and not hasattr(rep, "wasxfail")):
            rep.outcome = "failed"
            rep.longrepr = (
                f"CI=true: real_server test skipped ({rep.longrepr}); a skip in CI is a failure"
            )


@pytest.fixture(scope="session")
def realsrv_tmp(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("realsrv")


@pytest.fixture(scope="session")
def tiny_workload(realsrv_tmp) -> Path:
    """12 bodies of the bundled workload, cut to fit a 4k context (shared system block kept)."""
    out = realsrv_tmp / "mtbench-12-tiny"
    kt.scale_down(
        BUNDLED_WORKLOAD, out, n_bodies=12, system_chars=2400, message_chars=400, max_tokens=8
    )
    return out


@pytest.fixture(scope="session")
def tiny_hf_model(realsrv_tmp) -> Path:
    require(kt.vllm_python(), "the vLLM CPU environment")
    return kt.make_tiny_hf(realsrv_tmp / "tiny-hf")


@pytest.fixture(scope="session")
def tiny_gguf_model(realsrv_tmp) -> Path:
    require(kt.gguf_python(), "the gguf writer environment")
    return kt.make_tiny_gguf(realsrv_tmp / "tiny.gguf")


@pytest.fixture(scope="module")
def vllm_server(tiny_hf_model, realsrv_tmp):
    require(kt.vllm_python(), "the vLLM CPU environment")
    # VLLM_SERVER_DEV_MODE=1 mounts POST /reset_prefix_cache (the cold sweep points empty the cache)
    srv = kt.start_vllm(tiny_hf_model, log_path=realsrv_tmp / "vllm.log", ready_timeout_s=600,
                        extra_env={"VLLM_SERVER_DEV_MODE": "1"})
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def llama_server(tiny_gguf_model, realsrv_tmp):
    require(kt.llama_server_binary(), "llama-server")
    # --slot-save-path enables POST /slots/N?action=erase (the conversation test empties the slots)
    (realsrv_tmp / "llama-slots").mkdir(exist_ok=True)
    srv = kt.start_llama_server(
        tiny_gguf_model, log_path=realsrv_tmp / "llama-server.log", slots=4, ctx_per_slot=4096,
        extra_args=("--slot-save-path", str(realsrv_tmp / "llama-slots")),
    )
    try:
        yield srv
    finally:
        srv.stop()
