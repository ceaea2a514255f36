"""The counter and tier vocabulary: the one home of every common counter name.

Common counter names (a key is *absent*, never 0, when the server does not
report it)::

    counters: lookups hits misses hit_tokens query_tokens prompt_tokens computed_tokens
              stores evictions refused host_lookups host_hits host_query_tokens
              host_hit_tokens host_fetched_tokens host_reused_tokens host_stores
              host_evictions
    gauges:   entries bytes host_bytes host_rows_used host_pages_used running waiting
              retiring transfers_in_flight transfers_waiting

``prompt_tokens`` counts every prompt token, cached ones included (vLLM, SGLang);
``computed_tokens`` counts only the prompt tokens the server computed, cache
excluded (llama.cpp's ``prompt_tokens_total``, vLLM's ``source="local_compute"``).
``host_query_tokens`` is the host/external tier's analogue of ``query_tokens``.

Each name has one unit on every backend (``COMMON_UNITS``): ``lookups``,
``hits``, ``misses``, ``host_lookups`` and ``host_hits`` count lookups; the
``*_tokens`` names count tokens. A server that counts lookups and hits in tokens
(vLLM's ``prefix_cache_*`` and ``external_prefix_cache_*``) maps them to the token
names (``TOKEN_TWINS``: ``host_hits`` in tokens is ``host_hit_tokens``).

**Tiers** (``TIERS``): where a restore can come from. ``host`` is the host/KV
connector tier (CPU RAM, an external store), ``device`` the server's own prefix
cache, ``usage`` the answers' ``usage`` ``cached_tokens``. Each counter tier has
*lookup* keys (the tier was asked: ``HOST_LOOKUP_KEYS``, ``DEVICE_LOOKUP_KEYS``)
and *restore* keys, most preferred first (``HOST_KEYS``, ``DEVICE_KEYS``); a
device tier without a lookup counter (llama.cpp) is read through the server's
prompt work (``DEVICE_WORK_KEYS``). The rules that decide from these names live
in ``kvreplay.evidence.engine``.

*Absent is not zero*: a figure that does not exist (a counter the server does
not export, a tier that did not take part in a phase, a delta void by a restart)
is ``None`` in data and ``ABSENT`` (``"absent"``) in tables and cells, never 0.
"""

from __future__ import annotations

__all__ = [
    "ABSENT",
    "COMMON_UNITS",
    "COUNTER_NAMES",
    "DEVICE_KEYS",
    "DEVICE_LOOKUP_KEYS",
    "DEVICE_WORK_KEYS",
    "GAUGE_NAMES",
    "HOST_KEYS",
    "HOST_LOOKUP_KEYS",
    "LOAD_GAUGES",
    "REQUEST_COUNTERS",
    "RESTORE_KEYS",
    "TIERS",
    "TOKEN_TWINS",
    "USAGE_HOST_KEYS",
]

COUNTER_NAMES = (
    "lookups",
    "hits",
    "misses",
    "hit_tokens",
    "query_tokens",
    "prompt_tokens",
    "computed_tokens",
    "stores",
    "evictions",
    "refused",
    "host_lookups",
    "host_hits",
    "host_query_tokens",
    "host_hit_tokens",
    "host_fetched_tokens",
    "host_reused_tokens",
    "host_stores",
    "host_evictions",
)
"""Common counter names (monotonic: a phase's figure is the increase)."""
REQUEST_COUNTERS = ("lookups", "hits", "misses", "hit_tokens", "query_tokens", "prompt_tokens", "computed_tokens")
"""Counters every request moves on the server that serves it, cold ones too (not only hits):
a fleet's C1 attribution names the one replica whose request-level counters moved
(``runner.fleet.attribute_by_counters``)."""
GAUGE_NAMES = (
    "entries",
    "bytes",
    "host_bytes",
    "host_rows_used",
    "host_pages_used",
    "running",
    "waiting",
    "retiring",
    "transfers_in_flight",
    "transfers_waiting",
)
"""Common gauge names (levels: a phase's figure is the later value)."""
COMMON_UNITS = {
    "lookups": "lookups",
    "hits": "lookups",
    "misses": "lookups",
    "hit_tokens": "tokens",
    "query_tokens": "tokens",
    "prompt_tokens": "tokens",
    "computed_tokens": "tokens",
    "host_lookups": "lookups",
    "host_hits": "lookups",
    "host_query_tokens": "tokens",
    "host_hit_tokens": "tokens",
    "host_fetched_tokens": "tokens",
    "host_reused_tokens": "tokens",
    "running": "requests",
    "waiting": "requests",
    "retiring": "requests",
    "transfers_in_flight": "transfers",
    "transfers_waiting": "transfers",
    "bytes": "bytes",
    "host_bytes": "bytes",
    "host_rows_used": "rows",
    "host_pages_used": "pages",
}
"""The one unit of each common name that has a fixed one. ``stores``, ``evictions``,
``refused``, ``entries``, ``host_stores`` and ``host_evictions`` count the server's
own cache units (entries, blocks, rows): their unit is the profile's and is written
to summary.json (``units``)."""
TOKEN_TWINS = {
    "lookups": "query_tokens",
    "hits": "hit_tokens",
    "host_lookups": "host_query_tokens",
    "host_hits": "host_hit_tokens",
}
"""Lookup-count name -> its token-count name: where a profile maps a lookup name
with ``unit = "tokens"`` (as kvreplay's vLLM profile did before ``host_hit_tokens``
existed), the series goes to the token name, so each name keeps one meaning."""
LOAD_GAUGES = ("running", "waiting", "retiring", "transfers_in_flight", "transfers_waiting")
"""Gauges that must read zero for the server to count as drained."""

TIERS = ("host", "device", "usage")
"""The sources of restore evidence, in the order a comparison prefers them."""
HOST_KEYS = ("host_fetched_tokens", "host_reused_tokens", "host_hit_tokens", "host_hits")
"""Host-tier restore counters, most preferred first."""
HOST_LOOKUP_KEYS = ("host_lookups", "host_query_tokens")
"""Host-tier lookup counters: the tier takes part in a phase only when one moved."""
DEVICE_KEYS = ("hit_tokens", "hits")
"""Device-tier restore counters, most preferred first."""
DEVICE_LOOKUP_KEYS = ("lookups", "query_tokens")
"""Device-tier lookup counters: the tier takes part in a phase only when one moved."""
DEVICE_WORK_KEYS = ("prompt_tokens", "computed_tokens")
"""The server's prompt work: stands in for a device lookup counter a server lacks (llama.cpp)."""
RESTORE_KEYS = {"host": HOST_KEYS, "device": DEVICE_KEYS}
"""Counter tier -> its restore keys."""
USAGE_HOST_KEYS = ("host_fetched_tokens", "host_hit_tokens")
"""Host-tier token counters a usage ``cached_tokens`` also counts (the first present is
added: in vLLM both name the same external-hits series, never added twice)."""
ABSENT = "absent"
"""How a table or cell shows a figure that does not exist (never 0)."""
