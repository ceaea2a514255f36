"""Freeze an experiment file into ``experiment.json`` before the first request.

Every step's entry holds what its kind freezes (``StepKind.freeze``,
``experiments.steps``): a sending step its frozen plan (``kvreplay.plan``: the
exact body sequence of every phase, with ``plan_sha256``); an ``ab`` step also
its block order (``experiments.ab.block_order``: A B, B A, A B, ...). The
document's ``experiment_sha256`` is the SHA-256 of its canonical JSON (sorted
keys, ``experiment_sha256`` itself left out), so two windows ran the same
experiment exactly when the hashes agree.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from kvreplay import __version__
from kvreplay.experiments.model import ExperimentSpec, WindowSpec
from kvreplay.experiments.steps import kind_of
from kvreplay.plan import Plan
from kvreplay.workload import Workload

__all__ = ["EXPERIMENT_FORMAT", "experiment_sha256", "freeze", "load_workloads", "workload_json"]

EXPERIMENT_FORMAT = "kvreplay-experiment/1"


def experiment_sha256(doc: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of ``doc`` without its ``experiment_sha256`` key."""
    body = {k: v for k, v in doc.items() if k != "experiment_sha256"}
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()


def workload_json(workload: Workload) -> dict[str, Any]:
    """A workload as experiment.json names it: ``{"path", "n_bodies", "sha256"}``."""
    return {"path": workload.path and str(workload.path), "n_bodies": len(workload.bodies),
            "sha256": workload.sha256}


def load_workloads(exp: ExperimentSpec, *, max_body_bytes: int) -> tuple[Workload | None, dict[str, Workload]]:
    """The experiment's workload and each step's own (``workload`` of a step), each folder read once.

    Returns:
        ``(the experiment's workload or None, {step name: its own workload})``.

    Raises:
        WorkloadError: a workload that cannot be loaded (file, line and field named).
    """
    from kvreplay.workload import load_workload

    cache: dict[str, Workload] = {}

    def load(path: str) -> Workload:
        if path not in cache:
            cache[path] = load_workload(path, max_body_bytes=max_body_bytes)
        return cache[path]

    main = load(exp.workload) if exp.workload else None
    return main, {st.name: load(st.workload) for st in exp.steps if st.workload is not None}


def freeze(exp: ExperimentSpec, workload: Workload | None, window: WindowSpec,
           step_workloads: dict[str, Workload] | None = None) -> tuple[dict[str, Any], dict[str, Plan]]:
    """The frozen experiment document and the plan of every sending step.

    Args:
        exp: The parsed file.
        workload: The bodies (None when no step sends requests).
        window: The window in force (the file's, with command-line overrides).
        step_workloads: A step's own workload, by step name (``load_workloads``); its entry
            names it (``workload``: path, bodies, sha256) and its plan is built on it.

    Returns:
        ``(experiment.json content, {step name: Plan})``.

    Raises:
        ConfigError: a phase selects bodies the workload does not have (from ``build_plan``).
    """
    plans: dict[str, Plan] = {}
    steps = []
    for st in exp.steps:
        entry: dict[str, Any] = {"index": st.index, "name": st.name, "kind": st.kind, "line": st.line,
                                 "dir": st.dir if st.sends else None, "comparable": st.comparable,
                                 "label": st.settings.get("label")}
        if st.when:  # only when set, so experiment files without conditions keep their experiment.json
            entry["when"] = [c.text for c in st.when]
        own = (step_workloads or {}).get(st.name)
        if own is not None:
            entry["workload"] = workload_json(own)
        extra, plan = kind_of(st.kind).freeze(st, own if own is not None else workload)
        if plan is not None:
            plans[st.name] = plan
        entry.update(extra)
        steps.append(entry)
    doc: dict[str, Any] = {
        "format": EXPERIMENT_FORMAT,
        "file": {"path": str(exp.path), "sha256": hashlib.sha256(exp.text.encode()).hexdigest()},
        "kvreplay_version": __version__,
        "workload": workload_json(workload) if workload is not None else None,
        "server": exp.server.to_json(),
        "window": window.to_json(),
        "steps": steps,
        "compare": [list(p) for p in exp.compare],
        # only when set, so experiment files without [gates] keep their experiment.json
        **({"gates": exp.gates.to_json()} if exp.gates.body or exp.gates.fixed_bytes else {}),
    }
    doc["experiment_sha256"] = experiment_sha256(doc)
    return doc, plans
