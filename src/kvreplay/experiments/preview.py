"""``kvreplay experiment --dry-run``: what the window will do, step by step, before anything is written.

Below the schedule lines (``commands.experiment``), ``preview`` prints:

- the body gates and ``fixed_bytes`` (``[gates]``, ``experiments.gates``), and that every
  body already holds them (the freeze asserted it);
- the deadline arithmetic: what the deadlines count from (``[window] deadline_from``), when
  no new step starts, when in-flight requests are cancelled (``hard_deadline -
  restore_reserve``) and when the restore must be done; the ``abort_if`` bounds, if any;
- the ``[snapshot]`` commands run before the first step (``experiments.snapshot``);
- per step: its condition (``when``), the workload it sends (path, bodies, sha256) and the
  exact lifecycle commands it will run (each kind's ``commands`` hook; ``{dir}``,
  ``{here}``, ``{python}``, ``{kvreplay}`` filled in; ``{port}`` is chosen when the window
  runs and stays as written).

It reads the frozen document only: nothing is started, written or sent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvreplay.experiments.lifecycle import expand
from kvreplay.experiments.steps import kind_of

__all__ = ["deadline_lines", "preview"]


def _t(s: float | None) -> str:
    return "unbounded" if s is None else f"{s:g} s"


def deadline_lines(window: dict[str, Any], steps: list[dict[str, Any]]) -> list[str]:
    """The window's deadline arithmetic (``experiment.json``'s ``window``), one line each."""
    origin = window.get("deadline_from", "start")
    if origin == "start":
        at = "start"
        head = "deadlines count from the experiment's start"
    else:
        first = next((s["name"] for s in steps if s["kind"] == origin), origin)
        at = f"end of {first}"
        head = (f"deadlines count from the end of step {first} ({origin}, deadline_from = {origin!r}, once it is "
                "measured; before it, from the experiment's start)")
    stop, hard, reserve = window["stop_new_after_s"], window["hard_deadline_s"], window["restore_reserve_s"]
    cancel = window.get("cancel_in_flight_at_s")
    lines = [head,
             f"  no step starts, no request is sent after: {at} + {_t(stop)}",
             f"  in-flight requests cancelled at: {at} + " + (
                 f"{hard:g} - {reserve:g} = {cancel:g} s (hard_deadline - restore_reserve)" if hard is not None
                 else "unbounded"),
             f"  the restore must end by: {at} + {_t(hard)} (hard_deadline)"]
    return lines


def preview(doc: dict[str, Any], exp: Any, out: Path) -> str:
    """The dry-run's preview (module docstring) of a frozen experiment.

    Args:
        doc: ``experiment.json``'s content (not written).
        exp: The parsed file (``ExperimentSpec``: its folder is ``{here}``).
        out: The experiment directory the window would write (``{dir}``; not created).
    """
    here = Path(exp.path).parent
    lines: list[str] = []
    gates = doc.get("gates")
    if gates:
        body = ", ".join(f"{k} = {v!r}" for k, v in gates["body"].items()) or "none"
        n = sum(w["n_bodies"] for w in [doc.get("workload"), *(s.get("workload") for s in doc["steps"])] if w)
        lines.append(f"gates: body {body} (held by all {n} bodies: checked at the freeze); fixed_bytes "
                     + ("on: each sending step re-reads its workload and is refused if its sha256 changed"
                        if gates["fixed_bytes"] else "off"))
    else:
        lines.append("gates: none")
    lines += deadline_lines(doc["window"], doc["steps"])
    if bounds := doc["window"].get("abort_if"):
        lines.append(f"abort_if: {', '.join(bounds)}: checked at every counter read of a run, ab or sweep step; one "
                     "crossed stops new requests, the window aborts and the restore runs")
    server = doc.get("server") or {}
    for c in server.get("snapshot") or []:  # [snapshot] (experiments.snapshot)
        lines.append(f"  $ snapshot {c['name']} (before the first step; compared after the restore): "
                     f"{expand(c['cmd'], port=None, out_dir=out, here=here)}  (timeout {c['timeout_s']:g} s)")
    if fleet := server.get("fleet"):  # [fleet]: requests to the router, counters from every replica
        reps = ", ".join(r["url"] + "".join(f" {k}={r[k]}" for k in ("backend", "profile") if r.get(k))
                         for r in fleet["replicas"])
        lines.append(f"fleet: requests to the router {server['target']}; counters, identity and drain from "
                     f"{len(fleet['replicas'])} replicas: {reps}")
    main_wl = doc.get("workload")
    for s in doc["steps"]:
        kind = kind_of(s["kind"])
        lines.append(f"step {s['index']:02d} {s['name']} ({s['kind']})")
        when = s.get("when")
        lines.append("  when: " + (" and ".join(when) + " (evaluated just before it; false: skipped)" if when
                                   else ("always (a restore always runs)" if kind.restores else "always")))
        if kind.sends:
            wl = s.get("workload") or main_wl
            own = " (its own)" if s.get("workload") else ""
            if wl:
                lines.append(f"  workload{own}: {wl['path']} ({wl['n_bodies']} bodies, sha256 {wl['sha256']})")
        for what, cmd in kind.commands(s, server):
            lines.append(f"  $ {what}: {expand(cmd, port=None, out_dir=out, here=here)}")
    return "\n".join(lines)
