"""Public surface of kvreplay.sim: sorted __all__, lazy server import, no aiohttp for the models."""

from __future__ import annotations

import subprocess
import sys

import kvreplay.sim as sim


def test_all_sorted_and_resolvable():
    assert sim.__all__ == sorted(sim.__all__)
    for name in sim.__all__:
        assert getattr(sim, name) is not None


def test_cache_models_import_without_aiohttp():
    code = (
        "import sys; import kvreplay.sim.cache_entries, kvreplay.sim.cache_radix, kvreplay.sim.tokenizer; "
        "from kvreplay.sim import EntriesCache, RadixCache, HostTier; "
        "assert 'aiohttp' not in sys.modules, 'aiohttp imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=30)
