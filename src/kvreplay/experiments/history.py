"""A window's history across ``--resume`` (issue 42 item 3): ``attempts[]`` in progress.json and result.json.

Each run of the window — the first, then each ``kvreplay experiment --resume`` — is one
attempt::

    {"n": 1, "started": "2026-12-04T23:50:01Z", "ended": "2026-12-04T23:50:09Z",
     "how": "killed", "steps": [{"name": "A0", "status": "measured", ...},
                                 {"name": "A", "status": "aborted", "reason": "interrupted: ...",
                                  "partial": {"dir": "steps/01-A.interrupted", "records": 2,
                                              "sent": 2, "planned": 24}}],
     "stopped": []}

``how``: ``running`` while it runs (what a kill leaves on disk), then ``completed`` (every
step had its turn), ``interrupted`` (SIGINT/SIGTERM), ``deadline`` (the hard deadline cut
the window, or ``stop_new_after`` deferred a step), or ``killed`` (it never wrote its end:
read back as such by the next ``--resume`` or by ``kvreplay report``; ``ended`` is then its
last progress write). ``steps`` holds what each step did in that attempt (the results it
wrote, not the ones it kept from before); the step a kill cut has ``partial``: its folder
(renamed ``.interrupted`` by the resume), its records and the positions sent of those
planned (its ``summary.json``, rebuilt from the records when the kill left none).
``stopped``: what the attempt stopped first (``experiments.ledger.stop_entry`` records).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

__all__ = ["INTERRUPTED", "close_killed", "history_lines", "partial_of", "prior_attempts"]

INTERRUPTED = "interrupted: the window was killed during this step"
"""The reason of the step the kill cut."""


def partial_of(out: Path, run_dir: str | None) -> dict[str, Any] | None:
    """What a cut run step left: ``{"dir", "records", "sent", "planned"}``; None without a run folder.

    ``records``: lines of ``records.jsonl``; ``sent``/``planned``: summed over the phases of
    its ``summary.json``, rebuilt from the records (``rundir.rebuild_summary``) and written
    when the kill left none.
    """
    from kvreplay.rundir import PLAN, RECORDS, SUMMARY, iter_records, read_plan, rebuild_summary, write_summary

    if not run_dir or not (out / run_dir / PLAN).exists():
        return None
    d = out / run_dir
    try:
        records = len((d / RECORDS).read_bytes().splitlines())
    except OSError:
        records = 0
    if not (d / SUMMARY).exists():
        write_summary(d, rebuild_summary(d, read_plan(d), iter_records(d / RECORDS)))
    import orjson

    try:
        phases = orjson.loads((d / SUMMARY).read_bytes()).get("phases") or []
    except (OSError, ValueError):
        phases = []
    return {"dir": run_dir, "records": records, "sent": sum(int(p.get("sent") or 0) for p in phases),
            "planned": sum(int(p.get("planned") or 0) for p in phases)}


def prior_attempts(progress: dict[str, Any]) -> list[dict[str, Any]]:
    """The attempts of ``progress.json`` (copies); a progress.json written before them gives one per start.

    Such a file knows only when each attempt started (``started``, then ``resumed``) and the
    steps' last statuses: its attempts have ``how`` ``"unknown"`` and no ``steps``, the last
    one ``running`` (``close_killed`` reads it).
    """
    got = [dict(a) for a in progress.get("attempts") or []]
    if got:
        return got
    starts = [progress.get("started"), *(progress.get("resumed") or [])]
    return [{"n": i + 1, "started": t, "ended": None, "how": "running" if i == len(starts) - 1 else "unknown",
             "steps": [], "stopped": []} for i, t in enumerate(starts)]


def close_killed(attempts: list[dict[str, Any]], progress: dict[str, Any], out: Path, step_dirs: dict[str, str],
                 moved: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Mark the last attempt ``killed`` when it never wrote its end, its cut step ``aborted`` with ``partial``.

    Args:
        attempts: ``prior_attempts(progress)`` (changed in place and returned).
        progress: The progress.json the attempts come from (``updated``: the last write, the
            killed attempt's ``ended``; ``steps``: the cut step, ``running`` on disk).
        out: The experiment folder.
        step_dirs: Step name -> its folder (``steps/NN-name``, experiment.json's ``steps[].dir``).
        moved: Step folder -> where it is now (the ``.interrupted`` folder a resume set aside).
    """
    if not attempts or attempts[-1].get("how") != "running":
        return attempts
    last = attempts[-1]
    last["how"], last["ended"] = "killed", progress.get("updated") or last.get("started")
    steps = {s["name"]: s for s in last.get("steps") or []}
    for name, d in (progress.get("steps") or {}).items():
        if d.get("status") != "running":
            continue
        run_dir = step_dirs.get(name)
        step = {**steps.get(name, {}), "name": name, "kind": d.get("kind"), "status": "aborted",
                "reason": INTERRUPTED, "started": d.get("started")}
        where = (moved or {}).get(run_dir or "", run_dir) if run_dir else None
        if (part := partial_of(out, where)) is not None:
            step["partial"] = part
        steps[name] = step
    last["steps"] = list(steps.values())
    return attempts


def _cut(att: dict[str, Any]) -> str:
    cut = next((s for s in att.get("steps") or [] if s.get("reason") == INTERRUPTED), None)
    if cut is None:
        return ""
    part = cut.get("partial")
    if part is None:
        return f" during step {cut['name']}"
    return (f" during step {cut['name']} after {part['sent']} of {part['planned']} requests "
            f"({part['records']} records kept in {part['dir']})")


def history_lines(attempts: list[dict[str, Any]] | None) -> list[str]:
    """One line per attempt for the reports (``attempt 1: started ..., killed during step B after 30 of 104...``).

    Empty for a window of one attempt that completed (nothing to tell beyond its status).
    """
    atts = attempts or []
    if len(atts) == 1 and atts[0].get("how") == "completed":
        return []
    lines = []
    for a in atts:
        verb = "started" if a.get("n") == 1 else "resumed"
        text = f"attempt {a.get('n')}: {verb} {a.get('started')}"
        for s in a.get("stopped") or []:
            text += (f"; first stopped pid {s.get('pid')} (port {s.get('port')}, left alive by attempt "
                     f"{s.get('attempt')}): {(s.get('stop') or {}).get('text')}")
        ran = [s["name"] for s in a.get("steps") or [] if s.get("status") not in ("deferred", None)
               and s.get("reason") != INTERRUPTED]
        if a.get("n") != 1 and ran:
            text += f"; ran {', '.join(ran)} (on a fresh incarnation where it followed one)"
        how = a.get("how")
        text += {"killed": f"; killed{_cut(a)} (last progress {a.get('ended')})",
                 "interrupted": f"; interrupted by SIGINT/SIGTERM, ended {a.get('ended')}",
                 "deadline": f"; cut by the window's deadlines, ended {a.get('ended')}",
                 "running": "; running", "unknown": "; ended (how: not recorded)"}.get(
                     str(how), f"; {how} {a.get('ended')}")
        lines.append(text)
    return lines
