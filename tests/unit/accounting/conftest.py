"""Fixtures for the accountant unit tests: every test runs on both twins."""

from __future__ import annotations

import importlib
import os

import pytest

IMPLS = ["native", "pure"]


@pytest.fixture(params=IMPLS)
def impl(request):
    """The ``SSEAccountant`` class of one twin (native skipped under KVREPLAY_NO_EXTENSIONS=1)."""
    if request.param == "pure":
        return importlib.import_module("kvreplay.accounting._sse_py").SSEAccountant
    if os.environ.get("KVREPLAY_NO_EXTENSIONS", "") == "1":
        pytest.skip("native twin disabled by KVREPLAY_NO_EXTENSIONS=1")
    # A missing build is reported by tests/parity::test_extension_loaded.
    mod = pytest.importorskip("kvreplay.accounting._sse_c")
    return mod.SSEAccountant


@pytest.fixture(params=IMPLS)
def helpers(request):
    """The module of one twin's stream helpers (``itl_summary_ns``, ``end_marker_in``): ``events`` or ``_sse_c``."""
    if request.param == "pure":
        return importlib.import_module("kvreplay.accounting.events")
    if os.environ.get("KVREPLAY_NO_EXTENSIONS", "") == "1":
        pytest.skip("native twin disabled by KVREPLAY_NO_EXTENSIONS=1")
    return pytest.importorskip("kvreplay.accounting._sse_c")
