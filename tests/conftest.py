"""Shared fixtures."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from helpers import write_chat_workload
from hypothesis import settings
from hypothesis.configuration import set_hypothesis_home_dir

# pytester for the pytest plugin's tests (tests/plugin); only a top-level conftest may name plugins.
pytest_plugins = ["pytester"]

# Hypothesis: derandomized (examples drawn from a seed fixed per test, so a failure
# reproduces and every CI run is identical) and with no example database, so no
# .hypothesis/ directory is ever written into the checkout.
settings.register_profile("kvreplay", derandomize=True, database=None)
settings.load_profile("kvreplay")
# Hypothesis's own cache directory too (it defaults to ./.hypothesis).
set_hypothesis_home_dir(
    os.environ.get("KVREPLAY_HYPOTHESIS_HOME") or os.path.join(tempfile.gettempdir(), "kvreplay-hypothesis")
)


@pytest.fixture
def small_workload(tmp_path: Path) -> Path:
    """Six chat bodies sharing one system block."""
    return write_chat_workload(tmp_path / "wl", [("You are terse. " * 20, f"question {i}?") for i in range(6)])
