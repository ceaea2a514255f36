"""What a step kind declares: ``StepKind``, and what its hooks are given.

A step kind is one ``StepKind`` value in its own module (``experiments.steps.run``,
``.probe``, ...), listed in the registry (``experiments.steps``). The core never
branches on a kind's name: the parser (``experiments.window.spec``), the freezer
(``experiments.window.frozen``), the window (``experiments.window.execute``), the
publication (``experiments.publish``) and the dry-run schedule (``kvreplay
experiment``) look the kind up and call its hooks or read its traits.

Hooks (all but ``parse`` and ``execute`` default to doing nothing)::

    parse(rest, where, common) -> settings      its TOML keys (``keys``) as JSON-able settings
    check(step, server, where)                  cross-checks against [server] (raise ConfigError)
    freeze(step, workload) -> (entry, plan)     keys added to its experiment.json entry, and
                                                the frozen plan of a sending step (else None)
    execute(window, step, result)               run it; set result.status / reason / checks
    runs_commands(step) -> bool                 it runs lifecycle commands of its own (A/B arms)
    cells(step, frozen_step, ctx) -> [cell]     its result.json cells (default: one check cell)
    findings(out, step, frozen_step) -> [f]     its own findings (the A/B verdict)
    time_scales(out, step) -> {name: scale}     simulator time scales for result.json ``time``
    restate(out, step) -> message | None        redraw its reports after the window
    schedule(frozen_step) -> text               its part of the dry-run schedule line
    commands(frozen_step, server) -> [(what, cmd)]  the lifecycle commands it will run, as templates
                                                ({port} ... unexpanded), for the dry-run preview;
                                                ``server`` is experiment.json's ``server``

``step`` is a ``StepSpec`` for parse-time and run-time hooks and ``result.json``'s
step dictionary (``name``, ``kind``, ``status``, ``reason``, ``run_dir``, ...) for the
publication hooks; ``frozen_step`` is the step's ``experiment.json`` entry.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from kvreplay.experiments.fields import Where
from kvreplay.experiments.model import ExperimentSpec, ServerSpec, StepResult, StepSpec, WindowSpec

if TYPE_CHECKING:
    from kvreplay.experiments.findings import PhaseView
    from kvreplay.experiments.lifecycle import ServerControl
    from kvreplay.plan import Plan
    from kvreplay.workload import Workload

__all__ = ["COMMON_KEYS", "CellContext", "StepKind", "Window", "check_cells", "plan_schedule"]

COMMON_KEYS = frozenset({"label", "comparable"})
"""Keys the parser validates for every kind that accepts them (``label``: a string,
``comparable``: a bool); a kind accepts them by listing them in its ``keys``."""

Cell = dict[str, Any]


class Window(Protocol):
    """What a kind's ``execute`` may use of the running window (``experiments.window.execute.WindowRun``).

    Attributes:
        exp: The parsed file.
        frozen: ``experiment.json``'s content.
        plans: Frozen plan per sending step (by step name).
        workload: The bodies (None when no step needs them).
        out: The experiment directory (a step writes under ``out / step.dir``).
        window: Deadlines in force (seconds from the experiment's start).
        headers: Request headers (Authorization); never written.
        say: Progress line sink.
        pins: Identity pins of ``[server.identity]`` (``runner.identity``).
        server: The current incarnation and how to replace it (``ServerControl``).
        incarnation: Name of the current incarnation step (None: the incumbent).
        inc_identity: Identity read when the current incarnation came up.
        blocked: Why later steps are deferred (a failed incarnation), else None.
        snapshot_identity: Identity before the first step (what a restore must bring back).
        snapshot_note: How the snapshot was taken, when not before the first step.
        interrupted: Set by an operator interrupt.
    """

    exp: ExperimentSpec
    frozen: dict[str, Any]
    plans: dict[str, Plan]
    workload: Workload | None
    out: Path
    window: WindowSpec
    headers: dict[str, str]
    say: Callable[[str], None]
    pins: Any
    server: ServerControl
    incarnation: str | None
    inc_identity: dict[str, Any] | None
    blocked: str | None
    snapshot_identity: dict[str, Any] | None
    snapshot_note: str | None
    interrupted: bool

    def elapsed(self) -> float:
        """Seconds since the experiment started (or since the quiesce: ``[window] deadline_from``)."""
        ...

    def workload_for(self, st: StepSpec) -> Workload | None:
        """The bodies ``st`` sends: its own ``workload`` when it names one, else the experiment's."""
        ...

    def left(self, at: float | None) -> float | None:
        """Seconds from now until ``at`` (s from the start; 0 when past), None for None."""
        ...

    def say_stops(self, st: StepSpec, cmds: list[dict[str, Any]]) -> None:
        """One progress line per server a step's commands stopped (``stop.text`` of each record)."""
        ...

    def abort(self, reason: str, message: str) -> None:
        """Abort the window (first reason kept): later steps are deferred, the restore still runs."""
        ...


@dataclass(frozen=True, slots=True)
class CellContext:
    """What a kind's ``cells`` hook is given besides its own step.

    Attributes:
        views: Phase views by ``STEP/PHASE`` (``experiments.findings.load_views``).
        tier: Which cache tiers moved in the window (``experiments.findings.tiers``).
        findings: Every finding so far (restore pattern and the kinds' own).
        root: The experiment directory (None: cells that need a step's files take its status).
    """

    views: dict[str, PhaseView]
    tier: dict[str, Any]
    findings: list[dict[str, Any]]
    root: Path | None


def _no_check(step: StepSpec, server: ServerSpec, where: Where) -> None:
    return None


def _no_freeze(step: StepSpec, workload: Workload | None) -> tuple[dict[str, Any], Plan | None]:
    return {}, None


def _no_commands(step: StepSpec) -> bool:
    return False


def _no_findings(out: Path, step: dict[str, Any], frozen_step: dict[str, Any]) -> list[dict[str, Any]]:
    return []


def _no_scales(out: Path, step: dict[str, Any]) -> dict[str, float | None]:
    return {}


def _no_restate(out: Path, step: dict[str, Any]) -> str | None:
    return None


def _no_schedule(frozen_step: dict[str, Any]) -> str:
    return ""


def _no_lifecycle(frozen_step: dict[str, Any], server: dict[str, Any]) -> list[tuple[str, str]]:
    return []


def check_cells(metric: str) -> Callable[[dict[str, Any], dict[str, Any], CellContext], list[Cell]]:
    """A ``cells`` hook giving one cell, ``metric``, for a step that checks something and sends nothing.

    The cell's status and reason are the step's; its value is True when the step was
    measured, False when it ran and failed, and None (no value) when it never ran or was
    cut (``not_run``, ``deferred``, ``skipped``, ``aborted``): a check that was not made is
    neither passed nor failed.
    """
    def cells(step: dict[str, Any], frozen_step: dict[str, Any], ctx: CellContext) -> list[Cell]:
        status = step["status"]
        value = True if status == "measured" else (False if status == "failed" else None)
        return [{"step": step["name"], "metric": metric, "status": status, "value": value,
                 "reason": step.get("reason")}]

    return cells


def plan_schedule(frozen_step: dict[str, Any]) -> str:
    """The schedule text of a frozen plan: ``  NAME:ORDER:cN (K req), ...  plan SHA12``."""
    ph = frozen_step["plan"]["phases"]
    return ("  " + ", ".join(f"{p['name']}:{p['order']}:c{p['concurrency']} ({len(p['sequence'])} req)" for p in ph)
            + f"  plan {frozen_step['plan_sha256'][:12]}")


@dataclass(frozen=True, slots=True, kw_only=True)
class StepKind:
    """One kind of ``[[step]]``: how it is parsed, checked, frozen, run, and published (module docstring).

    Attributes:
        name: The ``kind = "..."`` of the TOML file, ``result.json`` and ``experiment.json``.
        keys: TOML keys it accepts besides ``name`` and ``kind`` (``COMMON_KEYS`` among them
            where it takes ``label``/``comparable``).
        parse: ``(rest, where, common) -> settings``: ``rest`` is the step's table without
            ``name``/``kind`` (unknown keys already refused), ``common`` the validated
            ``COMMON_KEYS`` present; returns the kind's settings (``common`` is merged in
            first, so the kind may override it). Raises ``ConfigError`` through ``where``.
        execute: ``async (window, step, result)``: run the step; sets ``result``'s status
            (measured | failed | aborted), reason and checks; may ``window.abort(...)``.
        sends: It sends generation requests: it gets a run directory (``step.dir``).
        needs_workload: It sends the workload's bodies (the file then needs ``workload``).
        phase_views: Its run directory is a plain run (``plan.json``/``summary.json`` phases):
            its phases become phase views (compared by ``compare``, restore evidence, and
            ``compare`` pairs may name them: ``settings["phases"]`` holds its ``PhaseSpec``s).
        starts_server: It brings up an incarnation: it runs while an earlier incarnation's
            failure blocks the other kinds, and before any server URL is known.
        restores: It brings the incumbent back: it always runs (after an abort, an
            interrupt, past ``stop_new_after``), an interrupt does not cancel it, and when it
            is measured the server left running is the incumbent.
        cancel_at_deadline: The window cancels it at ``hard_deadline - restore_reserve``
            (kinds that do not stop themselves at the window's deadlines).
        deadline_origin: ``[window] deadline_from = "<this kind's name>"`` may name it: when
            its first step of the window is measured, the window's deadlines count from its end.
        check, freeze, runs_commands, cells, findings, time_scales, restate, schedule, commands:
            Hooks of the module docstring.
    """

    name: str
    keys: frozenset[str]
    parse: Callable[[dict[str, Any], Where, dict[str, Any]], dict[str, Any]]
    execute: Callable[[Window, StepSpec, StepResult], Awaitable[None]]
    sends: bool = False
    needs_workload: bool = False
    phase_views: bool = False
    starts_server: bool = False
    restores: bool = False
    cancel_at_deadline: bool = False
    deadline_origin: bool = False
    check: Callable[[StepSpec, ServerSpec, Where], None] = _no_check
    freeze: Callable[[StepSpec, Workload | None], tuple[dict[str, Any], Plan | None]] = _no_freeze
    runs_commands: Callable[[StepSpec], bool] = _no_commands
    cells: Callable[[dict[str, Any], dict[str, Any], CellContext], list[Cell]] = check_cells("check")
    findings: Callable[[Path, dict[str, Any], dict[str, Any]], list[dict[str, Any]]] = _no_findings
    time_scales: Callable[[Path, dict[str, Any]], dict[str, float | None]] = _no_scales
    restate: Callable[[Path, dict[str, Any]], str | None] = _no_restate
    schedule: Callable[[dict[str, Any]], str] = _no_schedule
    commands: Callable[[dict[str, Any], dict[str, Any]], list[tuple[str, str]]] = _no_lifecycle
