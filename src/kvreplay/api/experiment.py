"""Experiments from the API: ``kvreplay.Experiment.from_file(path).run()`` (and ``kvreplay experiment``).

The experiment file is read and checked (``experiments.window.spec.load_experiment``),
frozen into experiment.json (``experiments.window.frozen.freeze``), then the window runs
and its publication (result.json, report.md, report.html) is written. ``kvreplay
experiment`` prints the schedule and the findings around the same calls.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

__all__ = ["Experiment", "FrozenExperiment", "experiment_headers", "resume_experiment", "resume_experiment_async",
           "unread_warning"]


@dataclass
class FrozenExperiment:
    """An experiment frozen into its directory (experiment.json written), ready to run.

    Attributes:
        spec: The checked experiment file (``experiments.model.Experiment``).
        doc: experiment.json as a dict (``experiment_sha256``, ``steps``, ``window``...).
        plans: The frozen plans of its run steps.
        workload: The loaded workload, or None when the file names none.
        out: The experiment directory.
        window: The window, with the overrides applied.
        frozen_path: The path of experiment.json.
        step_workloads: A step's own workload (its ``workload`` key), by step name.
    """

    spec: Any
    doc: dict[str, Any]
    plans: Any
    workload: Any
    out: Path
    window: Any
    frozen_path: Path
    step_workloads: dict[str, Any] = field(default_factory=dict)

    async def run_async(self, say: Callable[[str], None] = lambda _m: None,
                        resume: tuple[Any, ...] | None = None) -> dict[str, Any]:
        """Run the window, then write the publication (also after an abort).

        Args:
            say: Progress line sink.
            resume: ``(progress, keep)`` or ``(progress, keep, set_aside)`` to go on with a
                window killed before (``experiments.window.resume.plan_resume``; the step
                folders ``set_aside`` are renamed only once the server's identity is accepted);
                None for a new window.

        Returns:
            result.json as a dict (``status``, ``findings``, ``steps``, ``time``...).

        Raises:
            ConfigError: ``server.api_key_env`` names an unset variable or a key too short to redact.
        """
        from kvreplay.experiments.publish import build_result, restate_step_reports, write_publication
        from kvreplay.experiments.window.execute import WindowRun
        from kvreplay.rundir.experiment import write_source, write_workloads

        headers = experiment_headers(self.spec)
        if resume is None:
            # the file's exact bytes (what `kvreplay experiment --resume` parses after a kill)
            write_source(self.out, self.spec.text, self.spec.raw)
            write_workloads(self.out, self._workload_uses())
        w = WindowRun(self.spec, self.doc, self.plans, self.workload, self.out, self.window, headers, say)
        w.workloads = dict(self.step_workloads)
        if resume is not None:
            w.resume_from(*resume)
        results = await w.run()
        steps = [r.to_json() for r in results]
        for msg in restate_step_reports(self.out, steps):
            say(msg)
        result = build_result(self.out, self.doc, steps, started=w.started, ended=w.ended or w.started,
                              aborted=w.aborted, identity=w.snapshot_identity, left_running=w.left_running,
                              unread=w.unread, attempts=w.attempts, final_stops=w.closed)
        if self.window.deadline_from != "start":  # what the deadlines counted from (None: it never came)
            result["deadline_origin"] = {"deadline_from": self.window.deadline_from, "origin": w.origin}
        write_publication(self.out, result, self.spec.path.stem)
        return result


    def _workload_uses(self) -> list[tuple[list[str], Any]]:
        """Each distinct workload (by hash and path) with who uses it: ``workload`` and/or step names."""
        uses: dict[tuple[str, str], tuple[list[str], Any]] = {}
        named = ([("workload", self.workload)] if self.workload is not None else []) + list(
            self.step_workloads.items())
        for who, wl in named:
            uses.setdefault((str(wl.path), wl.sha256), ([], wl))[0].append(who)
        return list(uses.values())


def experiment_headers(exp: Any) -> dict[str, str]:
    """The Authorization header from ``server.api_key_env`` (registered as a secret); empty without one."""
    from kvreplay.errors import ConfigError
    from kvreplay.redaction import check_secret, register, register_headers

    headers: dict[str, str] = {}
    if exp.server.api_key_env:
        key = os.environ.get(exp.server.api_key_env)
        if not key:
            raise ConfigError(f"environment variable {exp.server.api_key_env} is not set", path=exp.path,
                              field="server.api_key_env")
        try:
            key = check_secret(key, field="server.api_key_env")
            register(key)  # every step's outputs (a probe's too) and the terminal: never the key
        except ValueError as exc:
            raise ConfigError(str(exc), path=exp.path, field="server.api_key_env") from None
        headers["Authorization"] = f"Bearer {key}"
        register_headers(headers)
    return headers


class Experiment:
    """An experiment file (TOML: a window of incarnations, runs, probes, A/B arms, a restore).

    Example::

        result = kvreplay.Experiment.from_file("host-cache-diagnosis.toml").run(out="runs/diag")
        print(result["status"], [f["rule"] for f in result["findings"]])
    """

    def __init__(self, spec: Any) -> None:
        self.spec = spec

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Experiment:
        """Read and check an experiment file.

        Raises:
            ConfigError: a bad file (nothing is written or sent).
        """
        from kvreplay.experiments.window.spec import load_experiment

        return cls(load_experiment(os.fspath(path)))

    def freeze(self, out: str | os.PathLike[str] | None = None, *, stop_new_after: float | None = None,
               hard_deadline: float | None = None, restore_reserve: float | None = None,
               max_transport_failures: int | None = None, max_body_bytes: int | None = None,
               fields: dict[str, str] | None = None) -> FrozenExperiment:
        """Apply the window overrides (seconds), load the workloads and write experiment.json into ``out``.

        ``prepare`` with the same arguments, then experiment.json written.

        Args:
            out: The experiment directory (default ``runs/<UTC timestamp>``).
            stop_new_after: ``[window] stop_new_after`` override (s).
            hard_deadline: ``[window] hard_deadline`` override (s).
            restore_reserve: ``[window] restore_reserve`` override (s).
            max_transport_failures: ``[window] max_transport_failures`` override (0 = never abort).
            max_body_bytes: The largest body loaded (default ``workload.DEFAULT_MAX_BODY_BYTES``).
            fields: How to name an override in an error (``kvreplay experiment``: its flags).

        Raises:
            ConfigError: a bad window, a body that breaks ``[gates] body``, or ``out`` already
                holds an experiment.json.
        """
        from kvreplay.rundir import write_experiment

        frozen = self.prepare(out, stop_new_after=stop_new_after, hard_deadline=hard_deadline,
                              restore_reserve=restore_reserve, max_transport_failures=max_transport_failures,
                              max_body_bytes=max_body_bytes, fields=fields)
        frozen.frozen_path = write_experiment(frozen.out, frozen.doc)  # ConfigError over an existing one
        return frozen

    def prepare(self, out: str | os.PathLike[str] | None = None, *, stop_new_after: float | None = None,
                hard_deadline: float | None = None, restore_reserve: float | None = None,
                max_transport_failures: int | None = None, max_body_bytes: int | None = None,
                fields: dict[str, str] | None = None) -> FrozenExperiment:
        """Everything ``freeze`` does but writing: the frozen document and plans, nothing written or sent.

        ``kvreplay experiment --dry-run`` prints it. Arguments as ``freeze``; ``frozen_path``
        is where experiment.json would be written.

        Raises:
            ConfigError: a bad window or a body that breaks ``[gates] body`` (file, body and field named).
        """
        from kvreplay.api.run import default_out
        from kvreplay.experiments.gates import check_body_gates
        from kvreplay.experiments.window.frozen import freeze, load_workloads
        from kvreplay.rundir import EXPERIMENT
        from kvreplay.workload import DEFAULT_MAX_BODY_BYTES

        exp = self.spec
        window = exp.window
        overrides = {"stop_new_after": stop_new_after, "hard_deadline": hard_deadline,
                     "restore_reserve": restore_reserve}
        for key, value in overrides.items():
            if value is not None:
                window = replace(window, **{f"{key}_s": value})
        if max_transport_failures is not None:
            window = replace(window, max_transport_failures=max_transport_failures or None)
        # the same checks as the file's, naming the option where the value came from the caller
        window.check(path=exp.path, fields=fields if fields is not None else
                     {k: k for k, v in overrides.items() if v is not None})
        workload, own = load_workloads(exp, max_body_bytes=max_body_bytes or DEFAULT_MAX_BODY_BYTES)
        # before anything is written or sent (exit 2 naming file, body, field)
        check_body_gates(exp.gates, ([("workload", workload)] if workload is not None else [])
                         + [(f"step {name}'s workload", wl) for name, wl in own.items()], exp.path)
        doc, plans = freeze(exp, workload, window, own)
        out_dir = Path(out) if out else default_out()
        return FrozenExperiment(exp, doc, plans, workload, out_dir, window, out_dir / EXPERIMENT, own)

    async def run_async(self, out: str | os.PathLike[str] | None = None, **overrides: Any) -> dict[str, Any]:
        """Freeze (``freeze``'s arguments) and run the experiment in the running event loop.

        Returns:
            result.json as a dict; ``result["status"] == "complete"`` when every step was measured.
        """
        return await self.freeze(out, **overrides).run_async()

    def run(self, out: str | os.PathLike[str] | None = None, **overrides: Any) -> dict[str, Any]:
        """Freeze and run the experiment on a fresh event loop; blocks until result.json is written.

        Raises:
            ConfigError: a bad window or directory (nothing sent).
        """
        from kvreplay.api.run import install_loop

        install_loop()
        return asyncio.run(self.run_async(out, **overrides))


async def resume_experiment_async(exp_dir: str | os.PathLike[str], *, max_body_bytes: int | None = None,
                                  say: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """Go on with an interrupted window (``kvreplay experiment --resume EXP_DIR``) in the running loop.

    The frozen ``experiment.json`` is used (no experiment file); the interrupted step runs
    again from its start (its partial folder set aside once the server's identity is
    accepted), then the remaining steps within the original window's deadlines
    (``experiments.window.resume``).

    Args:
        exp_dir: The experiment directory of the interrupted window.
        max_body_bytes: Largest body accepted when the workloads are read again (bytes;
            ``workload.DEFAULT_MAX_BODY_BYTES`` when None).
        say: Progress lines (``experiment: ...`` on the terminal).

    Returns:
        result.json as a dict (every step listed once with its final status).

    Raises:
        ConfigError: no ``progress.json`` (the window never started), or a frozen file that
            does not load; the server's identity changed (nothing touched).
    """
    from kvreplay.errors import ConfigError
    from kvreplay.experiments.window.resume import load_frozen, plan_resume
    from kvreplay.rundir import EXPERIMENT
    from kvreplay.rundir.experiment import read_progress
    from kvreplay.workload import DEFAULT_MAX_BODY_BYTES

    out = Path(exp_dir)
    exp, doc, plans, workload, window, own = load_frozen(out, max_body_bytes=max_body_bytes or DEFAULT_MAX_BODY_BYTES)
    progress = read_progress(out)
    if progress is None:
        raise ConfigError("no progress.json: the window never started, or was written before it existed; "
                          "run the experiment again into a new --out", path=out, field="--resume")
    rp = plan_resume(doc, progress)
    say(f"resuming {out}: interrupted at {rp.interrupted or 'nothing (every step ended)'}; "
        f"running again: {', '.join(rp.rerun) or 'none'}")
    frozen = FrozenExperiment(exp, doc, plans, workload, out, window, out / EXPERIMENT, own)
    # the partial step folders are set aside by the window once the server's identity is accepted
    return await frozen.run_async(say, resume=(progress, rp.keep, rp.set_aside))


def resume_experiment(exp_dir: str | os.PathLike[str], *, max_body_bytes: int | None = None,
                      say: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """``resume_experiment_async`` on a fresh event loop; blocks until result.json is written."""
    from kvreplay.api.run import install_loop

    install_loop()
    return asyncio.run(resume_experiment_async(exp_dir, max_body_bytes=max_body_bytes, say=say))


def unread_warning(spec: Any) -> str | None:
    """``--dry-run``: the series the target exposes that the backend will not read, and the profile that would.

    Checked for the embedded simulator, or a fixed URL that already answers
    (``experiments.unread``); None otherwise, or when nothing is left unread.

    Args:
        spec: The experiment (``Experiment.spec``).
    """
    from kvreplay.experiments.unread import fetch_metrics_text, sim_metrics_text, unread_series

    srv = spec.server
    backend = srv.counter_backend
    if backend in ("auto", "none"):
        return None
    if srv.is_sim:
        text: str | None = sim_metrics_text(srv.sim)
    elif "{" not in srv.target:
        text = fetch_metrics_text(srv.target)
    else:
        return None
    got = None if text is None else unread_series(text, backend, srv.profile)
    return None if got is None else str(got["message"])
