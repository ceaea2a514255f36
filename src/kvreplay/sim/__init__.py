"""kvreplay.sim: the embedded simulator (an OpenAI-compatible server with cache models).

Pure-Python cache models, importable without aiohttp (offline simulation uses
the same classes as the server):

- ``kvreplay.sim.cache_entries.EntriesCache``: N whole snapshots, strict LRU.
- ``kvreplay.sim.cache_radix.RadixCache``: block prefix cache (vLLM-like),
  optionally backed by ``kvreplay.sim.cache_host.HostTier`` (row and page pools).
- ``kvreplay.sim.tokenizer``: the documented tokenizer approximation and chat template.

The embedded fleet (``start_fleet``, ``Fleet``: N servers behind a router,
``kvreplay.sim.fleet``; its policies in ``kvreplay.sim.routing``), the server
(``SimServer``) and its configuration (``SimConfig``, ``add_arguments``,
``config_from_args``) are imported lazily so that importing
the cache models never imports aiohttp.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvreplay.sim.cache_entries import EntriesCache, EntriesOutcome
from kvreplay.sim.cache_host import HostTier
from kvreplay.sim.cache_radix import RadixCache, RadixOutcome
from kvreplay.sim.prefix import PrefixKeys
from kvreplay.sim.tokenizer import Prompt, render_body, tokenize_text

if TYPE_CHECKING:  # pragma: no cover
    from kvreplay.sim.config import SimConfig, add_arguments, config_from_args
    from kvreplay.sim.fleet import Fleet, start_fleet
    from kvreplay.sim.server import SimServer

__all__ = [
    "EntriesCache",
    "EntriesOutcome",
    "Fleet",
    "HostTier",
    "PrefixKeys",
    "Prompt",
    "RadixCache",
    "RadixOutcome",
    "SimConfig",
    "SimServer",
    "add_arguments",
    "config_from_args",
    "render_body",
    "start_fleet",
    "tokenize_text",
]

_LAZY = {
    "SimConfig": "kvreplay.sim.config",
    "add_arguments": "kvreplay.sim.config",
    "config_from_args": "kvreplay.sim.config",
    "SimServer": "kvreplay.sim.server",
    "Fleet": "kvreplay.sim.fleet",
    "start_fleet": "kvreplay.sim.fleet",
}


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'kvreplay.sim' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(mod), name)
