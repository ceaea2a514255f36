"""The facade's switch: native by default, pure on request, one warning when native is missing."""

from __future__ import annotations

import importlib
import sys
import warnings

import pytest

import kvreplay.accounting
from kvreplay.accounting import _sse_py, sse


def _reload_with(monkeypatch, *, env: str | None, hide_native: bool):
    if env is None:
        monkeypatch.delenv("KVREPLAY_NO_EXTENSIONS", raising=False)
    else:
        monkeypatch.setenv("KVREPLAY_NO_EXTENSIONS", env)
    if hide_native:
        monkeypatch.setitem(sys.modules, "kvreplay.accounting._sse_c", None)
        monkeypatch.delattr(kvreplay.accounting, "_sse_c", raising=False)
    return importlib.reload(sse)


@pytest.fixture
def restore(monkeypatch):
    yield
    monkeypatch.undo()
    importlib.reload(sse)
    assert sse.SSEAccountant is kvreplay.accounting.SSEAccountant


def test_env_switch_selects_pure(monkeypatch, restore):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mod = _reload_with(monkeypatch, env="1", hide_native=False)
    assert mod.IMPLEMENTATION == "pure" and mod.SSEAccountant is _sse_py.SSEAccountant


def test_missing_native_falls_back_with_one_warning(monkeypatch, restore):
    with pytest.warns(RuntimeWarning, match=r"pure-Python accountant \(no compiler at install time\)") as rec:
        mod = _reload_with(monkeypatch, env=None, hide_native=True)
    assert len(rec) == 1
    assert mod.IMPLEMENTATION == "pure" and mod.SSEAccountant is _sse_py.SSEAccountant
