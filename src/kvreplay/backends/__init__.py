"""Backend adapters: read a server's native cache counters, identity and load.

One adapter per server family, each satisfying ``kvreplay.runner.backend.Backend``
(the runner owns the contract and never imports this package's internals). Each
family is a ``BackendFamily`` in its adapter's module (name, adapter, one-line
summary, profile, how it is detected), registered in ``_registry``
(``BUILTIN_FAMILIES``; ``register_family`` at run time). ``--backend``'s help, ``make_backend``, ``detect``
and ``detect_text`` read the registry: ``backend_names()`` and ``kvreplay run --help``
list every family.

Adding a family: a module with its adapter and ``FAMILY = BackendFamily(...)``, its
profile (``kvreplay/profiles/<name>.toml``) when it reads Prometheus series, one entry
in ``_registry.BUILTIN_FAMILIES``, and its tests.

Usage::

    name = await detect(base_url, session)
    backend = make_backend(name, base_url, session, profile=None)
    snap = await settled_snapshot(backend, prev=None, interval_s=0.02, timeout_s=2.0)
    res = await wait_drained(backend, interval_s=0.2, timeout_s=10.0)
    ok, reason = check_fresh(snap)          # counters at zero and cache empty
    ok, reason = check_empty(snap)          # cache empty (verifies a reset_cache())

``settled_snapshot``, ``wait_drained``, ``check_fresh`` and ``DrainResult`` are the
runner's own (``kvreplay.runner.counters``), re-exported here so that there is
one implementation. Every HTTP error is translated into ``BackendError`` in
``_http.fetch``.
"""

from kvreplay.runner.counters import DrainResult, check_fresh, settled_snapshot, wait_drained

from ._common import OCCUPANCY_GAUGES, check_empty
from ._families import LlamacppBackend, SglangBackend, VllmBackend
from ._family import BackendFamily, families, family, register_family, unregister_family
from ._halogen import HALOGEN_KEYS, HalogenBackend
from ._openai import OpenAIBackend
from ._profile import Profile, SeriesMap, builtin_profile_names, load_profile
from ._prometheus import PrometheusBackend
from ._registry import BACKEND_NAMES, BUILTIN_FAMILIES, backend_names, detect, detect_text, make_backend, parse_dump

__all__ = [
    "BACKEND_NAMES",
    "BUILTIN_FAMILIES",
    "BackendFamily",
    "DrainResult",
    "HALOGEN_KEYS",
    "HalogenBackend",
    "LlamacppBackend",
    "OCCUPANCY_GAUGES",
    "OpenAIBackend",
    "Profile",
    "PrometheusBackend",
    "SeriesMap",
    "SglangBackend",
    "VllmBackend",
    "backend_names",
    "builtin_profile_names",
    "check_empty",
    "check_fresh",
    "detect",
    "detect_text",
    "families",
    "family",
    "load_profile",
    "make_backend",
    "parse_dump",
    "register_family",
    "settled_snapshot",
    "unregister_family",
    "wait_drained",
]
