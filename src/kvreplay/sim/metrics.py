"""Prometheus text (exposition 0.0.4) of the simulator's counters.

Device-tier series use vLLM V1's names, labels and shapes (SERVERS.md section 1,
from ``vllm/v1/metrics/loggers.py``): labels ``engine="0"`` and
``model_name=<model>``; counters end in ``_total`` and each has a ``_created``
gauge family beside it, as prometheus_client prints them (SERVERS.md section 6).
``_created`` and ``process_start_time_seconds`` change on a restart.

=================================================  =========================================
``vllm:prefix_cache_queries_total``                prompt tokens looked up (at admission)
``vllm:prefix_cache_hits_total``                   local hit tokens (device / snapshot)
``vllm:external_prefix_cache_queries_total``       ``n - local hit`` (host tier only)
``vllm:external_prefix_cache_hits_total``          host-tier tokens beyond the local hit
``vllm:prompt_tokens_total``                       all prompt tokens (at finish)
``vllm:prompt_tokens_by_source_total{source}``     local_compute, local_cache_hit, external_kv_transfer
``vllm:prompt_tokens_cached_total``                local + external cached tokens
``vllm:generation_tokens_total``                   output tokens
``vllm:request_success_total{finished_reason}``    stop, length, abort, error
``vllm:num_preemptions_total``                     always 0 (not modelled)
``vllm:num_requests_running`` / ``_waiting``       load gauges (running includes ``busy-gauge``)
``vllm:kv_cache_usage_perc``                       referenced blocks / capacity (0 when idle)
``vllm:cache_config_info``                         1, labels = cache configuration
=================================================  =========================================

Simulator series (``kvreplay_sim:`` prefix; host-tier ones only when a host tier
is configured, absent otherwise — absent means "not reported", never 0). Only
counters end in ``_total``; pool sizes are gauges named ``_capacity``:

=================================================  =========================================
``kvreplay_sim:host_lookups_total``                host lookups (one per request)
``kvreplay_sim:host_hits_total``                   lookups that found a checkpoint
``kvreplay_sim:host_fetched_tokens_total``         tokens copied host -> device
``kvreplay_sim:host_reused_tokens_total``          prompt tokens covered by the checkpoints used
``kvreplay_sim:host_stores_total``                 rows stored
``kvreplay_sim:host_evictions_total``              rows evicted
``kvreplay_sim:host_refused_total``                checkpoints that found no room
``kvreplay_sim:host_compactions_total``            rows folded into a terminal
``kvreplay_sim:host_rows_used`` / ``_capacity``    row pool
``kvreplay_sim:host_pages_used`` / ``_capacity``   page pool
``kvreplay_sim:host_bytes`` / ``_bytes_capacity``  pages x page_tokens x bytes_per_token
``kvreplay_sim:device_blocks_used`` / ``_capacity`` radix device blocks held / capacity
``kvreplay_sim:device_stored_blocks_total``        radix blocks inserted
``kvreplay_sim:device_evicted_blocks_total``       radix blocks evicted
``kvreplay_sim:cache_entries``                     entries model snapshots held
``kvreplay_sim:requests_active``                   requests holding a slot
``kvreplay_sim:requests_pending``                  requests waiting for a slot
``kvreplay_sim:requests_retiring``                 finished requests still storing
``kvreplay_sim:transfers_in_flight`` / ``_waiting`` store/restore copies running / queued
=================================================  =========================================
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from kvreplay.sim.engine import SimEngine

__all__ = ["filter_exposition", "render_metrics"]


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(d: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{_esc(str(v))}"' for k, v in sorted(d.items())) + "}" if d else ""


class _Out:
    def __init__(self, base: dict[str, str], created: float) -> None:
        self.lines: list[str] = []
        self.base = base
        self.created = created

    def counter(self, name: str, help_: str, samples: list[tuple[dict[str, str], float]] | float) -> None:
        if not isinstance(samples, list):
            samples = [({}, samples)]
        self.lines.append(f"# HELP {name}_total {help_}")
        self.lines.append(f"# TYPE {name}_total counter")
        for extra, v in samples:
            self.lines.append(f"{name}_total{_labels({**self.base, **extra})} {float(v)!r}")
        self.lines.append(f"# HELP {name}_created {help_}")
        self.lines.append(f"# TYPE {name}_created gauge")
        for extra, _v in samples:
            self.lines.append(f"{name}_created{_labels({**self.base, **extra})} {self.created!r}")

    def gauge(
        self, name: str, help_: str, value: float, extra: dict[str, str] | None = None, base: bool = True
    ) -> None:
        self.lines.append(f"# HELP {name} {help_}")
        self.lines.append(f"# TYPE {name} gauge")
        labels = {**(self.base if base else {}), **(extra or {})}
        self.lines.append(f"{name}{_labels(labels)} {float(value)!r}")


def render_metrics(eng: SimEngine) -> str:
    """The ``GET /metrics`` body (text/plain; version=0.0.4).

    Args:
        eng: The engine whose counters to print.

    Returns:
        The exposition text, ending with a newline.
    """
    cfg = eng.cfg
    c = eng.counters
    o = _Out({"engine": "0", "model_name": eng.model}, eng.start_time_s)
    o.gauge("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
            eng.start_time_s, base=False)
    o.counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
              c.query_tokens)
    o.counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", c.hit_tokens)
    host = eng.radix.host if eng.radix is not None else None
    if host is not None:
        o.counter("vllm:external_prefix_cache_queries",
                  "External prefix cache queries from KV connector cross-instance cache sharing, "
                  "in terms of number of queried tokens.", c.external_query_tokens)
        o.counter("vllm:external_prefix_cache_hits",
                  "External prefix cache hits from KV connector cross-instance cache sharing, "
                  "in terms of number of cached tokens.", c.external_hit_tokens)
    o.counter("vllm:prompt_tokens", "Number of prefill tokens processed.", c.prompt_tokens)
    o.counter("vllm:prompt_tokens_by_source", "Number of prompt tokens by source.", [
        ({"source": "local_compute"}, c.local_compute),
        ({"source": "local_cache_hit"}, c.local_cache_hit),
        ({"source": "external_kv_transfer"}, c.external_kv_transfer),
    ])
    o.counter("vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external).", c.cached_tokens)
    o.counter("vllm:generation_tokens", "Number of generation tokens processed.", c.generation_tokens)
    o.counter("vllm:request_success", "Count of successfully processed requests.",
              [({"finished_reason": k}, v) for k, v in sorted(c.success.items())])
    o.counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", 0)
    o.gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
            eng.running + eng.phantom_busy)
    o.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", eng.waiting)
    usage = eng.radix.kv_usage if eng.radix is not None else eng.running / cfg.slots
    o.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", usage)
    info = {
        "block_size": str(cfg.block_size if cfg.cache == "radix" else 1),
        "cache_dtype": "auto",
        "enable_prefix_caching": "True",
        "num_gpu_blocks": str(cfg.device_blocks if cfg.cache == "radix" else cfg.cache_entries),
        "num_cpu_blocks": str(cfg.host_pages if host is not None else 0),
        "sim_cache": cfg.cache,
        "sim_build": eng.build,
    }
    o.gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", 1.0, extra=info)
    if eng.radix is not None:
        r = eng.radix
        o.gauge("kvreplay_sim:device_blocks_used", "Radix device blocks held.", r.blocks)
        o.gauge("kvreplay_sim:device_blocks_capacity", "Radix device capacity in blocks.", r.capacity_blocks)
        o.counter("kvreplay_sim:device_stored_blocks", "Radix device blocks inserted.", r.stats.stored_blocks)
        o.counter("kvreplay_sim:device_evicted_blocks", "Radix device blocks evicted.", r.stats.evicted_blocks)
    else:
        assert eng.entries is not None
        o.gauge("kvreplay_sim:cache_entries", "Entries model snapshots held.", eng.entries.entries)
    if host is not None:
        hs = host.stats
        o.counter("kvreplay_sim:host_lookups", "Host tier lookups.", hs.lookups)
        o.counter("kvreplay_sim:host_hits", "Host tier lookups that found a checkpoint.", hs.hits)
        o.counter("kvreplay_sim:host_fetched_tokens", "Tokens copied host to device.", hs.fetched_tokens)
        o.counter("kvreplay_sim:host_reused_tokens", "Prompt tokens covered by host checkpoints used.",
                  hs.reused_tokens)
        o.counter("kvreplay_sim:host_stores", "Host rows stored.", hs.stores)
        o.counter("kvreplay_sim:host_evictions", "Host rows evicted.", hs.evictions)
        o.counter("kvreplay_sim:host_refused", "Host checkpoints refused for lack of room.", hs.refused)
        o.counter("kvreplay_sim:host_compactions", "Host rows folded into a terminal row.", hs.compactions)
        o.gauge("kvreplay_sim:host_rows_used", "Host rows held.", host.rows_used)
        o.gauge("kvreplay_sim:host_rows_capacity", "Host row pool size.", host.rows_total)
        o.gauge("kvreplay_sim:host_pages_used", "Host pages held.", host.pages_used)
        o.gauge("kvreplay_sim:host_pages_capacity", "Host page pool size.", host.pages_total)
        o.gauge("kvreplay_sim:host_bytes", "Host bytes held.", host.bytes)
        o.gauge("kvreplay_sim:host_bytes_capacity", "Host capacity in bytes.", host.bytes_total)
    o.gauge("kvreplay_sim:requests_active", "Requests holding a slot.", eng.running)
    o.gauge("kvreplay_sim:requests_pending", "Requests waiting for a slot.", eng.waiting)
    o.gauge("kvreplay_sim:requests_retiring", "Finished requests whose stores are still running.", eng.retiring)
    o.gauge("kvreplay_sim:transfers_in_flight", "Store/restore copies running.", eng.transfers_in_flight)
    o.gauge("kvreplay_sim:transfers_waiting", "Store/restore copies queued.", eng.transfers_waiting)
    return "\n".join(o.lines) + "\n"


def filter_exposition(text: str, names: set[str]) -> str:
    """Only the samples named in ``names``, as prometheus_client answers ``?name[]=...``.

    A family's ``# HELP``/``# TYPE`` lines are kept only when one of its samples
    is (prometheus_client's ``restricted_registry``).
    """
    out: list[str] = []
    head: list[str] = []
    family = ""
    for line in text.splitlines():
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE") and parts[2] != family:
                family, head = parts[2], []
            head.append(line)
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in names:
            out.extend(head)
            head = []
            out.append(line)
    return "\n".join(out) + ("\n" if out else "")
