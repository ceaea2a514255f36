"""After kill -9: rebuild a window's publication, or go on with it (issue 27, "crash-safe window").

The window writes its progress as it goes (``rundir.experiment``: ``progress.json`` at
its start and at each step's start and end, ``experiment.toml`` beside the frozen
``experiment.json``). From those:

- ``rebuild_publication(out)`` (``kvreplay report EXP_DIR``) writes ``result.json``,
  ``report.md`` and ``report.html``: each step once, with its last status; the step the
  kill cut (``running`` on disk) is ``aborted`` with ``interrupted: the window was killed
  during this step`` (its run's ``summary.json`` rebuilt from its records, so its cells
  read ``partial``), and every step that never started, the restore included, is
  ``not_run`` with ``not run: the window was killed before this step``; the window's ``aborted`` is
  ``{"reason": "killed"}``; every process of the window's ledger still alive
  (``experiments.ledger``: the server a killed window started) is named in ``left_running``
  with its pid, port, command and why; ``attempts`` (``experiments.history``) ends with the
  killed one, its cut step's partial records counted. A window that ended (every step final) is re-rendered as it
  was published.
- ``plan_resume(frozen, progress)`` (``kvreplay experiment --resume EXP_DIR``) says which
  steps run again: the first step that did not end (the interrupted one), preceded by
  the incarnation it ran in when it followed one, then every later step; the others
  keep their results. ``load_frozen`` rebuilds the experiment, its window and its plans
  from the directory and refuses (``ConfigError``) when they no longer freeze to the same
  ``experiment_sha256``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvreplay.errors import ConfigError
from kvreplay.experiments.fields import BOUND_RE
from kvreplay.experiments.history import INTERRUPTED
from kvreplay.experiments.model import ExperimentSpec, StepResult, WindowSpec
from kvreplay.experiments.steps import kind_of
from kvreplay.plan import Plan
from kvreplay.workload import Workload

__all__ = ["INTERRUPTED", "NOT_RUN", "ResumePlan", "load_frozen", "plan_resume", "rebuild_publication",
           "stop_orphans", "window_from_json"]

NOT_RUN = "not run: the window was killed before this step"
"""The reason of a step that never started before the kill."""


@dataclass(frozen=True, slots=True)
class ResumePlan:
    """Which steps of an interrupted window run again.

    Attributes:
        keep: Results of the steps that ended before the kill and are not run again.
        rerun: Names of the steps run again, in file order (the interrupted step, its
            incarnation before it when it followed one, then every later step).
        set_aside: Step folders (``steps/NN-name``) to keep under a new name before they run again.
        interrupted: The first step that did not end (None: every step ended).
    """

    keep: dict[str, StepResult]
    rerun: tuple[str, ...]
    set_aside: tuple[str, ...]
    interrupted: str | None


def _final(d: dict[str, Any] | None) -> bool:
    return d is not None and d.get("status") not in (None, "running")


def plan_resume(frozen: dict[str, Any], progress: dict[str, Any]) -> ResumePlan:
    """The resume plan of a window from its ``experiment.json`` and ``progress.json`` (module docstring)."""
    steps = frozen.get("steps") or []
    done = progress.get("steps") or {}
    k = next((i for i, s in enumerate(steps) if not _final(done.get(s["name"]))), None)
    if k is None:
        return ResumePlan({s["name"]: StepResult.from_json(done[s["name"]]) for s in steps}, (), (), None)
    start = k
    if not kind_of(steps[k]["kind"]).starts_server and not kind_of(steps[k]["kind"]).restores:
        inc = next((i for i in range(k - 1, -1, -1) if kind_of(steps[i]["kind"]).starts_server), None)
        if inc is not None:
            start = inc
    rerun = [steps[start]["name"]] + [s["name"] for s in steps[k:]] if start != k else [s["name"] for s in steps[k:]]
    keep = {s["name"]: StepResult.from_json(done[s["name"]]) for s in steps if s["name"] not in rerun}
    from kvreplay.rundir.names import step_dir

    aside = tuple(step_dir(s["index"], s["name"]) for s in (steps[start], steps[k]) if s["name"] in done)
    return ResumePlan(keep, tuple(rerun), tuple(dict.fromkeys(aside)), steps[k]["name"])


def window_from_json(w: dict[str, Any]) -> WindowSpec:
    """The ``WindowSpec`` of ``experiment.json``'s ``window`` (the file's, with command-line overrides)."""
    bounds = []
    for b in w.get("abort_if") or []:
        m = BOUND_RE.fullmatch(b)
        if m is None:
            raise ConfigError(f"not a bound: {b!r}", field="window.abort_if")
        bounds.append((m.group(1), m.group(2), float(m.group(3))))
    return WindowSpec(w.get("stop_new_after_s"), w.get("hard_deadline_s"), w.get("restore_reserve_s") or 0.0,
                      tuple(bounds), w.get("max_error_rate"), bool(w.get("abort_on_malformed")),
                      w.get("max_output_error_rate"), w.get("max_transport_failures", 3))


def load_frozen(out: Path, *, max_body_bytes: int) -> tuple[ExperimentSpec, dict[str, Any], dict[str, Plan],
                                                             Workload | None, WindowSpec, dict[str, Workload]]:
    """The experiment of an experiment directory, re-frozen and checked against its ``experiment.json``.

    Returns:
        ``(exp, frozen, plans, workload, window, step_workloads)`` (``step_workloads``: a step's
        own workload by step name).

    Raises:
        ConfigError: no ``experiment.json`` or ``experiment.toml``, or the file, the workload or
            the plans no longer freeze to the recorded ``experiment_sha256``.
    """
    from kvreplay.experiments.window.frozen import freeze, load_workloads
    from kvreplay.experiments.window.spec import load_experiment
    from kvreplay.rundir import read_experiment
    from kvreplay.rundir.experiment import read_source
    frozen = read_experiment(out)
    text = read_source(out)
    if frozen is None or text is None:
        raise ConfigError("not an experiment directory that can be resumed (experiment.json and experiment.toml "
                          "are written by kvreplay experiment)", path=out, field="--resume")
    exp = load_experiment(Path(frozen["file"]["path"]), text=text)
    window = window_from_json(frozen.get("window") or {})
    workload, own = load_workloads(exp, max_body_bytes=max_body_bytes)
    doc, plans = freeze(exp, workload, window, own)
    if doc["experiment_sha256"] != frozen["experiment_sha256"]:
        diff = sorted(k for k in doc if k != "experiment_sha256" and doc.get(k) != frozen.get(k))
        raise ConfigError(f"the experiment no longer freezes to experiment_sha256 {frozen['experiment_sha256'][:16]} "
                          f"(differs in: {', '.join(diff) or 'the hash'}); not resumed", path=out, field="--resume")
    return exp, frozen, plans, workload, window, own


def rebuild_publication(out: Path) -> dict[str, Any]:
    """Write ``result.json``, ``report.md`` and ``report.html`` of an experiment directory (module docstring).

    Returns:
        The result.

    Raises:
        ConfigError: no ``experiment.json`` (without ``progress.json`` every step reads ``not_run``).
    """
    from kvreplay.experiments.publish import build_result, write_publication
    from kvreplay.rundir import (
        PLAN,
        RECORDS,
        SUMMARY,
        iter_records,
        read_experiment,
        read_plan,
        read_result,
        rebuild_summary,
        write_summary,
    )
    from kvreplay.rundir.experiment import read_progress

    frozen = read_experiment(out)
    if frozen is None:
        raise ConfigError("no experiment.json: not an experiment directory", path=out)
    title = Path(str((frozen.get("file") or {}).get("path") or out.name)).stem
    progress = read_progress(out)
    done = (progress or {}).get("steps") or {}
    ended = progress is not None and all(_final(done.get(s["name"])) for s in frozen.get("steps") or [])
    old = read_result(out)
    if old is not None and (progress is None or ended):
        write_publication(out, old, title)
        return old
    if progress is None:  # killed before the window's first progress line: nothing ran
        progress = {"steps": {}, "started": None}
    steps = []
    for fs in frozen.get("steps") or []:
        d = done.get(fs["name"])
        if d is None:
            steps.append(StepResult(fs["name"], fs["kind"], status="not_run", reason=NOT_RUN,
                                    comparable=fs.get("comparable", True), label=fs.get("label")).to_json())
            continue
        if d.get("status") == "running":
            d = {**d, "status": "aborted", "reason": INTERRUPTED}
            rd = fs.get("dir")
            if rd and (out / rd / PLAN).exists():
                d["run_dir"] = rd
                if not (out / rd / SUMMARY).exists():
                    write_summary(out / rd, rebuild_summary(out / rd, read_plan(out / rd),
                                                            iter_records(out / rd / RECORDS)))
        steps.append(d)
    aborted = progress.get("aborted") or {"reason": "killed", "message": "the window was killed before it ended; "
                                                                        "result rebuilt from progress.json"}
    from kvreplay.experiments.history import close_killed, prior_attempts
    from kvreplay.experiments.ledger import left_entry, live_entries

    attempts = close_killed(prior_attempts(progress), progress, out,
                            {s["name"]: s.get("dir") for s in frozen.get("steps") or []})
    left = [left_entry(e, "started by the window before it was killed and still alive; "
                          "`kvreplay experiment --resume` stops it first") for e in live_entries(out)]
    result = build_result(out, frozen, steps, started=progress.get("started") or "", aborted=aborted,
                          ended=progress.get("updated") or progress.get("started") or "",
                          identity=progress.get("snapshot_identity"), unread=progress.get("unread_series"),
                          left_running=left or None, attempts=attempts)
    if (origin := (frozen.get("window") or {}).get("deadline_from", "start")) != "start":
        result["deadline_origin"] = {"deadline_from": origin, "origin": progress.get("deadline_origin")}
    write_publication(out, result, title)
    return result


async def stop_orphans(w: Any) -> list[dict[str, Any]]:
    """``--resume``: stop what the killed attempts left alive (``experiments.ledger``), each one said.

    Each live ledger process of ``w.out`` gets the configured ``[server] stop`` with its own
    ``{port}``, then SIGTERM to its process group, ``stop_grace``, SIGKILL
    (``ledger.stop_entry``); the port it was given must refuse connections before it counts as
    stopped.

    Args:
        w: The ``WindowRun``.

    Returns:
        One ``stop_entry`` record per process, with ``name``, ``dir`` and ``attempt`` from the ledger.
    """
    from kvreplay.experiments.background import port_answers
    from kvreplay.experiments.ledger import live_entries, stop_entry
    from kvreplay.experiments.lifecycle import expand, run_command

    srv = w.exp.server
    got = []
    for e in live_entries(w.out):
        port = e.get("port")

        async def stop_cmd(p: int | None) -> dict[str, Any]:
            assert srv.stop is not None
            return await run_command(expand(srv.stop.cmd, port=p, out_dir=w.out, here=w.exp.path.parent),
                                     name="stop-orphan", log_dir=w.out, timeout_s=srv.stop.timeout_s,
                                     ledger=w.server.ledger, port=p)

        url = f"http://127.0.0.1:{port}" if isinstance(port, int) else None

        def port_open(u: str | None = url) -> bool:
            return u is not None and port_answers(u)

        done = await stop_entry(e, grace_s=srv.stop_grace_s, stop_cmd=stop_cmd if srv.stop is not None else None,
                                port_open=port_open if url else None)
        done.update({"name": e.get("name"), "dir": e.get("dir"), "attempt": e.get("attempt")})
        got.append(done)
        w.say(f"stopped pid {e['pid']} (port {port}, {e.get('name')} of attempt {e.get('attempt')}, "
              f"left alive by the killed window): {done['stop']['text']}")
    return got
