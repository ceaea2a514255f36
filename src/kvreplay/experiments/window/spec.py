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
    [server.restore] checks = [{name = "containment", cmd = "...", timeout = "60s"}, ...]
                                    # run after the restore; each one's status a cell (restore_check.NAME)

    [window]                        # counted from the experiment's start, or from the quiesce:
    deadline_from = "quiesce"       # (default "start") the end of the first quiesce step, once measured
    stop_new_after = "70m"; hard_deadline = "90m"; restore_reserve = "20m"
    abort_if = ["host_bytes>34e9"]; max_error_rate = 0.05; abort_on_malformed = true
    max_output_error_rate = 0.05    # output failures only (max_error_rate counts every failure)
    max_transport_failures = 3      # consecutive sends that never reached the server (0 = never)

    [[step]]  name = "A0"; kind = "incarnation"; fresh = true; sim = {host_rows = 52}
    [[step]]  name = "A"; kind = "run"; phases = ["prime:forward:c1", "replay:reverse:c1"]
    [[step]]  name = "ctl"; kind = "run"; comparable = false; label = "control"
              [[step.phase]] tables are accepted as in a plan TOML (``kvreplay.plan``)
    [[step]]  name = "trace"; kind = "ab"; reps = 3; phases = "c1,c4"; select = "first:8"
              arms = [{name = "off", cmd = "..."}, {name = "on", cmd = "..."}]
              primary = ["ttft_p50:-5%"]; protected = ["itl_p50:+3%"]
    [[step]]  name = "P"; kind = "probe"; sizes = "8k,16k"; flush_max = 16; fit_on = "stream"
              the options of ``kvreplay probe`` (``kvreplay.experiments.probe.step``)
    [[step]]  name = "Q"; kind = "quiesce"; cmd = "drain-primary.sh"; timeout = "5m"; drain_timeout = "10m"
    [[step]]  name = "restore"; kind = "restore"

    Every step but a restore takes ``when`` (``experiments.conditions``: ``'time_left > "15m"'``,
    ``"previous_step_ok"``, ``'step_ok = "A"'``, or a list of them), and a sending step its own
    ``workload`` (relative to this file; frozen and hashed into experiment.json's step entry).
    [gates]  body = {max_tokens = 2048, temperature = 1}; fixed_bytes = true   (``experiments.gates``)
    [snapshot] commands = [{name = "router", cmd = "routerctl show primary", timeout = "30s"}]
             outputs frozen in snapshot.json before the first step, compared after the restore
             (``experiments.snapshot``)
    [fleet]  replicas = ["http://...:8001", {url = "http://...:8002", backend = "llamacpp"}]
             the target is a router (``runner.fleet``, as a plan's ``[fleet]``; ``_fleet``): run
             and ab steps read every replica as ``kvreplay run --replica`` does; no probe step

Each ``kind`` is a registered step kind (``kvreplay.experiments.steps``): its module
declares the keys it takes and how they are validated; this parser validates the
common keys (``name``, ``kind``, ``label``, ``comparable``) and hands the rest to it.
Durations are numbers of seconds or strings such as ``90s``, ``70m``, ``1.5h``.
Unknown keys and bad values raise ``ConfigError`` naming the file, the line of
the step and the field.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

from kvreplay.errors import ConfigError
from kvreplay.experiments.conditions import parse_when
from kvreplay.experiments.fields import BOUND_RE, NAME_RE, Where, parse_duration, transport_failures
from kvreplay.experiments.gates import parse_gates
from kvreplay.experiments.model import (
    STOP_GRACE_S,
    Command,
    ExperimentSpec,
    ReadySpec,
    RestoreCheck,
    ServerSpec,
    StepSpec,
    WindowSpec,
)
from kvreplay.experiments.steps import kind_names, kind_of
from kvreplay.redaction import redact_url, register_url, register_urls_in

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
               "ready", "stop_grace"}
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]!r}", path=path, line=line, field=f"server.{unknown[0]}")
    target = data.get("target", "sim")
    if not isinstance(target, str) or not (target == "sim" or target.startswith(("http://", "https://"))):
        raise ConfigError(f"must be 'sim' or an http(s) URL, not {redact_url(str(target))!r}", path=path,
                          line=line, field="server.target")
    try:
        register_url(target)  # credentials in the target URL: in no output (redaction)
    except ValueError as exc:
        raise ConfigError(f"credentials in the target URL: {exc}", path=path, line=line,
                          field="server.target") from None
    ident = data.get("identity", {})
    if not isinstance(ident, dict) or not all(isinstance(v, (str, int, float)) for v in ident.values()):
        raise ConfigError("identity pins are KEY = VALUE (dotted keys of the server identity)", path=path,
                          line=line, field="server.identity")
    sim = data.get("sim", {})
    if not isinstance(sim, dict):
        raise ConfigError("must be a table of simulator settings", path=path, line=line, field="server.sim")
    if sim and target != "sim":
        raise ConfigError("[server.sim] needs target = \"sim\"", path=path, line=line, field="server.sim")
    if sim:
        _check_sim(sim, text, path)
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
    restore = data.get("restore")
    checks = _restore_checks(restore.get("checks") if isinstance(restore, dict) else None, path=path,
                             line=_line_of(text, r"\[server\.restore\]") or line)
    if isinstance(restore, dict):
        restore = {k: v for k, v in restore.items() if k != "checks"} or None  # checks alone: no command
    cmds: dict[str, Any]  # Command or None, by name
    cmds = {k: _command(restore if k == "restore" else data.get(k), path=path, line=line, fld=f"server.{k}",
                        default_timeout=60.0) for k in ("start", "stop", "restore")}
    if "{port}" in target and cmds["start"] is None:
        raise ConfigError("a target with {port} needs a start command", path=path, line=line, field="server.start")
    return ServerSpec(target=target, backend=data.get("backend", "auto"), profile=data.get("profile"),
                      api_key_env=data.get("api_key_env"), identity={k: str(v) for k, v in ident.items()},
                      sim=dict(sim), ready=ready_spec, **cmds,
                      stop_grace_s=parse_duration(data.get("stop_grace", STOP_GRACE_S), path=path, line=line,
                                                  fld="server.stop_grace"), restore_checks=checks)


def _check_sim(sim: dict[str, Any], text: str, path: Path) -> None:
    """Refuse a ``[server.sim]`` the simulator would refuse, when the file is read (``--dry-run`` too).

    Raises:
        ConfigError: ``SimConfig``'s refusal (unknown setting, wrong type, value out of range), naming
            the file, the line of the key (else of ``[server.sim]``) and ``server.sim.KEY``.
    """
    from kvreplay.sim import SimConfig

    try:
        SimConfig.from_mapping(dict(sim))
    except ConfigError as exc:
        head = _line_of(text, r"\[server\.sim\]")
        key_line = None
        if head is not None and exc.field:
            table = list(itertools.takewhile(lambda ln: not ln.strip().startswith("["), text.splitlines()[head:]))
            rel = _line_of("\n".join(table), rf"{re.escape(exc.field)}\s*=")
            key_line = head + rel if rel is not None else None
        raise ConfigError(exc.message, path=path, line=key_line or head or _line_of(text, r"\[server\]"),
                          field=f"server.sim.{exc.field}" if exc.field else "server.sim") from None


def _fleet(data: Any, server: ServerSpec, raw_server: Any, text: str, path: Path) -> ServerSpec:
    """``[fleet]``: the replicas behind ``[server] target`` (the router), read by ``runner.fleet``.

    The table is the plan's (``runner.fleet.replicas_from_mapping``: ``router``, ``replicas``
    of URLs or ``{url, backend, profile}``); its ``router``, when given, is the target when
    ``[server]`` names none and must be the same server when it does.

    Raises:
        ConfigError: the plan's refusals, no replica, a target that is not a fixed router URL,
            a router that differs from the target, a replica that is the router or listed twice
            (the file, the line of ``[fleet]`` and the field).
    """
    from dataclasses import replace

    from kvreplay.runner.fleet import check_fleet, replicas_from_mapping

    line = _line_of(text, r"\[fleet\]") or _line_of(text, r"fleet\s*=")

    def refuse(msg: str, fld: str) -> ConfigError:
        return ConfigError(msg, path=path, line=line, field=fld)

    try:
        router, replicas = replicas_from_mapping(data, source="fleet")
    except ConfigError as exc:
        raise refuse(exc.message, exc.field or "fleet") from None
    if not replicas:
        raise refuse("a fleet needs replicas: replicas = [\"http://HOST:PORT\", ...]", "fleet.replicas")
    target = server.target
    if router is not None:
        given = isinstance(raw_server, dict) and "target" in raw_server
        if not given:
            target = router
        elif router.rstrip("/") != target.rstrip("/"):
            raise refuse(f"router {router!r} is not [server] target {target!r} (the router is the target; "
                         "give one of them)", "fleet.router")
    if target == "sim" or "{" in target or not target.startswith(("http://", "https://")):
        raise refuse(f"a fleet's requests go to a router: [server] target must be its fixed http(s) URL, "
                     f"not {target!r}", "server.target")
    if server.sim:
        raise refuse("[server.sim] configures the embedded simulator, not a fleet", "server.sim")
    from kvreplay.backends.fleet import check_fleet_backends

    try:
        check_fleet(target, replicas)
        check_fleet_backends(replicas, server.backend, server.profile, profiles=False)
    except ConfigError as exc:
        raise refuse(exc.message, "fleet.replicas") from None
    return replace(server, target=target, replicas=replicas)


def _restore_checks(raw: Any, *, path: Path, line: int | None,
                    fld: str = "server.restore.checks") -> tuple[RestoreCheck, ...]:
    """``[server.restore] checks = [{name, cmd, timeout}]`` (``timeout`` default 60 s); also ``[snapshot] commands``."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ConfigError("checks is a list of {name = ..., cmd = ..., timeout = ...}", path=path, line=line,
                          field=fld)
    out: list[RestoreCheck] = []
    for i, c in enumerate(raw):
        if not isinstance(c, dict):
            raise ConfigError("a check is {name = ..., cmd = ..., timeout = ...}", path=path, line=line,
                              field=f"{fld}[{i}]")
        unknown = sorted(set(c) - {"name", "cmd", "timeout"})
        if unknown:
            raise ConfigError(f"unknown key {unknown[0]!r}", path=path, line=line, field=f"{fld}[{i}].{unknown[0]}")
        name = c.get("name")
        if not isinstance(name, str) or not NAME_RE.match(name) or any(x.name == name for x in out):
            raise ConfigError("needs a unique name of letters, digits, '_', '.', '-'", path=path, line=line,
                              field=f"{fld}[{i}].name")
        if not isinstance(c.get("cmd"), str) or not c["cmd"].strip():
            raise ConfigError("needs a shell command", path=path, line=line, field=f"{fld}[{i}].cmd")
        out.append(RestoreCheck(name, c["cmd"], parse_duration(c.get("timeout", 60), path=path, line=line,
                                                               fld=f"{fld}[{i}].timeout")))
    return tuple(out)


def _snapshot(data: Any, text: str, path: Path) -> tuple[RestoreCheck, ...]:
    """``[snapshot] commands = [{name, cmd, timeout}]`` (``experiments.snapshot``)."""
    line = _line_of(text, r"\[snapshot\]")
    if not isinstance(data, dict):
        raise ConfigError("must be a table", path=path, line=line, field="snapshot")
    unknown = sorted(set(data) - {"commands"})
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]!r}", path=path, line=line, field=f"snapshot.{unknown[0]}")
    out = _restore_checks(data.get("commands"), path=path, line=line, fld="snapshot.commands")
    if not out:
        raise ConfigError("needs commands = [{name = ..., cmd = ...}, ...]", path=path, line=line,
                          field="snapshot.commands")
    return out


def _window(data: Any, text: str, path: Path) -> WindowSpec:
    if data is None:
        return WindowSpec()
    line = _line_of(text, r"\[window\]")
    if not isinstance(data, dict):
        raise ConfigError("must be a table", path=path, line=line, field="window")
    unknown = sorted(set(data) - {"stop_new_after", "hard_deadline", "restore_reserve", "abort_if",
                                  "max_error_rate", "abort_on_malformed", "max_output_error_rate",
                                  "max_transport_failures", "deadline_from"})
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
    rates = {}
    for k in ("max_error_rate", "max_output_error_rate"):
        rate = data.get(k)
        if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate <= 1):
            raise ConfigError("must be a fraction between 0 and 1", path=path, line=line, field=f"window.{k}")
        rates[k] = None if rate is None else float(rate)
    transport = transport_failures(data, path, line, "window")
    mal = data.get("abort_on_malformed", False)
    if not isinstance(mal, bool):
        raise ConfigError("must be true or false", path=path, line=line, field="window.abort_on_malformed")
    origin = data.get("deadline_from", "start")
    origins = ["start", *(k for k in kind_names() if kind_of(k).deadline_origin)]
    if origin not in origins:
        raise ConfigError(f"must be one of {', '.join(origins)}, not {origin!r}", path=path, line=line,
                          field="window.deadline_from")
    return WindowSpec(vals["stop_new_after"], vals["hard_deadline"], vals["restore_reserve"] or 0.0,
                      tuple(bounds), rates["max_error_rate"], mal, rates["max_output_error_rate"],
                      3 if transport is None else (transport or None), origin)



def _step(i: int, raw: Any, line: int | None, path: Path) -> StepSpec:
    fld = f"step[{i}]"
    if not isinstance(raw, dict):
        raise ConfigError("a step is a table", path=path, line=line, field=fld)
    name, kind_name = raw.get("name"), raw.get("kind")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ConfigError("needs a name of letters, digits, '_', '.', '-'", path=path, line=line, field=f"{fld}.name")
    if kind_name not in kind_names():
        raise ConfigError(f"kind must be one of {', '.join(kind_names())}, not {kind_name!r}", path=path, line=line,
                          field=f"{fld}.kind")
    kind = kind_of(kind_name)
    rest = {k: v for k, v in raw.items() if k not in ("name", "kind", "when", "workload")}
    unknown = sorted(set(rest) - kind.keys)
    if unknown:
        hint = unknown[0].replace("-", "_")
        hint = f" (did you mean {hint!r}?)" if hint != unknown[0] and hint in kind.keys else ""
        raise ConfigError(f"unknown key {unknown[0]!r} for a {kind_name} step{hint}", path=path, line=line,
                          field=f"{fld}.{unknown[0]}")
    common: dict[str, Any] = {}
    if "comparable" in rest:
        if not isinstance(rest["comparable"], bool):
            raise ConfigError("must be true or false", path=path, line=line, field=f"{fld}.comparable")
        common["comparable"] = rest["comparable"]
    if "label" in rest:
        if not isinstance(rest["label"], str):
            raise ConfigError("must be a string", path=path, line=line, field=f"{fld}.label")
        common["label"] = rest["label"]
    st = {**common, **kind.parse(rest, Where(path, line, fld), common)}
    when: tuple[Any, ...] = ()
    if "when" in raw:
        if kind.restores:
            raise ConfigError("a restore step always runs: it takes no when", path=path, line=line,
                              field=f"{fld}.when")
        when = parse_when(raw["when"], Where(path, line, fld))
    wl = raw.get("workload")
    if wl is not None:
        if not kind.needs_workload:
            raise ConfigError(f"a {kind_name} step sends no workload", path=path, line=line, field=f"{fld}.workload")
        if not isinstance(wl, str) or not wl:
            raise ConfigError("must be a path", path=path, line=line, field=f"{fld}.workload")
        wl = wl if Path(wl).is_absolute() else str((path.parent / wl).resolve())
    return StepSpec(i, name, kind_name, line, st, sends=kind.sends, when=when, workload=wl)


def load_experiment(path: str | Path, text: str | None = None) -> ExperimentSpec:
    """Parse and validate an experiment file (no workload is read, nothing is started).

    Args:
        path: The file; relative paths inside it are taken from its folder.
        text: The file's text when it is not to be read from ``path`` (``--resume`` parses the
            copy kept in the experiment directory as if it were at the original path).

    Raises:
        ConfigError: unreadable TOML, unknown keys, bad values, duplicate step names, a
            ``compare`` naming an unknown step, or a window whose deadlines are out of order.
    """
    p = Path(path)
    raw_bytes: bytes | None = None
    if text is None:
        from kvreplay.tomlfile import parse_toml, read_file_bytes

        raw_bytes = read_file_bytes(p, what="experiment file")
        text, data = parse_toml(raw_bytes, where=p)
    else:
        from kvreplay.tomlfile import parse_toml

        text, data = parse_toml(text.encode("utf-8"), where=p)
    try:
        register_urls_in(text)  # every URL in the file (targets, commands, checks): in no output
    except ValueError as exc:
        raise ConfigError(f"credentials in a URL: {exc}", path=p) from None
    unknown = sorted(set(data) - {"workload", "server", "window", "step", "compare", "gates", "fleet", "snapshot"})
    if unknown:
        raise ConfigError(f"unknown key {unknown[0]!r}", path=p, line=_line_of(text, rf"\[?{unknown[0]}\b"),
                          field=unknown[0])
    server = _server(data.get("server"), text, p)
    if "snapshot" in data:  # [snapshot] commands (experiments.snapshot)
        from dataclasses import replace

        server = replace(server, snapshot=_snapshot(data["snapshot"], text, p))
    if "fleet" in data:
        server = _fleet(data["fleet"], server, data.get("server"), text, p)
    window = _window(data.get("window"), text, p)
    window.check(path=p)
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
        for c in st.when:
            if c.step is not None and c.step not in seen:
                raise ConfigError(f"{c.text!r}: no earlier step {c.step!r}", path=p, line=st.line,
                                  field=f"step[{i}].when")
        seen.add(st.name)
        kind_of(st.kind).check(st, server, Where(p, st.line, f"step[{i}]"))
        steps.append(st)
    if window.deadline_from != "start" and not any(s.kind == window.deadline_from for s in steps):
        raise ConfigError(f"deadline_from = {window.deadline_from!r} needs a {window.deadline_from} step",
                          path=p, line=_line_of(text, r"deadline_from\s*="), field="window.deadline_from")
    wl = data.get("workload")
    if wl is not None and not isinstance(wl, str):
        raise ConfigError("must be a path", path=p, field="workload")
    if wl is not None and not Path(wl).is_absolute():
        wl = str((p.parent / wl).resolve())
    if wl is None and any(kind_of(s.kind).needs_workload and s.workload is None for s in steps):
        names = [k for k in kind_names() if kind_of(k).needs_workload]
        raise ConfigError(f"{' and '.join(names)} steps need a workload", path=p, field="workload")
    pairs = []
    by_name = {s.name: s for s in steps}
    cline = _line_of(text, r"compare\s*=")
    for pair in data.get("compare", []):
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) and "/" in x for x in pair)):
            raise ConfigError("compare is a list of [\"STEP/PHASE\", \"STEP/PHASE\"]", path=p, line=cline,
                              field="compare")
        for ref in pair:
            sname, _, ph = ref.partition("/")
            target = by_name.get(sname)
            if target is None or not kind_of(target.kind).phase_views:
                raise ConfigError(f"{ref!r}: no run step {sname!r}", path=p, line=cline, field="compare")
            if ph not in [x.name for x in target.settings["phases"]]:
                raise ConfigError(f"{ref!r}: step {sname!r} has no phase {ph!r}", path=p, line=cline,
                                  field="compare")
        pairs.append((pair[0], pair[1]))
    gates = parse_gates(data.get("gates"), path=p, line=_line_of(text, r"\[gates\]"))
    return ExperimentSpec(p, text, wl, server, window, tuple(steps), tuple(pairs), gates,
                          raw_bytes if raw_bytes is not None else text.encode("utf-8"))
