"""Shared fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import write_chat_workload


@pytest.fixture
def small_workload(tmp_path: Path) -> Path:
    """Six chat bodies sharing one system block."""
    return write_chat_workload(tmp_path / "wl", [("You are terse. " * 20, f"question {i}?") for i in range(6)])
