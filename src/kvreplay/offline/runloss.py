"""The routing loss of a fleet run: summary.json ``phases[].routing_loss`` (issue 33 item 4).

A fleet run's records name the replica that served each request (``replica``);
this module turns them, the frozen plan and the replicas' cache models into
``offline.routing.routing_loss`` per phase:

- the requests: every sent record of the run in send order (plan phase order,
  then ``position``), rendered as the simulator renders them
  (``sources.model_requests``); a reset phase starts a new cache epoch; records
  of other phases (and interleaved foreign bodies) are served but not counted,
  so phase *k* is simulated with the caches phases before it left;
- the cache model of each replica: the simulator's configuration when the target
  was the embedded fleet (plan.json ``run.sim_fleet.config``), else the model a probe
  verdict calibrates (``--replica-cache-from VERDICT``: ``run.replica_cache.config``,
  said in ``note``), or each replica's own (``--replica URL,verdict=FILE``:
  ``run.replica_cache.per_replica``, each replica's tokens then converted with its own
  ratio), or, for an external ``serve-sim`` fleet, each replica's ``/version`` cache
  configuration as the run's identity read kept it (``version_models``); otherwise none is
  known and the phase gets
  ``{"note": "no cache model: routing loss not computed"}``. A verdict's block size,
  counted in the server's tokens, is modelled in the simulator's (``server_blocks``:
  block / the replica's ratio over the run);
- the observed assignment: each record's ``replica`` mapped to its index in
  plan.json ``run.fleet.replicas``; a sent record naming no replica leaves no
  observed figure (said in ``note``);
- measured cached tokens: the sum of the phase's records' ``usage.cached_tokens``;
- the unit conversion (``add_server_units``): the figures are in the simulator's
  tokens, a real server counts in its own tokenizer's (llama-server's tiny
  vocabulary: 2.235 of its tokens per simulator token on the bundled workload), so
  where the phase's records carry ``usage.prompt_tokens`` (the server's own count)
  ``server_tokens_per_sim_token`` = their sum over the simulated prompt tokens of
  the same requests, each policy gets ``cached_tokens_server`` = round(cached
  tokens x that ratio), and ``observed_vs_measured_pct`` compares the observed
  figure in those units (the raw one stays as ``observed_vs_measured_pct_sim_tokens``).
  Against the embedded simulator the ratio is exactly 1.

The observed figure replays the assignment one request at a time: exact at
concurrency 1 (records in send order); above C1 requests overlap on the server,
which the ``note`` says.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from typing import Any

from kvreplay.errors import ConfigError, KvreplayError
from kvreplay.offline.routing import loss_sentence, routing_loss
from kvreplay.offline.sources import ModelRequest, model_requests
from kvreplay.sim.config import SimConfig

__all__ = ["NO_MODEL", "SIM_FLEET_FIELDS", "add_routing_loss", "add_server_units", "finish_routing_loss",
           "run_routing_loss", "sim_fleet_json", "version_models"]

NO_MODEL = "no cache model: routing loss not computed"
"""The ``note`` of a phase whose replicas' cache models are not known."""

SIM_FLEET_FIELDS = (
    "cache", "cache_entries", "snapshots", "snapshot_at", "bytes_per_token", "max_entry_bytes",
    "refuse_over_bytes", "max_bytes", "block_size", "device_blocks", "host_rows", "host_pages",
    "page_tokens", "host_evict", "entries_recency", "output_tokens", "max_output_tokens",
)
"""The ``SimConfig`` fields a replica's cache model (and its outputs) depend on: plan.json ``run.sim_fleet.config``."""


def sim_fleet_json(config: SimConfig, replicas: int, router: str | None, seed: int = 0) -> dict[str, Any]:
    """plan.json ``run.sim_fleet`` of a ``--target sim --sim-replicas N`` run (and ``run.replica_cache``).

    Returns:
        ``{"replicas", "router", "seed", "config": {field: value}}`` (``SIM_FLEET_FIELDS``;
        tuples as lists).
    """
    cfg = {k: (list(v) if isinstance(v, tuple) else v) for k in SIM_FLEET_FIELDS
           if (v := getattr(config, k)) is not None}
    return {"replicas": replicas, "router": router, "seed": seed, "config": cfg}


_VERSION_KEYS = {"model": "cache", "entries": "cache_entries", "snapshots": "snapshots",
                 "snapshot_at": "snapshot_at", "entries_recency": "entries_recency",
                 "bytes_per_token": "bytes_per_token", "max_entry_bytes": "max_entry_bytes", "max_bytes": "max_bytes",
                 "block_size": "block_size", "device_blocks": "device_blocks", "host_rows": "host_rows",
                 "host_pages": "host_pages", "page_tokens": "page_tokens", "host_evict": "host_evict"}
"""A serve-sim ``/version`` ``cache`` key -> its ``SimConfig`` field (``sim.server.cache_identity``)."""


def version_models(summary: dict[str, Any], urls: Sequence[Any]) -> dict[str, Any] | None:
    """A ``run.replica_cache`` block from each replica's ``/version`` cache configuration, or None.

    An external ``kvreplay serve-sim`` fleet states each replica's cache in its ``/version``
    (``sim.server.cache_identity``), which the run's identity read keeps
    (summary.json ``identity.before.replicas[URL].version.cache``): with it every replica has
    its cache model without a verdict. None when some replica's identity has no such object
    (a real server).

    Returns:
        ``{"source": "/version", "from_version": True, "per_replica": [{"url", "source", "config"}]}``.
    """
    ident = ((summary.get("identity") or {}).get("before") or {})
    reps = ident.get("replicas") if isinstance(ident, dict) else None
    if not isinstance(reps, dict) or not urls:
        return None
    per = []
    for u in urls:
        ver = (reps.get(u) or {}).get("version") if isinstance(reps.get(u), dict) else None
        cache = ver.get("cache") if isinstance(ver, dict) else None
        if not isinstance(cache, dict) or cache.get("model") not in ("entries", "radix"):
            return None
        cfg = {f: (tuple(v) if isinstance(v, list) else v) for k, f in _VERSION_KEYS.items()
               if (v := cache.get(k)) is not None}
        per.append({"url": u, "source": f"{u}/version", "config": cfg})
    return {"source": "/version", "from_version": True, "per_replica": per}


def _models(run_block: dict[str, Any], urls: list[Any]) -> tuple[list[SimConfig], str] | None:
    n = len(urls)
    rc = run_block.get("replica_cache")
    if isinstance(rc, dict) and isinstance(rc.get("per_replica"), list):  # a mixed fleet: a model per replica
        by = {e.get("url"): e for e in rc["per_replica"] if isinstance(e, dict)}
        missing = [u for u in urls if not isinstance((by.get(u) or {}).get("config"), dict)]
        if missing:
            raise ConfigError(f"no cache model for replica {missing[0]}", field="plan.json run.replica_cache")
        return [SimConfig.from_mapping(by[u]["config"], where=f"plan.json run.replica_cache ({u})")
                for u in urls], "per_replica"
    for key in ("sim_fleet", "replica_cache"):
        sf = run_block.get(key)
        if isinstance(sf, dict) and isinstance(sf.get("config"), dict):
            cfg = SimConfig.from_mapping(sf["config"], where=f"plan.json run.{key}.config")
            return [cfg] * n, key
    return None


def run_routing_loss(
    phases: Sequence[tuple[str, bool, int]],
    workload: Any,
    run_block: dict[str, Any],
    records: Iterable[dict[str, Any]],
    *,
    main_bodies: int | None = None,
) -> dict[str, dict[str, Any]]:
    """``phases[].routing_loss`` of a fleet run, by phase name.

    Args:
        phases: ``(name, reset, concurrency)`` of every plan phase, in plan order.
        workload: The bound workload the records' ``body_index`` indexes (``plan.bind``).
        run_block: plan.json ``run`` (``fleet.replicas``; ``sim_fleet`` for the cache models).
        records: The run's records (any order).
        main_bodies: Bodies of the main workload (indices at or above are
            interleaved foreign traffic: served, never counted); None = all.

    Returns:
        Phase name -> the ``routing_loss`` object plus ``note`` (text or None);
        ``{"note": NO_MODEL}`` where no cache model is known. Empty for a run
        that is not a fleet's.

    Raises:
        ConfigError: a bad ``run.sim_fleet.config``.
        WorkloadError: a body the simulator's tokenizer cannot render.
    """
    fleet = run_block.get("fleet")
    if not isinstance(fleet, dict) or not fleet.get("replicas"):
        return {}
    urls = [r.get("url") if isinstance(r, dict) else r for r in fleet["replicas"]]
    index = {u: i for i, u in enumerate(urls)}
    found = _models(run_block, urls)
    if found is None:
        return {name: {"note": NO_MODEL} for name, _, _ in phases}
    models, source = found
    order = {name: i for i, (name, _, _) in enumerate(phases)}
    sent = sorted((r for r in records if r.get("sent") and r.get("phase") in order),
                  key=lambda r: (order[r["phase"]], r.get("position", 0)))
    epochs: list[int] = []
    epoch, last = 0, None
    for r in sent:
        k = order[r["phase"]]
        if last is not None and k != last and any(phases[j][1] for j in range(last + 1, k + 1)):
            epoch += 1
        last = k
        epochs.append(epoch)
    base = models[0]
    rendered = model_requests(workload, [r["body_index"] for r in sent], epochs=epochs,
                              output_tokens=base.output_tokens, max_output_tokens=base.max_output_tokens)
    picks = [index.get(r.get("replica")) for r in sent]
    seed = int((run_block.get("sim_fleet") or {}).get("seed", 0))
    block_notes: list[str] = []
    if source != "sim_fleet":
        models, block_notes = server_blocks(models, _server_block_sizes(run_block, urls, source),
                                            run_ratios(sent, rendered, picks, len(urls),
                                                       per_replica=source == "per_replica"), urls)
    out: dict[str, dict[str, Any]] = {}
    for name, _reset, conc in phases:
        mine = [r.get("phase") == name for r in sent]
        if not any(mine):
            continue
        last_pos = max(i for i, m in enumerate(mine) if m)
        reqs = [ModelRequest(q.tokens, q.output, q.system_end, q.messages_end,
                             m and (main_bodies is None or r["body_index"] < main_bodies), q.epoch)
                for q, m, r in zip(rendered[:last_pos + 1], mine, sent, strict=False)]
        notes = []
        if source == "replica_cache":
            notes.append(f"cache model of every replica calibrated from the probe verdict "
                         f"{run_block['replica_cache'].get('source')}; prompts rendered with the simulator's "
                         "tokenizer, so the figures approximate the server's")
        elif source == "per_replica" and run_block["replica_cache"].get("from_version"):
            notes.append("each replica's cache model read from its /version (kvreplay serve-sim's cache "
                         "configuration; outputs at the simulator's default lengths)")
        elif source == "per_replica":
            notes.append("each replica's cache model calibrated from its own probe verdict ("
                         + ", ".join(f"{e.get('url')}: {e.get('source')}"
                                     for e in run_block["replica_cache"]["per_replica"])
                         + "), and each replica's tokens converted with its own ratio; prompts rendered with "
                         "the simulator's tokenizer, so the figures approximate the servers'")
        notes += block_notes
        observed: list[int] | None = [p for p in picks[:last_pos + 1] if p is not None]
        if observed is not None and len(observed) != last_pos + 1:
            observed = None
            notes.append("a sent record names no listed replica: no observed figure")
        if conc > 1:
            notes.append(f"concurrency {conc}: the observed figure replays the assignment one request at a "
                         "time in send order, exact only at C1")
        measured = sum(int((r.get("usage") or {}).get("cached_tokens") or 0)
                       for r, q in zip(sent, reqs, strict=False) if q.counted)
        loss = routing_loss(reqs, models, observed=observed, seed=seed, measured_cached_tokens=measured,
                            observed_label="each record's replica")
        counted = [(r, q) for r, q in zip(sent, reqs, strict=False) if q.counted]
        with_usage = [(r["usage"]["prompt_tokens"], len(q.tokens)) for r, q in counted
                      if isinstance(r.get("usage"), dict) and isinstance(r["usage"].get("prompt_tokens"), int)]
        if with_usage and len(with_usage) < len(counted):
            notes.append(f"server_tokens_per_sim_token from the {len(with_usage)} of {len(counted)} requests "
                         "whose records carry usage.prompt_tokens")
        add_server_units(loss, sum(s for s, _ in with_usage) if with_usage else None,
                         sum(t for _, t in with_usage))
        if source == "per_replica":
            _per_replica_units(loss, urls, [(r, q, p) for r, q, p in zip(sent, reqs, picks, strict=False)
                                            if q.counted])
        if loss["observed"] is not None:  # per position of this phase only
            keep = [i for i, m in enumerate(mine[:last_pos + 1]) if m]
            loss["observed"] = {k: [v[i] for i in keep] for k, v in loss["observed"].items()}
        loss["note"] = "; ".join(notes) or None
        out[name] = loss
    return out


def _server_block_sizes(run_block: dict[str, Any], urls: list[Any], source: str) -> list[int | None]:
    """Each replica's verdict block size in its server's tokens (``server_block_size``), None where not recorded.

    ``api.fleet.replica_cache_extra`` records it where the verdict's cached-token counts gave the
    block size (their gcd); plan.json files written before it have none (their figures stay as they were).
    """
    rc = run_block.get("replica_cache")
    if not isinstance(rc, dict) or rc.get("from_version"):
        return [None] * len(urls)
    if source == "per_replica":
        by = {e.get("url"): e for e in rc.get("per_replica") or [] if isinstance(e, dict)}
        got = [(by.get(u) or {}).get("server_block_size") for u in urls]
    else:
        got = [rc.get("server_block_size")] * len(urls)
    return [b if isinstance(b, int) and not isinstance(b, bool) and b > 0 else None for b in got]


def run_ratios(sent: Sequence[dict[str, Any]], rendered: Sequence[ModelRequest], picks: Sequence[int | None],
               n: int, *, per_replica: bool) -> list[Fraction | None]:
    """The server's tokens per simulator token over the whole run: each replica's, or the fleet's for every one.

    Args:
        sent: The sent records in send order.
        rendered: Their model requests (the simulator's tokens), in the same order.
        picks: Each record's replica index, None where it names none.
        n: Number of replicas.
        per_replica: Each replica's own ratio (its records' ``usage.prompt_tokens`` over their
            simulated prompt tokens; the fleet's where it served none with usage); else the fleet's for all.

    Returns:
        One ``Fraction`` per replica, None where no record carries ``usage.prompt_tokens``.
    """
    srv, sim = [0] * n, [0] * n
    for r, q, k in zip(sent, rendered, picks, strict=False):
        u = r.get("usage")
        if isinstance(u, dict) and isinstance(u.get("prompt_tokens"), int) and q.tokens:
            i = 0 if k is None or not per_replica else k
            srv[i] += u["prompt_tokens"]
            sim[i] += len(q.tokens)
    fleet = Fraction(sum(srv), sum(sim)) if sum(sim) else None
    return [Fraction(srv[i], sim[i]) if per_replica and sim[i] else fleet for i in range(n)]


def server_blocks(models: list[SimConfig], blocks: Sequence[int | None], ratios: Sequence[Fraction | None],
                  urls: Sequence[Any]) -> tuple[list[SimConfig], list[str]]:
    """Radix models whose block size a verdict gave in the server's tokens, in simulator tokens.

    A probe verdict's block size is the gcd of the cached-token counts the server reported
    (``sim.calibrate``: vLLM's 128), counted in the server's tokens, and its capacity is a number
    of those blocks; the routing loss renders prompts with the simulator's tokenizer. Replica
    ``i``'s block becomes ``max(1, round(block_i / ratio_i))`` simulator tokens (ties to even),
    ratio_i its server's tokens per simulator token (``run_ratios``), the number of blocks kept:
    a 9-block prefix on the server is about 9 blocks in the model, not 9 x 128 / ratio_i tokens
    rounded down to 128.

    Args:
        models: Each replica's model.
        blocks: Each replica's verdict block size in its server's tokens, None where not recorded.
        ratios: Each replica's ratio, None where unknown (the model then stays as it is).
        urls: The replicas' names (for the notes).

    Returns:
        The models (changed ones are copies) and one note per replica changed.
    """
    out, notes = [], []
    for cfg, b, ratio, u in zip(models, blocks, ratios, urls, strict=True):
        if b is None or ratio is None or ratio <= 0 or cfg.cache != "radix" or cfg.block_size != b:
            out.append(cfg)
            continue
        size = max(1, round(Fraction(b) / ratio))
        out.append(replace(cfg, block_size=size))
        notes.append(f"{u}: the verdict's {b}-token block (the server's tokens) modelled as {size} simulator "
                     f"tokens (÷ {float(ratio):.4g})")
    return out, notes


def _per_replica_units(loss: dict[str, Any], urls: list[Any],
                       served: list[tuple[dict[str, Any], ModelRequest, int | None]]) -> None:
    """A mixed fleet's units, replica by replica (in place): each replica's own token ratio.

    For replica ``i``: ``ratio_i`` = its records' ``usage.prompt_tokens`` over the simulated
    prompt tokens of the same requests (the fleet's ratio where it served none with usage).
    Every policy's ``cached_tokens_server`` becomes the sum of round(``per_replica_cached_tokens[i]``
    x ``ratio_i``); ``server_tokens_per_sim_token_per_replica`` lists the ratios, and
    ``per_replica_vs_measured`` each replica's observed figure (in its server's tokens) against
    the sum of its records' ``usage.cached_tokens``: ``{"url", "observed_cached_tokens_server",
    "measured_cached_tokens", "pct"}``. The fleet's ``observed_vs_measured_pct`` and sentence
    are redone on these figures.

    Args:
        loss: The phase's ``routing_loss`` object after ``add_server_units``.
        urls: The replicas' URLs in index order.
        served: ``(record, model request, replica index or None)`` of every counted request.
    """
    n = len(urls)
    srv, sim, meas = [0] * n, [0] * n, [0] * n
    for r, q, k in served:
        if k is None:
            continue
        u: dict[str, Any] = r["usage"] if isinstance(r.get("usage"), dict) else {}
        if isinstance(u.get("prompt_tokens"), int):
            srv[k] += u["prompt_tokens"]
            sim[k] += len(q.tokens)
        meas[k] += int(u.get("cached_tokens") or 0)
    fleet_ratio = Fraction(sum(srv), sum(sim)) if sum(sim) else None
    ratios = [Fraction(srv[i], sim[i]) if sim[i] else fleet_ratio for i in range(n)]
    loss["server_tokens_per_sim_token_per_replica"] = [None if x is None else float(x) for x in ratios]
    if any(x is None for x in ratios):
        return
    for fig in loss["policies"].values():
        per = fig.get("per_replica_cached_tokens") or []
        if len(per) == n:
            fig["cached_tokens_server"] = sum(round(c * ratios[i]) for i, c in enumerate(per))
    obs = loss["policies"].get("observed")
    if obs is None:
        return
    rows = []
    for i, u in enumerate(urls):
        o = round(obs["per_replica_cached_tokens"][i] * ratios[i])
        rows.append({"url": u, "observed_cached_tokens_server": o, "measured_cached_tokens": meas[i],
                     "pct": 100.0 * o / meas[i] if meas[i] else None})
    loss["per_replica_vs_measured"] = rows
    if loss.get("measured_cached_tokens"):
        loss["observed_vs_measured_pct"] = 100.0 * obs["cached_tokens_server"] / loss["measured_cached_tokens"]
    loss["sentence"] = loss_sentence(loss)


def add_server_units(loss: dict[str, Any], server_prompt_tokens: int | None, sim_prompt_tokens: int) -> None:
    """Add the server's token units to a ``routing_loss`` object (in place).

    Args:
        loss: ``offline.routing.routing_loss``'s object (figures in simulator tokens).
        server_prompt_tokens: The sum of the records' ``usage.prompt_tokens`` (the
            server's own count), or None when no record carries it.
        sim_prompt_tokens: The simulated prompt tokens (simulator tokens) of the same requests.

    Sets ``server_tokens_per_sim_token`` (server over simulated prompt tokens; None
    without a server count or with no simulated tokens), ``cached_tokens_server``
    of every policy (round(cached tokens x the ratio), exact: a fraction, ties to
    even; None without a ratio), ``observed_vs_measured_pct_sim_tokens`` (the
    observed figure in simulator tokens over the measured cached tokens, x 100) and
    ``observed_vs_measured_pct`` (the same on ``cached_tokens_server`` where the
    ratio is known, else the simulator-token figure), and rebuilds ``sentence``
    (its figures in the server's tokens when the ratio is not 1).
    """
    ratio = (Fraction(server_prompt_tokens, sim_prompt_tokens)
             if server_prompt_tokens is not None and sim_prompt_tokens > 0 else None)
    loss["server_tokens_per_sim_token"] = None if ratio is None else float(ratio)
    for fig in loss["policies"].values():
        fig["cached_tokens_server"] = None if ratio is None else round(fig["cached_tokens"] * ratio)
    raw = loss.get("observed_vs_measured_pct")
    loss["observed_vs_measured_pct_sim_tokens"] = raw
    measured = loss.get("measured_cached_tokens")
    if raw is not None and ratio is not None and measured:
        loss["observed_vs_measured_pct"] = 100.0 * loss["policies"]["observed"]["cached_tokens_server"] / measured
    loss["sentence"] = loss_sentence(loss)


def add_routing_loss(run_dir: Path, summary: dict[str, Any], *, plan: Any = None, workload: Any = None) -> bool:
    """Fill ``phases[].routing_loss`` of a fleet run's summary from its directory (records and plan.json).

    Where the summary is built: ``kvreplay run`` once the runner wrote it, and
    ``kvreplay report`` when it rebuilds a missing summary from the records.

    Args:
        run_dir: The run directory.
        summary: The summary (changed in place).
        plan: The frozen ``Plan``; None = read plan.json.
        workload: The workload the plan was built on; None = loaded from plan.json's path.

    Returns:
        True when any phase got a ``routing_loss`` (the summary changed); False for
        a run that is not a fleet's. A workload that cannot be loaded any more, or a
        bad cache model, gives each phase ``{"note": ...}`` saying why.
    """
    from kvreplay.rundir import PLAN, RECORDS, load_plan_json, read_plan, read_records
    from kvreplay.workload import load_workload

    run_block = (read_plan(run_dir) or {}).get("run") or {}
    if not isinstance(run_block.get("fleet"), dict):
        return False
    if not any(isinstance(run_block.get(k), dict) for k in ("sim_fleet", "replica_cache")):
        urls = [r.get("url") if isinstance(r, dict) else r for r in run_block["fleet"].get("replicas") or []]
        if (vm := version_models(summary, urls)) is not None:  # an external serve-sim fleet
            run_block = {**run_block, "replica_cache": vm}
    try:
        if workload is None:
            workload = load_workload(load_plan_json(run_dir / PLAN)[0].workload_path)
        if plan is None:
            plan = load_plan_json(run_dir / PLAN, workload)[0]
        phases = [(ph.name, bool(ph.spec.reset), ph.spec.concurrency) for ph in plan.phases]
        losses = run_routing_loss(phases, plan.bind(workload), run_block, read_records(run_dir / RECORDS),
                                  main_bodies=len(workload))
    except (KvreplayError, OSError) as exc:
        losses = {ph.get("name"): {"note": f"routing loss not computed: {exc}"}
                  for ph in summary.get("phases") or []}
    for ph in summary.get("phases") or []:
        if ph.get("name") in losses:
            ph["routing_loss"] = losses[ph["name"]]
    return bool(losses)


def finish_routing_loss(out: Path, summary: dict[str, Any], plan: Any, workload: Any, render_report: Any) -> None:
    """After a fleet run: ``phases[].routing_loss`` (``add_routing_loss``) into summary.json and report.md.

    Args:
        out: The run directory.
        summary: The summary the runner wrote (changed in place).
        plan: The frozen ``Plan``.
        workload: The workload it was built on.
        render_report: ``report.markdown.render_markdown``, or None (no report.md).
    """
    from kvreplay.rundir import read_plan, write_report_md, write_summary

    if add_routing_loss(out, summary, plan=plan, workload=workload):
        write_summary(out, summary)
        if render_report is not None:
            write_report_md(out, render_report(summary, read_plan(out)))
