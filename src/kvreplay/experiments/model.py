"""The parsed experiment file: server, window and steps (what ``experiments.window.spec`` returns).

Plain frozen dataclasses with their JSON forms, and ``StepResult`` (what happened to
one step, ``result.json``'s ``steps``). They live below the parser and the step kinds
(``experiments.steps``) so that both can use them; ``experiments.window.spec``
re-exports them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvreplay.errors import ConfigError
from kvreplay.experiments.gates import GateSpec

__all__ = ["STOP_GRACE_S", "Command", "ExperimentSpec", "ReadySpec", "RestoreCheck", "ServerSpec", "StepResult",
           "StepSpec", "WindowSpec"]


@dataclass(frozen=True, slots=True)
class Command:
    """A lifecycle command.

    Attributes:
        cmd: Shell command (``sh -c``) with ``{port}``/``{dir}``/``{python}``/``{kvreplay}`` placeholders.
        timeout_s: Bound (s); on expiry its whole process group is killed.
        background: Keep it running as the server process (killed at the next stop) instead of
            waiting for it to exit.
    """

    cmd: str
    timeout_s: float
    background: bool = False

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {"cmd": self.cmd, "timeout_s": self.timeout_s, "background": self.background}


@dataclass(frozen=True, slots=True)
class ReadySpec:
    """Readiness check after a start: a URL that must answer 200 and an optional completion.

    Attributes:
        url: URL template (``{port}``), None = ``<server URL>/health`` then ``/v1/models``.
        timeout_s: Bound (s).
        completion: A chat body whose streamed answer must end with ``finish_reason: "stop"``.
    """

    url: str | None
    timeout_s: float
    completion: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {"url": self.url, "timeout_s": self.timeout_s, "completion": self.completion}


@dataclass(frozen=True, slots=True)
class RestoreCheck:
    """One of ``[server.restore] checks``: a user command run after the restore (containment, monitoring...).

    Attributes:
        name: Its name (letters, digits, ``_.-``): the cell ``restore_check.NAME`` and the log ``check-NAME.log``.
        cmd: Shell command (``{port}``/``{dir}``/``{here}``/``{python}``/``{kvreplay}`` placeholders).
        timeout_s: Bound (s); on expiry its process group is killed and the check fails.
    """

    name: str
    cmd: str
    timeout_s: float

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {"name": self.name, "cmd": self.cmd, "timeout_s": self.timeout_s}


STOP_GRACE_S = 30.0
"""``[server] stop_grace`` when not given: seconds from SIGTERM to SIGKILL when a started server is stopped."""


@dataclass(frozen=True, slots=True)
class ServerSpec:
    """``[server]``: the target and how to start, check, stop and restore it."""

    target: str
    backend: str = "auto"
    profile: str | None = None
    api_key_env: str | None = None
    identity: dict[str, str] = field(default_factory=dict)
    sim: dict[str, Any] = field(default_factory=dict)
    start: Command | None = None
    stop: Command | None = None
    restore: Command | None = None
    ready: ReadySpec | None = None
    stop_grace_s: float = STOP_GRACE_S
    restore_checks: tuple[RestoreCheck, ...] = ()
    replicas: tuple[Any, ...] = ()
    """``[fleet]``: the replicas behind the ``target`` router (``runner.fleet.Replica``); empty: one server."""
    snapshot: tuple[RestoreCheck, ...] = ()
    """``[snapshot] commands``: outputs frozen before the first step, compared after the restore
    (``experiments.snapshot``)."""

    @property
    def is_sim(self) -> bool:
        """True for the embedded simulator."""
        return self.target == "sim"

    @property
    def counter_backend(self) -> str:
        """The counter adapter to read with: ``backend``, or ``vllm`` for the embedded simulator under ``auto``.

        The simulator's host-tier series are on ``/metrics`` (docs/simulator.md); ``auto``
        elsewhere is detected at the first read.
        """
        return "vllm" if self.is_sim and self.backend == "auto" else self.backend

    def to_json(self) -> dict[str, Any]:
        """JSON form (names the API key variable, never the key)."""
        return {
            "target": self.target, "backend": self.backend, "profile": self.profile,
            "api_key_env": self.api_key_env, "identity": dict(self.identity), "sim": dict(self.sim),
            **{k: (getattr(self, k).to_json() if getattr(self, k) else None)
               for k in ("start", "stop", "restore", "ready")},
            # only when set, so experiment files without it keep their experiment.json
            **({"stop_grace_s": self.stop_grace_s} if self.stop_grace_s != STOP_GRACE_S else {}),
            **({"restore_checks": [c.to_json() for c in self.restore_checks]} if self.restore_checks else {}),
            **({"fleet": {"replicas": [r.to_json() for r in self.replicas]}} if self.replicas else {}),
            **({"snapshot": [c.to_json() for c in self.snapshot]} if self.snapshot else {}),
        }


@dataclass(frozen=True, slots=True)
class WindowSpec:
    """``[window]``: deadlines and the abort rules every run step keeps.

    Deadlines are in seconds from the experiment's start, or from the end of the quiesce
    (``deadline_from``), None = unbounded; the
    abort rules are as ``kvreplay run``'s ``--abort-if``, ``--max-error-rate`` (every
    failure counts), ``--abort-on-malformed``, ``--max-output-error-rate`` (output
    failures only) and ``--max-transport-failures`` (consecutive sends that never
    reached the server; None = never; a run step may set its own).
    """

    stop_new_after_s: float | None = None
    hard_deadline_s: float | None = None
    restore_reserve_s: float = 0.0
    abort_if: tuple[tuple[str, str, float], ...] = ()
    max_error_rate: float | None = None
    abort_on_malformed: bool = False
    max_output_error_rate: float | None = None
    max_transport_failures: int | None = 3
    deadline_from: str = "start"
    """What the deadlines count from: ``start`` (the experiment's start) or the name of a step kind
    that is a deadline origin (``quiesce``: the end of the window's first such step, once measured)."""

    @property
    def cancel_at_s(self) -> float | None:
        """When in-flight requests are cancelled: ``hard_deadline - restore_reserve`` (s)."""
        if self.hard_deadline_s is None:
            return None
        return max(0.0, self.hard_deadline_s - self.restore_reserve_s)

    def check(self, *, path: object = None, fields: dict[str, str] | None = None) -> None:
        """Refuse deadlines that cannot hold together, wherever they came from (file or command line).

        ``restore_reserve`` must leave time before ``hard_deadline`` (a reserve as long as the
        deadline would cancel every request at once), and ``stop_new_after`` must not be later
        than ``hard_deadline - restore_reserve`` (no new request after in-flight ones are cancelled).

        Args:
            path: The experiment file, for the message.
            fields: The name to give each key in messages (``{"hard_deadline": "--hard-deadline"}``
                for a value from the command line); default ``window.KEY``.

        Raises:
            ConfigError: the clash, naming both values.
        """
        keys = ("stop_new_after", "hard_deadline", "restore_reserve")
        names = {k: k for k in keys}  # in messages: the file's key, or the flag that gave the value
        names.update(fields or {})
        field = {k: (names[k] if names[k].startswith("--") else f"window.{k}") for k in keys}
        hard, reserve, stop = self.hard_deadline_s, self.restore_reserve_s, self.stop_new_after_s
        if hard is not None and reserve > 0 and hard <= reserve:
            raise ConfigError(f"{names['restore_reserve']} ({reserve:g} s) leaves no time before "
                              f"{names['hard_deadline']} ({hard:g} s): in-flight requests would be cancelled "
                              "before anything ran", path=path, field=field["restore_reserve"])
        cancel = self.cancel_at_s
        if stop is not None and cancel is not None and stop > cancel:
            raise ConfigError(f"{names['stop_new_after']} ({stop:g} s) is later than {names['hard_deadline']} - "
                              f"{names['restore_reserve']} ({hard:g} - {reserve:g} = {cancel:g} s)",
                              path=path, field=field["stop_new_after"])

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {"stop_new_after_s": self.stop_new_after_s, "hard_deadline_s": self.hard_deadline_s,
                "restore_reserve_s": self.restore_reserve_s, "cancel_in_flight_at_s": self.cancel_at_s,
                "abort_if": [f"{n}{op}{v:g}" for n, op, v in self.abort_if], "max_error_rate": self.max_error_rate,
                "abort_on_malformed": self.abort_on_malformed, "max_output_error_rate": self.max_output_error_rate,
                "max_transport_failures": self.max_transport_failures,
                # only when set, so experiment files without it keep their experiment.json
                **({"deadline_from": self.deadline_from} if self.deadline_from != "start" else {})}


@dataclass(frozen=True, slots=True)
class StepSpec:
    """One ``[[step]]``.

    Attributes:
        index: 0-based position.
        name: Unique name (letters, digits, ``_.-``).
        kind: The name of a registered step kind (``experiments.steps``).
        line: Line of its ``[[step]]`` header.
        settings: The kind's settings, validated (phases as ``PhaseSpec``).
        sends: True for kinds that send generation requests (the kind's ``sends``): the step
            writes a run directory, ``dir``.
        when: Its conditions (``experiments.conditions``), evaluated just before it; () = always.
        workload: Its own workload (absolute path), None = the experiment's.
    """

    index: int
    name: str
    kind: str
    line: int | None
    settings: dict[str, Any]
    sends: bool = False
    when: tuple[Any, ...] = ()
    workload: str | None = None

    @property
    def comparable(self) -> bool:
        """False for a control (never pooled with, or compared as, a main arm)."""
        return bool(self.settings.get("comparable", True))

    @property
    def dir(self) -> str:
        """``steps/NN-name`` (``kvreplay.rundir.names.step_dir``)."""
        from kvreplay.rundir.names import step_dir

        return step_dir(self.index, self.name)


@dataclass(frozen=True, slots=True)
class ExperimentSpec:
    """A parsed experiment file."""

    path: Path
    text: str
    workload: str | None
    server: ServerSpec
    window: WindowSpec
    steps: tuple[StepSpec, ...]
    compare: tuple[tuple[str, str], ...]
    gates: GateSpec = GateSpec()
    raw: bytes | None = None
    """The file's exact bytes (kept in the experiment directory as ``experiment.toml``)."""


@dataclass(slots=True)
class StepResult:
    """What happened to one step (``result.json``'s ``steps``)."""

    name: str
    kind: str
    status: str = "deferred"
    reason: str | None = None
    run_dir: str | None = None
    comparable: bool = True
    label: str | None = None
    started: str | None = None
    ended: str | None = None
    checks: dict[str, Any] = field(default_factory=dict)
    incarnation: str | None = None
    condition: dict[str, Any] | None = None
    """Its ``when`` as evaluated (``experiments.conditions.evaluate``); None without one."""

    def to_json(self) -> dict[str, Any]:
        """JSON form (``condition`` only for a step with a ``when``)."""
        return {"name": self.name, "kind": self.kind, "status": self.status, "reason": self.reason,
                "run_dir": self.run_dir, "comparable": self.comparable, "label": self.label,
                "incarnation": self.incarnation, "started": self.started, "ended": self.ended,
                "checks": self.checks, **({"condition": self.condition} if self.condition is not None else {})}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> StepResult:
        """The inverse of ``to_json`` (a step of ``progress.json`` or ``step.json``; unknown keys ignored)."""
        return cls(name=d["name"], kind=d["kind"], status=d.get("status", "deferred"), reason=d.get("reason"),
                   run_dir=d.get("run_dir"), comparable=d.get("comparable", True), label=d.get("label"),
                   started=d.get("started"), ended=d.get("ended"), checks=dict(d.get("checks") or {}),
                   incarnation=d.get("incarnation"), condition=d.get("condition"))
