"""The per-replica table of a fleet run (summary.json ``phases[].replicas`` and ``phases[].fleet``).

One table per phase with replicas: a row per replica, an ``unattributed`` row (sent
records that name no replica, when there are any) and a ``fleet (all)`` row (attributed
and unattributed together: every record sent), with requests, tokens, hit rate, TTFT/ITL
p50 and each replica's own delta over the phase of the first request counter its backend
reads (``COUNTER_COLUMN``: hit tokens where the server counts them, as vLLM does; never a
column no replica has); the fleet row sums it over the replicas. Above C1 without a
replica header no record names its replica (``attribution`` ``phase_only``): a replica's
requests and tokens then read "not attributed", never 0, and only its counters tell how
the phase split. The notes say how records were attributed, the load balance and the
anomalies (``unattributed``, ``ambiguous``, ``unlisted``, ``conflict``). Rendered by
``report.document`` into report.md and report.html alike.
"""

from __future__ import annotations

from typing import Any

from kvreplay.report.cells import Cell, absent, measured
from kvreplay.report.figures import Plot
from kvreplay.report.sections import Table
from kvreplay.rundir import RunData

__all__ = ["ANOMALIES", "COUNTER_COLUMN", "replica_section", "routing_loss_plots", "routing_loss_section"]

ANOMALIES = ("ambiguous", "conflict", "unattributed", "unlisted")
"""``replica_reason`` values the report names as anomalies (``phase_only`` and ``not_reached`` are not)."""

_COLUMNS = ["requests", "ok", "prompt tokens", "cached tokens", "hit rate", "TTFT p50 (ms)", "ITL p50 (ms)"]

COUNTER_COLUMN = ("hit_tokens", "query_tokens", "prompt_tokens", "hits", "lookups")
"""The replicas' own counter the table shows: the first of these that some replica's delta holds
(``evidence.vocab.REQUEST_COUNTERS``, hit tokens first: vLLM and llama-server count no lookups)."""

_NOT_ATTRIBUTED = "not attributed: no record names its replica (above C1 without a replica header)"


def _num(v: Any, fmt: str = "{:g}") -> Cell:
    return absent("not measured") if v is None else measured(fmt.format(v))


def _counter(delta: Any, name: str | None) -> Cell:
    if not isinstance(delta, dict):
        return absent("no counters read")
    return _num(delta.get(name)) if name else absent("none of the request counters read")


def _row(e: dict[str, Any], counter: Cell, phase_only: bool = False) -> list[Cell]:
    if phase_only:
        return [absent(_NOT_ATTRIBUTED)] * len(_COLUMNS) + [counter]
    t = e.get("tokens") or {}
    return [_num(e.get("requests")), _num(e.get("ok")), _num(t.get("prompt")), _num(t.get("cached")),
            _num(e.get("hit_rate"), "{:.1%}"), _num((e.get("ttft_ms") or {}).get("p50")),
            _num((e.get("itl_ms") or {}).get("p50")), counter]


def _hit(tokens: dict[str, Any]) -> float | None:
    p, c = tokens.get("prompt"), tokens.get("cached")
    return round(c / p, 6) if isinstance(p, int) and isinstance(c, int) and p else None


def _fleet_rows(ph: dict[str, Any], reps: list[dict[str, Any]], fleet: dict[str, Any],
                name: str | None) -> list[tuple[str, list[Cell]]]:
    """The ``unattributed`` row (when some sent record names no replica) and the ``fleet (all)`` row."""
    un = fleet.get("unattributed") or {}
    n_un = un.get("requests") or 0
    ok_all = ph.get("ok") if isinstance(ph.get("ok"), int) else None
    keys = ("prompt", "cached", "completion")
    ftok, utok = fleet.get("tokens") or {}, un.get("tokens") or {}
    all_tok = {k: ftok[k] + utok[k] for k in keys if isinstance(ftok.get(k), int) and isinstance(utok.get(k), int)}
    rows = []
    if n_un:
        un_ok = ok_all - fleet["ok"] if ok_all is not None and isinstance(fleet.get("ok"), int) else None
        rows.append(("unattributed", _row({"requests": n_un, "ok": un_ok, "tokens": utok, "hit_rate": _hit(utok)},
                                          absent("a record naming no replica has no counters of its own"))))
    vals = [(e.get("counter_delta") or {}).get(name) for e in reps] if name else []
    nums = [float(v) for v in vals if isinstance(v, (int, float))]
    total = measured(f"{sum(nums):g}") if vals and len(nums) == len(vals) else absent("not read on every replica")
    rows.append(("fleet (all)", _row({"requests": (fleet.get("requests") or 0) + n_un,
                                      "ok": ok_all if ok_all is not None else (None if n_un else fleet.get("ok")),
                                      "tokens": all_tok, "hit_rate": _hit(all_tok)}, total)))
    return rows


def replica_section(run: RunData) -> tuple[list[Table], list[str]] | None:
    """The tables and notes of the "Replicas" section; None for a run that is not a fleet's."""
    tables: list[Table] = []
    notes: list[str] = []
    for ph in run.summary.get("phases") or []:
        reps = ph.get("replicas")
        fleet = ph.get("fleet")
        if not isinstance(reps, list) or not isinstance(fleet, dict):
            continue
        deltas = [e.get("counter_delta") for e in reps if isinstance(e.get("counter_delta"), dict)]
        name = next((n for n in COUNTER_COLUMN if any(d.get(n) is not None for d in deltas)), None)
        head = f"Δ {name} (own counters)" if name else "Δ request counters (own counters)"
        t = Table(f"replicas:{ph.get('name')}", [*_COLUMNS, head], corner=f"replica ({ph.get('name')})")
        phase_only = fleet.get("attribution") == "phase_only"
        for e in reps:
            t.rows.append((str(e.get("url")), _row(e, _counter(e.get("counter_delta"), name), phase_only)))
        t.rows += _fleet_rows(ph, reps, fleet, name)
        tables.append(t)
        bal = fleet.get("balance") or {}
        line = (f"{ph.get('name')}: attribution {fleet.get('attribution')}; load balance max/mean "
                f"requests {bal.get('requests_max_over_mean')}, prompt tokens {bal.get('prompt_tokens_max_over_mean')}")
        reasons = (fleet.get("unattributed") or {}).get("reasons") or {}
        odd = {k: v for k, v in reasons.items() if k in ANOMALIES}
        if odd:
            line += ("; anomaly: " + ", ".join(f"{k} {v}" for k, v in odd.items())
                     + " sent records name no replica")
        if reasons.get("not_reached"):
            line += f"; {reasons['not_reached']} sends never reached the router"
        if fleet.get("note") and fleet.get("attribution") == "phase_only":
            line += f"; {fleet['note']}"
        notes.append(line)
    return (tables, notes) if tables else None


_LOSS_COLUMNS = ["cached tokens", "hit rate", "kept of merged bound", "cached tokens per replica", "how computed"]


def routing_loss_section(run: RunData) -> tuple[list[Table], list[str]] | None:
    """The tables and notes of the "Routing loss" section (``phases[].routing_loss``); None without one.

    One table per phase with a table (a row per figure: ``observed``, ``merged``,
    ``prefix_affinity``, ``round_robin``, ``random``); the notes carry each
    phase's sentence "the routing kept X% of the reuse available (merged-cache
    bound Y, greedy affinity Z)", the observed figure against the measured cached
    tokens (in the server's tokens where ``server_tokens_per_sim_token`` is not 1,
    with the simulator-token figure beside it), and the phase's ``note`` (e.g. no
    cache model).
    """
    tables: list[Table] = []
    notes: list[str] = []
    for ph in run.summary.get("phases") or []:
        loss = ph.get("routing_loss")
        if not isinstance(loss, dict):
            continue
        name = ph.get("name")
        pol = loss.get("policies")
        if not isinstance(pol, dict):
            notes.append(f"{name}: {loss.get('note') or 'routing loss not computed'}")
            continue
        t = Table(f"routing-loss:{name}", list(_LOSS_COLUMNS), corner=f"figure ({name})")
        for key, fig in pol.items():
            t.rows.append((str(key), [
                _num(fig.get("cached_tokens"), "{:,}"), _num(fig.get("hit_rate"), "{:.1%}"),
                _num(fig.get("kept_pct"), "{:.1f}%"),
                measured(" / ".join(f"{v:,}" for v in fig.get("per_replica_cached_tokens") or [])),
                measured(str(fig.get("method"))),
            ]))
        tables.append(t)
        line = f"{name}: {loss.get('sentence')}"
        cache = loss.get("cache") or {}
        line += (f"; cache model {cache.get('model')}, {cache.get('per_replica')} {cache.get('unit')} per replica")
        if loss.get("measured_cached_tokens") is not None:
            line += (f"; measured cached tokens {loss['measured_cached_tokens']:,}, observed figure "
                     f"{_num(loss.get('observed_vs_measured_pct'), '{:.2f}%').text} of it")
            ratio = loss.get("server_tokens_per_sim_token")
            per = loss.get("server_tokens_per_sim_token_per_replica")
            if (ratio is not None and isinstance(per, list) and per and all(x is not None for x in per)
                    and any(x != 1.0 for x in per)):
                # a mixed fleet: each replica's figure converted with its own ratio (offline.runloss)
                line += (" in each replica's server's tokens (simulator tokens x "
                         + " / ".join(f"{x:.4g}" for x in per) + "; "
                         f"{_num(loss.get('observed_vs_measured_pct_sim_tokens'), '{:.2f}%').text} "
                         "in the simulator's tokens)")
            elif ratio is not None and ratio != 1.0:  # offline.runloss.add_server_units
                line += (f" in the server's tokens (simulator tokens x {ratio:.4g}; "
                         f"{_num(loss.get('observed_vs_measured_pct_sim_tokens'), '{:.2f}%').text} "
                         "in the simulator's tokens)")
        if cache.get("models"):  # a mixed fleet: each replica's own model (offline.routing)
            line += f" ({', '.join(cache['models'])})"
        for row in loss.get("per_replica_vs_measured") or []:  # a mixed fleet, each replica in its own tokens
            line += (f"; {row['url']}: observed {row['observed_cached_tokens_server']:,} of measured "
                     f"{row['measured_cached_tokens']:,} cached tokens ({_num(row.get('pct'), '{:.2f}%').text})")
        if loss.get("note"):
            line += f"; {loss['note']}"
        notes.append(line)
    return (tables, notes) if tables or notes else None


def routing_loss_plots(run: RunData) -> list[Plot]:
    """One ``routing-loss:<phase>`` plot per phase with an observed assignment.

    Cached tokens per position (send order), one series per replica.
    """
    from kvreplay.report.plots import replica_positions_png

    out = []
    for ph in run.summary.get("phases") or []:
        obs = (ph.get("routing_loss") or {}).get("observed")
        if not isinstance(obs, dict):
            continue
        key, title = f"routing-loss:{ph.get('name')}", f"phase {ph.get('name')}: cached tokens per position per replica"
        out.append(Plot(key, title, "measured", None,
                        replica_positions_png(str(ph.get("name")), obs["replica"], obs["cached_tokens"])))
    return out
