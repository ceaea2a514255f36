"""plan.json read back into a ``Plan`` that executes again exactly (``plan_from_json``; ``rundir`` reads the file)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from kvreplay.errors import ConfigError
from kvreplay.plan._model import ExtraWorkload, Phase, Plan, _shas
from kvreplay.plan._spec import MAX_POSITIONS, PLAN_FORMAT, Offsets, Pairs, PhaseSpec
from kvreplay.workload import Workload

__all__ = ["plan_from_json"]


def plan_from_json(data: Any, workload: Workload | None = None, *, path: str | Path) -> tuple[Plan, dict[str, Any]]:
    """A plan from plan.json's parsed content, so it can be executed again exactly.

    The file itself is read by ``kvreplay.rundir.load_plan_json``.

    Args:
        data: plan.json's content (parsed JSON).
        workload: The workload to check it against; loaded from the plan's
            ``workload.path`` by the caller when None is given here.
        path: The file it came from (named in errors).

    Returns:
        The plan (sequence taken verbatim from the file) and its ``run`` block.

    Raises:
        ConfigError: not a plan, hash mismatch, or bodies whose SHA-256 no
            longer match the workload.
    """
    p = Path(path)
    if not isinstance(data, dict) or data.get("format") != PLAN_FORMAT:
        raise ConfigError(f"not a {PLAN_FORMAT} file", path=p, field="format")
    content = {k: v for k, v in data.items() if k not in ("plan_sha256", "run")}
    digest = hashlib.sha256(orjson.dumps(content, option=orjson.OPT_SORT_KEYS)).hexdigest()
    if digest != data.get("plan_sha256"):
        raise ConfigError("plan_sha256 does not match the plan's content (edited?)", path=p, field="plan_sha256")
    try:
        return _load_plan_data(p, data, workload)
    except ConfigError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
        raise ConfigError(f"malformed plan.json: {type(exc).__name__}: {exc}"[:300], path=p) from None


def _load_plan_data(p: Path, data: Any, workload: Workload | None) -> tuple[Plan, dict[str, Any]]:
    """The body of ``plan_from_json`` once the hash is checked (shapes validated)."""
    wl = data["workload"]
    n_bodies = wl["n_bodies"]
    if not isinstance(n_bodies, int) or isinstance(n_bodies, bool) or not 0 < n_bodies <= MAX_POSITIONS:
        raise ConfigError(f"n_bodies must be an integer in [1, {MAX_POSITIONS}]", path=p, field="workload.n_bodies")
    if not isinstance(data["phases"], list):
        raise ConfigError("phases must be a list", path=p, field="phases")
    if sum(len(ph["sequence"]) for ph in data["phases"]) > MAX_POSITIONS:
        raise ConfigError(f"over {MAX_POSITIONS} positions", path=p, field="phases[].sequence")
    if workload is not None and (len(workload) != wl["n_bodies"] or workload.sha256 != wl["sha256"]):
        raise ConfigError(
            f"workload {workload.path} is not the one the plan was made from "
            f"(sha256 {workload.sha256[:12]} vs {wl['sha256'][:12]})",
            path=p,
            field="workload.sha256",
        )
    if workload is not None and (workload.sessions and workload.sessions.sha256) != (wl.get("sessions") or {}).get(
            "sha256"):
        raise ConfigError(f"the sessions side file of {workload.path} is not the one the plan was made with",
                          path=p, field="workload.sessions")
    seen_extra: dict[int, str] = {}
    phases = []
    body_sha = [""] * wl["n_bodies"]
    for i, ph in enumerate(data["phases"]):
        spec_data = {k: v for k, v in ph.items() if k != "sequence"}
        spec = PhaseSpec.from_mapping(spec_data, where={"path": p, "field": f"phases[{i}]"})
        seq = []
        intended = []
        turns: list[tuple[str, int]] = []
        earlier: dict[int, int] = {}  # body index -> its positions so far in this phase
        for k, item in enumerate(ph["sequence"]):
            bi_, rep_ = item["body_index"], item["repetition"]
            # One rule for main and interleaved bodies: a repetition is at most the number of
            # earlier positions of the same body (each round of `repeats` sends the selection
            # once; each cycle through an interleaved workload sends each of its bodies once).
            if (not isinstance(bi_, int) or isinstance(bi_, bool) or not 0 <= bi_ < MAX_POSITIONS
                    or not isinstance(rep_, int) or isinstance(rep_, bool) or not 0 <= rep_ <= earlier.get(bi_, 0)
                    or not isinstance(item["body_sha256"], str)):
                raise ConfigError("body_index, repetition or body_sha256 out of range or of the wrong type",
                                  path=p, field=f"phases[{i}].sequence[{k}]")
            earlier[bi_] = earlier.get(bi_, 0) + 1
            if "intended_ns" in item and (not isinstance(item["intended_ns"], int) or item["intended_ns"] < 0):
                raise ConfigError("intended_ns must be an integer >= 0", path=p,
                                  field=f"phases[{i}].sequence[{k}].intended_ns")
            if item["body_index"] < wl["n_bodies"]:
                body_sha[item["body_index"]] = item["body_sha256"]
            else:
                seen_extra[item["body_index"]] = item["body_sha256"]
            seq.append((item["body_index"], item["repetition"]))
            if "intended_ns" in item:
                intended.append(item["intended_ns"])
            if "session" in item:
                if (not isinstance(item["session"], str) or type(item["turn"]) is not int
                        or item["turn"] != (turns[-1][1] + 1 if item["turn"] else 0)
                        or (item["turn"] and turns[-1][0] != item["session"])):
                    raise ConfigError("session/turn out of order (turns of a session are contiguous from 0)",
                                      path=p, field=f"phases[{i}].sequence[{k}]")
                turns.append((item["session"], item["turn"]))
        if turns and len(turns) != len(seq):
            raise ConfigError("session/turn on some positions only", path=p, field=f"phases[{i}].sequence")
        phases.append(Phase(spec, Pairs.of(seq), _offsets(intended) if spec.arrival is not None else None,
                            tuple(turns) if turns else None))
    if workload is not None:
        for bi, sha in enumerate(body_sha):
            if sha and workload.sha_of(bi) != sha:
                raise ConfigError(f"body {bi} changed since the plan was made", path=p, field="body_sha256")
        body_sha = _shas(workload)  # type: ignore[assignment]
    extra = _load_extras(data.get("interleave_workloads"), p, seen_extra, load=workload is not None)
    plan = Plan(wl["path"], wl["sha256"], tuple(body_sha) if isinstance(body_sha, list) else body_sha,
                tuple(phases), extra, wl.get("sessions"))
    if workload is not None and plan.sha256 != data["plan_sha256"]:
        raise ConfigError("re-expanded plan does not hash to plan_sha256", path=p, field="plan_sha256")
    return plan, data.get("run", {})


def _load_extras(items: Any, p: Path, seen: dict[int, str], *, load: bool) -> tuple[ExtraWorkload, ...]:
    """Read plan.json's ``interleave_workloads``.

    Loaded and checked when ``load``; else with the body hashes its sequences
    name (``seen``: plan index -> SHA-256).
    """
    if not items:
        return ()
    out = []
    for it in items:
        wl = None
        if load:
            from kvreplay.workload import load_workload

            wl = load_workload(it["path"])
            if wl.sha256 != it["sha256"] or len(wl) != it["n_bodies"]:
                raise ConfigError(f"interleaved workload {it['path']} changed since the plan was made",
                                  path=p, field="interleave_workloads")
        if wl is not None:
            sha = _shas(wl)
            for j, b_sha in enumerate(sha):
                named = seen.get(it["first_index"] + j)
                if named is not None and named != b_sha:
                    raise ConfigError(f"body {j} of {it['path']} changed since the plan was made",
                                      path=p, field="body_sha256")
        else:
            sha = tuple(seen.get(it["first_index"] + j, "") for j in range(it["n_bodies"]))
        out.append(ExtraWorkload(it["path"], it["sha256"], sha, it["first_index"], wl))
    return tuple(out)


def _offsets(intended: list[int]) -> Sequence[int]:
    """``Offsets`` of a plan.json's intended times; a tuple where one is past int64 (as read before)."""
    try:
        return Offsets(intended)
    except OverflowError:
        return tuple(intended)
