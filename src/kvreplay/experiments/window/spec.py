"""Experiment files: parse a TOML window of steps and freeze it into ``experiment.json``.

An experiment file declares a whole diagnosis window (``kvreplay experiment FILE.toml``)::

    workload = "../workloads/mtbench-52"     # relative to this file
    compare = [["A/replay", "B/replay"]]     # STEP/PHASE pairs, side by side

    [server]
    target = "sim"                  # or "http://127.0.0.1:{port}" / a fixed URL
    backend = "vllm"                # counter adapter (auto, none, vllm, halogen, ...)
    profile = "..."                 # for backend = "prometheus"
    api_key_env = "NAME"            # the key is read from this variable, never written
    identity = {models = "kvreplay-sim"}   # pins: dotted identity key = expected value
    [server.sim]                    # SimConfig fields (target = "sim" only)
    cache = "radix"
    [server.start]                  # lifecycle commands ({port}, {dir}, {python}, {kvreplay})
    cmd = "..."; timeout = "60s"; background = false
    [server.ready]
    url = "http://127.0.0.1:{port}/health"; timeout = "120s"
    completion = {messages = [...], max_tokens = 8}   # optional: finish_reason must be "stop"
    [server.stop]    / [server.restore]    (cmd, timeout)

    [window]                        # all counted from the experiment's start
    stop_new_after = "70m"; hard_deadline = "90m"; restore_reserve = "20m"
    abort_if = ["host_bytes>34e9"]; max_error_rate = 0.05; abort_on_malformed = true

    [[step]]  name = "A0"; kind = "incarnation"; fresh = true; sim = {host_rows = 52}
    [[step]]  name = "A"; kind = "run"; phases = ["prime:forward:c1", "replay:reverse:c1"]
    [[step]]  name = "ctl"; kind = "run"; comparable = false; label = "control"
              [[step.phase]] tables are accepted as in a plan TOML (``kvreplay.plan``)
    [[step]]  name = "trace"; kind = "ab"; reps = 3; phases = "c1,c4"; select = "first:8"
              arms = [{name = "off", cmd = "..."}, {name = "on", cmd = "..."}]
              primary = ["ttft_p50:-5%"]; protected = ["itl_p50:+3%"]
    [[step]]  name = "P"; kind = "probe"; sizes = "8k,16k"; flush_max = 16; fit_on = "stream"
              the options of ``kvreplay probe`` (``kvreplay.experiments.probe.step``)
    [[step]]  name = "restore"; kind = "restore"

Durations are numbers of seconds or strings such as ``90s``, ``70m``, ``1.5h``.
Unknown keys and bad values raise ``ConfigError`` naming the file, the line of
the step and the field.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kvreplay.errors import ConfigError
from kvreplay.experiments.probe.step import PROBE_KEYS, probe_settings
from kvreplay.plan import PhaseSpec, parse_phase

__all__ = [
    "BOUND_RE",
    "Command",
    "ExperimentSpec",
    "ReadySpec",
    "ServerSpec",
    "StepSpec",
    "WindowSpec",
    "load_experiment",
    "parse_duration",
]

STEP_KINDS = ("incarnation", "run", "probe", "ab", "restore")
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")
BOUND_RE = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(>=|<=|>|<)\s*([-+0-9.eE]+)\s*")
"""An abort bound ``NAME OP NUMBER`` (``host_bytes>34e9``; OP one of > >= < <=), for ``fullmatch``:
``window.abort_if`` here and ``--abort-if`` of ``kvreplay run``/``ab``."""
_STEP_KEYS = {
    "incarnation": {"fresh", "sim"},
    "run": {"phases", "phase", "label", "comparable", "drain_timeout"},
    "probe": set(PROBE_KEYS),
    "ab": {"arms", "reps", "phases", "order", "select", "primary", "protected", "seed",
           "ready_timeout", "cmd_timeout", "drain_timeout"},
    "restore": set(),
}


def parse_duration(value: Any, *, path: Path | None = None, line: int | None = None, fld: str = "") -> float:
    """``90`` / ``"90s"`` / ``"70m"`` / ``"1.5h"`` / ``"250ms"`` -> seconds.

    Raises:
        ConfigError: not a non-negative duration (naming ``path``, ``line``, ``fld``).
    """
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    if isinstance(value, str):
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*", value)
        if m:
            return float(m.group(1)) * {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}[m.group(2) or "s"]
    raise ConfigError(f"not a duration: {value!r} (e.g. 90s, 70m, 1h)", path=path, line=line, field=fld)


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

    @property
    def is_sim(self) -> bool:
        """True for the embedded simulator."""
        return self.target == "sim"

    def to_json(self) -> dict[str, Any]:
        """JSON form (names the API key variable, never the key)."""
        return {
            "target": self.target, "backend": self.backend, "profile": self.profile,
            "api_key_env": self.api_key_env, "identity": dict(self.identity), "sim": dict(self.sim),
            **{k: (getattr(self, k).to_json() if getattr(self, k) else None)
               for k in ("start", "stop", "restore", "ready")},
        }


@dataclass(frozen=True, slots=True)
class WindowSpec:
    """``[window]``: deadlines and the abort rules every run step keeps.

    Deadlines are in seconds from the experiment's start (None = unbounded); the
    abort rules are as ``kvreplay run``'s ``--abort-if``, ``--max-error-rate``,
    ``--abort-on-malformed``.
    """

    stop_new_after_s: float | None = None
    hard_deadline_s: float | None = None
    restore_reserve_s: float = 0.0
    abort_if: tuple[tuple[str, str, float], ...] = ()
    max_error_rate: float | None = None
    abort_on_malformed: bool = False

    @property
    def cancel_at_s(self) -> float | None:
        """When in-flight requests are cancelled: ``hard_deadline - restore_reserve`` (s)."""
        if self.hard_deadline_s is None:
            return None
        return max(0.0, self.hard_deadline_s - self.restore_reserve_s)

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {"stop_new_after_s": self.stop_new_after_s, "hard_deadline_s": self.hard_deadline_s,
                "restore_reserve_s": self.restore_reserve_s, "cancel_in_flight_at_s": self.cancel_at_s,
                "abort_if": [f"{n}{op}{v:g}" for n, op, v in self.abort_if], "max_error_rate": self.max_error_rate,
                "abort_on_malformed": self.abort_on_malformed}


@dataclass(frozen=True, slots=True)
class StepSpec:
    """One ``[[step]]``.

    Attributes:
        index: 0-based position.
        name: Unique name (letters, digits, ``_.-``).
        kind: One of ``STEP_KINDS``.
        line: Line of its ``[[step]]`` header.
        settings: The kind's settings, validated (phases as ``PhaseSpec``).
    """

    index: int
    name: str
    kind: str
    line: int | None
    settings: dict[str, Any]

    @property
    def comparable(self) -> bool:
        """False for a control (never pooled with, or compared as, a main arm)."""
        return bool(self.settings.get("comparable", True))

    @property
    def sends(self) -> bool:
        """True for kinds that send generation requests."""
        return self.kind in ("run", "probe", "ab")

    @property
    def dir(self) -> str:
        """``steps/NN-name``."""
        return f"steps/{self.index:02d}-{self.name}"


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


def _read(path: Path) -> tuple[str, dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read experiment file: {exc.strerror or exc}", path=path) from exc
    try:
        return text, tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"not valid TOML: {exc}", path=path, line=getattr(exc, "lineno", None)) from exc


def _line_of(text: str, pattern: str) -> int | None:
    for i, ln in enumerate(text.splitlines()):
        if re.match(pattern, ln.strip()):
            return i + 1
    return None


def _command(data: Any, *, path: Path, line: int | None, fld: str, default_timeout: float) -> Command | None:
    if data is None:
        return None
    if isinstance(data, str):
        data = {"cmd": data}
    if not isinstance(data, dict) or not isinstance(data.get("cmd"), str) or not data["cmd"].strip():
        raise ConfigError("a command is a string or {cmd = \"...\", timeout = \"60s\"}", path=path, line=line,
                          field=fld)
    unknown = sorted(set(data) - {"cmd", "timeout", "background"})
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]!r}", path=path, line=line, field=f"{fld}.{unknown[0]}")
    bg = data.get("background", False)
    if not isinstance(bg, bool):
        raise ConfigError("must be true or false", path=path, line=line, field=f"{fld}.background")
    timeout = parse_duration(data.get("timeout", default_timeout), path=path, line=line, fld=f"{fld}.timeout")
    return Command(data["cmd"], timeout, bg)


def _server(data: Any, text: str, path: Path) -> ServerSpec:
    line = _line_of(text, r"\[server\]")
    if not isinstance(data, dict):
        raise ConfigError("the file needs a [server] table", path=path, field="server")
    allowed = {"target", "backend", "profile", "api_key_env", "identity", "sim", "start", "stop", "restore",
               "ready"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]!r}", path=path, line=line, field=f"server.{unknown[0]}")
    target = data.get("target", "sim")
    if not isinstance(target, str) or not (target == "sim" or target.startswith(("http://", "https://"))):
        raise ConfigError(f"must be 'sim' or an http(s) URL, not {target!r}", path=path, line=line,
                          field="server.target")
    ident = data.get("identity", {})
    if not isinstance(ident, dict) or not all(isinstance(v, (str, int, float)) for v in ident.values()):
        raise ConfigError("identity pins are KEY = VALUE (dotted keys of the server identity)", path=path,
                          line=line, field="server.identity")
    sim = data.get("sim", {})
    if not isinstance(sim, dict):
        raise ConfigError("must be a table of simulator settings", path=path, line=line, field="server.sim")
    if sim and target != "sim":
        raise ConfigError("[server.sim] needs target = \"sim\"", path=path, line=line, field="server.sim")
    ready = data.get("ready")
    ready_spec = None
    if ready is not None:
        if not isinstance(ready, dict) or sorted(set(ready) - {"url", "timeout", "completion"}):
            raise ConfigError("ready is {url = ..., timeout = ..., completion = {chat body}}", path=path,
                              line=line, field="server.ready")
        comp = ready.get("completion")
        if comp is not None and not isinstance(comp, dict):
            raise ConfigError("completion is a chat request body table", path=path, line=line,
                              field="server.ready.completion")
        ready_spec = ReadySpec(ready.get("url"), parse_duration(ready.get("timeout", 60), path=path, line=line,
                                                                fld="server.ready.timeout"), comp)
    for key in ("backend", "profile", "api_key_env"):
        if key in data and not isinstance(data[key], str):
            raise ConfigError("must be a string", path=path, line=line, field=f"server.{key}")
    cmds = {k: _command(data.get(k), path=path, line=line, fld=f"server.{k}", default_timeout=60.0)
            for k in ("start", "stop", "restore")}
    if "{port}" in target and cmds["start"] is None:
        raise ConfigError("a target with {port} needs a start command", path=path, line=line, field="server.start")
    return ServerSpec(target=target, backend=data.get("backend", "auto"), profile=data.get("profile"),
                      api_key_env=data.get("api_key_env"), identity={k: str(v) for k, v in ident.items()},
                      sim=dict(sim), ready=ready_spec, **cmds)


def _window(data: Any, text: str, path: Path) -> WindowSpec:
    if data is None:
        return WindowSpec()
    line = _line_of(text, r"\[window\]")
    if not isinstance(data, dict):
        raise ConfigError("must be a table", path=path, line=line, field="window")
    unknown = sorted(set(data) - {"stop_new_after", "hard_deadline", "restore_reserve", "abort_if",
                                  "max_error_rate", "abort_on_malformed"})
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]!r}", path=path, line=line, field=f"window.{unknown[0]}")
    vals = {k: (parse_duration(data[k], path=path, line=line, fld=f"window.{k}") if k in data else None)
            for k in ("stop_new_after", "hard_deadline", "restore_reserve")}
    bounds = []
    raw = data.get("abort_if", [])
    for b in raw if isinstance(raw, list) else [raw]:
        m = BOUND_RE.fullmatch(b) if isinstance(b, str) else None
        try:
            bounds.append((m.group(1), m.group(2), float(m.group(3))))  # type: ignore[union-attr]
        except (AttributeError, ValueError):
            raise ConfigError(f"not a bound: {b!r} (e.g. \"host_bytes>34e9\")", path=path, line=line,
                              field="window.abort_if") from None
    rate = data.get("max_error_rate")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate <= 1):
        raise ConfigError("must be a fraction between 0 and 1", path=path, line=line, field="window.max_error_rate")
    mal = data.get("abort_on_malformed", False)
    if not isinstance(mal, bool):
        raise ConfigError("must be true or false", path=path, line=line, field="window.abort_on_malformed")
    return WindowSpec(vals["stop_new_after"], vals["hard_deadline"], vals["restore_reserve"] or 0.0,
                      tuple(bounds), None if rate is None else float(rate), mal)


def _phases(raw: dict[str, Any], *, path: Path, line: int | None, fld: str) -> tuple[PhaseSpec, ...]:
    out: list[PhaseSpec] = []
    short = raw.get("phases", [])
    if not isinstance(short, list) or not all(isinstance(s, str) for s in short):
        raise ConfigError("phases is a list of shorthand strings (NAME:ORDER:cN...)", path=path, line=line,
                          field=f"{fld}.phases")
    for s in short:
        try:
            out.append(parse_phase(s))
        except ConfigError as exc:
            raise ConfigError(str(exc), path=path, line=line, field=f"{fld}.phases") from exc
    tables = raw.get("phase", [])
    if not isinstance(tables, list):
        raise ConfigError("[[step.phase]] tables", path=path, line=line, field=f"{fld}.phase")
    for i, t in enumerate(tables):
        out.append(PhaseSpec.from_mapping(t, where={"path": path, "line": line, "field": f"{fld}.phase[{i}]"}))
    if not out:
        raise ConfigError("a run step needs phases", path=path, line=line, field=f"{fld}.phases")
    names = [p.name for p in out]
    for n in names:
        if names.count(n) > 1:
            raise ConfigError(f"phase name {n!r} used twice", path=path, line=line, field=f"{fld}.phases")
    return tuple(out)


def _step(i: int, raw: Any, line: int | None, path: Path) -> StepSpec:
    fld = f"step[{i}]"
    if not isinstance(raw, dict):
        raise ConfigError("a step is a table", path=path, line=line, field=fld)
    name, kind = raw.get("name"), raw.get("kind")
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ConfigError("needs a name of letters, digits, '_', '.', '-'", path=path, line=line, field=f"{fld}.name")
    if kind not in STEP_KINDS:
        raise ConfigError(f"kind must be one of {', '.join(STEP_KINDS)}, not {kind!r}", path=path, line=line,
                          field=f"{fld}.kind")
    rest = {k: v for k, v in raw.items() if k not in ("name", "kind")}
    unknown = sorted(set(rest) - _STEP_KEYS[kind])
    if unknown:
        hint = unknown[0].replace("-", "_")
        hint = f" (did you mean {hint!r}?)" if hint != unknown[0] and hint in _STEP_KEYS[kind] else ""
        raise ConfigError(f"unknown key {unknown[0]!r} for a {kind} step{hint}", path=path, line=line,
                          field=f"{fld}.{unknown[0]}")
    st: dict[str, Any] = {}
    for key in ("fresh", "comparable"):
        if key in rest:
            if not isinstance(rest[key], bool):
                raise ConfigError("must be true or false", path=path, line=line, field=f"{fld}.{key}")
            st[key] = rest[key]
    if "label" in rest:
        if not isinstance(rest["label"], str):
            raise ConfigError("must be a string", path=path, line=line, field=f"{fld}.label")
        st["label"] = rest["label"]
    if kind == "incarnation":
        sim = rest.get("sim", {})
        if not isinstance(sim, dict):
            raise ConfigError("must be a table of simulator settings", path=path, line=line, field=f"{fld}.sim")
        st["sim"] = dict(sim)
        st.setdefault("fresh", False)
    elif kind == "run":
        phases = _phases(rest, path=path, line=line, fld=fld)
        # A control step makes every phase a control (plan.json, summary.json, records carry it);
        # the step's label names phases that have none of their own.
        st["phases"] = tuple(replace(ph, comparable=ph.comparable and st.get("comparable", True),
                                     label=ph.label if ph.label is not None else _phase_label(st.get("label")))
                             for ph in phases)
        if "drain_timeout" in rest:
            st["drain_timeout_s"] = parse_duration(rest["drain_timeout"], path=path, line=line,
                                                   fld=f"{fld}.drain_timeout")
    elif kind == "ab":
        st.update(_ab_settings(rest, path=path, line=line, fld=fld))
    elif kind == "probe":
        st.update(probe_settings(rest, path=path, line=line, fld=fld))
    return StepSpec(i, name, kind, line, st)


def _phase_label(text: str | None) -> str | None:
    """A step label as a phase label (1-64 of letters, digits, ``_.-``; other characters -> ``-``)."""
    if not text:
        return None
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")[:64] or None


def _ab_settings(rest: dict[str, Any], *, path: Path, line: int | None, fld: str) -> dict[str, Any]:
    arms = rest.get("arms")
    if (not isinstance(arms, list) or len(arms) != 2
            or not all(isinstance(a, dict) and set(a) <= {"name", "cmd"} and isinstance(a.get("name"), str)
                       and isinstance(a.get("cmd", ""), str) for a in arms)):
        raise ConfigError("arms is a list of two {name = ..., cmd = ...} (baseline first)", path=path, line=line,
                          field=f"{fld}.arms")
    for a in arms:
        if not _NAME_RE.match(a["name"]):
            raise ConfigError(f"bad arm name {a['name']!r}", path=path, line=line, field=f"{fld}.arms")
    reps = rest.get("reps", 3)
    if not isinstance(reps, int) or isinstance(reps, bool) or reps < 1:
        raise ConfigError("must be an integer >= 1", path=path, line=line, field=f"{fld}.reps")
    out: dict[str, Any] = {"arms": [{"name": a["name"], "cmd": a.get("cmd", "")} for a in arms], "reps": reps}
    phases = rest.get("phases", "c1,c4")
    if not isinstance(phases, str) or not re.fullmatch(r"c\d+(,c\d+)*", phases.replace(" ", "")):
        raise ConfigError("phases is a list of concurrencies like \"c1,c4\"", path=path, line=line,
                          field=f"{fld}.phases")
    out["phases"] = phases.replace(" ", "")
    out["order"] = rest.get("order", "forward")
    out["select"] = rest.get("select", "all")
    for role in ("primary", "protected"):
        v = rest.get(role, [])
        if not isinstance(v, list) or not all(isinstance(t, str) for t in v):
            raise ConfigError(f"{role} is a list of METRIC:±X% strings", path=path, line=line, field=f"{fld}.{role}")
        out[role] = list(v)
    out["seed"] = rest.get("seed", 0)
    for key, default in (("ready_timeout", 60.0), ("cmd_timeout", 120.0), ("drain_timeout", 10.0)):
        out[f"{key}_s"] = parse_duration(rest.get(key, default), path=path, line=line, fld=f"{fld}.{key}")
    return out


def load_experiment(path: str | Path) -> ExperimentSpec:
    """Parse and validate an experiment file (no workload is read, nothing is started).

    Raises:
        ConfigError: unreadable TOML, unknown keys, bad values, duplicate step names, a
            ``compare`` naming an unknown step, or a window whose deadlines are out of order.
    """
    p = Path(path)
    text, data = _read(p)
    unknown = sorted(set(data) - {"workload", "server", "window", "step", "compare"})
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]!r}", path=p, line=_line_of(text, rf"\[?{unknown[0]}\b"),
                          field=unknown[0])
    server = _server(data.get("server"), text, p)
    window = _window(data.get("window"), text, p)
    if (window.stop_new_after_s is not None and window.cancel_at_s is not None
            and window.stop_new_after_s > window.cancel_at_s):
        raise ConfigError("stop_new_after is later than hard_deadline - restore_reserve", path=p,
                          field="window.stop_new_after")
    raw_steps = data.get("step")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise ConfigError("an experiment needs at least one [[step]]", path=p, field="step")
    lines = [i + 1 for i, ln in enumerate(text.splitlines()) if ln.strip() == "[[step]]"]
    steps = []
    seen: set[str] = set()
    for i, raw in enumerate(raw_steps):
        st = _step(i, raw, lines[i] if i < len(lines) else None, p)
        if st.name in seen:
            raise ConfigError(f"step name {st.name!r} used twice", path=p, line=st.line, field=f"step[{i}].name")
        seen.add(st.name)
        if st.kind == "restore" and server.restore is None and not server.is_sim:
            raise ConfigError("a restore step needs [server.restore]", path=p, line=st.line, field="server.restore")
        steps.append(st)
    wl = data.get("workload")
    if wl is not None and not isinstance(wl, str):
        raise ConfigError("must be a path", path=p, field="workload")
    if wl is not None and not Path(wl).is_absolute():
        wl = str((p.parent / wl).resolve())
    if wl is None and any(s.kind in ("run", "ab") for s in steps):
        raise ConfigError("run and ab steps need a workload", path=p, field="workload")
    pairs = []
    by_name = {s.name: s for s in steps}
    cline = _line_of(text, r"compare\s*=")
    for pair in data.get("compare", []):
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) and "/" in x for x in pair)):
            raise ConfigError("compare is a list of [\"STEP/PHASE\", \"STEP/PHASE\"]", path=p, line=cline,
                              field="compare")
        for ref in pair:
            sname, _, ph = ref.partition("/")
            step = by_name.get(sname)
            if step is None or step.kind != "run":
                raise ConfigError(f"{ref!r}: no run step {sname!r}", path=p, line=cline, field="compare")
            if ph not in [x.name for x in step.settings["phases"]]:
                raise ConfigError(f"{ref!r}: step {sname!r} has no phase {ph!r}", path=p, line=cline,
                                  field="compare")
        pairs.append((pair[0], pair[1]))
    return ExperimentSpec(p, text, wl, server, window, tuple(steps), tuple(pairs))
